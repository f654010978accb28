package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/seam"
)

// drain is one drain of one bucket: it holds the bucket's lease, or has
// resumed a lease this relay released (docs/design.md, "resuming").
//
// A drain repeats the phases of docs/design.md §5 until the bucket is empty
// or its target is decided: read, classify (leftovers, run, gap, bad entry),
// publish, mark (tombstones, DeleteMode) and advance head.
type drain struct {
	r   *Relay
	b   int
	st  *DrainStats
	loc *local

	mu    sync.Mutex   // guards lease while the watchdog renews it
	lease outbox.Lease // as last read or written
	// held: this drain holds the lease (acquired it). Otherwise it resumed
	// a lease this relay had released, and writes it only lazily.
	held bool
	// checkedAt: when (scheduler clock) the last look at the lease that
	// found it still released by this process's hold was sent; a resumed
	// drain starts and runs no publish or marking past half a ResumeWindow
	// after it (windowEnd).
	checkedAt time.Time
	// head: the decided prefix as this drain knows it (the stored head may
	// lag). cleaned: every item at or below it is known decided and marked;
	// reads start above it.
	head, cleaned int64
	// wakeBase: release only if the lease's wake count is still this: the
	// count before the last read that reached the end of the bucket with
	// everything it read decided (0 until then).
	wakeBase int64
	// target: stop once head reaches it (0: drain until empty).
	target int64
	// pre: the first read of a resumed drain, sent beside its look at the
	// lease (prefetch); read takes it.
	pre *prefetched
	// marking: the tombstones of a held drain's last batch, in flight
	// while the release that carries its head goes out (finish).
	marking *pendingMark
	// isolate: the next publish is the head record alone, to tell whether
	// a record-level rejection is really its own.
	isolate bool
	// fenced: the publisher fenced the bucket's earlier holders since the
	// last publish (a HolderFencer that still answers ErrFenceRequired
	// then has failed: the error is handled as any publish failure, not
	// by fencing in a loop).
	fenced bool
	// Consecutive publish failures, and the sequence and time of the first.
	failures     int
	failedSeq    int64
	firstFailure time.Time
	// gateSince: when (scheduler clock) this drain first found its next
	// message held back by an epoch gate (zero: not waiting; gate.go).
	gateSince time.Time
	// process: what this drain's hold stores as its releasing process
	// (outbox.Lease.Process) — the relay's instance, marked when the drain
	// is a companion (companions.go) — set at its acquisition. Every
	// answer of the store under the hold names the previous releaser, so
	// Release and Abandon are given this.
	process string
}

func (d *drain) getLease() outbox.Lease {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lease
}

func (d *drain) setLease(l outbox.Lease) {
	d.mu.Lock()
	d.lease = l
	d.mu.Unlock()
}

// acquire takes the lease with a write. On ErrLeaseHeld a wake-up was left.
func (d *drain) acquire(ctx context.Context) error {
	cfg := &d.r.cfg
	l, err := d.r.store.Acquire(ctx, d.b, cfg.relayID, cfg.clock.Now(), cfg.leaseDuration)
	if err != nil {
		if errors.Is(err, outbox.ErrLeaseHeld) {
			return err
		}
		return fmt.Errorf("outbox: acquire bucket %d: %w", d.b, err)
	}
	prev := l.Process // the releaser's, as stored (a store that keeps it)
	d.process = d.r.instance
	if ctx.Value(companionDrainKey{}) != nil {
		d.process += companionMark
	}
	l.Process = d.process
	d.setLease(l)
	own := l.PrevToken != "" && l.PrevToken == d.loc.token
	d.loc.token = l.Token
	d.held = true
	_, fencer := d.r.pub.(outbox.HolderFencer)
	d.loc.fenceDue = fencer
	d.st.Acquired = true
	d.st.TakenOver = d.st.TakenOver || l.TakenOver
	d.st.HandedOver = d.st.HandedOver || l.PrevReleasedBy != "" && !own
	if l.PrevReleasedBy != "" && !own && !fencer && !cfg.hooks.NoHandoverWait {
		// The process that released it — another relay, or another
		// process sharing this relay's name — may be resuming it: what it
		// does on the strength of a look at the lease lands within
		// ResumeWindow of that look, and every look that found the lease
		// released was served before this acquisition, which was applied
		// before its answer came back (now). So read and publish nothing
		// before ResumeWindow from now (docs/design.md §4.3). A release of
		// this process's own hold owes nothing: its drains of the bucket
		// take turns (Relay.takeTurn). With a HolderFencer, the fence
		// before the first read shuts the resumer out instead: its
		// publishes fail from then on, and a resumer never initialises a
		// producer (HolderFencer's contract).
		if nb := d.r.sched.Now().Add(cfg.resumeWindow); nb.After(d.loc.notBefore) {
			d.loc.notBefore = nb
		}
		// The other buckets that process released wait W beside this
		// one, not after it (companions.go).
		if !strings.HasPrefix(prev, d.r.instance) && !strings.HasSuffix(prev, companionMark) {
			handedOver(ctx, prev)
		}
	}
	d.head, d.cleaned = max(d.head, l.Head), max(d.cleaned, l.Cleaned)
	if own {
		// This process's own release: nobody drained the bucket since.
		d.takeProgress(l.PrevToken)
	}
	if l.Wake > 0 {
		// Wake-ups a failed or crashed holder never honoured: their
		// messages may be anywhere in the bucket.
		d.target = 0
	}
	return d.inject(ctx, seam.AfterAcquire)
}

// takeProgress raises the drain's marks to those this process's last drain
// of the hold token ended with (local.head, local.cleaned): at or below
// them every message was decided and every item marked by this process,
// and nobody else drained the bucket under that hold.
func (d *drain) takeProgress(token string) {
	if token != "" && d.loc.progress == token {
		d.head, d.cleaned = max(d.head, d.loc.head), max(d.cleaned, d.loc.cleaned)
	}
}

// keepProgress records the marks the drain ended with (err: how it ended)
// for the next drain of the same hold (takeProgress). A crashed drain's
// process is gone, and so is what it knew.
func (d *drain) keepProgress(err error) {
	if errors.As(err, new(*seam.CrashError)) {
		d.loc.progress = ""
		return
	}
	d.loc.head, d.loc.cleaned, d.loc.progress = d.head, d.cleaned, d.loc.token
}

// pendingWrite is a lease write a drain left in flight (local.flush): it
// may outlast the drain, and a later drain of the bucket in this process
// takes its result.
type pendingWrite struct {
	done  chan struct{} // closed once the write returned
	sched seam.Scheduler
	bound time.Duration // the write's timeout: no wait lasts longer
	token string        // the released hold it writes
	at    time.Time     // scheduler clock, taken before the lease clock's time it writes
	err   error
}

// over reports whether the write returned; with block set it waits for it,
// but not past ctx: an invocation returns before its deadline even when a
// write left in flight by an earlier one (say, across a frozen container)
// has not returned yet. It waits through the scheduler (a bare receive
// would block a simulated drain outside the simulator's scheduler, and
// with it the whole schedule).
func (w *pendingWrite) over(ctx context.Context, block bool) bool {
	if block {
		stop := (<-chan struct{})(w.done)
		if cd := ctx.Done(); cd != nil {
			either := make(chan struct{})
			go func() {
				// Ends with the write, which its context bounds.
				select {
				case <-w.done:
				case <-cd:
				}
				close(either)
			}()
			stop = either
		}
		w.sched.Sleep(stop, w.bound)
	}
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// goWrite runs write on the scheduler, on a context that the drain's end
// does not cancel (bounded by LeaseDuration: past it the write decides
// nothing), and returns it in flight.
func (d *drain) goWrite(ctx context.Context, write func(context.Context) error) *pendingWrite {
	w := &pendingWrite{done: make(chan struct{}), token: d.loc.token}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.r.cfg.leaseDuration)
	w.sched, w.bound = d.r.sched, d.r.cfg.leaseDuration
	d.r.sched.Go(func() {
		defer close(w.done)
		defer cancel()
		w.err = write(bctx)
	})
	return w
}

// hold makes sure this drain holds the lease before an action that needs
// it (recording a gap, fencing, parking). It reports whether it had to
// acquire: the batch read before is then stale and must be read again.
func (d *drain) hold(ctx context.Context) (bool, error) {
	if d.held {
		return false, nil
	}
	return true, d.acquire(ctx)
}

// run drains until the bucket is empty or the target is decided. It returns
// nil then; any error leaves the bucket to the next drain.
func (d *drain) run(ctx context.Context) error {
	for {
		if done, err := d.round(ctx); done || err != nil {
			return err
		}
	}
}

// round is one round of run: check the lease (prepare), read and
// classify a batch, publish it, advance; done ends the drain with err.
func (d *drain) round(ctx context.Context) (done bool, err error) {
	cfg := &d.r.cfg
	if done, err := d.prepare(ctx); done || err != nil {
		return true, err
	}
	bt, err := d.read(ctx)
	if err != nil {
		return true, err
	}
	classify(bt, d.head, cfg.batchSize, cfg.maxMessageBytes, cfg.headers, d.isolate, max(d.r.openEpoch.Load(), d.loc.gateOpen.Load()))
	if len(bt.run) == 0 {
		done, err := d.nothingToPublish(ctx, bt)
		return done || err != nil, err
	}
	start := cfg.clock.Now()
	acked, perr := 0, error(nil)
	if len(bt.msgs) > 0 {
		acked, perr = d.publish(ctx, bt.msgs, d.isolate)
	}
	var crashed *seam.CrashError
	if errors.Is(perr, outbox.ErrLeaseLost) || errors.As(perr, &crashed) || errors.Is(perr, outbox.ErrDeadline) {
		// Another owner may take over at any moment: write nothing.
		return true, perr
	}
	if acked > 0 {
		if err := d.inject(ctx, seam.AfterProduce); err != nil {
			return true, err
		}
	}
	if err := d.advance(ctx, bt, acked, perr, cfg.clock.Now().Sub(start)); err != nil {
		return true, err
	}
	return d.afterPublish(ctx, bt, acked, perr, start)
}

// prepare is a round's checks before its read: the deadline, the target,
// the lease's renewal and recheck, a resumer's wait, the holders' fence.
func (d *drain) prepare(ctx context.Context) (done bool, err error) {
	if d.r.pastDeadline(ctx) {
		return true, outbox.ErrDeadline
	}
	if d.target > 0 && d.head >= d.target {
		return true, nil // everything hinted is decided; later commits bring their own hints
	}
	for _, step := range []func(context.Context) error{d.renewIfDue, d.recheck, d.waitForResumer, d.fenceHolders} {
		if err := step(ctx); err != nil {
			return true, err
		}
	}
	return false, nil
}

// afterPublish decides what follows an advanced publish: go on under the
// lease (a resume window ran out, a fence is required), the next round,
// the end of the drain, or the handling of a failure.
func (d *drain) afterPublish(ctx context.Context, bt *batch, acked int, perr error, start time.Time) (done bool, err error) {
	if errors.Is(perr, errResumeWindow) {
		// A resumed publish ran out of its window: go on under the
		// lease, with its watchdog.
		d.st.Retries++
		if _, err := d.hold(ctx); err != nil {
			return true, err
		}
		return false, nil
	}
	if errors.Is(perr, outbox.ErrFenceRequired) && !d.fenced {
		// A HolderFencer that dropped the producer this process's last
		// fence made (a failed transaction): fence again before the
		// next publish, under the lease — a resumed drain acquires its
		// release first (HolderFencer's contract).
		d.st.Retries++
		if _, err := d.hold(ctx); err != nil {
			return true, err
		}
		d.loc.fenceDue = true
		return false, nil
	}
	d.fenced = false
	if perr == nil {
		d.failures, d.isolate = 0, false
		if bt.complete(d.head) {
			d.reachedEnd(bt)
			return true, nil
		}
		return false, nil
	}
	if err := d.publishFailed(ctx, bt, acked, perr, start); err != nil {
		return true, err
	}
	return false, nil
}

// batch is what one read of the bucket found, classified.
type batch struct {
	entries []outbox.Entry
	// end: the read reached the end of the bucket.
	end bool
	// seenThrough: every sequence number up to it was covered by the read.
	seenThrough int64
	// wakeBefore: the lease's wake count (as this drain knew it) before the
	// read.
	wakeBefore int64

	leftovers []int64          // messages at or below head: published, not marked
	run       []outbox.Entry   // the contiguous run from head+1: messages and tombstones
	msgs      []outbox.Message // the run's messages, to publish
	gapAt     int64            // head+1 missing while gapNext is present
	gapNext   int64
	bad       *outbox.Entry // at head+1: undecodable, or above MaxMessageBytes
	// gated: the message at head+1 is of a BucketCount epoch above the
	// open one (gate.go); 0: none.
	gated, gatedEpoch int64
}

// complete reports whether the read reached the end of the bucket and
// everything it read is decided.
func (bt *batch) complete(head int64) bool {
	return bt.end && (len(bt.entries) == 0 || head >= bt.entries[len(bt.entries)-1].Sequence)
}

// read reads up to a batch of entries above the cleaned mark, consistently.
func (d *drain) read(ctx context.Context) (*batch, error) {
	if p := d.pre; p != nil {
		d.pre = nil
		if d.held {
			// Acquired since: a held drain's reads follow its acquisition.
			p.drop()
		} else if bt, ok := p.take(d.cleaned); ok {
			bt.wakeBefore = d.getLease().Wake
			return bt, nil
		}
	}
	bt, err := d.readFrom(ctx, d.head, d.cleaned)
	if err != nil {
		return nil, err
	}
	bt.wakeBefore = d.getLease().Wake
	return bt, nil
}

// readFrom reads up to a batch of entries above cleaned, given head.
func (d *drain) readFrom(ctx context.Context, head, cleaned int64) (*batch, error) {
	// Entries in (cleaned, head] are tombstones or leftovers; read enough
	// to also get a batch beyond head (a batch: BatchSize, or less while
	// many drains share MaxInFlight).
	n := d.r.readLimit()
	limit := n + int(min(head-cleaned, int64(n)))
	bt := &batch{}
	entries, end, err := d.r.store.Pending(ctx, d.b, cleaned, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: read bucket %d after %d: %w", d.b, cleaned, err)
	}
	bt.entries, bt.end = entries, end || len(entries) == 0
	bt.seenThrough = int64(1<<63 - 1)
	if !bt.end {
		bt.seenThrough = entries[len(entries)-1].Sequence
	}
	return bt, nil
}

// prefetched is a read of the bucket sent beside a drain's look at its
// lease (drain.prefetch).
type prefetched struct {
	wait    func()
	cancel  context.CancelFunc
	cleaned int64 // the read is of the entries above it
	bt      *batch
	err     error
}

// prefetch sends the drain's first read beside its look at the lease when
// this process expects to resume its own hold of the bucket — it released
// it, and knows the marks its last drain of that hold ended with — and
// that read is needed (a target not yet decided, as far as this process
// knows): a warm container's drain then waits for one round trip before it
// publishes, not two. The read is used only if the lease turns out
// resumable (begin), and only the entries above the cleaned mark the drain
// then starts from (prefetched.take): what it read at or below that mark is
// decided and marked. It decides nothing before the look: a resumer's
// exclusion is its window (docs/design.md §4.3), which bounds what it
// publishes and marks, not when it reads; an acquirer drops it (acquire,
// like a failed look, reads again after). Returns nil when no read is sent.
func (d *drain) prefetch(ctx context.Context) *prefetched {
	r, loc := d.r, d.loc
	if !r.cfg.resume || loc.token == "" || loc.progress != loc.token || loc.fenceDue ||
		d.target > 0 && loc.head >= d.target {
		return nil
	}
	pctx, cancel := context.WithCancel(ctx)
	p := &prefetched{cancel: cancel, cleaned: loc.cleaned}
	head := loc.head
	p.wait = r.sched.Go(func() { p.bt, p.err = d.readFrom(pctx, head, p.cleaned) })
	return p
}

// take returns the prefetched read as a read from cleaned: false when it
// failed or started above cleaned (then the drain reads again).
func (p *prefetched) take(cleaned int64) (*batch, bool) {
	p.wait()
	p.cancel()
	if p.err != nil || p.cleaned > cleaned {
		return nil, false
	}
	bt := p.bt
	i := 0
	for i < len(bt.entries) && bt.entries[i].Sequence <= cleaned {
		i++
	}
	if i == len(bt.entries) && !bt.end {
		return nil, false // all of it at or below cleaned: read on from there
	}
	bt.entries = bt.entries[i:]
	return bt, true
}

// drop ends a prefetched read that will not be used (nil: none).
func (p *prefetched) drop() {
	if p != nil {
		p.cancel()
		p.wait()
	}
}

// classify sorts what a read found, given the decided head: leftovers at or
// below head, the contiguous run from head+1 (at most batchSize messages,
// one when isolating, none of a BucketCount epoch above open), a gap, or a
// bad entry or a message held back by its epoch's gate at head+1.
func classify(bt *batch, head int64, batchSize, maxMessageBytes int, headers outbox.HeaderNames, isolate bool, open int64) {
	expect := head + 1
	for i := range bt.entries {
		e := &bt.entries[i]
		if e.Sequence <= head {
			if e.Err == nil && !e.Fence {
				bt.leftovers = append(bt.leftovers, e.Sequence)
			}
			continue
		}
		if e.Sequence != expect {
			if len(bt.run) == 0 {
				bt.gapAt, bt.gapNext = expect, e.Sequence
			}
			return
		}
		if len(bt.msgs) == batchSize || isolate && len(bt.msgs) == 1 {
			return
		}
		if e.Err != nil || (!e.Fence && headers.RecordSize(e.Message) > maxMessageBytes) {
			bt.bad = e
			return
		}
		if !e.Fence && e.Epoch > open {
			// A new epoch's message: published only once its gate is
			// open (the run stops before it; at head+1 the drain asks).
			if len(bt.run) == 0 {
				bt.gated, bt.gatedEpoch = e.Sequence, e.Epoch
			}
			return
		}
		bt.run = append(bt.run, *e)
		if !e.Fence {
			bt.msgs = append(bt.msgs, e.Message)
		}
		expect++
	}
}

// nothingToPublish handles a read whose run is empty. It reports whether
// the drain is done.
func (d *drain) nothingToPublish(ctx context.Context, bt *batch) (bool, error) {
	cfg := &d.r.cfg
	switch {
	case len(bt.leftovers) > 0:
		if err := d.markInWindow(ctx, bt.leftovers); err != nil {
			return false, err
		}
		d.st.Leftovers += len(bt.leftovers)
		d.cleaned = max(d.cleaned, min(d.head, bt.seenThrough))
		return false, nil
	case bt.bad != nil:
		// Never publish, skip or delete what cannot be published: park it
		// (default) or stop the bucket.
		if stale, err := d.hold(ctx); stale || err != nil {
			return false, err
		}
		e := *bt.bad
		reason := fmt.Errorf("record of %d bytes exceeds MaxMessageBytes=%d", cfg.headers.RecordSize(e.Message), cfg.maxMessageBytes)
		if e.Err != nil {
			if outbox.Classify(e.Err) == outbox.Fatal {
				return false, d.stopped(ctx, outbox.Entry{Sequence: e.Sequence}, &outbox.PublishError{Bucket: d.b, Sequence: e.Sequence, Err: e.Err})
			}
			reason = fmt.Errorf("item cannot be decoded: %w", e.Err)
		}
		now := cfg.clock.Now()
		return false, d.recordError(ctx, e, outbox.WithClass(reason, outbox.RecordPermanent), now, now, 0)
	case bt.gapAt != 0:
		if stale, err := d.hold(ctx); stale || err != nil {
			return false, err
		}
		return false, d.gap(ctx, bt.gapAt, bt.gapNext)
	case bt.gated != 0:
		return false, d.gate(ctx, bt.gated, bt.gatedEpoch)
	case bt.end:
		d.reachedEnd(bt)
		return true, nil
	default:
		// Everything read was at or below head and already marked; read on
		// from the last sequence seen.
		d.cleaned = max(d.cleaned, min(d.head, bt.seenThrough))
		return false, nil
	}
}

// reachedEnd records that a read reached the end of the bucket and
// everything it saw is decided: every wake-up counted before that read is
// honoured.
func (d *drain) reachedEnd(bt *batch) { d.wakeBase = bt.wakeBefore }

// advance handles the decided prefix of a published run: it moves head past
// the acknowledged messages and the run's tombstones and marks the
// acknowledged messages and the leftovers (DeleteMode). A held drain writes
// head first, so that a crash in between leaves leftovers (marked later
// without publishing them again); a resumed drain keeps head in memory (it is
// written by finish or a later drain) and relies on the tombstones.
func (d *drain) advance(ctx context.Context, bt *batch, acked int, perr error, took time.Duration) error {
	cfg := &d.r.cfg
	newHead, fenced, n := d.head, 0, 0
	for _, e := range bt.run {
		if !e.Fence {
			if n == acked {
				break
			}
			n++
		} else if !e.Published {
			fenced++
		}
		newHead = e.Sequence
	}
	stats := BatchStats{Bucket: d.b, Messages: len(bt.msgs), Acked: acked, Fenced: fenced, PublishDuration: took, Err: perr}
	if errors.Is(perr, errResumeWindow) || errors.Is(perr, outbox.ErrFenceRequired) {
		// Not a publish failure: the rest goes out under the lease, after
		// a fence.
		stats.Err = nil
	}
	if stats.Err != nil {
		stats.Class = outbox.Classify(stats.Err)
	}
	if newHead > d.head {
		d.head = newHead
		if d.held && d.endsWithRelease(bt, acked, perr) {
			// The drain's last batch: its head goes out with the release
			// and its tombstones beside it (finish).
			d.markBesideRelease(ctx, bt, acked, stats)
			return nil
		}
		if d.held {
			if err := d.writeHead(ctx); err != nil {
				stats.Err, stats.Class = err, outbox.Classify(err)
				cfg.metrics.Batch(stats)
				return err
			}
			if err := d.inject(ctx, seam.AfterHeadUpdate); err != nil {
				return err
			}
		}
	}
	toMark := bt.leftovers
	for _, m := range bt.msgs[:acked] {
		toMark = append(toMark, m.Sequence)
	}
	if len(toMark) > 0 {
		if err := d.markInWindow(ctx, toMark); err != nil {
			stats.Err, stats.Class = err, outbox.Classify(err)
			cfg.metrics.Batch(stats)
			return err
		}
	}
	d.cleaned = max(d.cleaned, min(d.head, bt.seenThrough))
	if d.r.mode == outbox.DeleteMode {
		stats.Deleted = len(toMark)
	}
	cfg.metrics.Batch(stats)
	d.st.Batches++
	d.st.Published += acked
	d.st.Leftovers += len(bt.leftovers)
	return nil
}

// pendingMark is a mark in flight (drain.marking).
type pendingMark struct {
	wait             func()
	err              error
	stats            BatchStats
	acked, leftovers int
	cleaned          int64 // d.cleaned once the tombstones landed
}

// endsWithRelease tells whether a held drain's batch is its last, decided
// whole: the drain releases the lease next (run returns at its target or at
// the end of the bucket), without a fault injector (whose crash points fall
// between the head write and the marking). In WatermarkMode there is
// nothing to mark: the release alone carries the head, one write where
// there were two in a row (head, release).
func (d *drain) endsWithRelease(bt *batch, acked int, perr error) bool {
	return d.r.cfg.hooks.Faults == nil && perr == nil && acked == len(bt.msgs) && acked > 0 &&
		(d.target > 0 && d.head >= d.target || bt.complete(d.head))
}

// markBesideRelease starts marking the last batch of a held drain (its
// acknowledged messages and leftovers) without writing its head first: the
// release that ends the drain writes the head, with cleaned still below
// the batch, while the tombstones are in flight, so the invocation waits
// for one write instead of three in a row (head, tombstones, release).
// Both follow Kafka's acknowledgement (I1). Whatever lands first, a reader
// finds each of these messages decided: a tombstone, or a message at or
// below the stored head — a leftover, marked without publishing it again
// (§7.2). A crash before the release leaves tombstones above the stored
// head, as a resumed drain leaves them, passed over like fences; a crash
// before both republishes the batch (§7.1), as a crash before the head
// write did.
func (d *drain) markBesideRelease(ctx context.Context, bt *batch, acked int, stats BatchStats) {
	toMark := slices.Clone(bt.leftovers)
	for _, m := range bt.msgs[:acked] {
		toMark = append(toMark, m.Sequence)
	}
	m := &pendingMark{stats: stats, acked: acked, leftovers: len(bt.leftovers), cleaned: min(d.head, bt.seenThrough)}
	m.wait = d.r.sched.Go(func() { m.err = d.mark(ctx, toMark) })
	m.stats.Deleted = len(toMark)
	d.marking = m
}

// joinMark waits for the mark in flight, if any, and accounts for it as
// advance accounts for a batch.
func (d *drain) joinMark() error {
	m := d.marking
	if m == nil {
		return nil
	}
	d.marking = nil
	m.wait()
	cfg := &d.r.cfg
	if m.err != nil {
		m.stats.Deleted = 0
		m.stats.Err, m.stats.Class = m.err, outbox.Classify(m.err)
		cfg.metrics.Batch(m.stats)
		return m.err
	}
	d.cleaned = max(d.cleaned, m.cleaned)
	cfg.metrics.Batch(m.stats)
	d.st.Batches++
	d.st.Published += m.acked
	d.st.Leftovers += m.leftovers
	return nil
}

// writeHead writes the drain's head and cleaned marks to the lease it holds,
// keeping a recorded gap that head has not passed.
func (d *drain) writeHead(ctx context.Context) error {
	cfg := &d.r.cfg
	l := d.getLease()
	u := outbox.LeaseUpdate{Head: d.head, Cleaned: min(d.cleaned, d.head)}
	if l.Gap != 0 && l.Gap > d.head {
		u.Gap, u.GapSince = l.Gap, l.GapSince
	}
	nl, err := d.r.store.Update(ctx, l, u, cfg.clock.Now())
	if err != nil {
		return fmt.Errorf("outbox: advance head of bucket %d to %d: %w", d.b, d.head, err)
	}
	d.setLease(nl)
	return nil
}

// markInWindow marks seqs; a resumed drain marks within its window, like its
// publish (docs/design.md §7.13): a relay that acquired the bucket meanwhile
// reads after that window, so it sees every tombstone that landed, and a
// mark the window cut off is reported as failed rather than landing unseen.
func (d *drain) markInWindow(ctx context.Context, seqs []int64) error {
	if d.held || d.r.mode == outbox.WatermarkMode {
		return d.mark(ctx, seqs)
	}
	_, expired, err := d.underWindow(ctx, func(ctx context.Context) (int, error) { return 0, d.mark(ctx, seqs) })
	if !expired {
		return err
	}
	// The window ended first. Take the lease: if nobody acquired it since,
	// it is this process's own release (no wait), and the tombstones are
	// written under the hold — not left to this process's next drain or to
	// an acquirer, which would publish them again. Marking messages Kafka
	// acknowledged is safe under any hold (I1); only if another process
	// holds the bucket are they left to it.
	if herr := d.acquire(ctx); herr != nil {
		return fmt.Errorf("outbox: marking %d messages of bucket %d outlasted a resumed drain's window and another relay holds the bucket (it publishes them again): %w",
			len(seqs), d.b, errors.Join(errResumeWindow, err, herr))
	}
	d.st.ResumeMarkHeld = true
	return d.mark(ctx, seqs)
}

// mark replaces acknowledged messages (and leftovers) by tombstones
// (DeleteMode; WatermarkMode keeps them). With a fault injector the write is
// split in two so that a crash can fall between.
func (d *drain) mark(ctx context.Context, seqs []int64) error {
	if d.r.mode == outbox.WatermarkMode {
		return nil
	}
	now := d.r.cfg.clock.Now()
	first := seqs
	if d.r.cfg.hooks.Faults != nil && len(seqs) > 1 {
		first = seqs[:len(seqs)/2]
	}
	if err := d.r.store.MarkPublished(ctx, d.b, first, now); err != nil {
		return fmt.Errorf("outbox: mark %d messages of bucket %d published: %w", len(first), d.b, err)
	}
	if len(first) < len(seqs) {
		if err := d.inject(ctx, seam.MidDelete); err != nil {
			return err
		}
		if err := d.r.store.MarkPublished(ctx, d.b, seqs[len(first):], now); err != nil {
			return fmt.Errorf("outbox: mark %d messages of bucket %d published: %w", len(seqs)-len(first), d.b, err)
		}
	}
	d.st.Deleted += len(seqs)
	return nil
}

// publishFailed applies the error class of a failed publish: retry with
// backoff, isolate and then park (or block) a record-level failure, or stop
// the bucket on a fatal one.
func (d *drain) publishFailed(ctx context.Context, bt *batch, acked int, perr error, start time.Time) error {
	cfg := &d.r.cfg
	failed := bt.msgs[acked]
	var pe *outbox.PublishError
	if !errors.As(perr, &pe) {
		perr = &outbox.PublishError{Bucket: d.b, Sequence: failed.Sequence, MessageID: failed.ID, Err: perr}
	}
	d.failures++
	if d.failures == 1 || d.failedSeq != failed.Sequence {
		d.failedSeq, d.firstFailure = failed.Sequence, start
	}
	switch outbox.Classify(perr) {
	case outbox.RecordPermanent:
		if !d.isolate {
			// Kafka rejects whole batches, and franz-go fails every record
			// buffered with a rejected one, other buckets' included: only a
			// publish of this record alone can tell.
			d.isolate = true
			return nil
		}
		if stale, err := d.hold(ctx); stale || err != nil {
			return err // read again under the lease; the record is isolated again
		}
		d.isolate = false
		if err := d.recordError(ctx, outbox.Entry{Sequence: failed.Sequence, Message: failed}, perr, d.firstFailure, cfg.clock.Now(), d.failures); err != nil {
			return err
		}
		d.failures = 0
		return nil
	case outbox.Fatal:
		return d.stopped(ctx, outbox.Entry{Sequence: failed.Sequence, Message: failed}, perr)
	default:
		// Retriable: back off with full jitter, keep the rows, try again
		// (from the new head) unless the deadline comes first.
		wait := backoff(cfg.retryBase, cfg.retryMax, d.failures, d.r.rand)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl)-cfg.deadlineMargin < wait {
			return perr
		}
		cfg.logger.WarnContext(ctx, "outbox: retriable publish error; backing off", "bucket", d.b, "sequence", failed.Sequence,
			"attempt", d.failures, "wait", wait, "err", perr)
		d.st.Retries++
		if !d.r.sched.Sleep(ctx.Done(), wait) {
			return perr
		}
		return nil
	}
}

// backoff returns a full-jitter exponential backoff for the given attempt,
// drawing from rnd (rand.Int64N unless a test installed another).
func backoff(base, max time.Duration, attempt int, rnd func(int64) int64) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return time.Duration(rnd(int64(d)) + 1)
}

// recordError applies the record-error policy to e, the entry at head+1.
// The drain holds the lease.
func (d *drain) recordError(ctx context.Context, e outbox.Entry, cause error, first, last time.Time, attempts int) error {
	cfg := &d.r.cfg
	if cfg.recordPolicy == outbox.Block {
		cfg.logger.ErrorContext(ctx, "outbox: record cannot be published; the bucket is blocked until it is fixed or parked",
			"bucket", d.b, "sequence", e.Sequence, "message_id", e.Message.ID, "err", cause)
		var pe *outbox.PublishError
		if errors.As(cause, &pe) {
			return cause
		}
		return &outbox.PublishError{Bucket: d.b, Sequence: e.Sequence, MessageID: e.Message.ID, Err: cause}
	}
	_, err := d.park(ctx, e, cause, outbox.RecordPermanent, first, last, attempts)
	return err
}

// park moves e, the entry at head+1, to the dead letters and advances head
// past it. The drain holds the lease.
func (d *drain) park(ctx context.Context, e outbox.Entry, cause error, class outbox.ErrorClass, first, last time.Time, attempts int) (outbox.Parked, error) {
	cfg := &d.r.cfg
	// Park writes head to e.Sequence conditional on it being e.Sequence-1:
	// bring a lagging stored head up first.
	if d.getLease().Head < d.head {
		if err := d.writeHead(ctx); err != nil {
			return outbox.Parked{}, err
		}
	}
	msg := e.Message
	msg.Bucket, msg.Sequence = d.b, e.Sequence
	p := outbox.Parked{Bucket: d.b, Sequence: e.Sequence, Message: msg, Reason: cause.Error(), Class: class,
		Attempts: max(attempts, 1), FirstFailure: first, LastFailure: last}
	l, err := d.r.store.Park(ctx, d.getLease(), p, cfg.clock.Now())
	if err != nil {
		return outbox.Parked{}, fmt.Errorf("outbox: park bucket %d sequence %d: %w", d.b, e.Sequence, err)
	}
	d.setLease(l)
	d.head = max(d.head, e.Sequence)
	if d.cleaned == e.Sequence-1 {
		d.cleaned = e.Sequence
	}
	d.st.Parked++
	cfg.metrics.Batch(BatchStats{Bucket: d.b, Parked: 1, Err: cause, Class: class})
	cfg.logger.ErrorContext(ctx, "outbox: record parked in the dead letters; the bucket continues",
		"bucket", d.b, "sequence", e.Sequence, "message_id", e.Message.ID, "attempts", p.Attempts, "err", cause)
	return p, nil
}

// gap handles a missing sequence number at seq (head+1) while next, a later
// one, is present: wait until GapTimeout has passed since any relay first saw
// it, then fence [seq, next) so the bucket can move on. If a writer's commit
// lands first, its message is published in order; if the fence lands first,
// the writer's transaction is cancelled and resubmitted with a fresh sequence.
// The drain holds the lease.
func (d *drain) gap(ctx context.Context, seq, next int64) error {
	r := d.r
	cfg := &r.cfg
	now := cfg.clock.Now()
	l := d.getLease()
	if l.Gap != seq || l.Head < d.head {
		since := now
		if l.Gap == seq {
			since = l.GapSince
		}
		nl, err := r.store.Update(ctx, l, outbox.LeaseUpdate{Head: d.head, Cleaned: min(d.cleaned, d.head), Gap: seq, GapSince: since}, now)
		if err != nil {
			return fmt.Errorf("outbox: record gap at %d in bucket %d: %w", seq, d.b, err)
		}
		d.setLease(nl)
		l = nl
	}
	waited := now.Sub(l.GapSince)
	if waited >= cfg.gapTimeout && r.writtenElsewhere(d.b) {
		// A fence must win against the writer's put by a conditional
		// write in one region; here the writer is in another, and its
		// commit may not have replicated yet: a fence put now would win
		// last-writer-wins over it, and the message would be lost.
		return fmt.Errorf("outbox: bucket %d of region %s waits on sequence %d (for %v): a gap in a slice taken over from another region is never fenced (docs/design.md §14.4): %w",
			d.b, r.regionOf(d.b), seq, waited, outbox.ErrGapPending)
	}
	if waited >= cfg.gapTimeout {
		const maxFences = 100
		for s := seq; s < next && s < seq+maxFences; s++ {
			err := r.store.Fence(ctx, d.b, s, now)
			switch {
			case err == nil:
				d.st.Fenced++
				if cerr := d.inject(ctx, seam.DuringFence); cerr != nil {
					return cerr
				}
				cfg.logger.WarnContext(ctx, "outbox: fenced a sequence number nobody committed within GapTimeout", "bucket", d.b, "sequence", s, "waited", waited)
			case errors.Is(err, outbox.ErrAlreadyWritten):
				// The writer won the race; its message is read next.
			default:
				return fmt.Errorf("outbox: fence bucket %d sequence %d: %w", d.b, s, err)
			}
		}
		return nil
	}
	wait := min(cfg.gapPoll, cfg.gapTimeout-waited)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl)-cfg.deadlineMargin < wait {
		return fmt.Errorf("outbox: bucket %d waits on sequence %d for %v more: %w", d.b, seq, cfg.gapTimeout-waited, outbox.ErrGapPending)
	}
	t0 := time.Now()
	ok := r.sched.Sleep(ctx.Done(), wait)
	d.st.GapWait += time.Since(t0)
	if !ok {
		return ctx.Err()
	}
	return nil
}

// waitForResumer waits, before reading, until a relay that released the
// bucket and may still be resuming it can no longer publish (the window set
// when this relay acquired it): what it reads then is what that relay left.
func (d *drain) waitForResumer(ctx context.Context) error {
	wait := d.loc.notBefore.Sub(d.r.sched.Now())
	if wait <= 0 {
		return nil
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl)-d.r.cfg.deadlineMargin < wait {
		return fmt.Errorf("outbox: bucket %d may not be published for %v more (a relay that released it may still resume it): %w", d.b, wait, outbox.ErrDeadline)
	}
	d.st.ResumeWait += wait
	if !d.r.sched.Sleep(ctx.Done(), wait) {
		return outbox.ErrDeadline
	}
	return nil
}

// fenceHolders has a HolderFencer publisher fence the bucket's earlier
// holders once after each acquisition, before the first read under it
// (docs/design.md §7.3): a stalled holder's transaction cannot commit after
// this drain read the bucket. It comes after waitForResumer, so that a
// releaser still resuming within its window is not cut off mid-publish. It
// is bounded by the lease's publish cut-off, like a publish: nothing renews
// the lease meanwhile, so the lease is renewed when due before it (the
// wait for a resumer spent lease time) and after it: a slow fence must not
// leave the read and publish so little lease that they fail with
// ErrLeaseLost, and the next drain fence again. Until it succeeds the hold
// is not resumed (Relay.resumable).
func (d *drain) fenceHolders(ctx context.Context) error {
	f, ok := d.r.pub.(outbox.HolderFencer)
	if !ok || !d.loc.fenceDue {
		return nil
	}
	if err := d.renewIfDue(ctx); err != nil {
		return err
	}
	left := d.cutoff(d.getLease()).Sub(d.r.cfg.clock.Now())
	if left <= 0 {
		return fmt.Errorf("outbox: lease of bucket %d is past its publish cut-off before its earlier holders were fenced: %w", d.b, outbox.ErrLeaseLost)
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cut atomic.Bool
	deadline := d.r.sched.AfterFunc(left, func() {
		cut.Store(true)
		cancel()
	})
	err := f.FenceHolders(fctx, d.b)
	deadline.Stop()
	switch {
	case err != nil && cut.Load() && ctx.Err() == nil:
		return fmt.Errorf("outbox: fencing the earlier holders of bucket %d reached its lease's cut-off: %w", d.b, errors.Join(outbox.ErrLeaseLost, err))
	case err != nil:
		return fmt.Errorf("outbox: fence the earlier holders of bucket %d: %w", d.b, err)
	}
	d.loc.fenceDue, d.fenced = false, true
	return d.renewIfDue(ctx)
}

// recheck looks at the lease again, for a resumed drain whose last look is
// a quarter of ResumeWindow old: the drain publishes and marks only within
// half a window of its last look (windowEnd), so a look before each read
// keeps it going while nobody takes the bucket. If the lease is no longer
// released by this process's hold, the drain acquires it (or fails with
// ErrLeaseHeld).
func (d *drain) recheck(ctx context.Context) error {
	if d.held {
		return nil
	}
	now := d.r.sched.Now()
	if now.Sub(d.checkedAt) < d.r.cfg.resumeWindow/4 {
		return nil
	}
	l, err := d.r.store.ReadLease(ctx, d.b)
	if err != nil {
		return fmt.Errorf("outbox: read lease of bucket %d: %w", d.b, err)
	}
	if d.r.resumable(l, d.loc) && l.Epoch == d.getLease().Epoch {
		// Still ours (a sweeper may have advanced its head meanwhile).
		d.checkedAt = now
		d.setLease(l)
		d.head, d.cleaned = max(d.head, l.Head), max(d.cleaned, l.Cleaned)
		return nil
	}
	_, err = d.hold(ctx)
	return err
}

// renewIfDue renews a held lease when its renewal interval has passed, and
// fails with ErrLeaseLost when it is past its publish cut-off: a holder that
// stalled past it must not act on the bucket again.
func (d *drain) renewIfDue(ctx context.Context) error {
	if !d.held {
		return nil
	}
	cfg := &d.r.cfg
	now := cfg.clock.Now()
	l := d.getLease()
	if now.Before(l.Expires.Add(-(cfg.leaseDuration - cfg.renewInterval))) {
		return nil
	}
	nl, err := d.r.store.Renew(ctx, l, now, cfg.leaseDuration)
	if err != nil {
		if errors.Is(err, outbox.ErrLeaseLost) || !now.Before(d.cutoff(l)) {
			return fmt.Errorf("outbox: renew lease of bucket %d: %w", l.Bucket, errors.Join(outbox.ErrLeaseLost, err))
		}
		return fmt.Errorf("outbox: renew lease of bucket %d: %w", l.Bucket, err)
	}
	d.setLease(nl)
	return d.inject(ctx, seam.DuringRenewal)
}

// cutoff is when, by this relay's clock, a holder of l stops publishing:
// LeaseMargin for a cancelled publish to stop, plus MaxClockSkew for a
// contender whose clock runs ahead, before l expires.
func (d *drain) cutoff(l outbox.Lease) time.Time {
	return l.Expires.Add(-(d.r.cfg.leaseMargin + d.r.cfg.maxSkew))
}

// finish ends a drain that reached its goal. A held lease is released, with
// the wake count of the last complete read (ErrWoken: drain again). A resumed
// drain writes its head when it is due (docs/design.md, "resuming").
func (d *drain) finish(ctx context.Context) error {
	cfg := &d.r.cfg
	cctx, cancel := cleanupContext(ctx, d.r.cfg.leaseDuration)
	defer cancel()
	if d.held {
		l := d.getLease()
		l.Wake = d.wakeBase
		l.Process = cmp.Or(d.process, d.r.instance)
		// With the last batch's tombstones in flight (markBesideRelease):
		// cleaned stays below them until they landed.
		nl, err := d.r.store.Release(cctx, l, d.head, min(d.cleaned, d.head))
		merr := d.joinMark()
		if errors.Is(err, outbox.ErrWoken) {
			d.setLease(nl)
			return cmp.Or(merr, err)
		}
		if err != nil {
			return err
		}
		d.setLease(nl)
		d.loc.flushedAt = cfg.clock.Now()
		if merr != nil {
			// Released with the head: what did not land is a leftover for
			// the next drain, which marks it without publishing it again.
			d.held = false
			return merr
		}
		return nil
	}
	if d.r.mode == outbox.DeleteMode {
		d.flushBehind(ctx)
		return nil
	}
	d.flushResumed(ctx, cctx, false)
	return nil
}

// flushBehind is flushResumed in DeleteMode, on the way out of a resumed
// drain that finished: the head write is left in flight (one at a time per
// bucket) rather than waited for. In DeleteMode the head is a cache — the
// tombstones, which landed before it is sent, mark what was published — so
// nothing depends on when it lands or whether it does; Advance is
// conditional on nobody holding the bucket and on the head it read, so a
// late one lands only where it is still true, and never moves a head back.
func (d *drain) flushBehind(ctx context.Context) {
	cfg := &d.r.cfg
	if w := d.loc.flush; w != nil && !w.over(ctx, false) {
		return
	}
	d.loc.flush = nil
	l := d.getLease()
	now := cfg.clock.Now()
	if d.head <= l.Head || now.Sub(d.loc.flushedAt) < cfg.flushInterval {
		return
	}
	head, cleaned := d.head, min(d.cleaned, d.head)
	d.loc.flushedAt = now
	d.loc.flush = d.goWrite(ctx, func(wctx context.Context) error {
		_, err := d.r.store.Advance(wctx, l, head, cleaned, now)
		d.logFlush(ctx, head, err)
		return err
	})
}

// logFlush logs a resumed drain's head write that failed.
func (d *drain) logFlush(ctx context.Context, head int64, err error) {
	cfg := &d.r.cfg
	switch {
	case err == nil:
	case errors.Is(err, outbox.ErrLeaseHeld) || errors.Is(err, outbox.ErrLeaseLost):
		// The lease changed since the drain read it: another relay took
		// the bucket (then some messages may have gone out twice), or this
		// process's own earlier head write landed after the read. Either
		// way the stored head stands; in DeleteMode it is only a cache.
		cfg.logger.InfoContext(ctx, "outbox: a resumed drain's head write found the lease changed (taken by another relay, or an earlier head write of this one landed); the stored head stands", "bucket", d.b, "err", err)
	default:
		// The head is a cache in DeleteMode; in WatermarkMode a stale head
		// means the next drain publishes those messages again.
		cfg.logger.WarnContext(ctx, "outbox: could not write the bucket's head after a resumed drain", "bucket", d.b, "head", head, "err", err)
	}
}

// flushResumed writes the head of a resumed drain: always in WatermarkMode
// (its head is all that keeps what Kafka acknowledged from being published
// again), and in DeleteMode when HeadFlushInterval has passed or force is
// set. A write that fails leaves the stored head behind, never ahead.
func (d *drain) flushResumed(ctx, cctx context.Context, force bool) {
	cfg := &d.r.cfg
	l := d.getLease()
	now := cfg.clock.Now()
	if d.head <= l.Head || (d.r.mode == outbox.DeleteMode && !force && now.Sub(d.loc.flushedAt) < cfg.flushInterval) {
		return
	}
	nl, err := d.r.store.Advance(cctx, l, d.head, min(d.cleaned, d.head), now)
	if err == nil {
		d.setLease(nl)
		d.loc.flushedAt = now
	}
	d.logFlush(ctx, d.head, err)
}

// stop ends a drain that failed. A held lease is abandoned — its wake-ups
// stay for the next holder — unless the drain crashed (a dead process gives
// nothing up); a lease lost to another relay is left alone by the store.
func (d *drain) stop(ctx context.Context, err error) {
	var crash *seam.CrashError
	if errors.As(err, &crash) {
		return
	}
	if errors.Is(err, outbox.ErrLeaseLost) {
		// Lost to another relay, or past this drain's own cut-off while the
		// store may still name it the holder: give it up if it is still ours
		// (Abandon is conditional on the owner), so that contenders need not
		// wait for it to expire, with their wake-ups kept.
		d.st.LeaseLost = true
	}
	if merr := d.joinMark(); merr != nil {
		d.r.cfg.logger.WarnContext(ctx, "outbox: tombstones of a drain's last batch failed; the next drain marks them", "bucket", d.b, "err", merr)
	}
	cctx, cancel := cleanupContext(ctx, d.r.cfg.leaseDuration)
	defer cancel()
	if !d.held {
		// A resumed drain keeps what it decided: in WatermarkMode its head
		// is the only record of what Kafka acknowledged, so without this
		// write every failing resumed drain (a fatal publish error, the
		// deadline, a failed read) would be published again from the start,
		// and a drain too long for one invocation would never reach the
		// tail. Advance is conditional on nobody holding the bucket.
		d.flushResumed(ctx, cctx, true)
		return
	}
	l := d.getLease()
	l.Process = cmp.Or(d.process, d.r.instance)
	if aerr := d.r.store.Abandon(cctx, l, d.head, min(d.cleaned, d.head)); aerr != nil {
		d.r.cfg.logger.WarnContext(ctx, "outbox: could not give the lease up after a failed drain; it expires by itself", "bucket", d.b, "err", aerr)
	}
}

// inject consults the fault injector at p.
func (d *drain) inject(ctx context.Context, p seam.CrashPoint) error {
	f := d.r.cfg.hooks.Faults
	if f == nil {
		return nil
	}
	if err := f.At(ctx, p, d.b); err != nil {
		return &seam.CrashError{Point: p, Bucket: d.b, Err: err}
	}
	return nil
}
