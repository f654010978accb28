// Package kafka is the outbox's Kafka publisher: an outbox.Publisher on the
// franz-go client (kgo) that the relay engine hands one bucket's contiguous
// run of messages at a time.
//
// # Guarantees it enforces
//
// The Publisher builds its own kgo client. Options passed through
// ClientOptions are applied first and the publisher's settings after, so none
// of these can be downgraded:
//
//   - acks=all and idempotent writes: a record is acknowledged only once every
//     in-sync replica has it, and the broker drops duplicates of a batch the
//     client resends. ClientOptions that disable idempotence, set other acks,
//     allow cancelling in-flight idempotent records, make the client
//     transactional, flush manually or force a default topic are refused with
//     a *DowngradeError.
//   - kgo.StickyKeyPartitioner(nil): a keyed record lands on
//     (murmur2(key) & 0x7fffffff) mod partitions, as with the Java client and
//     librdkafka (and as outbox.BucketForKey computes); an empty, non-nil key
//     is hashed like any key; a nil key is keyless. A message with an explicit
//     Partition goes to that partition.
//   - ProducerBatchMaxBytes derived from MaxMessageBytes, so no batch the
//     client builds exceeds what the topic admits (the broker would reject the
//     whole batch, failing every record in it) and a record too large on its
//     own fails alone.
//   - a delivery timeout below LeaseDuration, so records the client could
//     not send do not outlive the lease they are published under. (It is a
//     deadline on the records' context, not kgo's RecordDeliveryTimeout, which
//     counts from the record timestamp: the message's CreatedAt.)
//
// # What Publish returns
//
// Publish starts every record of the run before it waits, so Kafka batches
// them (no broker round trip per record), then waits until every started
// record has a result. It returns the number of messages, counted from the
// front, that Kafka acknowledged, and the first error in message order,
// wrapped in an *outbox.PublishError that names the message. Messages are
// checked locally first (size against MaxMessageBytes, topic name, headers,
// the message-id header name, topic existence and limits): a message that
// fails a local check is not produced, and neither is any message after it,
// so a message that can never be published cannot be overtaken by later ones
// of the same key.
//
// Records the broker rejects are another matter: Kafka accepts or rejects each
// partition's batch on its own, so when one message fails at the broker, later
// messages on other partitions may still be written (on the same partition kgo
// fails every record buffered behind the failed one, so a partition has no
// gaps). The acknowledged prefix is all the relay deletes; what was written
// beyond it is published again later, which the message-id header lets
// consumers deduplicate.
//
// # Stamped headers
//
// After the message's own headers, every record carries three headers (the
// wire contract; names configurable with MessageIDHeader, BucketHeader and
// SequenceHeader, which must match the writers'):
//
//	x-outbox-message-id  the message id, a canonical UUID (v7 from the writer API)
//	x-outbox-bucket      the message's bucket, decimal: (murmur2(key) & 0x7fffffff) mod BucketCount
//	x-outbox-sequence    the message's sequence number in its bucket, decimal
//
// A consumer in any language can deduplicate on the id, and order a bucket's
// records by sequence: sequences grow with commit order per bucket but have
// gaps (fenced numbers, parked messages, and the bucket's messages on other
// topics). The inbox package does both for Go consumers.
//
// # Record timestamps
//
// A record's timestamp is the message's CreatedAt, which for a backlog can be
// long past. Topics with message.timestamp.type=LogAppendTime replace it with
// the broker's time; a topic with message.timestamp.before.max.ms (Kafka 3.6+)
// or message.timestamp.difference.max.ms below the oldest backlog the outbox
// may hold rejects older messages with INVALID_TIMESTAMP, which blocks their
// bucket: leave those unset (the default) on outbox topics.
//
// # Cancellation and the lease
//
// Each record is produced with the Publish context. kgo honours a record's
// context only while the record is not in flight: when the first record of a
// partition's oldest batch has a cancelled context and that batch has not
// been written to a broker (or has been answered), the client fails every
// record buffered for that partition. A batch written to a broker but not yet
// answered is never failed by cancellation: with idempotent writes, the only
// way to know whether Kafka stored it is the broker's answer (kgo retries the
// request until it gets one). Publish therefore returns promptly on
// cancellation when records are waiting (for a producer id or buffer space at
// once, after a retriable error within DefaultMetadataMinAge) and otherwise
// as soon as the in-flight requests are answered. A broker that accepted a
// request and never answers it can thus hold a Publish past its lease; the
// relay must not delete anything after losing its lease anyway, and what such
// a request writes is a duplicate the message-id header identifies. See
// Publisher.Publish.
//
// # Authentication
//
// TLS and SASL configure encryption and authentication; the mechanisms come
// from franz-go: pkg/sasl/scram for SCRAM-SHA-512 and pkg/sasl/aws for MSK
// IAM (see the examples).
package kafka
