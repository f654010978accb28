package dynamo

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/dynakafka/outbox"
)

// settings holds every option of the package; each constructor reads the
// ones that apply to it (the option types below say which).
type settings struct {
	// ChangeBucketCount's (rebucket.go).
	changeTimeout, changeGap time.Duration
	bucketCount              int
	fenceTTL                 time.Duration
	tombstoneTTL             time.Duration
	deleteConcurrency        int
	maxMessageBytes          int
	headers                  outbox.HeaderNames
	tracer                   outbox.Tracer
	maxAttempts              int
	clock                    outbox.Clock
	logger                   *slog.Logger
	notifier                 *outbox.Notifier
	notifierSet              bool
	// jitter draws a backoff delay below its argument (tests fix it).
	jitter func(time.Duration) time.Duration
	// mode: the mode CreateTables creates, or the one NewStore and
	// NewWriter expect (modeSet: given). retention: CreateTables' message
	// retention in WatermarkMode (0: DefaultRetention).
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
	// target: the constructor being configured (forTables, forStore,
	// forWriter); misplaced: the options it was given that do not apply
	// to it, or nil options.
	target    int
	misplaced []error
	// emptyHeader names a header option given an empty name.
	emptyHeader string
}

func defaultSettings() settings {
	return settings{
		fenceTTL:          DefaultFenceTTL,
		changeTimeout:     DefaultChangeTimeout,
		changeGap:         outbox.DefaultGapTimeout,
		tombstoneTTL:      DefaultTombstoneTTL,
		deleteConcurrency: 4,
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

// Option configures CreateTables, NewStore and NewWriter: the package's one
// option type (docs/design.md, "Options"). Each option's comment says its
// default and which of the three it applies to; giving one to a constructor
// it does not apply to is an *outbox.OptionError naming it, and nothing is
// done.
type Option func(*settings)

// TablesOption is the former name of an Option for CreateTables.
//
// Deprecated: use Option.
type TablesOption = Option

// StoreOption is the former name of an Option for NewStore.
//
// Deprecated: use Option.
type StoreOption = Option

// WriterOption is the former name of an Option for NewWriter.
//
// Deprecated: use Option.
type WriterOption = Option

// FenceOption is the former name of an Option for NewStore and NewWriter.
//
// Deprecated: use Option.
type FenceOption = Option

// The constructors an option applies to.
const (
	forTables = 1 << iota
	forStore
	forWriter
	forChange
	forAll = forTables | forStore | forWriter
)

// constructorNames names the constructors in misplaced-option errors.
var constructorNames = []struct {
	bit  int
	name string
}{{forTables, "CreateTables"}, {forStore, "NewStore"}, {forWriter, "NewWriter"}, {forChange, "ChangeBucketCount"}}

// apply applies opts for the constructor target (forTables, forStore or
// forWriter).
func (s *settings) apply(target int, opts []Option) {
	s.target = target
	for _, o := range opts {
		if o == nil {
			s.misplaced = append(s.misplaced, &outbox.OptionError{Option: "opts", Value: nil, Reason: "an option must not be nil"})
			continue
		}
		o(s)
	}
}

// set records option name as given and runs change when the constructor
// being configured is one of to; otherwise it records the misplacement.
func (s *settings) set(name string, to int, change func()) {
	if s.target != 0 && s.target&to == 0 {
		var where, here []string
		for _, c := range constructorNames {
			if to&c.bit != 0 {
				where = append(where, c.name)
			}
			if s.target == c.bit {
				here = append(here, c.name)
			}
		}
		s.misplaced = append(s.misplaced, &outbox.OptionError{Option: name, Value: strings.Join(here, ""),
			Reason: "applies to " + strings.Join(where, " and ") + " only; drop it here" + misplacedHint[name]})
		return
	}
	change()
}

// misplacedHint says, for options a constructor reads from the config item
// instead, where the setting comes from.
var misplacedHint = map[string]string{
	"Retention": " (writers read the retention from the config item)",
	"Topics":    " (writers read the topics from the config item)",
}

// BucketCount is the outbox's number of buckets, 1..outbox.MaxBucketCount.
//
// For CreateTables it is the count a new outbox is created with (default 0,
// meaning outbox.DefaultBucketCount); an existing outbox with another count
// is a *outbox.MisconfigurationError. For NewStore and NewWriter it is the
// count this process expects (default 0: take the config item's); when it
// differs from the config item's, they fail with a *outbox.MisconfigurationError
// naming both values.
func BucketCount(n int) Option {
	return func(s *settings) { s.set("BucketCount", forAll, func() { s.bucketCount = n }) }
}

// WithMode is the outbox's mode: outbox.DeleteMode (published messages are
// replaced by tombstones) or outbox.WatermarkMode (they stay until their TTL,
// the outbox's Retention, removes them, and can be replayed by range).
//
// For CreateTables it is the mode a new outbox is created with (default
// outbox.DeleteMode); an existing outbox in the other mode is a
// *outbox.MisconfigurationError (Configure changes it). For NewStore and
// NewWriter it is the mode this process expects (default: take the config
// item's); when the config item says the other one, they fail with a
// *outbox.MisconfigurationError naming both. A writer must know the mode:
// in WatermarkMode it puts a TTL on every message item, in DeleteMode it
// must not.
func WithMode(m outbox.Mode) Option {
	return func(s *settings) { s.set("WithMode", forAll, func() { s.mode, s.modeSet = m, true }) }
}

// Mode is the former name of WithMode.
//
// Deprecated: use WithMode.
func Mode(m outbox.Mode) Option { return WithMode(m) }

// Retention is how long a message item lives in a WatermarkMode outbox:
// the writer puts a TTL attribute (x, epoch seconds) on every message it
// writes, its created-at (or the wall clock, if later) plus Retention, and
// DynamoDB's TTL deletes it after that, for free. Until then the message
// can be replayed by range (package replay, outbox replay --from --to).
// CreateTables only: writers read it from the config item. Default
// DefaultRetention (1 day) in WatermarkMode; at least MinRetention (1
// hour); refused in DeleteMode, whose messages live only until published.
//
// The TTL does not wait for the relay: a message still pending when its
// TTL passes can be deleted by DynamoDB before it was published, and is
// lost. The retention must therefore be far above any backlog the outbox
// can build up (a Kafka outage, a stuck bucket, a parked deployment), and
// the alarm on the sweeper's OldestPendingAge must sit well below it —
// minutes against hours or days — so that someone acts long before.
func Retention(d time.Duration) Option {
	return func(s *settings) { s.set("Retention", forTables, func() { s.retention = d }) }
}

// Topics are the Kafka topics the outbox serves, written to its config item
// by CreateTables (CreateTables only: writers read them there). A Writer
// refuses a message for any other topic with a *TopicError and writes
// nothing. Default: none, which means any topic — a misspelt topic is then
// accepted, and the relay stops its bucket until the topic exists or an
// operator parks the message (outbox park). On an existing outbox the
// option adds to its list (topics may change at any time; writers read
// them when they start); a list that leaves out a stored topic is refused
// with a *TopicsDroppedError unless ReplaceTopics is given too, and an
// empty list (any topic) replaces it. Without the option the stored list is
// kept.
func Topics(names ...string) Option {
	return func(s *settings) { s.set("Topics", forTables, func() { s.topics, s.topicsSet = names, true }) }
}

// ReplaceTopics lets CreateTables' Topics replace an existing outbox's list
// with one that drops stored topics (CreateTables only; it needs Topics).
// Default off: such a list is refused with a *TopicsDroppedError naming the
// dropped topics, and nothing is changed, because writers that write them
// refuse their messages with a *TopicError once they restart.
func ReplaceTopics() Option {
	return func(s *settings) { s.set("ReplaceTopics", forTables, func() { s.replaceTopics = true }) }
}

// Regions puts a new outbox in region mode, for messages and control tables
// that are DynamoDB global tables replicated to these regions
// (CreateTables only: writers and relays read them in the config item).
// The bucket range is cut into one slice per region, in this order, so
// BucketCount must be a multiple of len(ids); each region's writers write
// and its relays drain only its slice (docs/design.md §14). Default: none,
// the single-region mode, which refuses global tables. The list must be
// the same in every region's stack; it can change only on an empty outbox
// (like BucketCount).
func Regions(ids ...string) Option {
	return func(s *settings) { s.set("Regions", forTables, func() { s.regions = ids }) }
}

// WithRegion is the region a Writer or Store runs in (NewWriter,
// NewStore), required for an outbox in region mode where the process
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
func WithRegion(id string) Option {
	return func(s *settings) { s.set("WithRegion", forWriter|forStore, func() { s.region = id }) }
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
func FenceTTL(d time.Duration) Option {
	return func(s *settings) { s.set("FenceTTL", forStore|forWriter, func() { s.fenceTTL = d }) }
}

// TombstoneTTL is how long the tombstone that replaces a published message
// (DeleteMode) is kept before the table's TTL removes it. Default
// DefaultTombstoneTTL (1 day); at least MinTombstoneTTL. While it exists it
// marks its sequence number decided for relays whose view of the bucket's
// head is older; a relay reading the bucket after it expired, from a head
// that still lags behind it, waits GapTimeout and fences the number (a
// delay, never a loss). Heads are written every HeadFlushInterval and by
// the sweeper, so an hour is already plenty.
func TombstoneTTL(d time.Duration) Option {
	return func(s *settings) { s.set("TombstoneTTL", forStore, func() { s.tombstoneTTL = d }) }
}

// DeleteConcurrency is how many BatchWriteItem calls (of at most 25
// tombstones, the marking spread evenly over them) Store.MarkPublished
// runs at once. Default 4; 1..32.
func DeleteConcurrency(n int) Option {
	return func(s *settings) { s.set("DeleteConcurrency", forStore, func() { s.deleteConcurrency = n }) }
}

// MaxMessageBytes bounds one message as a Kafka record (outbox.RecordSize),
// at least outbox.RecordOverhead. (A DynamoDB item is at most 400 KB, which
// the writer checks separately.) A shared setting, stored in the outbox's
// config item (docs/design.md §11.1): for CreateTables it is the value a new
// outbox is created with (default outbox.DefaultMaxMessageBytes); for
// NewStore and NewWriter, and for CreateTables on an existing outbox, it is
// the value this process expects (default: the config item's), and another
// value than the stored one is a *outbox.MisconfigurationError naming both.
// Configure changes it.
func MaxMessageBytes(n int) Option {
	return func(s *settings) { s.set("MaxMessageBytes", forAll, func() { s.maxMessageBytes = n }) }
}

// MessageIDHeader is the header the relay stamps the message id under; the
// writer uses it to compute record sizes and to refuse messages that carry
// it themselves. A shared setting, like MaxMessageBytes: default the config
// item's (outbox.DefaultMessageIDHeader when it has none); another name than
// the stored one is a *outbox.MisconfigurationError.
func MessageIDHeader(name string) Option {
	return func(s *settings) {
		s.set("MessageIDHeader", forAll, func() { s.headers.MessageID, s.emptyHeader = name, emptyName(s.emptyHeader, "MessageIDHeader", name) })
	}
}

// BucketHeader is the header the relay stamps the message's bucket under
// (kafka.BucketHeader); like MessageIDHeader, the writer uses it for record
// sizes and refuses messages that carry it. A shared setting: default the
// config item's (outbox.DefaultBucketHeader when it has none).
func BucketHeader(name string) Option {
	return func(s *settings) {
		s.set("BucketHeader", forAll, func() { s.headers.Bucket, s.emptyHeader = name, emptyName(s.emptyHeader, "BucketHeader", name) })
	}
}

// SequenceHeader is the header the relay stamps the message's sequence
// number under (kafka.SequenceHeader); see BucketHeader. A shared setting:
// default the config item's (outbox.DefaultSequenceHeader when it has none).
func SequenceHeader(name string) Option {
	return func(s *settings) {
		s.set("SequenceHeader", forAll, func() { s.headers.Sequence, s.emptyHeader = name, emptyName(s.emptyHeader, "SequenceHeader", name) })
	}
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
func WithTracer(t outbox.Tracer) Option {
	return func(s *settings) { s.set("WithTracer", forWriter, func() { s.tracer = t }) }
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
func MaxAttempts(n int) Option {
	return func(s *settings) { s.set("MaxAttempts", forWriter, func() { s.maxAttempts = n }) }
}

// WithClock sets the clock that stamps CreatedAt on messages and fences.
// Default outbox.SystemClock.
func WithClock(c outbox.Clock) Option {
	return func(s *settings) { s.set("WithClock", forWriter, func() { s.clock = c }) }
}

// WithLogger sets the logger the Writer reports its retries to, one
// record per retried attempt, with the call (TransactWriteItems, or the
// counter's UpdateItem and fence PutItems), the attempt, MaxAttempts and the
// cause: at DEBUG for a transaction conflict (expected when writers contend
// for an item), at WARN for throttling, a lost or failed response, and a
// resubmission after relays fenced the reserved numbers (the writer took
// longer than their gap timeout). The final error is returned, not logged.
// Default: silent.
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) { s.set("WithLogger", forWriter, func() { s.logger = l }) }
}

// WithNotifier notifies n of the buckets of every transaction the Writer
// committed, right after the commit, so that the relay running in this
// process with the same Notifier (outbox.WithNotifier) publishes them at
// once rather than at its next poll. Notifying never blocks the Write and
// never fails it; a Write that failed, or whose outcome is unknown
// (outbox.ErrOutcomeUnknown), notifies nothing: its messages, if stored,
// are found by the relay's polls. Default: none.
func WithNotifier(n *outbox.Notifier) Option {
	return func(s *settings) {
		s.set("WithNotifier", forWriter, func() { s.notifier, s.notifierSet = n, true })
	}
}

func (s *settings) validate() error {
	bad := func(opt string, v any, why string) error {
		return &outbox.OptionError{Option: opt, Value: v, Reason: why}
	}
	if len(s.misplaced) > 0 {
		return s.misplaced[0]
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
	case s.notifierSet && s.notifier == nil:
		return bad("WithNotifier", nil, "must not be nil (use outbox.NewNotifier)")
	case s.changeTimeout <= 0:
		return bad("ChangeTimeout", s.changeTimeout, "must be positive")
	case s.changeGap <= 0:
		return bad("ChangeGapTimeout", s.changeGap, "must be positive")
	case s.region != "" && outbox.ValidateRegionID(s.region) != nil:
		return bad("WithRegion", s.region, outbox.ValidateRegionID(s.region).Error())
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

// ChangeTimeout bounds how long ChangeBucketCount waits for the old buckets
// to drain — the longest pause the change puts on writers — before it aborts
// the change. Default DefaultChangeTimeout (30 s); a context deadline
// shortens it, keeping DefaultChangeMargin for the end of the change.
func ChangeTimeout(d time.Duration) Option {
	return func(s *settings) { s.set("ChangeTimeout", forChange, func() { s.changeTimeout = d }) }
}

// ChangeGapTimeout is how long a sequence number up to a bucket's fence
// point may stay missing before ChangeBucketCount fences it, as relays
// fence gaps (a number reserved last in its bucket by a crashed writer is
// no gap to a relay: nothing follows it). Default outbox.DefaultGapTimeout;
// use the relays' GapTimeout.
func ChangeGapTimeout(d time.Duration) Option {
	return func(s *settings) { s.set("ChangeGapTimeout", forChange, func() { s.changeGap = d }) }
}
