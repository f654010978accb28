package relay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/dynakafka/outbox"
)

// stuckInterval is how often a stopped bucket is logged and recorded in
// the store, at most, per bucket and process.
const stuckInterval = time.Minute

// stoppedRetry is how long a sweep (Relay.Run, Relay.Sweep) leaves a bucket
// alone after a drain stopped it with a Fatal error, or PollInterval if that
// is longer, as long as the message it stopped at is still the first
// pending one (an operator's park moves the head, and the relay drains the
// rest at its next sweep, as outbox park says). Retrying it every sweep would hold its lease for most of the
// time at a short PollInterval, so that outbox park and outbox drain would
// find it held (ErrLeaseHeld); this way the lease is free for all but one
// short attempt every stoppedRetry, and a fixed cause (a topic created
// again) is still picked up within stoppedRetry. DrainBucket, stream hints
// and wake-ups are not held back.
const stoppedRetry = 5 * time.Second

// stoppedError is a drain that stopped at a message because of a permanent
// topic- or cluster-wide error; the drain logged it (rate-limited), so the
// relay does not log it again. It matches what it wraps.
type stoppedError struct{ err error }

func (e *stoppedError) Error() string { return e.err.Error() }
func (e *stoppedError) Unwrap() error { return e.err }

// stopped handles a permanent topic- or cluster-wide error (class Fatal) at
// e, the entry at head+1: it parks e when ParkStuckAfter has passed since a
// relay first saw the bucket stopped there, and otherwise records why the
// bucket stopped on its lease (StuckRecorder) and logs it, each at most once
// per stuckInterval per bucket and process (the log line carries how many
// failures it stands for), and returns perr wrapped in a *stoppedError.
func (d *drain) stopped(ctx context.Context, e outbox.Entry, perr error) error {
	cfg := &d.r.cfg
	loc := d.loc
	now := cfg.clock.Now()
	s := loc.stuck
	if s.Sequence != e.Sequence {
		s = outbox.Stuck{Sequence: e.Sequence, Since: now}
		loc.recordedAt, loc.loggedAt, loc.unlogged = time.Time{}, time.Time{}, 0
	}
	if ls := d.getLease().Stuck; ls.Sequence == e.Sequence && !ls.Since.IsZero() && ls.Since.Before(s.Since) {
		// Another process (or an earlier life of this one) saw it first.
		s.Since, s.Count = ls.Since, max(s.Count, ls.Count)
	}
	s.MessageID, s.Topic, s.Class = e.Message.ID, e.Message.Topic, outbox.Fatal
	cause := perr
	if pe := (*outbox.PublishError)(nil); errors.As(perr, &pe) && pe.Err != nil {
		cause = pe.Err // the bucket, sequence and id are fields of their own
	}
	s.Reason = clipReason(cause.Error(), outbox.MaxStuckReason)
	s.Count++
	s.Last = now
	loc.stuck = s
	loc.unlogged++
	rec, canRecord := d.r.store.(outbox.StuckRecorder)
	if cfg.parkStuckAfter > 0 && canRecord && e.Message.ID != "" && now.Sub(s.Since) >= cfg.parkStuckAfter {
		// An undecodable item (no ID) is not parked: this relay cannot
		// read it, a newer one may.
		if stale, err := d.hold(ctx); stale || err != nil {
			return err // read again under the lease; the message fails again, and is parked then
		}
		cause := fmt.Errorf("parked by the relay after its bucket was stopped for %v (ParkStuckAfter %v): %w",
			now.Sub(s.Since).Round(time.Second), cfg.parkStuckAfter, perr)
		if _, err := d.park(ctx, e, cause, outbox.Fatal, s.Since, now, int(s.Count)); err != nil {
			return err
		}
		loc.stuck = outbox.Stuck{}
		loc.retryAt.Store(0)
		d.failures, d.isolate = 0, false
		return nil
	}
	loc.stopErr.Store(&stoppedError{err: perr})
	loc.retrySeq.Store(e.Sequence)
	loc.retryAt.Store(now.Add(max(stoppedRetry, cfg.pollInterval)).UnixNano())
	if canRecord && (loc.recordedAt.IsZero() || now.Sub(loc.recordedAt) >= stuckInterval) {
		if err := rec.RecordStuck(ctx, d.b, s); err != nil {
			cfg.logger.WarnContext(ctx, "outbox: could not record why the bucket stopped", "bucket", d.b, "err", err)
		} else {
			loc.recordedAt = now
		}
	}
	if loc.loggedAt.IsZero() || now.Sub(loc.loggedAt) >= stuckInterval {
		cfg.logger.ErrorContext(ctx, "outbox: bucket stopped by a permanent topic- or cluster-wide error; it stays stopped until the cause is fixed "+
			"or the message is parked (outbox park), logged at most once a minute",
			"bucket", d.b, "sequence", e.Sequence, "message_id", e.Message.ID, "topic", e.Message.Topic,
			"failures", loc.unlogged, "stopped_for", now.Sub(s.Since).Round(time.Millisecond), "err", perr)
		loc.loggedAt, loc.unlogged = now, 0
	}
	return &stoppedError{perr}
}

// clipReason cuts s to at most n bytes on a rune boundary.
func clipReason(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// ParkError is Relay.Park refusing to park: the bucket has nothing pending,
// waits on a gap, or the sequence named is not its first pending message.
// Nothing was written.
type ParkError struct {
	Bucket   int
	Sequence int64 // as asked (0: the head)
	// FirstPending is the bucket's first pending message, 0 when none.
	FirstPending int64
	Reason       string
}

func (e *ParkError) Error() string {
	what := "its first pending message"
	if e.Sequence != 0 {
		what = fmt.Sprintf("sequence %d", e.Sequence)
	}
	return fmt.Sprintf("outbox: park bucket %d, %s: %s", e.Bucket, what, e.Reason)
}

// Park moves a pending message of bucket to the dead letters, so that the
// rest of the bucket can flow: seq, which must be the bucket's first pending
// message (everything before it published, fenced or parked), or with seq 0
// whatever that first message is. It is the operator's way out of a bucket
// stopped by a permanent topic-wide error (outbox park); the message keeps
// its id and can be replayed once the cause is fixed (dynamo.ReplayParked,
// outbox replay), behind what was enqueued since.
//
// Park follows the lease protocol of a drain: it acquires the bucket's lease
// (ErrLeaseHeld when another relay holds it; a wake-up was left, and the
// holder drains the bucket again before it lets go), waits ResumeWindow when
// another relay released it last (it may still be resuming it), parks with
// the store's transaction conditional on holding the lease with head at
// seq-1, and gives the lease up keeping its wake-ups. It publishes nothing;
// the bucket's next drain publishes the rest. reason is kept with the
// message, followed by the reason the bucket was stopped, when one was
// recorded. A *ParkError when there is nothing to park there; nothing is
// written then.
func (r *Relay) Park(ctx context.Context, bucket int, seq int64, reason string) (outbox.Parked, error) {
	if n := r.BucketSpan(); bucket < 0 || bucket >= n {
		return outbox.Parked{}, &outbox.BucketRangeError{Bucket: bucket, BucketCount: n}
	}
	if seq < 0 {
		return outbox.Parked{}, &ParkError{Bucket: bucket, Sequence: seq, Reason: "a sequence number is positive (0: the first pending message)"}
	}
	loc := r.local(bucket)
	if err := r.takeTurn(ctx, loc); err != nil {
		return outbox.Parked{}, err
	}
	defer func() { <-loc.turn }()
	wctx, cancel := r.workContext(ctx)
	defer cancel()
	d := &drain{r: r, b: bucket, st: &DrainStats{Bucket: bucket}, loc: loc}
	if err := d.acquire(wctx); err != nil {
		return outbox.Parked{}, err
	}
	p, err := d.parkFirst(wctx, seq, reason)
	d.stop(ctx, err)
	if err == nil {
		loc.stuck = outbox.Stuck{}
		loc.retryAt.Store(0)
	}
	return p, err
}

// parkFirst parks the first pending message (seq 0) or seq if it is that
// message. The drain holds the lease.
func (d *drain) parkFirst(ctx context.Context, seq int64, reason string) (outbox.Parked, error) {
	if err := d.waitForResumer(ctx); err != nil {
		return outbox.Parked{}, err
	}
	e, err := d.firstPending(ctx, seq)
	if err != nil {
		return outbox.Parked{}, err
	}
	if seq != 0 && e.Sequence != seq {
		why := fmt.Sprintf("it is not the first pending message, %d is (park that first, or use the head)", e.Sequence)
		if seq < e.Sequence {
			why = fmt.Sprintf("it is decided already (published, fenced or parked); the first pending message is %d", e.Sequence)
		}
		return outbox.Parked{}, &ParkError{Bucket: d.b, Sequence: seq, FirstPending: e.Sequence, Reason: why}
	}
	now := d.r.cfg.clock.Now()
	first, attempts, why := now, 1, reason
	if why == "" {
		why = "parked by an operator"
	}
	if st := d.getLease().Stuck; st.Sequence == e.Sequence {
		first, attempts = st.Since, int(st.Count)
		why += "; the bucket was stopped: " + st.Reason
	}
	return d.park(ctx, e, errors.New(why), outbox.Fatal, first, now, attempts)
}

// firstPending reads the bucket from its cleaned mark to its first pending
// entry (a message, or an item that cannot be published), passing over
// fences and tombstones after head.
func (d *drain) firstPending(ctx context.Context, seq int64) (outbox.Entry, error) {
	cfg := &d.r.cfg
	for {
		if d.r.pastDeadline(ctx) {
			return outbox.Entry{}, outbox.ErrDeadline
		}
		bt, err := d.read(ctx)
		if err != nil {
			return outbox.Entry{}, err
		}
		// Parking publishes nothing: no epoch gate holds it back.
		classify(bt, d.head, cfg.batchSize, cfg.maxMessageBytes, cfg.headers, false, math.MaxInt64)
		for _, e := range bt.run {
			if !e.Fence {
				return e, nil
			}
			d.head = e.Sequence
		}
		switch {
		case bt.bad != nil:
			return *bt.bad, nil
		case bt.gapAt != 0:
			return outbox.Entry{}, &ParkError{Bucket: d.b, Sequence: seq, Reason: fmt.Sprintf(
				"sequence %d is missing (reserved, not committed): the relays fence it after GapTimeout; nothing before it is pending", bt.gapAt)}
		case bt.end:
			return outbox.Entry{}, &ParkError{Bucket: d.b, Sequence: seq, Reason: "nothing is pending in the bucket"}
		}
		d.cleaned = max(d.cleaned, min(d.head, bt.seenThrough))
	}
}
