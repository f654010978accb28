package dynamo

import (
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/dynakafka/outbox"
)

// settings holds every option of the package; each constructor reads the
// ones of its kind (the option types below).
type settings struct {
	// ChangeBucketCount's (rebucket.go).
	changeTimeout, changeGap time.Duration
	bucketCount              int
	fenceTTL                 time.Duration
	tombstoneTTL             time.Duration
	deleteConcurrency        int
	// maxMessageBytes and headers: CreateTables' shared settings (0, "":
	// not given); for NewStore and NewWriter, the config item's.
	maxMessageBytes int
	headers         outbox.HeaderNames
	tracer          outbox.Tracer
	maxAttempts     int
	clock           outbox.Clock
	logger          *slog.Logger
	notifier        Notifier
	notifierSet     bool
	// jitter draws a backoff delay below its argument (tests fix it).
	jitter func(time.Duration) time.Duration
	// mode: the mode CreateTables creates (modeSet: given). retention:
	// CreateTables' message retention in WatermarkMode (0:
	// DefaultRetention).
	mode      outbox.Mode
	modeSet   bool
	retention time.Duration
	// topics: CreateTables' topic list (topicsSet: given; replaceTopics:
	// it may drop stored topics).
	topics        []string
	topicsSet     bool
	replaceTopics bool
	// regions: CreateTables' region list (region mode); region: the
	// region a Writer or Store runs in.
	regions []string
	region  string
	// nilOption: an option given was nil.
	nilOption bool
	// emptyHeader names a header option given an empty name.
	emptyHeader string
}

func defaultSettings() settings {
	return settings{
		fenceTTL:          DefaultFenceTTL,
		changeTimeout:     DefaultChangeTimeout,
		changeGap:         outbox.DefaultGapTimeout,
		tombstoneTTL:      DefaultTombstoneTTL,
		deleteConcurrency: DefaultDeleteConcurrency,
		maxAttempts:       DefaultMaxAttempts,
		clock:             outbox.SystemClock,
		logger:            slog.New(slog.DiscardHandler),
		jitter:            fullJitter,
	}
}

// DefaultFenceTTL is how long a fence tombstone is kept: 7 days.
const DefaultFenceTTL = 7 * 24 * time.Hour

// MinFenceTTL is the shortest FenceTTL accepted.
const MinFenceTTL = time.Hour

// DefaultTombstoneTTL is how long the tombstone of a published message is
// kept: 1 day.
const DefaultTombstoneTTL = 24 * time.Hour

// MinTombstoneTTL is the shortest TombstoneTTL accepted.
const MinTombstoneTTL = time.Hour

// DefaultRetention is the default Retention of a WatermarkMode outbox: 1
// day.
const DefaultRetention = 24 * time.Hour

// MinRetention is the shortest Retention accepted.
const MinRetention = time.Hour

// DefaultMaxAttempts is the default of MaxAttempts: a Write sends its
// transaction, and each counter update and fence put, at most 6 times.
const DefaultMaxAttempts = 6

// Option is what every option of the package is. Each constructor takes
// options of its own kind: TablesOption (CreateTables), StoreOption
// (NewStore), WriterOption (NewWriter) and ChangeOption (ChangeBucketCount,
// PlanBucketCountChange, Configure); an option of another kind given to it
// does not compile (docs/design.md §11, after franz-go's kgo.ProducerOpt
// and kgo.ConsumerOpt). An option that serves two constructors is of both
// kinds (StoreWriterOption). Each option's comment states its default.
type Option interface{ apply(*settings) }

// TablesOption configures CreateTables: the outbox's shared settings
// (BucketCount, WithMode, Retention, Topics, MaxMessageBytes, the header
// names, Regions), which it writes to the config item, where everything
// else reads them.
type TablesOption interface {
	Option
	tablesOption()
}

// StoreOption configures NewStore.
type StoreOption interface {
	Option
	storeOption()
}

// WriterOption configures NewWriter.
type WriterOption interface {
	Option
	writerOption()
}

// StoreWriterOption configures NewStore and NewWriter both.
type StoreWriterOption interface {
	StoreOption
	WriterOption
}

// ChangeOption configures an online BucketCount change: ChangeBucketCount,
// PlanBucketCountChange and Configure.
type ChangeOption interface {
	Option
	changeOption()
}

type (
	tablesOpt      func(*settings)
	storeOpt       func(*settings)
	writerOpt      func(*settings)
	storeWriterOpt func(*settings)
	changeOpt      func(*settings)
)

func (o tablesOpt) apply(s *settings)      { o(s) }
func (o storeOpt) apply(s *settings)       { o(s) }
func (o writerOpt) apply(s *settings)      { o(s) }
func (o storeWriterOpt) apply(s *settings) { o(s) }
func (o changeOpt) apply(s *settings)      { o(s) }
func (tablesOpt) tablesOption()            {}
func (storeOpt) storeOption()              {}
func (writerOpt) writerOption()            {}
func (storeWriterOpt) storeOption()        {}
func (storeWriterOpt) writerOption()       {}
func (changeOpt) changeOption()            {}

// applyOptions applies opts to s; a nil option is recorded for validate.
func applyOptions[O Option](s *settings, opts []O) {
	for _, o := range opts {
		if Option(o) == nil {
			s.nilOption = true
			continue
		}
		o.apply(s)
	}
}

// BucketCount is the number of buckets a new outbox is created with,
// 1..outbox.MaxBucketCount. Default outbox.DefaultBucketCount. An existing
// outbox with another count is a *outbox.MisconfigurationError naming both
// (ChangeBucketCount, outbox buckets set, changes it online). Writers,
// stores and relays read it from the config item.
func BucketCount(n int) TablesOption {
	return tablesOpt(func(s *settings) { s.bucketCount = n })
}

// WithMode is the mode a new outbox is created with: outbox.DeleteMode
// (published messages are replaced by tombstones) or outbox.WatermarkMode
// (they stay until their TTL, the outbox's Retention, removes them, and can
// be replayed by range). Default outbox.DeleteMode. An existing outbox in
// the other mode is a *outbox.MisconfigurationError (Configure changes it,
// on an empty outbox). Writers and relays read it from the config item: in
// WatermarkMode a writer puts a TTL on every message item.
func WithMode(m outbox.Mode) TablesOption {
	return tablesOpt(func(s *settings) { s.mode, s.modeSet = m, true })
}

// Retention is how long a message item lives in a WatermarkMode outbox:
// the writer puts a TTL attribute (x, epoch seconds) on every message it
// writes, its created-at (or the wall clock, if later) plus Retention, and
// DynamoDB's TTL deletes it after that, for free. Until then the message
// can be replayed by range (package replay, outbox replay --from --to).
// Writers read it from the config item. Default
// DefaultRetention (1 day) in WatermarkMode; at least MinRetention (1
// hour); refused in DeleteMode, whose messages live only until published.
//
// The TTL does not wait for the relay: a message still pending when its
// TTL passes can be deleted by DynamoDB before it was published, and is
// lost. The retention must therefore be far above any backlog the outbox
// can build up (a Kafka outage, a stuck bucket, a parked deployment), and
// the alarm on the sweeper's OldestPendingAge must sit well below it —
// minutes against hours or days — so that someone acts long before.
func Retention(d time.Duration) TablesOption {
	return tablesOpt(func(s *settings) { s.retention = d })
}

// Topics are the Kafka topics the outbox serves, written to its config item
// by CreateTables (writers read them there). A Writer
// refuses a message for any other topic with a *TopicError and writes
// nothing. Default: none, which means any topic — a misspelt topic is then
// accepted, and the relay stops its bucket until the topic exists or an
// operator parks the message (outbox park). On an existing outbox the
// option adds to its list (topics may change at any time; writers read
// them when they start); a list that leaves out a stored topic is refused
// with a *TopicsDroppedError unless ReplaceTopics is given too, and an
// empty list (any topic) replaces it. Without the option the stored list is
// kept.
func Topics(names ...string) TablesOption {
	return tablesOpt(func(s *settings) { s.topics, s.topicsSet = names, true })
}

// ReplaceTopics lets CreateTables' Topics replace an existing outbox's list
// with one that drops stored topics (it needs Topics).
// Default off: such a list is refused with a *TopicsDroppedError naming the
// dropped topics, and nothing is changed, because writers that write them
// refuse their messages with a *TopicError once they restart.
func ReplaceTopics() TablesOption {
	return tablesOpt(func(s *settings) { s.replaceTopics = true })
}

// Regions puts a new outbox in region mode, for messages and control tables
// that are DynamoDB global tables replicated to these regions (writers
// and relays read them in the config item).
// The bucket range is cut into one slice per region, in this order, so
// BucketCount must be a multiple of len(ids); each region's writers write
// and its relays drain only its slice (docs/design.md §14). Default: none,
// the single-region mode, which refuses global tables. The list must be
// the same in every region's stack; it can change only on an empty outbox
// (like BucketCount).
func Regions(ids ...string) TablesOption {
	return tablesOpt(func(s *settings) { s.regions = ids })
}

// Region is the region a Writer or Store runs in, required for an outbox in region mode where the process
// reserves sequence numbers: the writer puts its messages in that region's
// slice of buckets, reserving their sequence numbers in its counters, and
// a Store replays dead letters (ReplayParked) only of that slice. It is an
// AWS region, and the client's must be the same (aws.Config.Region): a
// reservation through a client of another region would write this
// region's counters in that region's replica (a *sequence.RegionError).
// Default "": the single-region mode; NewWriter refuses an empty region in
// region mode, and both refuse a region the config item does not list and
// any region in the single-region mode (*outbox.MisconfigurationError). A
// Store without it (relays, status tools) opens a region-mode outbox but
// replays nothing.
func Region(id string) StoreWriterOption {
	return storeWriterOpt(func(s *settings) { s.region = id })
}

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
func FenceTTL(d time.Duration) StoreWriterOption {
	return storeWriterOpt(func(s *settings) { s.fenceTTL = d })
}

// TombstoneTTL is how long the tombstone that replaces a published message
// (DeleteMode) is kept before the table's TTL removes it. Default
// DefaultTombstoneTTL (1 day); at least MinTombstoneTTL. While it exists it
// marks its sequence number decided for relays whose view of the bucket's
// head is older; a relay reading the bucket after it expired, from a head
// that still lags behind it, waits GapTimeout and fences the number (a
// delay, never a loss). Heads are written every HeadFlushInterval and by
// the sweeper, so an hour is already plenty.
func TombstoneTTL(d time.Duration) StoreOption {
	return storeOpt(func(s *settings) { s.tombstoneTTL = d })
}

// DeleteConcurrency is how many tombstone BatchWriteItem calls a Store
// has in flight at once, for all buckets. Concurrent Store.MarkPublished
// calls (of any buckets) share them: a call that finds one free is sent at
// once (its puts cut evenly over up to 4 calls); the puts
// that queue while every one is busy are cut into as few calls of at most
// 25 as that limit allows. Default DefaultDeleteConcurrency (32); 1..32.
func DeleteConcurrency(n int) StoreOption {
	return storeOpt(func(s *settings) { s.deleteConcurrency = n })
}

// DefaultDeleteConcurrency is DeleteConcurrency's default, the most it
// allows. With 4 calls in flight for the whole process (the per-drain
// figure before the puts of concurrent drains were combined), the
// modelled stage at 5,000 msgs/s over 64 buckets fell behind the writers
// (p99 1,323 ms, relayed 4,621 of 4,921 msgs/s); with 16 it kept up (p99
// 366 ms) at 0.16 DynamoDB calls per message, against 0.27 before
// combining (those with packed calls at 16; the modelled stage was not run
// again at 32 with the spread, and combining now starts only once 32
// calls are in flight, so the call count is likely higher); but make
// demo's latency on DynamoDB Local, with a busy loop
// beside it, was p99 1.3-2.8 s (6 runs) with 16 against 0.8-1.4 s before
// combining, and 0.9-1.7 s (5 runs) with 32 (2026-12-07,
// docs/benchmarks.md). Calls are combined only once all are in flight.
const DefaultDeleteConcurrency = 32

// MaxMessageBytes bounds one message as a Kafka record (outbox.RecordSize),
// at least outbox.RecordOverhead, for a new outbox. (A DynamoDB item is at
// most 400 KB, which the writer checks separately.) A shared setting,
// stored in the outbox's config item (docs/design.md §12), where writers,
// relays and publishers read it. Default outbox.DefaultMaxMessageBytes. On
// an existing outbox another value than the stored one is a
// *outbox.MisconfigurationError naming both; Configure changes it.
func MaxMessageBytes(n int) TablesOption {
	return tablesOpt(func(s *settings) { s.maxMessageBytes = n })
}

// MessageIDHeader is the header the relay stamps the message id under, for
// a new outbox; writers use it to compute record sizes and to refuse
// messages that carry it themselves, consumers to deduplicate. A shared
// setting, like MaxMessageBytes. Default outbox.DefaultMessageIDHeader.
func MessageIDHeader(name string) TablesOption {
	return tablesOpt(func(s *settings) {
		s.headers.MessageID, s.emptyHeader = name, emptyName(s.emptyHeader, "MessageIDHeader", name)
	})
}

// BucketHeader is the header the relay stamps the message's bucket under,
// for a new outbox; see MessageIDHeader. A shared setting. Default
// outbox.DefaultBucketHeader.
func BucketHeader(name string) TablesOption {
	return tablesOpt(func(s *settings) {
		s.headers.Bucket, s.emptyHeader = name, emptyName(s.emptyHeader, "BucketHeader", name)
	})
}

// SequenceHeader is the header the relay stamps the message's sequence
// number under, for a new outbox; see MessageIDHeader. A shared setting.
// Default outbox.DefaultSequenceHeader.
func SequenceHeader(name string) TablesOption {
	return tablesOpt(func(s *settings) {
		s.headers.Sequence, s.emptyHeader = name, emptyName(s.emptyHeader, "SequenceHeader", name)
	})
}

// emptyName returns option when name is empty, else was.
func emptyName(was, option, name string) string {
	if name == "" {
		return option
	}
	return was
}

// WithTracer traces every Write as an "outbox enqueue" span, a child of the
// caller's context, and writes that span's trace context (W3C traceparent
// and tracestate) into every message's headers, so the consumer's span joins
// the writer's trace. The headers count in the record size. Default: none
// (nothing traced, no header added). github.com/dynakafka/outbox/otel
// provides an OpenTelemetry Tracer.
func WithTracer(t outbox.Tracer) WriterOption {
	return writerOpt(func(s *settings) { s.tracer = t })
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
	return writerOpt(func(s *settings) { s.maxAttempts = n })
}

// WithClock sets the clock that stamps CreatedAt on messages and fences.
// Default outbox.SystemClock.
func WithClock(c outbox.Clock) WriterOption {
	return writerOpt(func(s *settings) { s.clock = c })
}

// WithLogger sets the logger the Writer reports its retries to, one
// record per retried attempt, with the call (TransactWriteItems, or the
// counter's UpdateItem and fence PutItems), the attempt, MaxAttempts and the
// cause: at DEBUG for a transaction conflict (expected when writers contend
// for an item), at WARN for throttling, a lost or failed response, and a
// resubmission after relays fenced the reserved numbers (the writer took
// longer than their gap timeout). The final error is returned, not logged.
// Default: silent.
func WithLogger(l *slog.Logger) WriterOption {
	return writerOpt(func(s *settings) { s.logger = l })
}

// Notifier is what WithNotifier needs of the relay's *relay.Notifier:
// declared here so that the store does not import the engine.
type Notifier interface {
	Notify(buckets ...int)
}

// WithNotifier notifies n of the buckets of every transaction the Writer
// committed, right after the commit, so that the relay running in this
// process with the same Notifier (relay.WithNotifier) publishes them at
// once rather than at its next poll. Notifying never blocks the Write and
// never fails it; a Write that failed, or whose outcome is unknown
// (outbox.ErrOutcomeUnknown), notifies nothing: its messages, if stored,
// are found by the relay's polls. Default: none.
func WithNotifier(n Notifier) WriterOption {
	return writerOpt(func(s *settings) { s.notifier, s.notifierSet = n, true })
}

func (s *settings) validate() error {
	bad := func(opt string, v any, why string) error {
		return &outbox.OptionError{Option: opt, Value: v, Reason: why}
	}
	if s.nilOption {
		return &outbox.OptionError{Option: "opts", Value: nil, Reason: "an option must not be nil"}
	}
	switch {
	case s.bucketCount != 0 && !outbox.ValidBucketCount(s.bucketCount):
		return bad("BucketCount", s.bucketCount, fmt.Sprintf("must be 1..%d (or 0 for the default)", outbox.MaxBucketCount))
	case s.fenceTTL < MinFenceTTL:
		return bad("FenceTTL", s.fenceTTL, fmt.Sprintf("must be at least %v, and should be days: a fence must outlive any writer that could still commit at its sequence", MinFenceTTL))
	case s.tombstoneTTL < MinTombstoneTTL:
		return bad("TombstoneTTL", s.tombstoneTTL, fmt.Sprintf("must be at least %v", MinTombstoneTTL))
	case s.deleteConcurrency < 1 || s.deleteConcurrency > 32:
		return bad("DeleteConcurrency", s.deleteConcurrency, "must be 1..32")
	case s.maxMessageBytes != 0 && (s.maxMessageBytes < outbox.RecordOverhead || s.maxMessageBytes > maxSharedMessageBytes):
		return bad("MaxMessageBytes", s.maxMessageBytes, fmt.Sprintf("must be %d..%d", outbox.RecordOverhead, maxSharedMessageBytes))
	case s.emptyHeader != "":
		return bad(s.emptyHeader, "", "must not be empty (leave the option out to take the config item's name)")
	case s.notifierSet && nilNotifier(s.notifier):
		return bad("WithNotifier", nil, "must not be nil (use relay.NewNotifier)")
	case s.changeTimeout <= 0:
		return bad("ChangeTimeout", s.changeTimeout, "must be positive")
	case s.changeGap <= 0:
		return bad("ChangeGapTimeout", s.changeGap, "must be positive")
	case s.region != "" && outbox.ValidateRegionID(s.region) != nil:
		return bad("Region", s.region, outbox.ValidateRegionID(s.region).Error())
	case s.maxAttempts < 1 || s.maxAttempts > 20:
		return bad("MaxAttempts", s.maxAttempts, "must be 1..20")
	case s.clock == nil:
		return bad("WithClock", nil, "must not be nil")
	case s.logger == nil:
		return bad("WithLogger", nil, "must not be nil (leave the option out for a silent writer)")
	case s.modeSet && s.mode != outbox.DeleteMode && s.mode != outbox.WatermarkMode:
		return bad("WithMode", s.mode, "must be outbox.DeleteMode or outbox.WatermarkMode")
	case s.retention != 0 && (!s.modeSet || s.mode != outbox.WatermarkMode):
		return bad("Retention", s.retention, "applies to WatermarkMode only (a DeleteMode outbox deletes messages once published); add WithMode(outbox.WatermarkMode) or drop it")
	case s.retention != 0 && s.retention < MinRetention:
		return bad("Retention", s.retention, fmt.Sprintf("must be at least %v: a message still pending when its TTL passes can be deleted unpublished; "+
			"keep it far above any backlog, and the OldestPendingAge alarm far below it", MinRetention))
	case s.retention%time.Second != 0:
		return bad("Retention", s.retention, "must be whole seconds (the TTL attribute is in seconds)")
	}
	return s.headers.Check()
}

// ChangeTimeout is how long the old epoch of a BucketCount change may take
// to drain: ChangeBucketCount watches it drain that long before it returns
// (the change stands; Result.Draining names the old buckets left), waits
// at most that long before the flip for the previous change's old epoch
// (a *ChangeAbortedError after it, nothing written), and past it the
// change is overdue (the sweeper's BucketCountChangeOverdue). Writers never
// wait for it. Default DefaultChangeTimeout (30 s); a context that ends
// sooner ends the watch (or the wait) sooner.
func ChangeTimeout(d time.Duration) ChangeOption {
	return changeOpt(func(s *settings) { s.changeTimeout = d })
}

// ChangeGapTimeout is how long a sequence number up to an old bucket's cut
// point may stay missing before ChangeBucketCount fences it, as relays
// fence gaps (a number reserved last in its bucket by a crashed writer is
// no gap to a relay: nothing follows it). Default outbox.DefaultGapTimeout;
// use the relays' GapTimeout.
func ChangeGapTimeout(d time.Duration) ChangeOption {
	return changeOpt(func(s *settings) { s.changeGap = d })
}

// nilNotifier reports whether n is nil, or a nil pointer in an interface.
func nilNotifier(n Notifier) bool {
	if n == nil {
		return true
	}
	v := reflect.ValueOf(n)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
