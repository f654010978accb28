// Command example is a CDK app to copy: one stack with an outbox and a
// placeholder writer function that may enqueue. Build the functions first
// (`make build` at the repository root writes bin/<function>/<goarch>/
// bootstrap), then, in this folder:
//
//	cdk synth                   # or: cdk deploy
//	cdk deploy -c kafkaBootstrapServers=b-1.msk.example:9094 -c kafkaAuthMode=tls
//
// Context values (cdk.json or -c): kafkaBootstrapServers, kafkaAuthMode and
// binDir (default ../../bin, this repository's). Every other setting keeps
// the template's default; set it in NewStack's Props.
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/dynakafka/outbox/cdk"
)

func main() {
	app := awscdk.NewApp(nil)
	_, _, err := NewStack(app, "OutboxExample", propsFromContext(app))
	if err == nil {
		app.Synth(nil)
	}
	jsii.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// propsFromContext reads the settings the example takes from CDK context.
func propsFromContext(app awscdk.App) *outboxcdk.Props {
	get := func(key, def string) *string {
		if v, ok := app.Node().TryGetContext(jsii.String(key)).(string); ok && v != "" {
			return jsii.String(v)
		}
		return jsii.String(def)
	}
	return &outboxcdk.Props{
		KafkaBootstrapServers: get("kafkaBootstrapServers", ""),
		KafkaAuthMode:         get("kafkaAuthMode", ""),
		BinDir:                get("binDir", "../../bin"),
	}
}
