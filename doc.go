// Package outbox is the core of a transactional outbox from DynamoDB to
// Kafka: the message model, the Store and Publisher contracts, and the
// config item (Config). The engine that publishes each bucket's messages
// strictly in sequence order, under a lease, is package relay.
//
// # Where to start
//
// Service writers put business items and messages in one transaction.
// Build messages with [Message], [JSON] or cloudevent.New (package
// cloudevent), and write them with store/dynamo's Writer (dynamo.NewWriter, Writer.Write, and
// dynamo.UpdateIfVersion for "update my item if its version is still v").
// A failed write matches the sentinels with errors.Is ([ErrConditionFailed]
// among them); bad input is a [*ValidationError]. Test a service's read
// model with package outboxtest.
//
// Implementers of a Store or a Publisher satisfy [Store] and [Publisher];
// the optional capabilities are discovered by type assertion, never
// required: [BucketProbe], [StuckRecorder], [Isolator], [HolderFencer],
// [ConfigChecker], [EpochGate], [CounterProbe], [ParkedCounter]. Errors
// say what the relay should do through [Classifier] or [WithClass]. Every
// store must pass the conformance suite in package storetest; store/memory
// is the smallest one, store/dynamo the production one, kafka the
// production publisher.
//
// People who run the relay build one with relay.New (package relay) from
// a store, a publisher and options; a bad value is an [*OptionError] at
// construction. [Classify] tells an error that stops a bucket (Fatal) from
// one that is retried; the writer and the publisher trace through a
// [Tracer].
//
// # What it promises
//
// Every committed message reaches Kafka at least once; first deliveries
// are in sequence order per bucket; nothing is marked done before Kafka
// acknowledged it; no hint is lost. README.md states the guarantees and
// their limits, and docs/design.md walks through every race, step by step,
// with a map of which file holds which part.
//
// The package, and package relay, import no AWS SDK and no Kafka client: DynamoDB lives in
// store/dynamo (with the per-bucket counters in sequence), Kafka in kafka,
// and the Lambda entry points in lambda/relay and lambda/sweeper.
package outbox
