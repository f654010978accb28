package outbox

import (
	"fmt"
	"unicode/utf8"
)

// DefaultMaxMessageBytes is the default bound on one Kafka record's size as
// computed by RecordSize. It is 1 MiB, below Kafka's default topic limit
// max.message.bytes = 1048588 (the producer-side record batch limit). Note
// that a DynamoDB item is at most 400 KB, so in practice the item bound is
// reached first unless MaxMessageBytes is set lower.
const DefaultMaxMessageBytes = 1 << 20

// Default names of the headers the relay stamps on every record, after the
// message's own headers. They are part of the wire contract (with the bucket
// vectors in testdata/bucket_vectors.json): the message id (its canonical
// UUID), and the message's bucket and sequence number as decimal strings, so
// that a consumer in any language can deduplicate and order.
const (
	DefaultMessageIDHeader = "x-outbox-message-id"
	DefaultBucketHeader    = "x-outbox-bucket"
	DefaultSequenceHeader  = "x-outbox-sequence"
)

// HeaderNames names the headers the relay stamps on every record. An empty
// name means its default (DefaultMessageIDHeader, DefaultBucketHeader,
// DefaultSequenceHeader). Writers and the publisher must use the same names:
// writers count the stamped headers in a record's size and refuse messages
// that carry them.
type HeaderNames struct {
	MessageID, Bucket, Sequence string
}

// Longest values of the stamped headers: a canonical UUID, a bucket below
// MaxBucketCount, a non-negative int64.
const (
	maxIDValue       = 36
	maxBucketValue   = 4
	maxSequenceValue = 19
)

// WithDefaults returns h with every empty name replaced by its default.
func (h HeaderNames) WithDefaults() HeaderNames {
	if h.MessageID == "" {
		h.MessageID = DefaultMessageIDHeader
	}
	if h.Bucket == "" {
		h.Bucket = DefaultBucketHeader
	}
	if h.Sequence == "" {
		h.Sequence = DefaultSequenceHeader
	}
	return h
}

// Check returns an *OptionError (Option MessageIDHeader, BucketHeader or
// SequenceHeader) unless the names, with defaults, are valid UTF-8 (Kafka
// header keys are strings) and distinct.
func (h HeaderNames) Check() error {
	h = h.WithDefaults()
	named := []struct{ option, name string }{{"MessageIDHeader", h.MessageID}, {"BucketHeader", h.Bucket}, {"SequenceHeader", h.Sequence}}
	for i, n := range named {
		if !utf8.ValidString(n.name) {
			return &OptionError{Option: n.option, Value: n.name, Reason: "must be valid UTF-8 (Kafka header keys are strings)"}
		}
		for _, o := range named[:i] {
			if o.name == n.name {
				return &OptionError{Option: n.option, Value: n.name, Reason: fmt.Sprintf("is also the %s; the stamped headers need distinct names", o.option)}
			}
		}
	}
	return nil
}

// RecordSize returns the size bound of m as a Kafka record, with the stamped
// headers under these names: key + value + m's headers + the stamped headers
// at their longest (36-byte id, 4-digit bucket, 19-digit sequence) +
// RecordOverhead.
func (h HeaderNames) RecordSize(m Message) int {
	h = h.WithDefaults()
	n := RecordOverhead + len(m.Key) + len(m.Value)
	for _, x := range m.Headers {
		n += HeaderOverhead + len(x.Key) + len(x.Value)
	}
	n += 3*HeaderOverhead + len(h.MessageID) + maxIDValue + len(h.Bucket) + maxBucketValue + len(h.Sequence) + maxSequenceValue
	return n
}

// Per-record overhead used by RecordSize. Kafka's record-batch format (v2)
// spends 61 bytes on the batch header and, per record, at most 5 varints of
// length/attributes/offset/key/value (up to 5 bytes each) plus a 10-byte
// timestamp delta and a header-count varint: 61 + 1 + 10 + 5*4 + 5 = 97. We
// round up to 128 so the bound holds for a record that travels alone in its
// batch. Each header costs its key and value lengths (two varints of at most
// 5 bytes) on top of its bytes.
const (
	RecordOverhead = 128
	HeaderOverhead = 10
)

// MaxTopicLength is Kafka's topic name length limit.
const MaxTopicLength = 249

// RecordSize returns the size bound of m as a Kafka record with the
// message-id header named idHeader and the bucket and sequence headers under
// their default names: HeaderNames{MessageID: idHeader}.RecordSize(m).
func RecordSize(m Message, idHeader string) int {
	return HeaderNames{MessageID: idHeader}.RecordSize(m)
}

// ValidateTopic checks a Kafka topic name: 1..249 characters of
// [a-zA-Z0-9._-], and not "." or "..".
func ValidateTopic(topic string) error {
	switch {
	case topic == "":
		return fmt.Errorf("topic is empty")
	case len(topic) > MaxTopicLength:
		return fmt.Errorf("topic is %d characters long; Kafka allows at most %d", len(topic), MaxTopicLength)
	case topic == "." || topic == "..":
		return fmt.Errorf("topic %q is not allowed by Kafka", topic)
	}
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			r, _ := utf8.DecodeRuneInString(topic[i:])
			return fmt.Errorf("topic %q has the character %q at byte %d; Kafka allows only a-z A-Z 0-9 . _ -", topic, r, i)
		}
	}
	return nil
}

// Validate is HeaderNames{MessageID: idHeader}.Validate(m, index,
// maxMessageBytes): the bucket and sequence headers under their default names.
func Validate(m Message, index, maxMessageBytes int, idHeader string) error {
	return HeaderNames{MessageID: idHeader}.Validate(m, index, maxMessageBytes)
}

// ValidateNew is Validate for a message a caller hands to a writer: it
// also refuses a message with Bucket or Sequence set (a *ValidationError
// naming the field). Both are the writer's to assign (the bucket from the
// key or partition, the sequence from the bucket's counter); the write's
// result carries them.
func (h HeaderNames) ValidateNew(m Message, index, maxMessageBytes int) error {
	switch {
	case m.Bucket != 0:
		return &ValidationError{Index: index, Field: "Bucket", Reason: fmt.Sprintf(
			"is %d; the writer assigns the bucket from the key (or Partition): leave it zero and read it from the write's result", m.Bucket)}
	case m.Sequence != 0:
		return &ValidationError{Index: index, Field: "Sequence", Reason: fmt.Sprintf(
			"is %d; the writer reserves the sequence number: leave it zero and read it from the write's result", m.Sequence)}
	}
	return h.Validate(m, index, maxMessageBytes)
}

// Validate checks one message before it is written: a legal topic, header
// keys that are valid UTF-8 and none of the stamped headers' names, a
// non-negative explicit partition, and a record size (h.RecordSize) within
// maxMessageBytes. index is the message's position in the caller's batch and
// is reported in the error.
func (h HeaderNames) Validate(m Message, index, maxMessageBytes int) error {
	h = h.WithDefaults()
	if err := ValidateTopic(m.Topic); err != nil {
		return &ValidationError{Index: index, Field: "Topic", Reason: err.Error()}
	}
	for i, x := range m.Headers {
		if !utf8.ValidString(x.Key) {
			return &ValidationError{Index: index, Field: fmt.Sprintf("Headers[%d].Key", i), Reason: "header keys must be valid UTF-8 (Kafka header keys are strings)"}
		}
		for _, stamped := range [...]struct{ what, name string }{{"message-id", h.MessageID}, {"bucket", h.Bucket}, {"sequence", h.Sequence}} {
			if x.Key == stamped.name {
				return &ValidationError{Index: index, Field: fmt.Sprintf("Headers[%d].Key", i), Reason: fmt.Sprintf("%q is the %s header the relay stamps; use another name", x.Key, stamped.what)}
			}
		}
	}
	if m.Partition != nil && *m.Partition < 0 {
		return &ValidationError{Index: index, Field: "Partition", Reason: fmt.Sprintf("%d is negative", *m.Partition)}
	}
	if size := h.RecordSize(m); size > maxMessageBytes {
		return &ValidationError{Index: index, Field: "Value", Reason: fmt.Sprintf("the record is %d bytes (key+value+headers+stamped headers+%d overhead), above MaxMessageBytes=%d; shrink the key, value or headers", size, RecordOverhead, maxMessageBytes)}
	}
	return nil
}
