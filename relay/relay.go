package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/seam"
)

func init() {
	seam.Register(func(h seam.Hooks) any { return Option(func(c *config) { c.hooks = h }) })
}

// Relay publishes the messages of each bucket strictly in sequence order and
// marks only the contiguous acknowledged prefix. It is safe for concurrent
// use; leases keep concurrent drains of one bucket by different relays apart,
// and a Relay runs one drain per bucket at a time.
type Relay struct {
	store outbox.Store
	pub   outbox.Publisher
	cfg   config
	// instance names this process's holds on the leases it releases
	// (outbox.Lease.Process); unlike the owner name, no other process
	// shares it.
	instance string
	// bucketCount and bucketEpoch: the outbox's BucketCount and its epoch
	// as this relay last read them (RefreshConfig); an online change only
	// ever raises the epoch.
	bucketCount atomic.Int64
	bucketEpoch atomic.Int64
	// oldCount: the old epoch's count while it drains (0: none), as last
	// read; relays drain buckets below max(bucketCount, oldCount).
	// openEpoch: every bucket's messages stamped with an epoch at or
	// below it may be published (Config.OpenEpoch of the newest config
	// item read); it only rises (gate.go).
	oldCount  atomic.Int64
	openEpoch atomic.Int64
	mode      outbox.Mode
	sched     seam.Scheduler
	rand      func(int64) int64
	// regions: the stored configuration's regions and takeovers as last
	// read (region mode only), and the buckets this relay's region drains
	// by them; under mu, since Sweep re-reads them.
	regions outbox.Config
	drains  []bool

	// Per bucket: one drain at a time in this process, and when this relay
	// last wrote the bucket's head. The store's lease is per owner id, so it
	// cannot keep two drains of one Relay apart: this can.
	mu      sync.Mutex
	buckets map[int]*local
	// fair: this relay's fair share as its last sweep computed it (ok: a
	// sweep did), which Run's notified drains keep to.
	fair fairShare

	// changesCompleted: BucketCount changes whose drained old epoch this
	// relay ended (change.go).
	changesCompleted atomic.Int64
	// draining counts the drains running, which share MaxInFlight
	// (readLimit).
	draining atomic.Int64
}

// fairShare is a relay's fair share over the buckets its region drains:
// pos maps a bucket to its place among them (-1: not drained), n is how
// many there are. In the default mode pos is the identity.
type fairShare struct {
	share, rank, n int
	pos            []int
	ok             bool
}

// index is b's place among the drained buckets (-1: not drained).
func (f fairShare) index(b int) int {
	if b < 0 || b >= len(f.pos) {
		return -1
	}
	return f.pos[b]
}

// local is this process's view of one bucket.
type local struct {
	turn      chan struct{} // holds a token while a drain of this Relay runs
	flushedAt time.Time     // when this relay last wrote the bucket's head (lease clock)
	// notBefore: no read or publish of this bucket before it (scheduler
	// clock): ResumeWindow after this process acquired it from a release
	// by another process, which may still be resuming it. It binds this
	// process only, which is enough: no other process can resume a hold of
	// this one (token), and whoever acquires after this one owes its own
	// wait.
	notBefore time.Time
	// token: the lease token of this process's last acquisition of the
	// bucket. Only a release of that hold may be resumed without a write:
	// the owner name may be shared by other processes (docs/design.md §4.3).
	token string
	// flush: a DeleteMode head flush (Advance) that a resumed drain left
	// in flight; a later drain takes it (drain.flushBehind).
	flush *pendingWrite
	// head, cleaned: the marks this process's last drain of the bucket
	// ended with (drain.head, drain.cleaned), under the hold whose token
	// is progress. The stored marks lag them (a resumed drain writes its
	// head only every HeadFlushInterval, and in DeleteMode its cleaned
	// mark with it), so a later drain of that same hold — resumed, or
	// acquiring this process's own release — starts from them: nobody
	// else drained the bucket since (the token), and the stored marks,
	// which never move back, can only have moved on (the sweeper's head
	// advance), so the drain takes the greater of each.
	head, cleaned int64
	progress      string
	// fenceDue: the hold of token was acquired with a HolderFencer
	// publisher that has not fenced the bucket's earlier holders since
	// (drain.fenceHolders); such a hold is not resumed, so that its next
	// drain acquires and fences before it reads.
	fenceDue bool
	// stuck: what this process last saw stop the bucket (lease clock);
	// recordedAt and loggedAt: when it last recorded it in the store and
	// logged it, unlogged: the failures since that log line.
	stuck                outbox.Stuck
	recordedAt, loggedAt time.Time
	unlogged             int64
	// retryAt: until when (scheduler clock, Unix nanoseconds; 0: none) a
	// sweep leaves the bucket alone after a drain stopped it at retrySeq
	// (see stoppedRetry). Read by sweeps without the turn.
	retryAt, retrySeq atomic.Int64
	// stopErr: the error that drain stopped the bucket with, which the
	// sweeps that leave it alone report, so that each still fails naming
	// it as a retry would have (the sweeper's errors and its stuck count).
	stopErr atomic.Pointer[stoppedError]
	// gateOpen: the highest BucketCount epoch whose gate this process saw
	// open for the bucket (gate.go); gateLogged: when a drain last logged
	// waiting at it (under the turn).
	gateOpen   atomic.Int64
	gateLogged time.Time
}

// New reads the outbox's config item (unless StoredConfig gives it)
// and returns a relay for it, on the item's shared settings: BucketCount,
// the mode, MaxMessageBytes and the stamped header names (docs/design.md
// §12). It fails with a *MisconfigurationError when the stored format is
// newer than this code, the Region option does not fit the item, or the
// publisher's settings are not the item's (ConfigChecker), and with an
// *OptionError for an invalid option. A nil store or publisher
// (also a nil pointer in the interface, such as the *kafka.Publisher a
// failed constructor returned) is an *OptionError.
func New(ctx context.Context, store outbox.Store, pub outbox.Publisher, opts ...Option) (*Relay, error) {
	switch {
	case isNil(store):
		return nil, &outbox.OptionError{Option: "relay.New", Value: store, Reason: "a store is required (nil given)"}
	case isNil(pub):
		return nil, &outbox.OptionError{Option: "relay.New", Value: pub, Reason: "a publisher is required (nil given: check the error of the publisher's constructor)"}
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var stored outbox.Config
	if cfg.stored != nil {
		stored = *cfg.stored
	} else {
		var err error
		if stored, err = store.Config(ctx); err != nil {
			return nil, fmt.Errorf("outbox: read config item: %w", err)
		}
	}
	if err := outbox.CheckConfig(stored); err != nil {
		return nil, err
	}
	cfg.maxMessageBytes, cfg.headers = stored.SharedMaxMessageBytes(), stored.SharedHeaders()
	if err := cfg.headers.Check(); err != nil {
		return nil, err
	}
	if cc, ok := pub.(outbox.ConfigChecker); ok {
		if err := cc.CheckConfig(stored); err != nil {
			return nil, err
		}
	}
	if err := outbox.CheckRegion(stored, cfg.region); err != nil {
		return nil, err
	}
	if cfg.region != "" && !strings.HasPrefix(cfg.relayID, cfg.region+"/") {
		cfg.relayID = cfg.region + "/" + cfg.relayID
	}
	sched := cfg.hooks.Scheduler
	if sched == nil {
		sched = seam.Runtime
	}
	rnd := cfg.hooks.Rand
	if rnd == nil {
		rnd = rand.Int64N
	}
	r := &Relay{store: store, pub: pub, cfg: cfg, mode: stored.Mode, sched: sched, instance: outbox.NewID(),
		rand: rnd, buckets: map[int]*local{}}
	r.adopt(stored)
	r.setRegions(stored)
	return r, nil
}

// adopt takes stored's BucketCount and old count if its epoch is newer
// than the one this relay knows, or its old count at the same epoch (an
// old epoch that ended), and raises the epoch every bucket may publish.
func (r *Relay) adopt(stored outbox.Config) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch epoch := r.bucketEpoch.Load(); {
	case r.bucketCount.Load() == 0 || stored.BucketEpoch > epoch:
		r.bucketCount.Store(int64(stored.BucketCount))
		r.bucketEpoch.Store(stored.BucketEpoch)
		r.oldCount.Store(int64(stored.OldBucketCount))
	case stored.BucketEpoch == epoch && !stored.Draining():
		r.oldCount.Store(0)
	}
	if open := stored.OpenEpoch(); open > r.openEpoch.Load() {
		r.openEpoch.Store(open)
	}
}

// RefreshConfig reads the config item again and takes its BucketCount when
// an online change (docs/design.md §13) moved it on, and returns the count.
// A relay calls it when asked for a bucket beyond its range, and at each
// full sweep, to learn of new buckets, of the old buckets still draining
// after a shrink (BucketSpan), and of an old epoch that ended (its messages'
// gates are then open without asking the store). It writes nothing; a full
// Sweep also ends a drained old epoch (EpochGate.EndOldEpoch).
func (r *Relay) RefreshConfig(ctx context.Context) (int, error) {
	stored, err := r.store.Config(ctx)
	if err != nil {
		return r.BucketCount(), fmt.Errorf("outbox: read config item: %w", err)
	}
	return r.countFrom(stored)
}

// countFrom is RefreshConfig on a config item already read.
func (r *Relay) countFrom(stored outbox.Config) (int, error) {
	if err := outbox.CheckConfig(stored); err != nil {
		return r.BucketCount(), err
	}
	r.mu.Lock()
	regions := r.regions.Regions
	r.mu.Unlock()
	if !slices.Equal(stored.Regions, regions) {
		// Region mode turned on or off, or another list: not something a
		// running relay adopts (refreshRegions says so at the sweep).
		return r.BucketCount(), &outbox.MisconfigurationError{Setting: "Regions", Configured: fmt.Sprint(regions), Stored: fmt.Sprint(stored.Regions),
			Fix: "the outbox's regions changed: restart the relay"}
	}
	r.adopt(stored)
	r.setRegions(stored)
	return r.BucketCount(), nil
}

// setRegions records the regions and takeovers of stored and the buckets
// this relay's region drains by them.
func (r *Relay) setRegions(stored outbox.Config) {
	drains := make([]bool, r.BucketCount())
	for _, b := range stored.Drains(r.cfg.region) {
		if b < len(drains) {
			drains[b] = true
		}
	}
	r.mu.Lock()
	r.regions, r.drains = stored, drains
	r.mu.Unlock()
}

// Drains reports whether this relay's region drains bucket: always in the
// default mode; in region mode, for its own region's buckets and those of
// the regions it took over (as of New or the last Sweep). A stream
// handler skips hints for the others: replicated items of another region.
func (r *Relay) Drains(bucket int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.regions.RegionMode() {
		// Every bucket of the span, which an online BucketCount change
		// (refused in region mode) may have moved since setRegions.
		return bucket >= 0 && bucket < r.BucketSpan()
	}
	return bucket >= 0 && bucket < len(r.drains) && r.drains[bucket]
}

// writtenElsewhere reports whether bucket is in another region's slice (a
// region-mode relay draining a slice it took over).
func (r *Relay) writtenElsewhere(bucket int) bool {
	w := r.regionOf(bucket)
	return w != "" && w != r.cfg.region
}

// regionOf is the region whose writers write bucket ("": default mode).
func (r *Relay) regionOf(bucket int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.regions.RegionOf(bucket)
}

// Region returns the relay's region ("" in the default mode).
func (r *Relay) Region() string { return r.cfg.region }

// RefreshRegions re-reads the config item's takeovers in region mode (a
// no-op otherwise), as every Sweep does: a relay that only drains stream
// hints calls it now and then (lambda/handler: at most every
// RegionRefreshInterval), so that a takeover or a hand-back reaches it.
func (r *Relay) RefreshRegions(ctx context.Context) error { return r.refreshRegions(ctx) }

// refreshRegions re-reads the config item of a region-mode outbox (one
// consistent read per sweep), so that a takeover or a hand-back reaches
// running relays. A config item whose bucket count or regions changed is a
// *MisconfigurationError: restart the relay.
func (r *Relay) refreshRegions(ctx context.Context) error {
	if !r.regionMode() {
		return nil
	}
	stored, err := r.store.Config(ctx)
	if err != nil {
		return fmt.Errorf("outbox: re-read the config item's takeovers: %w", err)
	}
	return r.regionsFrom(stored)
}

// regionMode reports whether the relay runs in region mode.
func (r *Relay) regionMode() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.regions.RegionMode()
}

// regionsFrom is refreshRegions on a config item already read (a no-op in
// the default mode).
func (r *Relay) regionsFrom(stored outbox.Config) error {
	if !r.regionMode() {
		return nil
	}
	if stored.BucketCount != r.BucketCount() || !slices.Equal(stored.Regions, r.regions.Regions) {
		return &outbox.MisconfigurationError{Setting: "Regions", Configured: fmt.Sprint(r.regions.Regions, " over ", r.BucketCount(), " buckets"),
			Stored: fmt.Sprint(stored.Regions, " over ", stored.BucketCount, " buckets"), Fix: "the outbox's regions or bucket count changed: restart the relay"}
	}
	if err := outbox.CheckRegion(stored, r.cfg.region); err != nil {
		return err
	}
	r.setRegions(stored)
	return nil
}

// isNil reports whether v is nil or an interface holding a nil pointer or
// function, whose methods would panic when called.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	// Only the kinds whose nil value cannot serve a method call: a nil
	// pointer (what a failed constructor returns) and a nil func. A nil
	// channel or map may be a deliberate stand-in (tests use one).
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func:
		return rv.IsNil()
	}
	return false
}

// BucketCount returns the outbox's bucket count.
func (r *Relay) BucketCount() int { return int(r.bucketCount.Load()) }

// BucketSpan returns how many buckets the relay drains: BucketCount, or
// the old count of an online change whose old epoch still drains when it
// is larger (a shrink's old buckets above the new count), as last read
// from the config item.
func (r *Relay) BucketSpan() int { return int(max(r.bucketCount.Load(), r.oldCount.Load())) }

// Mode returns the outbox's mode.
func (r *Relay) Mode() outbox.Mode { return r.mode }

// ID returns the relay's id as written in leases and heartbeats.
func (r *Relay) ID() string { return r.cfg.relayID }

// DrainStats summarises one DrainBucket call.
type DrainStats struct {
	Bucket    int
	Batches   int
	Published int   // messages acknowledged by the broker
	Deleted   int   // messages replaced by tombstones (acknowledged and leftovers; DeleteMode)
	Leftovers int   // messages found at or below head and marked without republishing
	Fenced    int   // fence tombstones written by this drain
	Parked    int   // records moved to the dead letters
	Retries   int   // publish attempts retried after a retriable error
	Head      int64 // the bucket's head (decided prefix) when the drain stopped

	// How the drain held the bucket.
	Resumed   bool // drained a lease this relay had released, without acquiring it
	Acquired  bool // acquired the lease (a write)
	TakenOver bool // acquired it from a holder whose lease had expired unreleased
	// HandedOver: acquired it from a release by another process (which
	// may have been resuming it): a hand-over, which waited ResumeWait or
	// fenced the earlier holders.
	HandedOver bool
	// Companion: drained unhinted, beside another bucket's hand-over
	// (DrainBucketsTo).
	Companion bool
	LeaseLost bool          // lost the lease (expired or taken over) while draining
	Waited    time.Duration // waited for another holder to release the bucket
	// ResumeWait: waited before reading, after acquiring a lease that
	// another process released and might still be resuming (ResumeWindow
	// from the acquisition; nothing with a HolderFencer publisher).
	ResumeWait time.Duration
	// ResumeMarkHeld: a resumed drain's window ended before its
	// tombstones landed, and it acquired its own release to write them
	// under the lease.
	ResumeMarkHeld bool
	GapWait        time.Duration // waited on missing sequence numbers
	// GateWait: waited for old buckets to drain before publishing messages
	// of a new BucketCount epoch (EpochGate).
	GateWait time.Duration
	Duration time.Duration
	// Err is the error DrainBucket returned (nil when drained), and Class
	// its class.
	Err   error
	Class outbox.ErrorClass
}

// DrainBucket takes the bucket and publishes its pending messages in
// sequence order until the bucket is empty, the lease is lost, or the
// context's deadline minus DeadlineMargin is reached. It returns nil only
// when the bucket was drained (everything committed before the call is
// decided).
//
// If another relay holds the bucket, DrainBucket waits for it to release the
// bucket (or for its lease to expire), up to HolderWait and as long as the
// context's deadline allows, then drains. If it may wait no longer it leaves
// a wake-up on the lease and returns ErrLeaseHeld: the holder drains again
// before it releases, or, if it fails, leaves the wake-up to whoever holds
// the bucket next, so the caller's message is not lost (docs/design.md, I3).
// Another DrainBucket of the same Relay on the same bucket waits for this one.
func (r *Relay) DrainBucket(ctx context.Context, bucket int) (DrainStats, error) {
	return r.DrainBucketTo(ctx, bucket, 0)
}

// DrainBucketTo is DrainBucket that may stop as soon as the bucket's head
// has reached seq (0: drain until empty). A stream hint names the sequence
// number of the message it announces, and every committed message's hint
// arrives in some batch, so a relay invocation need only drain each bucket
// up to the highest sequence hinted in its batch: messages committed later
// are announced to the next invocation. This keeps invocations short, so a
// busy bucket cannot hold back the hints of the others. Wake-ups from
// contenders, and wake-ups a failed holder left on the lease, still drain to
// the end.
func (r *Relay) DrainBucketTo(ctx context.Context, bucket int, seq int64) (DrainStats, error) {
	return r.drainBucket(ctx, bucket, seq, true)
}

func (r *Relay) drainBucket(ctx context.Context, bucket int, target int64, wait bool) (st DrainStats, err error) {
	st.Bucket = bucket
	st.Companion = ctx.Value(companionDrainKey{}) != nil
	if bucket >= r.BucketSpan() && bucket < outbox.MaxBucketCount {
		r.RefreshConfig(ctx) // an online change may have added it; an error leaves the count
	}
	if n := r.BucketSpan(); bucket < 0 || bucket >= n {
		return st, &outbox.BucketRangeError{Bucket: bucket, BucketCount: n}
	}
	if !r.Drains(bucket) {
		r.mu.Lock()
		drainer := r.regions.Drainer(r.regions.RegionOf(bucket))
		r.mu.Unlock()
		return st, &outbox.RegionError{Bucket: bucket, Region: r.cfg.region, Drainer: drainer}
	}
	if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && time.Until(dl) <= r.cfg.deadlineMargin {
		return st, outbox.ErrDeadline // the same threshold as the drain's own check
	}
	start := time.Now()
	defer func() {
		st.Duration = time.Since(start)
		if st.Err = err; err != nil {
			st.Class = outbox.Classify(err)
		}
		r.cfg.metrics.Drain(st)
	}()
	loc := r.local(bucket)
	if err := r.takeTurn(ctx, loc); err != nil {
		return st, err
	}
	defer func() { <-loc.turn }()
	r.draining.Add(1)
	defer r.draining.Add(-1)

	// Work stops a moment before the caller's deadline so that the lease can
	// still be released, on a context that the caller's deadline bounds.
	wctx, cancel := r.workContext(ctx)
	defer cancel()
	d, err := r.begin(wctx, bucket, target, wait, &st)
	if err != nil {
		return st, err
	}
	defer func() {
		d.pre.drop() // a resumed drain that had nothing to read
		d.keepProgress(err)
	}()
	for {
		err := d.run(wctx)
		st.Head = d.head
		if err != nil {
			d.stop(ctx, err)
			if !errors.As(err, new(*stoppedError)) {
				// A stopped bucket was logged by the drain, at most once a minute.
				r.cfg.logger.Log(ctx, levelFor(err), "outbox: drain stopped", "bucket", bucket, "head", d.head, "err", err)
			}
			return st, err
		}
		err = d.finish(ctx)
		if errors.Is(err, outbox.ErrWoken) {
			// A contender found the bucket held while we drained: what it
			// saw committed may have landed after our last complete read.
			// Drain again, to the end.
			d.target = 0
			continue
		}
		if err != nil {
			d.stop(ctx, err)
			return st, fmt.Errorf("outbox: release bucket %d: %w", bucket, err)
		}
		return st, nil
	}
}

// readLimit is how many entries a drain's read of a bucket takes: at most
// BatchSize, and at most its share of MaxInFlight among the drains running,
// so that the relay's memory is bounded however many buckets it drains at
// once.
func (r *Relay) readLimit() int {
	return max(1, min(r.cfg.batchSize, r.cfg.maxInFlight/int(max(r.draining.Load(), 1))))
}

// takeTurn waits until no other drain of this Relay runs on the bucket.
// Such concurrency is rare (a stream hint during a sweep of the same relay),
// so a short poll is enough, and it keeps every wait on the scheduler.
func (r *Relay) takeTurn(ctx context.Context, loc *local) error {
	for poll := 5 * time.Millisecond; ; poll = min(2*poll, 200*time.Millisecond) {
		select {
		case loc.turn <- struct{}{}:
			return nil
		default:
		}
		if !r.sched.Sleep(ctx.Done(), poll) {
			return outbox.ErrDeadline
		}
	}
}

// local returns this process's state of bucket.
func (r *Relay) local(bucket int) *local {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.buckets[bucket]
	if l == nil {
		l = &local{turn: make(chan struct{}, 1)}
		r.buckets[bucket] = l
	}
	return l
}

// cleanupReserve is how much of DeadlineMargin is kept for releasing leases
// after work stopped: at most a second, at most half the margin.
func (r *Relay) cleanupReserve() time.Duration {
	return min(r.cfg.deadlineMargin/2, time.Second)
}

// workContext returns ctx shortened by the cleanup reserve.
func (r *Relay) workContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && r.cleanupReserve() > 0 {
		return context.WithDeadline(ctx, dl.Add(-r.cleanupReserve()))
	}
	return context.WithCancel(ctx)
}

// cleanupContext returns a context for releasing a lease after work
// stopped: not cancelled with ctx, and ending a moment (up to 100 ms) before
// ctx's deadline, so that the drain returns before it, or after limit (the
// lease's duration: past it the lease has expired and the write decides
// nothing) when ctx has none. A store that does not answer in time leaves
// the lease to expire. (A fixed few seconds here failed a release that a
// loaded DynamoDB Local answered in more: make test's bench smoke run.)
func cleanupContext(ctx context.Context, limit time.Duration) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(base, dl.Add(-min(time.Until(dl)/4, 100*time.Millisecond)))
	}
	return context.WithTimeout(base, limit)
}

// begin takes bucket for a drain: it resumes a lease this relay released
// (no write), or acquires it — waiting, when wait is set and the deadline
// allows, for another holder to release it or for its lease to expire.
func (r *Relay) begin(ctx context.Context, bucket int, target int64, wait bool, st *DrainStats) (*drain, error) {
	d := &drain{r: r, b: bucket, st: st, target: target, loc: r.local(bucket)}
	checked := r.sched.Now()
	// Where this process expects to resume its own hold, it reads the
	// bucket beside the lease rather than after it.
	pre := d.prefetch(ctx)
	l, err := r.store.ReadLease(ctx, bucket)
	if err != nil {
		pre.drop()
		return nil, fmt.Errorf("outbox: read lease of bucket %d: %w", bucket, err)
	}
	if r.resumable(l, d.loc) {
		// Released by this process and acquired by nobody since: drain it
		// again without a write (docs/design.md §4.3), from the marks its
		// last drain of this hold ended with, within ResumeWindow of this
		// look (sent at checked).
		d.lease, d.head, d.cleaned = l, l.Head, l.Cleaned
		d.takeProgress(l.Token)
		d.pre = pre
		d.checkedAt = checked
		st.Resumed = true
		if err := d.inject(ctx, seam.AfterAcquire); err != nil {
			d.pre.drop()
			return d, err
		}
		return d, nil
	}
	pre.drop()
	if wait && r.holderWait() > 0 && l.HeldAt(r.cfg.clock.Now()) {
		// Held — by another relay, or by another process sharing this
		// relay's name: wait for it the same way.
		st.Waited = r.waitForHolder(ctx, bucket)
	}
	if err := d.acquire(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// holderWait is the HolderWait option with its default resolved.
func (r *Relay) holderWait() time.Duration {
	if r.cfg.holderWait < 0 {
		return r.cfg.leaseDuration + r.cfg.maxSkew
	}
	return r.cfg.holderWait
}

// HoldToken returns the lease token of this relay's last acquisition of
// bucket ("" if it made none): the hold that a release by this process
// left on the lease; it waits for a drain of the bucket in progress.
// (*dynamo.Store).Disown takes it, so that a process
// hands back only its own release, never that of another process sharing
// its owner name.
func (r *Relay) HoldToken(bucket int) string {
	if bucket < 0 || bucket >= r.BucketSpan() {
		return ""
	}
	loc := r.local(bucket)
	loc.turn <- struct{}{} // after a drain of the bucket in progress
	defer func() { <-loc.turn }()
	return loc.token
}

// resumable reports whether this relay may drain the bucket of l without
// acquiring it: this process released the lease last (its own hold, by
// token: processes sharing the owner name cannot tell each other's releases
// from their own), no wake-up is pending, and its publisher need not fence
// the bucket's earlier holders first.
func (r *Relay) resumable(l outbox.Lease, loc *local) bool {
	return r.cfg.resume && l.Released() && l.Owner == r.cfg.relayID && l.Token != "" && l.Token == loc.token && l.Wake == 0 &&
		!loc.fenceDue
}

// waitForHolder polls the bucket's lease until nobody holds it, HolderWait
// has passed or the context's deadline (minus DeadlineMargin) is near, and
// returns how long it waited. A live holder releases after its drain; a dead
// one's lease expires.
func (r *Relay) waitForHolder(ctx context.Context, bucket int) time.Duration {
	// What is left after waiting must still do for acquiring.
	const keep = 100 * time.Millisecond
	start := r.cfg.clock.Now()
	until := start.Add(r.holderWait())
	poll := 10 * time.Millisecond
	for {
		dl, ok := ctx.Deadline()
		if ok && time.Until(dl)-r.cfg.deadlineMargin-keep < poll || until.Sub(r.cfg.clock.Now()) < poll {
			return r.cfg.clock.Now().Sub(start)
		}
		if !r.sched.Sleep(ctx.Done(), poll) {
			return r.cfg.clock.Now().Sub(start)
		}
		l, err := r.store.ReadLease(ctx, bucket)
		if err != nil || !l.HeldAt(r.cfg.clock.Now()) {
			return r.cfg.clock.Now().Sub(start)
		}
		poll = min(2*poll, 500*time.Millisecond)
	}
}

func levelFor(err error) slog.Level {
	if errors.Is(err, outbox.ErrDeadline) || errors.Is(err, outbox.ErrGapPending) || errors.Is(err, outbox.ErrGatePending) || errors.Is(err, outbox.ErrLeaseLost) || errors.Is(err, outbox.ErrLeaseHeld) ||
		errors.Is(err, context.Canceled) {
		// context.Canceled: the caller stopped the relay (a shutdown).
		return slog.LevelInfo
	}
	return slog.LevelError
}

// DrainBuckets drains the given buckets, at most Concurrency at once (all of
// them by default), and returns the error of each bucket that was not
// drained (nil map entries are omitted). Duplicates in buckets are drained
// once.
func (r *Relay) DrainBuckets(ctx context.Context, buckets []int) map[int]error {
	return r.drainBuckets(ctx, buckets, true)
}

func (r *Relay) drainBuckets(ctx context.Context, buckets []int, wait bool) map[int]error {
	seen := make(map[int]bool, len(buckets))
	var uniq []int
	for _, b := range buckets {
		if !seen[b] {
			seen[b] = true
			uniq = append(uniq, b)
		}
	}
	var (
		mu   sync.Mutex
		errs = make(map[int]error)
		wg   sync.WaitGroup
		sem  = make(chan struct{}, cmp.Or(r.cfg.concurrency, max(len(uniq), 1)))
	)
	for _, b := range uniq {
		sem <- struct{}{}
		wg.Add(1)
		go func(b int) {
			defer func() { <-sem; wg.Done() }()
			if _, err := r.drainBucket(ctx, b, 0, wait); err != nil {
				mu.Lock()
				errs[b] = err
				mu.Unlock()
			}
		}(b)
	}
	wg.Wait()
	return errs
}

func (r *Relay) pastDeadline(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) <= r.cfg.deadlineMargin-r.cleanupReserve()
}

// LiveShare returns how many buckets a relay should hold at most when the
// given relays are alive, and this relay's rank among them (-1 if absent).
func LiveShare(bucketCount int, live []string, id string) (share, rank int) {
	ids := append([]string(nil), live...)
	sort.Strings(ids)
	rank = sort.SearchStrings(ids, id)
	if rank >= len(ids) || ids[rank] != id {
		ids = append(ids, id)
		sort.Strings(ids)
		rank = sort.SearchStrings(ids, id)
	}
	n := len(ids)
	return (bucketCount + n - 1) / n, rank
}
