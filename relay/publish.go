package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/seam"
)

// publish produces msgs (alone: msgs[0] alone, see Isolator). A resumed
// drain publishes under the caller's context. A held drain publishes under
// its lease: a watchdog renews the lease every LeaseRenewInterval, and the
// publish is cancelled at the lease's cut-off (LeaseMargin + MaxClockSkew
// before it expires, by this relay's clock) unless a renewal moved it. If
// the lease is lost, or cannot be renewed before the cut-off, the publisher
// aborts what it has not sent and ErrLeaseLost is returned.
func (d *drain) publish(ctx context.Context, msgs []outbox.Message, alone bool) (int, error) {
	call := func(ctx context.Context) (int, error) {
		if iso, ok := d.r.pub.(outbox.Isolator); ok && alone {
			if err := iso.PublishAlone(ctx, msgs[0]); err != nil {
				return 0, err
			}
			return 1, nil
		}
		return d.r.pub.Publish(ctx, msgs)
	}
	if alone {
		msgs = msgs[:1]
	}
	cfg := &d.r.cfg
	if !d.held {
		return d.publishResumed(ctx, msgs, call)
	}

	l0 := d.getLease()
	now := cfg.clock.Now()
	if !now.Before(d.cutoff(l0)) {
		// Stalled since the last renewal (e.g. in a slow read): the lease
		// may be taken over any moment. Publish nothing.
		return 0, fmt.Errorf("outbox: lease of bucket %d is past its publish cut-off: %w", d.b, outbox.ErrLeaseLost)
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &publishWatch{cancel: cancel, done: make(chan struct{})}
	// The cut-off runs on the runtime's timer, by the monotonic clock, so it
	// fires even if the watchdog is stuck in a renewal; every successful
	// renewal moves it.
	deadline := d.r.sched.AfterFunc(d.cutoff(l0).Sub(now), func() {
		w.fail(fmt.Errorf("outbox: publish of bucket %d reached its lease's cut-off: %w", d.b, outbox.ErrLeaseLost))
	})
	wait := d.r.sched.Go(func() { d.renewDuring(ctx, pctx, w, deadline) })
	acked, err := call(pctx)
	close(w.done)
	wait()
	deadline.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lost != nil {
		return min(max(acked, 0), len(msgs)), w.lost
	}
	return checkAcked(acked, err)(len(msgs))
}

// publishWatch is a held publish's watch: the first reason it was
// cancelled (the lease's cut-off, a lost or failed renewal), and done,
// closed when the publish returned.
type publishWatch struct {
	mu     sync.Mutex
	lost   error
	cancel context.CancelFunc
	done   chan struct{}
}

// fail records err, unless a reason is already recorded, and cancels the
// publish.
func (w *publishWatch) fail(err error) {
	w.mu.Lock()
	if w.lost == nil {
		w.lost = err
	}
	w.mu.Unlock()
	w.cancel()
}

// renewDuring is a held publish's watchdog: it renews the lease every
// LeaseRenewInterval until the publish returns (w.done), moving the
// cut-off (deadline) with each renewal; a lost lease fails the publish.
func (d *drain) renewDuring(ctx, pctx context.Context, w *publishWatch, deadline seam.Timer) {
	cfg := &d.r.cfg
	for {
		l := d.getLease()
		now := cfg.clock.Now()
		wait := l.Expires.Add(-(cfg.leaseDuration - cfg.renewInterval)).Sub(now)
		if wait <= 0 {
			// A renewal failed: try again soon, until the cut-off.
			wait = max(cfg.renewInterval/10, time.Millisecond)
		}
		if !d.r.sched.Sleep(w.done, wait) {
			return
		}
		// A renewal that cannot land before the cut-off is of no use:
		// bound it, so a store that stopped answering does not hold
		// the drain once the publish was cancelled.
		rctx, rcancel := context.WithTimeout(ctx, max(d.cutoff(l).Sub(cfg.clock.Now()), time.Millisecond))
		nl, err := d.r.store.Renew(rctx, l, cfg.clock.Now(), cfg.leaseDuration)
		rcancel()
		if err == nil {
			d.setLease(nl)
			if pctx.Err() == nil {
				deadline.Reset(d.cutoff(nl).Sub(cfg.clock.Now()))
			}
			if cerr := d.inject(ctx, seam.DuringRenewal); cerr != nil {
				w.fail(cerr)
				return
			}
			continue
		}
		if errors.Is(err, outbox.ErrLeaseLost) || ctx.Err() != nil {
			w.fail(fmt.Errorf("outbox: renew lease of bucket %d during publish: %w", d.b, errors.Join(outbox.ErrLeaseLost, err)))
			return
		}
		cfg.logger.WarnContext(ctx, "outbox: lease renewal failed during publish; retrying", "bucket", d.b, "err", err)
	}
}

// errResumeWindow: a resumed drain's publish reached the end of its window.
var errResumeWindow = errors.New("outbox: a resumed publish reached the end of its window")

// publishResumed publishes for a resumed drain, within its window
// (underWindow).
func (d *drain) publishResumed(ctx context.Context, msgs []outbox.Message, call func(context.Context) (int, error)) (int, error) {
	acked, expired, err := d.underWindow(ctx, call)
	if expired {
		return min(max(acked, 0), len(msgs)), errResumeWindow
	}
	return checkAcked(acked, err)(len(msgs))
}

// underWindow runs f for a resumed drain: its publish and its marks. Its
// bound is half a ResumeWindow after the drain's last look at the lease
// that found it still released by this process's hold (windowEnd); a
// watchdog looks again every quarter window and moves the bound, so f runs
// as long as it needs while nobody takes the bucket, and is cancelled half
// a window before a relay that did may read or publish it (docs/design.md
// §4.3). expired reports that the bound cancelled f (and not ctx).
func (d *drain) underWindow(ctx context.Context, f func(context.Context) (int, error)) (n int, expired bool, err error) {
	cfg := &d.r.cfg
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	left := d.windowEnd().Sub(d.r.sched.Now())
	if left <= 0 {
		// Over before f began: f runs on a context already ended, so that
		// the store or publisher under it sees the cut at once (nothing
		// is sent) rather than not at all: the harnesses' attribution
		// takes what this drain published and could not mark as at risk
		// from this moment, before an acquirer reads the bucket.
		cancel()
		n, err := f(pctx)
		return n, true, errors.Join(errResumeWindow, err)
	}
	var over atomic.Bool
	deadline := d.r.sched.AfterFunc(left, func() {
		over.Store(true)
		cancel()
	})
	done := make(chan struct{})
	wait := d.r.sched.Go(func() {
		for {
			if !d.r.sched.Sleep(done, d.checkedAt.Add(cfg.resumeWindow/4).Sub(d.r.sched.Now())) {
				return
			}
			checked := d.r.sched.Now()
			rctx, rcancel := context.WithTimeout(ctx, max(d.windowEnd().Sub(checked), time.Millisecond))
			l, err := d.r.store.ReadLease(rctx, d.b)
			rcancel()
			if err != nil || !d.r.resumable(l, d.loc) || l.Epoch != d.getLease().Epoch {
				if err != nil {
					cfg.logger.WarnContext(ctx, "outbox: cannot look at the lease of a bucket being resumed; its publish stops at the window's end", "bucket", d.b, "err", err)
				}
				return // the deadline stands
			}
			d.checkedAt = checked
			if pctx.Err() != nil {
				return
			}
			deadline.Reset(d.windowEnd().Sub(d.r.sched.Now()))
		}
	})
	n, err = f(pctx)
	close(done)
	wait()
	deadline.Stop()
	return n, over.Load() && ctx.Err() == nil, err
}

// windowEnd is when a resumed drain's publishes and marks must be over:
// half a ResumeWindow after its last look at the lease that found it still
// released by this process's hold. Whatever it cancels then returns within
// the other half (the publisher's AbandonGrace), so everything it decided
// on that look has landed ResumeWindow after the look was sent, before any
// relay that acquired the bucket since reads it.
func (d *drain) windowEnd() time.Time {
	return d.checkedAt.Add(d.r.cfg.resumeWindow / 2)
}

// checkAcked validates a publisher's answer for n messages.
func checkAcked(acked int, err error) func(n int) (int, error) {
	return func(n int) (int, error) {
		if acked < 0 || acked > n {
			return 0, fmt.Errorf("outbox: publisher returned acked=%d for %d messages", acked, n)
		}
		if err == nil && acked < n {
			return acked, fmt.Errorf("outbox: publisher acknowledged %d of %d messages without an error", acked, n)
		}
		return acked, err
	}
}
