// Package outboxcdk is the outbox as an AWS CDK construct: New creates in a
// stack what template.yaml creates with SAM — the messages and control
// tables and their config item (a custom resource backed by the setup
// function), the relay on the messages table's KEYS_ONLY stream, the
// sweeper on a one-minute schedule, their least-privilege roles, the writer
// policy, log groups, alarms and dashboard — from the same settings (Props
// mirrors the template's parameters, with the same defaults, bounds and
// rules).
//
//	ob, err := outboxcdk.New(stack, "Outbox", &outboxcdk.Props{
//		KafkaBootstrapServers: jsii.String("b-1.example:9092,b-2.example:9092"),
//		KafkaAuthMode:         jsii.String(outboxcdk.AuthTLS),
//		BinDir:                jsii.String("../outbox/bin"), // make build
//	})
//	if err != nil {
//		log.Fatal(err) // a *PropError naming the field
//	}
//	ob.GrantEnqueue(writerFunction)
//
// The functions' code is the bootstrap binaries `make build` writes under
// bin/<function>/<goarch>/ (Props.BinDir). The construct lives in its own
// module, github.com/dynakafka/outbox/cdk, so that services importing the
// library never download the CDK. Its tests (in ./example) synthesize the
// example app and check that the result lints clean and is equivalent to
// template.yaml after the SAM transform, resource by resource.
package outboxcdk
