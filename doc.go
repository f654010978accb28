// Package outbox is the engine of a transactional outbox from DynamoDB to
// Kafka: the message model, the Store and Publisher contracts, and the
// Relay, which publishes each bucket's messages strictly in sequence
// order, under a lease, marking done only what the broker acknowledged.
//
// # Where to start
//
// Service writers put business items and messages in one transaction.
// Build messages with [Message], [JSON] or [CloudEvent], and write them
// with store/dynamo's Writer (dynamo.NewWriter, Writer.Write, and
// dynamo.UpdateIfVersion for "update my item if its version is still v").
// A failed write matches the sentinels with errors.Is ([ErrConditionFailed]
// among them); bad input is a [*ValidationError]. Test a service's read
// model with package outboxtest.
//
// Implementers of a Store or a Publisher satisfy [Store] and [Publisher];
// the optional capabilities are discovered by type assertion, never
// required: [BucketProbe], [StuckRecorder], [Isolator], [HolderFencer],
// [ConfigChecker], [ChangeEnder], [CounterProbe], [ParkedCounter]. Errors
// say what the relay should do through [Classifier] or [WithClass]. Every
// store must pass the conformance suite in package storetest; store/memory
// is the smallest one, store/dynamo the production one, kafka the
// production publisher.
//
// People who run the relay build one with [NewRelay] from a store, a
// publisher and options ([Option]; every option's doc states its default,
// and a bad value is an [*OptionError] at construction). A
// stream-triggered function calls [Relay.DrainBucketTo] per hinted bucket
// (lambda/relay wires it), a scheduled sweeper calls [Relay.Sweep]
// (lambda/sweeper), a long-running process calls [Relay.Run];
// [Relay.Park] moves a stopped bucket's message to a dead letter. Observe it through [WithLogger] and [WithMetrics] (the
// CloudWatch EMF and OpenTelemetry adapters are lambda/emf and otel); the
// writer and the publisher trace through a [Tracer]. [Classify] tells an
// error that stops a bucket (Fatal) from one that is retried.
//
// # What it promises
//
// Every committed message reaches Kafka at least once; first deliveries
// are in sequence order per bucket; nothing is marked done before Kafka
// acknowledged it; no hint is lost. README.md states the guarantees and
// their limits, and docs/design.md walks through every race, step by step,
// with a map of which file holds which part.
//
// The package imports no AWS SDK and no Kafka client: DynamoDB lives in
// store/dynamo (with the per-bucket counters in sequence), Kafka in kafka,
// and the Lambda entry points in lambda/relay and lambda/sweeper.
package outbox
