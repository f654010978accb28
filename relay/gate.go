package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/dynakafka/outbox"
)

// gateLogInterval is how often, at most, a drain held back by an epoch gate
// logs the old buckets it waits for.
const gateLogInterval = time.Minute

// gateOpen reports whether the drain may publish messages of bucket
// stamped with epoch: at or below the epoch every bucket may publish by
// the config item this relay last read (Config.OpenEpoch), or below one
// this process saw the bucket's gate open for, at once; otherwise the
// store's EpochGate is asked (one config read; during a change, the drained
// check of the old buckets too). A store without the capability is asked
// for its config item: the gate is open when it shows no old epoch
// draining, or a later epoch.
func (r *Relay) gateOpen(ctx context.Context, loc *local, bucket int, epoch int64) (bool, []int, error) {
	if epoch <= r.openEpoch.Load() || epoch <= loc.gateOpen.Load() {
		return true, nil, nil
	}
	var (
		open    bool
		waiting []int
		err     error
	)
	if g, ok := r.store.(outbox.EpochGate); ok {
		open, waiting, err = g.GateOpen(ctx, bucket, epoch)
	} else {
		// Without the drained check, only the config item can open it:
		// once the old epoch ended (or a later change began).
		var stored outbox.Config
		if stored, err = r.store.Config(ctx); err == nil {
			r.adopt(stored)
			open = epoch <= stored.OpenEpoch()
		}
	}
	if err != nil {
		return false, nil, fmt.Errorf("outbox: ask bucket %d's gate for BucketCount epoch %d: %w", bucket, epoch, err)
	}
	if open {
		for {
			cur := loc.gateOpen.Load()
			if epoch <= cur || loc.gateOpen.CompareAndSwap(cur, epoch) {
				break
			}
		}
	}
	return open, waiting, nil
}

// gate handles a read whose first undecided message, at head+1, is stamped
// with an epoch whose gate this process has not seen open: it asks the
// gate; open, the drain goes on at once (the next read publishes it); not
// open, it waits as for a gap — GapPollInterval, then the drain reads and
// asks again — while the deadline allows and for at most GapTimeout in one
// drain, then stops with ErrGatePending (the stream's redelivery and the
// sweeps try again).
func (d *drain) gate(ctx context.Context, seq, epoch int64) error {
	r := d.r
	cfg := &r.cfg
	open, waiting, err := r.gateOpen(ctx, d.loc, d.b, epoch)
	if err != nil || open {
		d.gateSince = time.Time{}
		return err
	}
	now := r.sched.Now()
	if d.gateSince.IsZero() {
		d.gateSince = now
	}
	if at := d.loc.gateLogged; at.IsZero() || now.Sub(at) >= gateLogInterval {
		d.loc.gateLogged = now
		cfg.logger.InfoContext(ctx, "outbox: the bucket's messages of a new BucketCount epoch wait until the old buckets that share their keys are drained",
			"bucket", d.b, "sequence", seq, "epoch", epoch, "waiting_for", waiting)
	}
	pending := fmt.Errorf("outbox: bucket %d's message %d of BucketCount epoch %d waits for old buckets %v to drain: %w", d.b, seq, epoch, waiting, outbox.ErrGatePending)
	wait := cfg.gapPoll
	if dl, ok := ctx.Deadline(); ok && time.Until(dl)-cfg.deadlineMargin < wait || now.Sub(d.gateSince)+wait > cfg.gapTimeout {
		return pending
	}
	t0 := time.Now()
	ok := r.sched.Sleep(ctx.Done(), wait)
	d.st.GateWait += time.Since(t0)
	if !ok {
		return ctx.Err()
	}
	return nil
}
