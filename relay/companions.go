package relay

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/dynakafka/outbox/internal/seam"

	"github.com/dynakafka/outbox"
)

// Companion drains: one ResumeWindow per hand-over, not one per batch.
//
// A relay function's shard is invoked serially. When its invocations move
// to another container, the new container's first batch names only the
// buckets that batch's few records hint; it acquires those, and waits
// ResumeWindow (W) after each acquisition before it reads (docs/design.md
// §4.3.2). Meanwhile the shard's next records queue behind the invocation,
// and the next batch hints the other busy buckets, which the container then
// acquires, and waits W for, again: their messages waited W twice, plus two
// invocations (the bench's hand-over stage: a first batch of 2 records, a
// second of about 30, p99 1.4 s above a warm container's in DeleteMode).
//
// So when a drain of DrainBucketsTo owes W after taking a release of
// process P (outbox.Lease.Process), the call also drains, beside it and in
// the same invocation, every other bucket of this relay's span that P
// released, that waits on no gap and is not stopped, and whose counter is
// past its stored head: their acquisitions and windows run beside the
// first. Every other bucket is left alone (no write), so an idle outbox
// pays nothing, and a busy one pays what the next batch's acquisitions
// would have cost. Nothing about exclusion changes: a companion is an
// ordinary drain (a sweep drains buckets nobody hinted the same way),
// which acquires, owes its own W and reads after it.
//
// A companion's hold stores its process marked (companionMark), and a
// hand-over of a marked release starts no companions: when one process
// released buckets of several shards (a partition split, a sweep, a reused
// container), the container that took some as companions gives them back,
// at most, to their own shard's container with one window's wait, and that
// starts nothing more. Unmarked, the two containers traded them on every
// batch. A call starts the companions of the first release it takes only.

// BucketResult is one bucket's drain in DrainBucketsTo.
type BucketResult struct {
	Bucket int
	Stats  DrainStats
	Err    error
}

// companionKey marks a drain's context with its call's companion trigger.
type companionKey struct{}

// companionTrigger starts a call's companion drains, at most once.
type companionTrigger struct {
	once  sync.Once
	start func(process string)
}

// handedOver is called by a drain that owes ResumeWindow after acquiring a
// lease that process (outbox.Lease.Process) released: it starts its call's
// companion drains of that process's releases. A lease that names no
// process starts none.
func handedOver(ctx context.Context, process string) {
	if t, ok := ctx.Value(companionKey{}).(*companionTrigger); ok && process != "" {
		t.once.Do(func() { t.start(process) })
	}
}

// DrainBucketsTo drains each bucket of targets up to its sequence, as
// DrainBucketTo (a sequence below 1 counts as 1), at most Concurrency at once
// (all of them by default), and returns each bucket's result. If one of
// them is handed over from another process's release and owes
// ResumeWindow, the buckets that process's releases left with messages are
// drained beside it, to the end of what they held then (companions, above):
// their results are returned apart, and their errors are theirs alone (the
// hints that name their messages arrive in later batches).
func (r *Relay) DrainBucketsTo(ctx context.Context, targets map[int]int64) (hinted, companions []BucketResult) {
	var (
		mu    sync.Mutex
		waits []func()
		after func() // waits for the companions, once started
		trig  = &companionTrigger{}
		sem   chan struct{}
	)
	if c := r.cfg.concurrency; c > 0 && c < len(targets) {
		sem = make(chan struct{}, c)
	}
	trig.start = func(process string) {
		w := r.sched.Go(func() {
			got := r.drainCompanions(ctx, process, targets)
			mu.Lock()
			companions = got
			mu.Unlock()
		})
		mu.Lock()
		after = w
		mu.Unlock()
	}
	cctx := context.WithValue(ctx, companionKey{}, trig)
	for b, seq := range targets {
		if sem != nil {
			sem <- struct{}{}
		}
		// Goroutines through the scheduler: the simulator runs them.
		waits = append(waits, r.sched.Go(func() {
			if sem != nil {
				defer func() { <-sem }()
			}
			st, err := r.drainBucket(cctx, b, max(seq, 1), true)
			mu.Lock()
			hinted = append(hinted, BucketResult{b, st, err})
			mu.Unlock()
		}))
	}
	for _, w := range waits {
		w()
	}
	// Only a hinted drain starts the companions: all of them returned.
	mu.Lock()
	w := after
	mu.Unlock()
	if w != nil {
		w()
	}
	return hinted, companions
}

// companionDrainKey marks a companion drain's context (DrainStats.Companion).
type companionDrainKey struct{}

// companionMark ends the process a companion's hold stores.
const companionMark = "/companion"

// companionLooks bounds the companion scan's reads in flight, as the
// sweep's probes are bounded.
const companionLooks = 16

// drainCompanions drains the buckets of the span outside skip that
// process's holds released with messages above their stored heads, each up
// to the last sequence reserved when it looked: at most Concurrency at once
// (all by default), after a scan of at most companionLooks leases at once.
// It needs the store's CounterProbe; without it, or without time left for
// a window and a drain before the context's deadline, it drains nothing.
func (r *Relay) drainCompanions(ctx context.Context, process string, skip map[int]int64) []BucketResult {
	counter, ok := r.store.(outbox.CounterProbe)
	if !ok {
		return nil
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 2*r.cfg.resumeWindow+r.cfg.deadlineMargin {
		return nil // each would acquire, and stop before its first read
	}
	var candidates []int
	for b := range r.BucketSpan() {
		if _, hinted := skip[b]; !hinted && r.Drains(b) {
			candidates = append(candidates, b)
		}
	}
	var (
		mu     sync.Mutex
		chosen = map[int]int64{}
	)
	inTurns(r.sched, len(candidates), companionLooks, func(i int) {
		b := candidates[i]
		if last, ok := r.companion(ctx, counter, process, b); ok {
			mu.Lock()
			chosen[b] = last
			mu.Unlock()
		}
	})
	var (
		buckets []int
		out     []BucketResult
	)
	for b := range chosen {
		buckets = append(buckets, b)
	}
	ctx = context.WithValue(ctx, companionDrainKey{}, true)
	inTurns(r.sched, len(buckets), cmp.Or(r.cfg.concurrency, len(buckets)), func(i int) {
		b := buckets[i]
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 2*r.cfg.resumeWindow+r.cfg.deadlineMargin {
			return // a later turn: it would acquire and stop before reading
		}
		st, err := r.drainBucket(ctx, b, chosen[b], false)
		mu.Lock()
		out = append(out, BucketResult{b, st, err})
		mu.Unlock()
	})
	return out
}

// inTurns calls f(0) … f(n-1), limit at once, in goroutines of the
// scheduler (the simulator runs them), and returns when all returned.
func inTurns(sched seam.Scheduler, n, limit int, f func(i int)) {
	for from := 0; from < n; from += max(limit, 1) {
		var waits []func()
		for i := from; i < min(n, from+max(limit, 1)); i++ {
			waits = append(waits, sched.Go(func() { f(i) }))
		}
		for _, w := range waits {
			w()
		}
	}
}

// companion reports whether bucket b is to be drained beside a hand-over
// of one of process's releases, and up to which sequence: its lease is
// released by process, it waits on no gap and is not stopped on a message,
// and messages lie above its stored head (its counter is past it: they
// came since that hold's last flush). Every failed read says no: the
// bucket's own hints still come.
func (r *Relay) companion(ctx context.Context, counter outbox.CounterProbe, process string, b int) (int64, bool) {
	l, err := r.store.ReadLease(ctx, b)
	if err != nil || !l.Released() || l.Process != process || l.Gap != 0 || l.Stuck.Current(l.Head) {
		return 0, false
	}
	last, err := counter.LastSequence(ctx, b)
	if err != nil || last <= l.Head {
		return 0, false
	}
	return last, true
}
