package dynamo

import (
	"fmt"
	"time"

	"github.com/dynakafka/outbox"
)

// settings holds every option of the package; each constructor reads the
// ones that apply to it (the option types below say which).
type settings struct {
	bucketCount       int
	fenceTTL          time.Duration
	deleteConcurrency int
	maxMessageBytes   int
	idHeader          string
	maxAttempts       int
	clock             outbox.Clock
	// jitter draws a backoff delay below its argument (tests fix it).
	jitter func(time.Duration) time.Duration
}

func defaultSettings() settings {
	return settings{
		fenceTTL:          DefaultFenceTTL,
		deleteConcurrency: 4,
		maxMessageBytes:   outbox.DefaultMaxMessageBytes,
		idHeader:          outbox.DefaultMessageIDHeader,
		maxAttempts:       DefaultMaxAttempts,
		clock:             outbox.SystemClock,
		jitter:            fullJitter,
	}
}

// DefaultFenceTTL is how long a fence tombstone is kept: 7 days.
const DefaultFenceTTL = 7 * 24 * time.Hour

// MinFenceTTL is the shortest FenceTTL accepted.
const MinFenceTTL = time.Hour

// DefaultMaxAttempts is the default of MaxAttempts: a Write sends its
// transaction, and each counter update and fence put, at most 6 times.
const DefaultMaxAttempts = 6

// TablesOption configures CreateTables.
type TablesOption interface{ applyTables(*settings) }

// StoreOption configures NewStore.
type StoreOption interface{ applyStore(*settings) }

// WriterOption configures NewWriter.
type WriterOption interface{ applyWriter(*settings) }

// Option configures CreateTables, NewStore and NewWriter alike.
type Option struct{ set func(*settings) }

func (o Option) applyTables(s *settings) { o.set(s) }
func (o Option) applyStore(s *settings)  { o.set(s) }
func (o Option) applyWriter(s *settings) { o.set(s) }

// FenceOption configures NewStore and NewWriter (both write fences).
type FenceOption struct{ set func(*settings) }

func (o FenceOption) applyStore(s *settings)  { o.set(s) }
func (o FenceOption) applyWriter(s *settings) { o.set(s) }

type storeOption func(*settings)

func (o storeOption) applyStore(s *settings) { o(s) }

type writerOption func(*settings)

func (o writerOption) applyWriter(s *settings) { o(s) }

// BucketCount is the outbox's number of buckets, 1..outbox.MaxBucketCount.
//
// For CreateTables it is the count a new outbox is created with (default 0,
// meaning outbox.DefaultBucketCount); an existing outbox with another count
// is a *outbox.MisconfigurationError. For NewStore and NewWriter it is the
// count this process expects (default 0: take the config item's); when it
// differs from the config item's, they fail with a *outbox.MisconfigurationError
// naming both values.
func BucketCount(n int) Option { return Option{func(s *settings) { s.bucketCount = n }} }

// FenceTTL is how long a fence tombstone is kept before the table's TTL
// removes it, counted from the later of the fence's time and the wall clock
// (DynamoDB expires items by its own clock). Default DefaultFenceTTL (7
// days); at least MinFenceTTL.
//
// A fence stops a late writer from committing a message at a sequence number
// the relay has already passed: the writer's put is conditional on the
// sequence being free. Once the fence expires, that protection is gone, so
// FenceTTL must exceed by far the longest time a writer could still send a
// transaction for a reserved sequence number: its retries, a process pause
// (GC, a frozen Lambda, a suspended VM), and clock error. Days, not minutes.
func FenceTTL(d time.Duration) FenceOption {
	return FenceOption{func(s *settings) { s.fenceTTL = d }}
}

// DeleteConcurrency is how many BatchWriteItem calls of 25 deletes Store.Delete
// runs at once. Default 4; 1..32.
func DeleteConcurrency(n int) StoreOption {
	return storeOption(func(s *settings) { s.deleteConcurrency = n })
}

// MaxMessageBytes bounds one message as a Kafka record (outbox.RecordSize).
// Default outbox.DefaultMaxMessageBytes; at least outbox.RecordOverhead. Use
// the same value as the relay. (A DynamoDB item is at most 400 KB, which the
// writer checks separately.)
func MaxMessageBytes(n int) WriterOption {
	return writerOption(func(s *settings) { s.maxMessageBytes = n })
}

// MessageIDHeader is the header the relay stamps the message id under; the
// writer uses it only to compute record sizes and to refuse messages that
// carry it themselves. Default outbox.DefaultMessageIDHeader. Use the same
// value as the relay.
func MessageIDHeader(name string) WriterOption {
	return writerOption(func(s *settings) { s.idHeader = name })
}

// MaxAttempts is the most requests the Writer sends for each call it makes,
// counting the first; it is the number of requests on the wire. The Writer
// is the only layer that retries them: it switches the client's retryer off
// for these calls (whatever RetryMaxAttempts, RetryMode or Retryer the
// client has), and waits between attempts with full-jitter exponential
// backoff, longer after throttling (25 ms doubling up to 2 s; throttled:
// 100 ms doubling up to 5 s).
//
//   - TransactWriteItems: one Write sends at most MaxAttempts. Retries of a
//     lost or failed response (same client request token, identical items),
//     of a conflict or of throttling, and resubmissions with new sequence
//     numbers after a relay fenced the reserved ones (a new token, sent at
//     once without backoff) all count.
//   - The counter UpdateItem that reserves a bucket's numbers, and each
//     fence PutItem that releases an unused number: at most MaxAttempts
//     each, retried after throttling, server errors, lost responses and
//     conflicts.
//
// NewWriter's reads of the config item and the messages table are left to
// the client's retryer. Default DefaultMaxAttempts (6); 1..20.
func MaxAttempts(n int) WriterOption {
	return writerOption(func(s *settings) { s.maxAttempts = n })
}

// WithClock sets the clock that stamps CreatedAt on messages and fences.
// Default outbox.SystemClock.
func WithClock(c outbox.Clock) WriterOption {
	return writerOption(func(s *settings) { s.clock = c })
}

func (s *settings) validate() error {
	bad := func(opt string, v any, why string) error {
		return &outbox.OptionError{Option: opt, Value: v, Reason: why}
	}
	switch {
	case s.bucketCount < 0 || s.bucketCount > outbox.MaxBucketCount:
		return bad("BucketCount", s.bucketCount, fmt.Sprintf("must be 1..%d (or 0 for the default)", outbox.MaxBucketCount))
	case s.fenceTTL < MinFenceTTL:
		return bad("FenceTTL", s.fenceTTL, fmt.Sprintf("must be at least %v, and should be days: a fence must outlive any writer that could still commit at its sequence", MinFenceTTL))
	case s.deleteConcurrency < 1 || s.deleteConcurrency > 32:
		return bad("DeleteConcurrency", s.deleteConcurrency, "must be 1..32")
	case s.maxMessageBytes < outbox.RecordOverhead:
		return bad("MaxMessageBytes", s.maxMessageBytes, fmt.Sprintf("must be at least %d", outbox.RecordOverhead))
	case s.idHeader == "":
		return bad("MessageIDHeader", s.idHeader, "must not be empty")
	case s.maxAttempts < 1 || s.maxAttempts > 20:
		return bad("MaxAttempts", s.maxAttempts, "must be 1..20")
	case s.clock == nil:
		return bad("WithClock", nil, "must not be nil")
	}
	return nil
}
