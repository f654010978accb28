// Package relay is the outbox's engine: a [Relay], built with [New] from
// an outbox.Store, an outbox.Publisher and options ([Option]; every
// option's doc states its default, and a bad value is an
// *outbox.OptionError at construction), publishes each bucket's messages
// strictly in sequence order, under a lease, marking done only what the
// broker acknowledged.
//
// A stream-triggered function calls [Relay.DrainBucketTo] per hinted
// bucket (lambda/relay wires it), a scheduled sweeper calls [Relay.Sweep]
// (lambda/sweeper), a long-running process calls [Relay.Run];
// [Relay.Park] moves a stopped bucket's message to a dead letter. Observe
// it through [WithLogger] and [WithMetrics] (the CloudWatch EMF and
// OpenTelemetry adapters are lambda/emf and otel); a writer in the same
// process wakes it through a [Notifier].
//
// The package imports no AWS SDK and no Kafka client. docs/design.md
// walks through every race, step by step.
package relay
