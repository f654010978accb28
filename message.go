package outbox

import (
	"fmt"
	"time"

	"github.com/google/uuid"
)

// FormatVersion is the item format version written on every item the outbox
// stores. Readers refuse items with a higher version than they understand.
const FormatVersion = 1

// Header is one Kafka record header. Headers are ordered, duplicate keys are
// allowed and values are arbitrary bytes (nil and empty are both legal).
type Header struct {
	Key   string
	Value []byte
}

// Message is one outbox message: a Kafka record to be produced, plus its
// identity and its place in its bucket's order.
//
// Key and Value are serialized once, by the writer; the relay passes the bytes
// through untouched.
type Message struct {
	// ID is the message's unique id, a UUID v7 in its canonical text form.
	// The writer assigns one when it is empty. It is stamped on the Kafka
	// record as the message-id header so consumers can deduplicate.
	ID string
	// Bucket is the ordering bucket, assigned by the writer (see
	// BucketFor): an output, not an input. A writer refuses a message
	// with Bucket set (HeaderNames.ValidateNew); its result carries it.
	Bucket int
	// Sequence is the message's position in its bucket, reserved from the
	// bucket's counter by the writer. Monotonic per bucket, gaps allowed.
	// Like Bucket, an output: refused when set on a write.
	Sequence int64
	// Topic is the Kafka topic.
	Topic string
	// Key is the record key. nil means keyless (no order is promised for
	// keyless messages); an empty, non-nil slice is a real (empty) key.
	Key []byte
	// Value is the record value. nil is a tombstone.
	Value []byte
	// Headers are the record headers, in order.
	Headers []Header
	// Partition, when non-nil, pins the record to this Kafka partition and
	// buckets the message by partition instead of by key.
	Partition *int32
	// CreatedAt is when the writer created the message. It becomes the
	// Kafka record timestamp. The writer sets it when zero.
	CreatedAt time.Time
}

// PartitionOf returns a pointer to p, for Message.Partition.
func PartitionOf(p int32) *int32 { return &p }

// NewID returns a new message id: a UUID v7 (time-ordered) in canonical form.
func NewID() string {
	id, err := uuid.NewV7()
	if err != nil {
		// uuid.NewV7 only fails when the system's random source fails.
		panic(fmt.Sprintf("outbox: cannot generate a UUID v7: %v", err))
	}
	return id.String()
}

// Entry is one item read from a bucket's pending range: a message, or a
// tombstone that marks its sequence number as decided without a message — a
// fence (nobody committed that number in time, or its writer's transaction
// failed) or a published message's tombstone (DeleteMode).
type Entry struct {
	Sequence int64
	// Fence is true for a tombstone; Message is then zero except for
	// Bucket, Sequence and CreatedAt (when the tombstone was written).
	Fence bool
	// Published is true for the tombstone of a published message (Fence is
	// true too).
	Published bool
	Message   Message
	// Epoch is the BucketCount epoch the message's sequence number was
	// reserved at (its item's stamp; 0 when it has none: written at epoch
	// 0, or a tombstone). A relay publishes a message of an epoch whose
	// gate it has not seen open only after asking (EpochGate).
	Epoch int64
	// Err is set when the stored item could not be decoded into a message.
	// The relay never deletes such an item; it parks it or stops the bucket.
	Err error
}
