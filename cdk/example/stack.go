package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/dynakafka/outbox/cdk"
)

// NewStack is the example's stack: the outbox and, standing in for your
// service, a writer function granted exactly what enqueueing needs.
func NewStack(scope constructs.Construct, id string, props *outboxcdk.Props) (awscdk.Stack, *outboxcdk.Outbox, error) {
	stack := awscdk.NewStack(scope, jsii.String(id), &awscdk.StackProps{
		Description: jsii.String("Transactional outbox from DynamoDB to Kafka, with a placeholder writer."),
	})
	ob, err := outboxcdk.New(stack, "Outbox", props)
	if err != nil {
		return nil, nil, err
	}
	// Replace with your service. It writes its items and outbox messages in
	// one transaction with dynamo.NewWriter(ctx, client, dynamo.Tables{...})
	// and needs, besides GrantEnqueue, its own tables' permissions.
	writer := awslambda.NewFunction(stack, jsii.String("Writer"), &awslambda.FunctionProps{
		Description: jsii.String("Placeholder for a service that enqueues outbox messages."),
		Runtime:     awslambda.Runtime_NODEJS_24_X(),
		Handler:     jsii.String("index.handler"),
		Code:        awslambda.Code_FromInline(jsii.String("exports.handler = async () => ({});")),
		Environment: &map[string]*string{
			"OUTBOX_MESSAGES_TABLE": ob.MessagesTable.TableName(),
			"OUTBOX_CONTROL_TABLE":  ob.ControlTable.TableName(),
		},
	})
	ob.GrantEnqueue(writer)
	return stack, ob, nil
}
