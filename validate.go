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

// DefaultMessageIDHeader is the record header that carries the message id.
const DefaultMessageIDHeader = "x-outbox-message-id"

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

// RecordSize returns the size bound of m as a Kafka record: key + value +
// headers (including the message-id header the relay stamps, named
// idHeader, with a 36-byte UUID value) + RecordOverhead.
func RecordSize(m Message, idHeader string) int {
	n := RecordOverhead + len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += HeaderOverhead + len(h.Key) + len(h.Value)
	}
	n += HeaderOverhead + len(idHeader) + 36
	return n
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

// Validate checks one message before it is written: a legal topic, a header
// key that is valid UTF-8, a non-negative explicit partition, and a record
// size within maxMessageBytes. index is the message's position in the
// caller's batch and is reported in the error.
func Validate(m Message, index, maxMessageBytes int, idHeader string) error {
	if err := ValidateTopic(m.Topic); err != nil {
		return &ValidationError{Index: index, Field: "Topic", Reason: err.Error()}
	}
	for i, h := range m.Headers {
		if !utf8.ValidString(h.Key) {
			return &ValidationError{Index: index, Field: fmt.Sprintf("Headers[%d].Key", i), Reason: "header keys must be valid UTF-8 (Kafka header keys are strings)"}
		}
		if h.Key == idHeader {
			return &ValidationError{Index: index, Field: fmt.Sprintf("Headers[%d].Key", i), Reason: fmt.Sprintf("%q is the message-id header the relay stamps; use another name", idHeader)}
		}
	}
	if m.Partition != nil && *m.Partition < 0 {
		return &ValidationError{Index: index, Field: "Partition", Reason: fmt.Sprintf("%d is negative", *m.Partition)}
	}
	if size := RecordSize(m, idHeader); size > maxMessageBytes {
		return &ValidationError{Index: index, Field: "Value", Reason: fmt.Sprintf("the record is %d bytes (key+value+headers+%d overhead), above MaxMessageBytes=%d; shrink the key, value or headers", size, RecordOverhead, maxMessageBytes)}
	}
	return nil
}
