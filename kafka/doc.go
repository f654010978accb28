// Package kafka is the outbox's Kafka publisher: an outbox.Publisher on the
// franz-go client (kgo) that the relay engine hands one bucket's contiguous
// run of messages at a time.
//
// NewPublisher(ctx, seeds, opts...) builds it (see ExampleNewPublisher);
// pass it to relay.New, or let lambda/relay wire it from the
// environment. Publish produces a run, PublishAlone one record on its own
// (outbox.Isolator), Ping checks the brokers, Close releases the clients.
// TLS and SASL configure encryption and authentication, with mechanisms from
// franz-go: pkg/sasl/scram for SCRAM-SHA-512 and pkg/sasl/aws for MSK IAM
// (ExampleSASL_scram, ExampleSASL_mskIAM).
//
// # Guarantees it enforces
//
// Options passed through ClientOptions are applied first and the
// publisher's settings after, so none of these can be downgraded (a
// *DowngradeError refuses a ClientOption that tries):
//
//   - acks=all and idempotent writes;
//   - kgo.StickyKeyPartitioner(nil): a keyed record lands on
//     (murmur2(key) & 0x7fffffff) mod partitions, as with the Java client and
//     librdkafka and as outbox.BucketForKey computes; a message with an
//     explicit Partition goes to that partition;
//   - batches no larger than MaxMessageBytes allows, so a record too large
//     on its own fails alone;
//   - a delivery deadline below LeaseDuration.
//
// # What Publish returns
//
// Publish returns the number of messages, counted from the front, that
// Kafka acknowledged, and the first error in message order, wrapped in an
// *outbox.PublishError that names the message. A message that fails a local
// check (size, topic, headers, topic existence) is not produced, nor is any
// after it. A topic deleted after its check fails its next records with a
// *TopicError (Fatal, "does not exist") once the publisher has looked again,
// and is produced to again once it is recreated, without a restart.
// Publish returns at the latest AbandonGrace after its context is done or
// DeliveryTimeout has passed (twice that after DeliveryTimeout when it looks
// at a record's topic again); a record without a result by then is reported
// not acknowledged (ErrAbandoned), although Kafka may still write it: a
// duplicate the message-id header lets consumers drop.
//
// # Stamped headers
//
// After the message's own headers, every record carries three headers (the
// wire contract; other names can be set in the outbox's config item, where
// writers, the publisher (OutboxConfig) and consumers read them):
//
//	x-outbox-message-id  the message id, a canonical UUID (v7 from the writer API)
//	x-outbox-bucket      the message's bucket, decimal: (murmur2(key) & 0x7fffffff) mod BucketCount
//	x-outbox-sequence    the message's sequence number in its bucket, decimal
//
// The record timestamp is the message's CreatedAt: leave
// message.timestamp.before.max.ms and message.timestamp.difference.max.ms
// unset on outbox topics, or a backlog older than them blocks its bucket.
//
// How the publisher batches, what a cancelled Publish leaves in the client,
// and why PublishAlone uses a second client are in docs/design.md (§7.3 and
// §10, "The Kafka publisher").
package kafka
