// Package outbox is the storage- and broker-agnostic core of the transactional
// outbox: the message model, bucketing, validation, the Store and Publisher
// contracts, and the relay engine that publishes each bucket strictly in
// sequence order, under a lease, deleting only what the broker acknowledged.
//
// The package imports no AWS SDK and no Kafka client. DynamoDB lives in
// store/dynamo (with the per-bucket counters in sequence), Kafka in kafka, and
// the Lambda entry points in lambda/relay and lambda/sweeper.
//
// Guarantees, and their exact limits, are described in README.md and walked
// through race by race in docs/design.md.
package outbox
