package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/dynakafka/outbox"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrClosed is returned by Publish once Close has been called, and wraps the
// error of records that Close failed.
var ErrClosed = errors.New("kafka: publisher is closed")

// ErrSharedBatchCancelled reports a record that failed because another,
// concurrent Publish was cancelled: kgo batches records per partition and
// consults only the context of the first record of a batch, failing every
// record buffered for the partition when it is done. Nothing is wrong with
// the record or this Publish; publish it again.
var ErrSharedBatchCancelled = errors.New("kafka: record failed because a concurrent Publish sharing its partition batch was cancelled; publish it again")

// ErrAbandoned reports a record that had no result when its Publish stopped
// waiting, AbandonGrace after the Publish's context ended (or DeliveryTimeout
// passed): written to a broker that has not answered, or queued in the
// client behind such a request. It is not acknowledged, but Kafka may still
// write it, possibly after records produced later by another relay: a
// duplicate once it is published again, which consumers drop by the
// message-id header. The error also matches the context's error (or
// kgo.ErrRecordTimeout). Retriable.
var ErrAbandoned = errors.New("kafka: record abandoned without an answer when the publish's context ended; Kafka may still write it")

// DowngradeError reports a kgo option passed through ClientOptions that would
// weaken a delivery guarantee the Publisher enforces. NewPublisher refuses to
// start.
type DowngradeError struct {
	Option string // the kgo option, e.g. "kgo.DisableIdempotentWrite"
	Value  string // what it sets
	Reason string // why it is refused and what to do instead
}

func (e *DowngradeError) Error() string {
	return fmt.Sprintf("kafka: ClientOptions(%s) sets %s, which the publisher refuses: %s", e.Option, e.Value, e.Reason)
}

// TopicError reports a topic that does not exist (Err is
// kerr.UnknownTopicOrPartition) or that could not be checked (for example Err
// is kerr.TopicAuthorizationFailed). Match the cause with errors.Is.
type TopicError struct {
	Topic string
	Err   error
}

func (e *TopicError) Error() string {
	switch {
	case errors.Is(e.Err, kerr.UnknownTopicOrPartition):
		return fmt.Sprintf("kafka: topic %q does not exist; create it (the relay does not create topics)", e.Topic)
	case errors.Is(e.Err, kerr.TopicAuthorizationFailed):
		return fmt.Sprintf("kafka: topic %q: not authorized to describe it or its configs (%v); grant Describe and DescribeConfigs on the topic", e.Topic, e.Err)
	}
	return fmt.Sprintf("kafka: checking topic %q: %v", e.Topic, e.Err)
}

func (e *TopicError) Unwrap() error { return e.Err }

// TopicLimitError reports a topic whose max.message.bytes is below
// MaxMessageBytes: a message the writers accept could be rejected by Kafka
// and block its bucket. Source says where the limit came from: the topic's
// config, the broker's message.max.bytes, or Kafka's documented default.
type TopicLimitError struct {
	Topic                string
	TopicMaxMessageBytes int
	Source               string
	MaxMessageBytes      int
}

func (e *TopicLimitError) Error() string {
	return fmt.Sprintf("kafka: topic %q admits record batches of at most %d bytes (max.message.bytes, from %s) but MaxMessageBytes is %d; raise the topic's max.message.bytes to at least %d or lower the outbox's MaxMessageBytes (its config item)",
		e.Topic, e.TopicMaxMessageBytes, e.Source, e.MaxMessageBytes, e.MaxMessageBytes)
}

// RecordTooLargeError reports a message larger than MaxMessageBytes. It was
// not produced. It matches kerr.MessageTooLarge with errors.Is.
type RecordTooLargeError struct {
	Size            int // outbox.HeaderNames.RecordSize of the message with the stamped headers
	MaxMessageBytes int
	// Topic is set when the limit is the topic's max.message.bytes (Strict
	// mode's pre-flight check) rather than MaxMessageBytes.
	Topic string
}

func (e *RecordTooLargeError) Error() string {
	if e.Topic != "" {
		return fmt.Sprintf("kafka: record is %d bytes, above topic %q's max.message.bytes=%d; it was not produced (was the topic's limit lowered?)", e.Size, e.Topic, e.MaxMessageBytes)
	}
	return fmt.Sprintf("kafka: record is %d bytes, above MaxMessageBytes=%d; it was not produced (the outbox's MaxMessageBytes was lowered after it was written, or this publisher was built without the outbox's config item: kafka.OutboxConfig)", e.Size, e.MaxMessageBytes)
}

func (e *RecordTooLargeError) Unwrap() error { return kerr.MessageTooLarge }

// ProduceError reports a record that Kafka or the client failed. Err is what
// kgo reported: a *kerr.Error from the broker (match it with errors.Is, e.g.
// kerr.NotEnoughReplicas), kgo.ErrRecordTimeout, a context error, ...
type ProduceError struct {
	Topic     string
	Partition int32 // -1 when the record was not assigned a partition
	Err       error
}

func (e *ProduceError) Error() string {
	where := fmt.Sprintf("topic %q", e.Topic)
	if e.Partition >= 0 {
		where += fmt.Sprintf(" partition %d", e.Partition)
	}
	hint := ""
	switch {
	case errors.Is(e.Err, kerr.MessageTooLarge):
		hint = "; the topic's max.message.bytes is below MaxMessageBytes (was it lowered after start?) or the broker recompressed the batch to a larger size"
	case errors.Is(e.Err, ErrAbandoned):
		hint = "; the broker did not answer in time (it may still write the record: a duplicate when it is published again)"
	case errors.Is(e.Err, kgo.ErrRecordTimeout):
		hint = "; the broker or the partition's leader did not take it in time"
	case errors.Is(e.Err, kerr.TopicAuthorizationFailed):
		hint = "; grant Write on the topic"
	case errors.Is(e.Err, kerr.ClusterAuthorizationFailed):
		hint = "; grant IdempotentWrite on the cluster (Kafka before 3.0 requires it for idempotent producers)"
	}
	return fmt.Sprintf("kafka: produce to %s: %v%s", where, e.Err, hint)
}

func (e *ProduceError) Unwrap() error { return e.Err }

// IsRetriable reports whether err, as returned by Publish, is transient:
// nothing is known to be wrong with the message or the configuration, and
// publishing the same message again later may succeed. That covers
// cancellation, delivery timeouts, a closed publisher, network errors and the
// broker errors Kafka marks retriable (NOT_ENOUGH_REPLICAS, leader changes,
// ...).
//
// It is false for errors that repeat until someone acts: a message larger
// than MaxMessageBytes or rejected by the broker (MESSAGE_TOO_LARGE,
// INVALID_RECORD, CORRUPT_MESSAGE, ...), a missing or too small topic,
// missing permissions, an invalid message or explicit partition, a refused
// option, and for errors it does not recognise. A relay can alert on those
// instead of retrying in a loop.
//
// It is Class's verdict: true only where Class says outbox.Retriable.
// Class also calls retriable what it does not recognise (the relay tries
// it again); IsRetriable is narrower there.
func IsRetriable(err error) bool {
	return err != nil && Class(err) == outbox.Retriable && transient(err)
}

// transient reports whether err is one of the errors known to pass: a
// broker error (Class has sorted out those that do not), the end of a
// context, a record the client gave up on or a closed client, or a network
// error.
func transient(err error) bool {
	if _, ok := errors.AsType[*kerr.Error](err); ok {
		return true
	}
	switch {
	case errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, ErrSharedBatchCancelled),
		errors.Is(err, ErrAbandoned),
		errors.Is(err, ErrClosed),
		errors.Is(err, kgo.ErrClientClosed),
		errors.Is(err, kgo.ErrRecordTimeout),
		errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, kgo.ErrMaxBuffered),
		errors.Is(err, kgo.ErrAborting),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// Class sorts a Publish error into the relay's error classes (see
// outbox.ErrorClass):
//
//   - RecordPermanent: the record itself cannot be written — larger than
//     MaxMessageBytes, or rejected by the broker as MESSAGE_TOO_LARGE,
//     INVALID_RECORD, CORRUPT_MESSAGE, INVALID_TIMESTAMP,
//     RECORD_LIST_TOO_LARGE or INVALID_TOPIC_EXCEPTION, or invalid before it
//     was produced. The relay parks it (or blocks its bucket).
//   - Fatal: nothing in the topic or cluster can be written until someone
//     acts — a missing (deleted) or too small topic, authorization or SASL
//     failures, a refused option, an unsupported broker, and any broker
//     error Kafka does not mark retriable. The bucket stops; nothing is
//     parked; it resumes when the cause is fixed.
//   - Retriable: everything else, including UNKNOWN_TOPIC_OR_PARTITION while
//     producing to a topic that a fresh check still finds (metadata may be
//     settling; a topic the check finds gone is a *TopicError, Fatal),
//     UNKNOWN_TOPIC_ID from a topic deleted and created again (the
//     publisher replaces its client, and the next Publish produces to the
//     new topic), leadership changes, timeouts, NOT_ENOUGH_REPLICAS
//     and network errors.
func Class(err error) outbox.ErrorClass {
	var (
		tooLarge  *RecordTooLargeError
		limit     *TopicLimitError
		topic     *TopicError
		downgrade *DowngradeError
		invalid   *outbox.ValidationError
	)
	switch {
	case err == nil:
		return outbox.Retriable
	case errors.As(err, &tooLarge), errors.As(err, &invalid):
		return outbox.RecordPermanent
	case errors.As(err, &limit), errors.As(err, &topic), errors.As(err, &downgrade):
		return outbox.Fatal
	}
	if ke, ok := errors.AsType[*kerr.Error](err); ok {
		switch ke {
		case kerr.MessageTooLarge, kerr.InvalidRecord, kerr.CorruptMessage, kerr.InvalidTimestamp,
			kerr.RecordListTooLarge, kerr.InvalidTopicException:
			return outbox.RecordPermanent
		case kerr.UnknownTopicOrPartition:
			return outbox.Retriable
		}
		if ke.Retriable {
			return outbox.Retriable
		}
		return outbox.Fatal
	}
	return outbox.Retriable
}

// OutboxErrorClass implements outbox.Classifier.
func (e *ProduceError) OutboxErrorClass() outbox.ErrorClass { return Class(e.Err) }

// OutboxErrorClass implements outbox.Classifier: always RecordPermanent.
func (e *RecordTooLargeError) OutboxErrorClass() outbox.ErrorClass { return outbox.RecordPermanent }

// OutboxErrorClass implements outbox.Classifier: always Fatal (the topic is
// missing, or cannot be described).
func (e *TopicError) OutboxErrorClass() outbox.ErrorClass { return outbox.Fatal }

// OutboxErrorClass implements outbox.Classifier: always Fatal.
func (e *TopicLimitError) OutboxErrorClass() outbox.ErrorClass { return outbox.Fatal }
