package relay

import (
	"context"
	"sync"

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
// So when a drain of DrainBucketsTo owes W after a hand-over, the call also
// drains, during that wait and in the same invocation, every other bucket
// of this relay's span whose lease another process's hold released and
// which holds a message above its stored head: its acquisition and its W
// run beside the first. A bucket that is held, resumable by this process,
// or without a message above its head is left alone (no write), so an
// idle outbox pays nothing, and a busy one pays what the next batch's
// acquisitions would have cost. Nothing about exclusion changes: a
// companion is an ordinary drain (a sweep drains buckets nobody hinted
// the same way), which acquires, owes its own W and reads after it.

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
	start func()
}

// handedOver is called by a drain that owes ResumeWindow after acquiring a
// lease another process released: it starts its call's companion drains.
func handedOver(ctx context.Context) {
	if t, ok := ctx.Value(companionKey{}).(*companionTrigger); ok {
		t.once.Do(t.start)
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
	trig.start = func() {
		w := r.sched.Go(func() {
			got := r.drainCompanions(ctx, targets)
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

// drainCompanions drains, all at once, the buckets of the span outside
// skip that another process's hold released with a message above the
// stored head, each up to the last sequence reserved when it looked. It
// needs the store's BucketProbe and CounterProbe; without them it drains
// nothing.
func (r *Relay) drainCompanions(ctx context.Context, skip map[int]int64) []BucketResult {
	counter, ok := r.store.(outbox.CounterProbe)
	if !ok {
		return nil
	}
	ctx = context.WithValue(ctx, companionDrainKey{}, true)
	var (
		mu    sync.Mutex
		waits []func()
		out   []BucketResult
	)
	for b := range r.BucketSpan() {
		if _, hinted := skip[b]; hinted || !r.Drains(b) {
			continue
		}
		waits = append(waits, r.sched.Go(func() {
			last, ok := r.companion(ctx, counter, b)
			if !ok {
				return
			}
			st, err := r.drainBucket(ctx, b, last, false)
			mu.Lock()
			out = append(out, BucketResult{b, st, err})
			mu.Unlock()
		}))
	}
	for _, w := range waits {
		w()
	}
	return out
}

// companion reports whether bucket b is to be drained beside a hand-over,
// and up to which sequence: its lease is released by a hold that is not
// this process's own, and a message lies above its stored head. Every
// failed read says no: the bucket's own hints still come.
func (r *Relay) companion(ctx context.Context, counter outbox.CounterProbe, b int) (int64, bool) {
	l, err := r.store.ReadLease(ctx, b)
	if err != nil || !l.Released() || l.HeldAt(r.cfg.clock.Now()) {
		return 0, false
	}
	loc := r.local(b)
	select {
	case loc.turn <- struct{}{}:
		own := l.Token != "" && l.Token == loc.token
		<-loc.turn
		if own {
			return 0, false // resumable: no wait owed
		}
	default:
		return 0, false // a drain of it runs in this process
	}
	last, err := counter.LastSequence(ctx, b)
	if err != nil || last <= l.Head {
		return 0, false
	}
	return last, true
}
