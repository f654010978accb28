package relay

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/seam"
)

// Option configures a Relay. Every option states its default; New
// validates the combination and returns an *OptionError naming the option.
type Option func(*config)

type config struct {
	batchSize       int
	leaseDuration   time.Duration
	renewInterval   time.Duration
	leaseMargin     time.Duration
	maxSkew         time.Duration
	flushInterval   time.Duration
	resume          bool
	resumeWindow    time.Duration
	holderWait      time.Duration // <0: LeaseDuration + MaxClockSkew
	sweepMinAge     time.Duration
	gapTimeout      time.Duration
	gapPoll         time.Duration
	deadlineMargin  time.Duration
	maxMessageBytes int                // the config item's (New)
	headers         outbox.HeaderNames // the config item's (New)
	relayID         string
	region          string
	concurrency     int // 0: as many as the buckets given
	maxInFlight     int
	pollInterval    time.Duration
	recordPolicy    outbox.RecordErrorPolicy
	parkStuckAfter  time.Duration
	retryBase       time.Duration
	retryMax        time.Duration
	clock           outbox.Clock
	hooks           seam.Hooks
	logger          *slog.Logger
	metrics         Metrics
	notifier        *Notifier
	notifierSet     bool
	stored          *outbox.Config // StoredConfig: New does not read the config item
}

func defaultConfig() config {
	host, _ := os.Hostname()
	return config{
		batchSize:      500,
		leaseDuration:  30 * time.Second,
		renewInterval:  10 * time.Second,
		leaseMargin:    5 * time.Second,
		maxSkew:        5 * time.Second,
		flushInterval:  30 * time.Second,
		resume:         true,
		resumeWindow:   DefaultResumeWindow,
		holderWait:     -1,
		gapTimeout:     outbox.DefaultGapTimeout,
		gapPoll:        50 * time.Millisecond,
		deadlineMargin: 5 * time.Second,
		relayID:        fmt.Sprintf("%s-%d-%s", host, os.Getpid(), outbox.NewID()[24:]),
		concurrency:    0,
		maxInFlight:    DefaultMaxInFlight,
		pollInterval:   time.Second,
		recordPolicy:   outbox.Park,
		retryBase:      100 * time.Millisecond,
		retryMax:       5 * time.Second,
		clock:          outbox.SystemClock,
		logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		metrics:        noMetrics{},
	}
}

// StoredConfig gives New the outbox's config item as the caller has
// just read it, so that New does not read it again: the Lambda
// functions pass what dynamo.NewStore read a moment before
// (dynamo.Store.Opened), one round trip less on their init. New
// checks it as it checks the one it reads (CheckConfig, the mode, shared
// settings and region options); pass only a config item read by this
// process's init, never a saved one. Default: none (New reads the
// config item from the Store).
func StoredConfig(c outbox.Config) Option { return func(cfg *config) { cfg.stored = &c } }

// BatchSize is the most messages read and published per store round trip.
// Default 500; 1..10000.
func BatchSize(n int) Option { return func(c *config) { c.batchSize = n } }

// LeaseDuration is how long a bucket lease lasts after its last renewal; a
// stalled holder's bucket is taken over after at most this long. Default 30s;
// at least ResumeWindow + MaxClockSkew (a takeover at expiry owes no
// ResumeWindow wait, so the lease must outlast the one its holder owed).
func LeaseDuration(d time.Duration) Option { return func(c *config) { c.leaseDuration = d } }

// LeaseRenewInterval is how often a held lease is renewed, also while a
// publish is pending. Default 10s; LeaseRenewInterval + LeaseMargin +
// MaxClockSkew must be below LeaseDuration, so that a renewal is due before
// the holder's publish cut-off.
func LeaseRenewInterval(d time.Duration) Option { return func(c *config) { c.renewInterval = d } }

// LeaseMargin is how long a publish the holder cancels may still take to
// stop: the holder cancels its publish LeaseMargin + MaxClockSkew before its
// lease expires (by its own clock) unless a renewal moved the expiry, so
// that nothing it sends can land after another relay whose clock runs ahead
// by up to MaxClockSkew took the bucket over. Default 5s.
func LeaseMargin(d time.Duration) Option { return func(c *config) { c.leaseMargin = d } }

// MaxClockSkew is how far the relays' clocks may disagree. Lease expiry is
// written by the holder's clock and compared with a contender's, so a
// contender whose clock runs ahead takes over early: the holder stops
// publishing MaxClockSkew earlier to make up for it. Beyond this bound a
// stalled holder may still publish after a takeover — duplicates, never
// loss. Default 5s (Lambda's clocks are NTP-synchronised to well under a
// second); must be below LeaseDuration-LeaseRenewInterval-LeaseMargin.
func MaxClockSkew(d time.Duration) Option { return func(c *config) { c.maxSkew = d } }

// HeadFlushInterval bounds how stale a bucket's stored head may be while
// this relay drains it without holding its lease (resuming a lease it
// released, see docs/design.md). In DeleteMode the tombstones of published
// messages mark them decided, so the head is written at most once per
// interval per bucket, and the drain does not wait for the write; the
// sweeper advances the heads of quiet buckets. A stale head costs only the
// next acquirer a longer read over tombstones. WatermarkMode writes it
// after every drain, before the drain returns. Default 30s; 0 writes it
// every time.
func HeadFlushInterval(d time.Duration) Option { return func(c *config) { c.flushInterval = d } }

// ResumeReleased lets a relay drain a bucket whose lease it released last,
// and nobody acquired since, without acquiring it again: in the steady
// state of a warm relay its drains write nothing to the lease on their
// path (a look at the lease is a read; docs/design.md §4.3). Default true.
// With false every drain acquires and releases the lease (two writes), as
// relays before version 0.2 did.
func ResumeReleased(on bool) Option { return func(c *config) { c.resume = on } }

// HolderWait is how long DrainBucket waits for another relay that holds the
// bucket to release it (or for its lease to expire) before it leaves a
// wake-up on the lease and returns ErrLeaseHeld. Waiting makes the caller's
// drain independent of the holder's life: a holder that dies after the
// wake-up would leave the caller's message to the next drain or sweep.
// Default LeaseDuration + MaxClockSkew (long enough to see a dead holder's
// lease expire), always bounded by the context's deadline minus
// DeadlineMargin; 0 never waits. Sweeps never wait.
func HolderWait(d time.Duration) Option { return func(c *config) { c.holderWait = d } }

// ResumeWindow is what a hand-over of a busy bucket costs: a relay that
// acquires a bucket another process released (and may still be resuming,
// see ResumeReleased) reads and publishes nothing until ResumeWindow after
// its acquisition; in exchange, a resumed drain starts no publish and no
// tombstone write later than half a ResumeWindow after its last look at
// the lease that found it still released by its own hold, and cancels any
// still running then (the other half is for a cancelled publish to
// return: the Kafka publisher's AbandonGrace, 200ms). A watchdog looks at
// the lease every quarter window while a publish or a marking runs (a
// read, not a write), so a long publish goes on while nobody takes the
// bucket. Both sides count on their own monotonic clocks from events the
// store orders (a look served before the acquisition, the acquisition
// answered after it), so clock skew does not enter. With a HolderFencer
// publisher (kafka.TxnPublisher) an acquirer does not wait: its fence shuts
// the resumer out (docs/design.md §4.3). Default 500ms (DefaultResumeWindow);
// at least 400ms.
func ResumeWindow(d time.Duration) Option { return func(c *config) { c.resumeWindow = d } }

// DefaultResumeWindow is ResumeWindow's default.
const DefaultResumeWindow = 500 * time.Millisecond

// MinResumeWindow is ResumeWindow's least value: its second half must
// cover a cancelled publish's return (kafka.AbandonGrace, 200ms).
const MinResumeWindow = 400 * time.Millisecond

// SweepMinAge leaves a sweep's hands off messages younger than this: they are
// in flight on the stream path, which drains them within a second, and a
// sweeper that took their bucket would only make both wait. Default 0 (a
// long-running relay that is the only path drains everything); the
// sweeper Lambda uses OUTBOX_SWEEP_MIN_AGE (default 10s).
func SweepMinAge(d time.Duration) Option { return func(c *config) { c.sweepMinAge = d } }

// GapTimeout is how long a missing sequence number (head+1 absent while a
// later one is present) is waited on before it is fenced. It is measured from
// the first time any relay saw the gap, stored on the lease, so it holds
// across invocations and restarts. Default 10s: far above a healthy writer's
// reserve-to-commit time (milliseconds), short enough that an abandoned
// reservation holds its bucket back only briefly.
func GapTimeout(d time.Duration) Option { return func(c *config) { c.gapTimeout = d } }

// GapPollInterval is how often a pending gap is re-read. Default 50ms.
func GapPollInterval(d time.Duration) Option { return func(c *config) { c.gapPoll = d } }

// DeadlineMargin is how long before the context's deadline the relay stops
// claiming new work (a Lambda invocation's deadline). Default 5s.
func DeadlineMargin(d time.Duration) Option { return func(c *config) { c.deadlineMargin = d } }

// Region is the region this relay runs in, for an outbox in region mode
// (Config.Regions, a DynamoDB global table): the relay drains only the
// buckets its region drains, and its id in leases and heartbeats is
// prefixed "<region>/" so that each region counts only its own live
// relays. Default "": the default single-region mode. New refuses an
// empty region in region mode, a region the config item does not list, and
// any region in the default mode (*MisconfigurationError).
func Region(id string) Option { return func(c *config) { c.region = id } }

// RelayID names this relay in leases and heartbeats. Default
// "<hostname>-<pid>-<random>". At most 128 characters.
func RelayID(id string) Option { return func(c *config) { c.relayID = id } }

// Concurrency is how many buckets DrainBuckets, Sweep and Run drain at once,
// and DrainBucketsTo its hinted buckets (and, beside a hand-over, as many
// companions again).
// Default 0: every bucket they are given, however many the outbox has — a
// drain mostly waits for DynamoDB and Kafka, and one that waits on a gap
// or a hand-over must not hold the others back. What bounds the relay's
// memory is MaxInFlight.
func Concurrency(n int) Option { return func(c *config) { c.concurrency = n } }

// MaxInFlight bounds the messages this relay's drains hold at once, read
// and not yet decided: each read of a bucket takes at most BatchSize
// messages and, while other drains run, at most MaxInFlight divided by the
// drains running. Default 4000 (DefaultMaxInFlight: eight drains of a full
// BatchSize, what the default bounded before Concurrency followed the
// buckets); at least 1.
func MaxInFlight(n int) Option { return func(c *config) { c.maxInFlight = n } }

// DefaultMaxInFlight is MaxInFlight's default.
const DefaultMaxInFlight = 4000

// PollInterval is how often Run looks for work when idle. Default 1s.
func PollInterval(d time.Duration) Option { return func(c *config) { c.pollInterval = d } }

// OnRecordError sets what happens to a record-level permanent error at the
// head of a bucket (MESSAGE_TOO_LARGE, INVALID_RECORD, an undecodable item,
// a record above MaxMessageBytes). Default Park: the record goes to the dead
// letters and the bucket continues. Block stops the bucket and reports it.
func OnRecordError(p outbox.RecordErrorPolicy) Option { return func(c *config) { c.recordPolicy = p } }

// ParkStuckAfter parks a message that has stopped its bucket with a
// permanent topic- or cluster-wide error (class Fatal: a topic that does not
// exist, an authorization failure) for at least d, measured from the first
// time a relay recorded the bucket stopped at that message (on the lease,
// so it holds across invocations), and lets the rest of the bucket flow.
// The parked message keeps its id and can be replayed once the cause is
// fixed (outbox replay). Default 0: off — the bucket stays stopped until
// the cause is fixed or an operator parks the message (outbox park). A
// cluster-wide cause (authorization) then parks one message per bucket per
// d for as long as it lasts: choose d above any outage you would rather
// wait out. Needs a StuckRecorder store (store/dynamo, store/memory);
// with another store it never parks. Must not be negative.
func ParkStuckAfter(d time.Duration) Option { return func(c *config) { c.parkStuckAfter = d } }

// RetryBackoff bounds the exponential backoff, with full jitter, between
// attempts after a retriable publish error. Default 100ms doubling up to 5s.
func RetryBackoff(base, max time.Duration) Option {
	return func(c *config) { c.retryBase, c.retryMax = base, max }
}

// WithClock sets the clock used for leases, heartbeats and gap timeouts.
// Default SystemClock.
func WithClock(clk outbox.Clock) Option { return func(c *config) { c.clock = clk } }

// WithLogger sets the logger. Default: silent.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithNotifier makes Run drain the buckets notified on n as soon as they
// are, besides polling every PollInterval: give the same Notifier to the
// writers of this process (store/dynamo's WithNotifier) and their commits
// reach Kafka without waiting for the next poll. Run drains only the
// notified buckets in this relay's fair share as of its last sweep (the
// others are left to the relays that poll them), never waits for another
// relay's hold (it leaves a wake-up, as a sweep does), and may drain up to
// Concurrency buckets for notifications while a sweep drains as many.
// DrainBucket and Sweep ignore n. Default: none (Run polls only).
func WithNotifier(n *Notifier) Option {
	return func(c *config) { c.notifier, c.notifierSet = n, true }
}

// WithMetrics sets the metrics sink, called once per batch and once per
// drain. Default: none.
func WithMetrics(m Metrics) Option { return func(c *config) { c.metrics = m } }

func (c *config) validate() error {
	bad := func(opt string, v any, why string) error {
		return &outbox.OptionError{Option: opt, Value: v, Reason: why}
	}
	switch {
	case c.batchSize < 1 || c.batchSize > 10000:
		return bad("BatchSize", c.batchSize, "must be 1..10000")
	case c.leaseDuration < time.Second:
		return bad("LeaseDuration", c.leaseDuration, "must be at least 1s")
	case c.leaseMargin <= 0:
		return bad("LeaseMargin", c.leaseMargin, "must be positive")
	case c.maxSkew < 0:
		return bad("MaxClockSkew", c.maxSkew, "must not be negative")
	case c.renewInterval <= 0 || c.renewInterval >= c.leaseDuration-c.leaseMargin-c.maxSkew:
		return bad("LeaseRenewInterval", c.renewInterval, fmt.Sprintf("must be positive and below LeaseDuration-LeaseMargin-MaxClockSkew (%v): a renewal must be due before the publish cut-off", c.leaseDuration-c.leaseMargin-c.maxSkew))
	case c.resumeWindow < MinResumeWindow:
		return bad("ResumeWindow", c.resumeWindow, fmt.Sprintf("must be at least %v: a resumed drain cancels its publish half a window after its last look, and a cancelled publish may take AbandonGrace (200ms) to return", MinResumeWindow))
	case c.leaseDuration < c.resumeWindow+c.maxSkew:
		// Taking over an expired hold owes no wait: the holder may have
		// acquired from a release and owed a resumer ResumeWindow from its
		// acquisition; its lease, compared by a clock up to MaxClockSkew
		// ahead, must outlast that window.
		return bad("LeaseDuration", c.leaseDuration, fmt.Sprintf("must be at least ResumeWindow (%v) + MaxClockSkew (%v) = %v: a lease taken over at expiry must outlast the ResumeWindow its holder owed a relay that may still be resuming the bucket",
			c.resumeWindow, c.maxSkew, c.resumeWindow+c.maxSkew))
	case c.sweepMinAge < 0:
		return bad("SweepMinAge", c.sweepMinAge, "must not be negative")
	case c.holderWait < -1:
		return bad("HolderWait", c.holderWait, "must not be negative")
	case c.flushInterval < 0:
		return bad("HeadFlushInterval", c.flushInterval, "must not be negative")
	case c.gapTimeout <= 0:
		return bad("GapTimeout", c.gapTimeout, "must be positive")
	case c.gapPoll <= 0:
		return bad("GapPollInterval", c.gapPoll, "must be positive")
	case c.deadlineMargin < 0:
		return bad("DeadlineMargin", c.deadlineMargin, "must not be negative")
	case c.relayID == "" || len(c.relayID) > 128:
		return bad("RelayID", c.relayID, "must be 1..128 characters")
	case c.region != "" && outbox.ValidateRegionID(c.region) != nil:
		return bad("Region", c.region, outbox.ValidateRegionID(c.region).Error())
	case c.concurrency < 0:
		return bad("Concurrency", c.concurrency, "must be 0 (every bucket given, at once) or more")
	case c.maxInFlight < 1:
		return bad("MaxInFlight", c.maxInFlight, "must be at least 1")
	case c.pollInterval <= 0:
		return bad("PollInterval", c.pollInterval, "must be positive")
	case c.recordPolicy != outbox.Park && c.recordPolicy != outbox.Block:
		return bad("OnRecordError", c.recordPolicy, "must be Park or Block")
	case c.parkStuckAfter < 0:
		return bad("ParkStuckAfter", c.parkStuckAfter, "must not be negative (0 is off)")
	case c.retryBase <= 0 || c.retryMax < c.retryBase:
		return bad("RetryBackoff", fmt.Sprintf("%v..%v", c.retryBase, c.retryMax), "base must be positive and max at least base")
	case c.clock == nil:
		return bad("WithClock", nil, "must not be nil")
	case c.logger == nil:
		return bad("WithLogger", nil, "must not be nil")
	case c.metrics == nil:
		return bad("WithMetrics", nil, "must not be nil")
	case c.notifierSet && c.notifier == nil:
		return bad("WithNotifier", nil, "must not be nil (use outbox.NewNotifier)")
	}
	return nil
}

// Metrics receives one call per published batch and one per drain (each
// DrainBucket call that got past its argument checks). Implementations must
// be fast and safe for concurrent use; adapters (CloudWatch EMF,
// OpenTelemetry) live outside this package.
type Metrics interface {
	Batch(BatchStats)
	Drain(DrainStats)
}

// BatchStats describes one batch of one bucket.
type BatchStats struct {
	Bucket          int
	Messages        int // messages handed to the publisher
	Acked           int // contiguous acknowledged prefix
	Fenced          int // fences passed over (written by this relay or another, or by a failed writer)
	Deleted         int // messages replaced by tombstones (acknowledged + leftovers; DeleteMode)
	Parked          int // records moved to the dead letters
	PublishDuration time.Duration
	Err             error
	// Class of Err when it is not nil.
	Class outbox.ErrorClass
}

type noMetrics struct{}

func (noMetrics) Batch(BatchStats) {}
func (noMetrics) Drain(DrainStats) {}
