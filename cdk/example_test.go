package outboxcdk_test

import (
	"log"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"

	"github.com/dynakafka/outbox/cdk"
)

// The snippet in docs/deploy.md. (Compiled, not run: running it needs the
// bootstraps; ./example synthesizes a stack.)
func ExampleNew() {
	app := awscdk.NewApp(nil)
	stack := awscdk.NewStack(app, jsii.String("Orders"), nil)
	var ordersFunction awslambda.IFunction // your service
	var myAction awscloudwatch.IAlarmAction

	ob, err := outboxcdk.New(stack, "Outbox", &outboxcdk.Props{
		KafkaBootstrapServers: jsii.String("b-1.example:9094,b-2.example:9094"),
		KafkaAuthMode:         jsii.String(outboxcdk.AuthTLS),
		BucketCount:           jsii.Number(16),
		BinDir:                jsii.String("../outbox/bin"),
	})
	if err != nil {
		log.Fatal(err) // *outboxcdk.PropError: "outboxcdk: Props.BucketCount = 0: 1..4096 (...)"
	}
	ob.GrantEnqueue(ordersFunction) // WriterPolicy's statements: GetItem+PutItem+DescribeTable on messages, GetItem+UpdateItem+DescribeTable on control
	for _, a := range ob.Alarms.All() {
		a.AddAlarmAction(myAction)
	}
	app.Synth(nil)
}
