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
// record has a result, or until AbandonGrace after its context ended (see
// below). It returns the number of messages, counted from the
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
// Publish returns at the latest AbandonGrace (200 ms) after its context is
// done or DeliveryTimeout has passed, whatever the brokers do; the relay
// cancels a publish at its lease's cut-off and at the end of the
// invocation's working time. A record that has no result by then is
// abandoned: reported as not acknowledged (an error matching ErrAbandoned
// and the context's error), although Kafka may still write it. Nothing is
// reported acknowledged that Kafka did not acknowledge.
//
// What becomes of a record when the context ends, exactly (kgo consults a
// record's context only while the record heads its partition's oldest batch,
// and while Produce waits for buffer space):
//
//   - A record in flight (in a produce request written to a broker and not
//     answered) is never failed by its context: with idempotent writes only
//     the broker's answer tells whether Kafka stored it, so kgo waits for the
//     answer, resending the request on a new connection after a connection
//     error. It may be written after Publish returned, and after another
//     relay took the bucket over.
//   - A record not yet written fails with the context's error only if it
//     heads its partition's oldest batch and that batch is not in flight:
//     kgo checks that record's context when it builds a request for the
//     partition, after a retriable error (the retry waits for a metadata
//     refresh, within DefaultMetadataMinAge) and while it waits for a
//     producer id. Then it fails every record buffered for the partition,
//     other buckets' included (their Publish sees ErrSharedBatchCancelled,
//     retriable).
//   - Any other record not yet written is not failed by its own context. A
//     record behind another bucket's record in its batch goes out with that
//     batch, whose first record's context decides. A batch behind one in
//     flight is sent without any check (kgo pipelines up to five produce
//     requests per broker), and once it is the oldest only its first
//     record's context counts. Such records may be written after Publish
//     returned and after a takeover.
//
// So the records a cancelled Publish leaves behind can still be written
// afterwards, in their partition's order. They are duplicates of messages the
// relay did not mark, which it (or the relay that took the bucket over)
// publishes again; consumers drop them by the message-id header. Since each
// client keeps a partition's records in order, the first copy of each message
// of a partition still arrives in sequence order; a later copy is an older
// duplicate after newer records. The client stays usable: the next Publish's
// records queue behind the unanswered request and go out once the broker
// answers. The client is shared by concurrent Publish calls, so Publish does
// not use kgo's AbortBufferedRecords, which would abort every bucket's
// records.
//
// # Publishing a record alone
//
// Kafka rejects a partition's record batch as a whole, and kgo fails every
// record buffered for the partition with that error, so a healthy record can
// get MESSAGE_TOO_LARGE because another bucket's record shared its batch. The
// relay therefore judges a record-level rejection only after PublishAlone
// (outbox.Isolator): it produces the one record through a second kgo client,
// built with the same settings on first use, that holds one record at a time,
// so the record is alone in its produce request. That client has its own
// producer id and metadata; a call whose record it abandoned makes the next
// call replace it, so records never queue behind an abandoned one there.
//
// # Authentication
//
// TLS and SASL configure encryption and authentication; the mechanisms come
// from franz-go: pkg/sasl/scram for SCRAM-SHA-512 and pkg/sasl/aws for MSK
// IAM (see the examples).
package kafka
