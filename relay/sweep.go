package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/fanout"
)

// SweepReport summarises one Sweep.
type SweepReport struct {
	Live  int // live relays, this one included
	Share int // buckets in this relay's fair-share range
	// Pending is the number of pending messages the probes saw (each is
	// bounded by the probe limit, so this is a lower bound when Truncated).
	Pending   int
	Truncated bool
	// Oldest is the creation time of the oldest pending message seen.
	Oldest time.Time
	// Buckets with pending messages, and what became of them.
	Ready   []int
	Drained []int
	Held    []int // held by another owner, which was woken to drain again
	Skipped []int // left to others: outside this relay's range, or younger than SweepMinAge; or stopped by a Fatal error less than 5 s (or PollInterval) ago
	// CaughtUp lists the buckets whose stored head this sweep advanced over
	// tombstones and fences (a relay resuming them writes it lazily).
	CaughtUp []int
	// OutOfRange maps buckets outside 0..BucketCount-1 to the number of
	// messages seen in them: a writer uses another BucketCount.
	OutOfRange map[int]int
	Errors     map[int]error
	// Buckets holds what the sweep saw of each bucket in range, in order.
	Buckets []BucketReport
	// Change is the online BucketCount change whose old epoch a full sweep
	// saw draining (nil: none), and whether the sweep ended it.
	Change *ChangeSeen
}

// BucketReport is what a sweep saw of one bucket.
type BucketReport struct {
	Bucket int
	// Lease as read (and advanced, when the sweep caught its head up).
	Lease outbox.Lease
	// Last is the bucket's last reserved sequence number, -1 when the store
	// cannot tell (no CounterProbe) or the read failed.
	Last int64
	// Messages is how many pending messages the probe saw (at most the
	// probe limit); Oldest the creation time of the first.
	Messages int
	Oldest   time.Time
	// Parked is the bucket's dead-letter count, -1 when the store cannot
	// tell (no ParkedCounter) or the read failed.
	Parked int
	// Err is the error of this bucket's probe, if any.
	Err error
	// Foreign: a region-mode bucket that this relay's region does not
	// drain (another region's, replicated here): not probed, never
	// drained or caught up by this relay.
	Foreign bool
}

// Reserved returns how many sequence numbers are reserved above the head:
// pending messages, fences not yet passed and reservations not yet committed
// or abandoned. -1 when Last is unknown.
func (b BucketReport) Reserved() int64 {
	if b.Last < 0 {
		return -1
	}
	return max(0, b.Last-b.Lease.Head)
}

// probeLimit bounds the messages one bucket probe counts.
const probeLimit = 100

// Sweep is one round of polling recovery, for a scheduled sweeper or a
// long-running relay: it heartbeats; looks at every bucket with a few
// bounded reads (no table scan); advances the stored heads of buckets that
// nobody holds over the tombstones of messages already published; drains the
// buckets with pending messages in this relay's fair-share range, and those
// outside it whose oldest message waited longer than LeaseDuration; and
// reports the backlog. Messages younger than SweepMinAge are left to the
// stream. It also looks at the buckets just above the configured range and
// reports messages there loudly: the returned error is then a
// *BucketRangeError. A sweep never waits for another relay's drain: a held
// bucket is woken.
//
// The store must implement BucketProbe; CounterProbe and ParkedCounter
// complete the report when it implements them.
func (r *Relay) Sweep(ctx context.Context) (SweepReport, error) {
	return r.sweep(ctx, true)
}

// sweepConfig reads the config item once: a full sweep learns an online
// BucketCount change from it at the latest (docs/design.md §13), ends its
// old epoch once drained (rep.Change) and, in
// region mode, the takeovers (§14.2), both from the one read; a partial
// sweep reads it only in region mode. In the default mode a failed read or
// a bad item leaves the count as it was, with a warning; in region mode it
// fails the sweep (its slices may have moved).
func (r *Relay) sweepConfig(ctx context.Context, full bool, rep *SweepReport) error {
	if !full {
		return r.refreshRegions(ctx)
	}
	stored, err := r.store.Config(ctx)
	if err != nil {
		if r.regionMode() {
			return fmt.Errorf("outbox: re-read the config item's takeovers: %w", err)
		}
		r.cfg.logger.WarnContext(ctx, "outbox: sweep could not read the config item again", "err", fmt.Errorf("outbox: read config item: %w", err))
		return nil
	}
	stored, rep.Change = r.endOldEpoch(ctx, stored)
	if _, err := r.countFrom(stored); err != nil {
		// The sweep goes on with the count it knows (regionsFrom refuses a
		// region-mode item that moved).
		r.cfg.logger.WarnContext(ctx, "outbox: sweep could not read the config item again", "err", err)
	}
	return r.regionsFrom(stored)
}

// sweep is Sweep; a partial one (full false, Run's sweeps between the
// minutely full ones) neither looks above the bucket range, nor counts the
// dead letters, nor reads the counters of buckets with messages: only the
// report shows them (Last and Parked are -1 there). Its phases: heartbeat
// and list the live relays (alongside the probes), probe, classify, drain,
// catch the quiet buckets up, report.
func (r *Relay) sweep(ctx context.Context, full bool) (SweepReport, error) {
	rep := SweepReport{OutOfRange: map[int]int{}, Errors: map[int]error{}}
	probe, ok := r.store.(outbox.BucketProbe)
	if !ok {
		return rep, &outbox.OptionError{Option: "Store", Value: fmt.Sprintf("%T", r.store), Reason: "Sweep needs a store that implements outbox.BucketProbe"}
	}
	if err := r.sweepConfig(ctx, full, &rep); err != nil {
		return rep, err
	}
	count := r.BucketSpan()
	now := r.cfg.clock.Now()
	// The heartbeat and the list of live relays go alongside the probes
	// rather than before them: a message committed just after its bucket's
	// probe waits for the next sweep, so every round trip before the
	// probes adds to its latency.
	liveRelays := r.heartbeat(ctx, now)
	fair := r.drainOrder()
	looks := r.probeAll(ctx, probe, fair, count, full)
	live, err := liveRelays()
	if err != nil {
		return rep, err
	}
	share, rank := LiveShare(fair.n, live, r.cfg.relayID)
	rep.Live, rep.Share = max(len(live), rank+1), share
	fair.share, fair.rank, fair.ok = share, rank, true
	r.mu.Lock()
	r.fair = fair
	r.mu.Unlock()

	pos := func(b int) int { return fairPos(fair.index(b), fair.n, share, rank) }
	ready := r.classify(ctx, looks, count, now, pos, share, &rep)
	rep.Buckets = looks[:min(count, len(looks))]
	r.drainReady(ctx, ready, pos, &rep)
	r.catchUpQuiet(ctx, now, &rep)
	err = r.reportSweep(ctx, now, count, &rep)
	return rep, err
}

// heartbeat starts the sweep's heartbeat and its read of the live relays
// (of this relay's region) and returns the function that waits for them.
func (r *Relay) heartbeat(ctx context.Context, now time.Time) func() ([]string, error) {
	cfg := &r.cfg
	var live []string
	var liveErr error
	liveDone := make(chan struct{})
	go func() {
		defer close(liveDone)
		if err := r.store.Heartbeat(ctx, cfg.relayID, now, cfg.leaseDuration); err != nil {
			liveErr = fmt.Errorf("outbox: heartbeat: %w", err)
			return
		}
		if live, liveErr = r.store.LiveRelays(ctx, now, cfg.leaseDuration); liveErr != nil {
			liveErr = fmt.Errorf("outbox: list live relays: %w", liveErr)
		}
		live = r.ownRegion(live)
	}()
	return func() ([]string, error) {
		<-liveDone
		return live, liveErr
	}
}

// probeAll looks at every bucket below count, and a full sweep at those
// up to OutOfRangeProbe(count) too; a bucket this relay's region does not
// drain is reported Foreign without a look.
func (r *Relay) probeAll(ctx context.Context, probe outbox.BucketProbe, fair fairShare, count int, full bool) []BucketReport {
	upper := count
	if full {
		upper = outbox.OutOfRangeProbe(count)
	}
	looks := make([]BucketReport, upper)
	// Every bucket gets its report, also once ctx ends: a probe that fails
	// says so in its report's Err.
	_ = fanout.Each(context.WithoutCancel(ctx), upper, 16, func(_ context.Context, b int) error {
		if fair.index(b) < 0 && b < count {
			looks[b] = BucketReport{Bucket: b, Last: -1, Parked: -1, Foreign: true}
		} else {
			looks[b] = r.look(ctx, probe, b, b < count, full)
		}
		return nil
	})
	return looks
}

// classify adds each look to rep (errors, out-of-range messages, pending,
// skipped) and returns the buckets this sweep drains: those of this
// relay's share, and any other whose oldest message waited LeaseDuration.
func (r *Relay) classify(ctx context.Context, looks []BucketReport, n int, now time.Time, pos func(int) int, share int, rep *SweepReport) []int {
	cfg := &r.cfg
	var ready []int
	for _, lk := range looks {
		switch {
		case lk.Foreign:
			continue
		case lk.Err != nil:
			rep.Errors[lk.Bucket] = fmt.Errorf("outbox: probe bucket %d: %w", lk.Bucket, lk.Err)
			continue
		case lk.Bucket >= n:
			if lk.Messages > 0 {
				rep.OutOfRange[lk.Bucket] = lk.Messages
				cfg.logger.ErrorContext(ctx, "outbox: messages in a bucket outside the configured range; a writer uses another BucketCount and these messages will not be relayed",
					"bucket", lk.Bucket, "bucket_count", n, "pending_seen", lk.Messages)
			}
			continue
		}
		if lk.Messages == 0 {
			continue
		}
		rep.Pending += lk.Messages
		rep.Truncated = rep.Truncated || lk.Messages >= probeLimit
		if rep.Oldest.IsZero() || lk.Oldest.Before(rep.Oldest) {
			rep.Oldest = lk.Oldest
		}
		rep.Ready = append(rep.Ready, lk.Bucket)
		age := now.Sub(lk.Oldest)
		switch {
		case cfg.sweepMinAge > 0 && age < cfg.sweepMinAge:
			// (Only when set: a message committed during this sweep, after
			// now was read, has a negative age and must not wait a poll.)
			rep.Skipped = append(rep.Skipped, lk.Bucket) // in flight on the stream path
		case r.leaveStopped(lk.Bucket, lk.Lease.Head, now, rep):
			// Stopped by a Fatal error moments ago (see stoppedRetry): not
			// retried, but failed with that error, as a retry would be.
		case pos(lk.Bucket) < share || age >= cfg.leaseDuration:
			ready = append(ready, lk.Bucket)
		default:
			rep.Skipped = append(rep.Skipped, lk.Bucket) // another live relay's range
		}
	}
	return ready
}

// drainReady drains the ready buckets, this relay's range first in its
// order, and reports each as drained, held by another relay, or failed.
func (r *Relay) drainReady(ctx context.Context, ready []int, pos func(int) int, rep *SweepReport) {
	sort.SliceStable(ready, func(i, j int) bool { return pos(ready[i]) < pos(ready[j]) })
	for b, err := range r.drainBuckets(ctx, ready, false) {
		if errors.Is(err, outbox.ErrLeaseHeld) {
			rep.Held = append(rep.Held, b)
		} else {
			rep.Errors[b] = err
		}
	}
	for _, b := range ready {
		if _, failed := rep.Errors[b]; !failed && !slices.Contains(rep.Held, b) {
			rep.Drained = append(rep.Drained, b)
		}
	}
}

// catchUpQuiet catches the quiet buckets' heads up. It comes after the
// drains: its reads and writes, one bucket after another, would otherwise
// delay the messages found. Each is conditional on the lease the probe
// read, so what happened to a bucket since fails it harmlessly (§7.14).
func (r *Relay) catchUpQuiet(ctx context.Context, now time.Time, rep *SweepReport) {
	for _, lk := range rep.Buckets {
		if lk.Err == nil && lk.Messages == 0 && !lk.Foreign {
			if nl, ok := r.catchUp(ctx, lk, now); ok {
				rep.Buckets[lk.Bucket].Lease = nl
				rep.CaughtUp = append(rep.CaughtUp, lk.Bucket)
			}
		}
	}
}

// reportSweep sorts and logs rep, and returns a *BucketRangeError for the
// highest bucket above the range that holds messages.
func (r *Relay) reportSweep(ctx context.Context, now time.Time, count int, rep *SweepReport) error {
	sort.Ints(rep.Drained)
	sort.Ints(rep.Held)
	sort.Ints(rep.Skipped)
	r.cfg.logger.InfoContext(ctx, "outbox: sweep", "live", rep.Live, "share", rep.Share, "pending", rep.Pending, "truncated", rep.Truncated,
		"oldest_age_s", ageSeconds(now, rep.Oldest), "ready", rep.Ready, "drained", rep.Drained, "held", rep.Held,
		"skipped", rep.Skipped, "caught_up", rep.CaughtUp, "errors", len(rep.Errors), "out_of_range", rep.OutOfRange)
	if len(rep.OutOfRange) > 0 {
		worst := -1
		for b := range rep.OutOfRange {
			worst = max(worst, b)
		}
		return &outbox.BucketRangeError{Bucket: worst, BucketCount: count}
	}
	return nil
}

// look probes one bucket: its lease (in range), its pending messages, and
// what the optional probes tell.
func (r *Relay) look(ctx context.Context, probe outbox.BucketProbe, b int, inRange, full bool) BucketReport {
	lk := BucketReport{Bucket: b, Last: -1, Parked: -1}
	after := int64(0)
	if inRange {
		if lk.Lease, lk.Err = r.store.ReadLease(ctx, b); lk.Err != nil {
			return lk
		}
		after = lk.Lease.Cleaned
	}
	if lk.Messages, lk.Oldest, lk.Err = probe.Peek(ctx, b, after, probeLimit); lk.Err != nil || !inRange {
		return lk
	}
	// A partial sweep reads the counter only where catchUp needs it: for a
	// bucket with messages it would only delay their drain.
	if cp, ok := r.store.(outbox.CounterProbe); ok && (full || lk.Messages == 0) {
		if last, err := cp.LastSequence(ctx, b); err == nil {
			lk.Last = last
		}
	}
	if pc, ok := r.store.(outbox.ParkedCounter); ok && full {
		if n, err := pc.CountParked(ctx, b); err == nil {
			lk.Parked = n
		}
	}
	return lk
}

// catchUp advances the stored head of a bucket nobody holds over the
// tombstones and fences that follow it, when the probe found no message and
// the counter says numbers above the head were reserved. Relays that resume
// a bucket write its head lazily (HeadFlushInterval); this keeps a quiet
// bucket's head, and so its reported backlog, exact.
func (r *Relay) catchUp(ctx context.Context, lk BucketReport, now time.Time) (outbox.Lease, bool) {
	l := lk.Lease
	if lk.Last >= 0 && lk.Last <= l.Head || l.HeldAt(now) {
		return l, false
	}
	entries, _, err := r.store.Pending(ctx, lk.Bucket, l.Cleaned, r.cfg.batchSize)
	if err != nil {
		return l, false
	}
	head := l.Head
	for _, e := range entries {
		if e.Sequence <= head {
			if !e.Fence {
				return l, false // a leftover: the next drain marks it
			}
			continue
		}
		if e.Sequence != head+1 || !e.Fence {
			break
		}
		head = e.Sequence
	}
	if head == l.Head {
		return l, false
	}
	nl, err := r.store.Advance(ctx, l, head, head, now)
	if err != nil {
		return l, false
	}
	return nl, true
}

func ageSeconds(now, t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return max(0, now.Sub(t).Seconds())
}

// drainOrder is the fair-share order of the buckets this relay's region
// drains (share and rank not yet set).
func (r *Relay) drainOrder() fairShare {
	f := fairShare{pos: make([]int, r.BucketSpan())}
	for b := range f.pos {
		f.pos[b] = -1
		if r.Drains(b) {
			f.pos[b] = f.n
			f.n++
		}
	}
	return f
}

// ownRegion keeps the live relays of this relay's region (all of them in
// the default mode): replicated heartbeats of another region's relays share
// none of its buckets.
func (r *Relay) ownRegion(live []string) []string {
	if r.cfg.region == "" {
		return live
	}
	out := live[:0:0]
	for _, id := range live {
		if strings.HasPrefix(id, r.cfg.region+"/") {
			out = append(out, id)
		}
	}
	return out
}

// fairPos is bucket b's place in the order a relay of the given rank
// takes buckets in: its own range (positions below share) first.
func fairPos(b, n, share, rank int) int { return ((b-rank*share)%n + n) % n }

// rangeProbeInterval is how often Run looks above the bucket range.
const rangeProbeInterval = time.Minute

// Run sweeps every PollInterval until ctx is done: a long-running relay for
// containers and tests. It looks for stray buckets above the range, and
// counts dead letters, once a minute rather than on every sweep. Errors of
// one sweep are logged and the next sweep tries again; a misconfiguration
// (*BucketRangeError) is returned.
//
// Sweeps start PollInterval apart (start to start; one that overruns is
// followed at once by the next), so a message committed on an idle outbox
// reaches Kafka within PollInterval plus a sweep's probe and the drain of
// its bucket. With WithNotifier, the buckets notified by this process's
// writers are drained as soon as they are, between and during sweeps.
func (r *Relay) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	swept := make(chan struct{})
	var sweeps atomic.Uint64
	if n := r.cfg.notifier; n != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.runNotified(ctx, n, swept, &sweeps)
		}()
		defer func() { cancel(); <-done }()
	}
	t := time.NewTicker(r.cfg.pollInterval)
	defer t.Stop()
	var lastRangeProbe time.Time
	for {
		full := time.Since(lastRangeProbe) >= rangeProbeInterval
		if full {
			lastRangeProbe = time.Now()
		}
		_, err := r.sweep(ctx, full)
		var re *outbox.BucketRangeError
		if errors.As(err, &re) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			r.cfg.logger.ErrorContext(ctx, "outbox: sweep failed", "err", err)
		}
		sweeps.Add(1)
		select {
		case <-swept:
		default:
			close(swept) // the fair share is known: notified drains may start
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// runNotified drains the buckets notified on n, from the first sweep's end
// (swept: the fair share is known, and that sweep saw what was committed
// before it) until ctx is done. A bucket outside this relay's fair share is
// left to its owner's sweeps; so is a bucket whose notified drain failed,
// until the next sweep has run (sweeps counts them): notifications never
// retry a failing bucket faster than the polls do.
func (r *Relay) runNotified(ctx context.Context, n *Notifier, swept <-chan struct{}, sweeps *atomic.Uint64) {
	select {
	case <-ctx.Done():
		return
	case <-swept:
	}
	failed := map[int]uint64{} // bucket -> sweeps when its drain failed
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.Ready():
		}
		gen := sweeps.Load()
		var buckets []int
		for _, b := range r.ownNotified(n.Take()) {
			if at, ok := failed[b]; ok && at == gen {
				continue // the next sweep retries it
			}
			delete(failed, b)
			buckets = append(buckets, b)
		}
		if len(buckets) == 0 {
			continue
		}
		for b, err := range r.drainBuckets(ctx, buckets, false) {
			if ctx.Err() != nil {
				return
			}
			if !errors.Is(err, outbox.ErrLeaseHeld) {
				failed[b] = gen
			}
			r.cfg.logger.Log(ctx, levelFor(err), "outbox: notified drain stopped", "bucket", b, "err", err)
		}
	}
}

// ownNotified keeps the notified buckets in range and in this relay's fair
// share as of its last sweep.
func (r *Relay) ownNotified(buckets []int) []int {
	r.mu.Lock()
	fair := r.fair
	r.mu.Unlock()
	count := r.BucketSpan()
	out := buckets[:0]
	for _, b := range buckets {
		// A bucket beyond the count is kept: an online change may have
		// added it, and its drain reads the config item to find out.
		if b >= count || r.Drains(b) && (!fair.ok || fair.index(b) >= 0 && fairPos(fair.index(b), fair.n, fair.share, fair.rank) < fair.share) {
			out = append(out, b)
		}
	}
	return out
}

// stoppedRecently reports whether a drain of this relay stopped bucket with
// a Fatal error less than stoppedRetry before now, at the message after
// head, and the error it stopped with.
func (r *Relay) stoppedRecently(bucket int, head int64, now time.Time) (bool, error) {
	loc := r.local(bucket)
	at := loc.retryAt.Load()
	if at == 0 || now.UnixNano() >= at || head >= loc.retrySeq.Load() {
		return false, nil
	}
	if e := loc.stopErr.Load(); e != nil {
		return true, e
	}
	return true, nil
}

// leaveStopped reports whether the sweep leaves bucket alone as stopped
// recently (stoppedRecently); if so it lists it in rep's Skipped and, with
// the error the drain stopped it with, in its Errors: a sweep that leaves a
// stopped bucket alone fails naming it, as one that retried it would (the
// sweeper's BucketsFailed and stuck count, SweeperErrorsAlarm).
func (r *Relay) leaveStopped(bucket int, head int64, now time.Time, rep *SweepReport) bool {
	ok, err := r.stoppedRecently(bucket, head, now)
	if !ok {
		return false
	}
	rep.Skipped = append(rep.Skipped, bucket)
	if err != nil {
		rep.Errors[bucket] = err
	}
	return true
}
