package outbox

import (
	"context"
	"fmt"
	"time"
)

// EpochGate is an optional Store capability (store/dynamo's and
// store/memory's Store have it): the relays' side of an online BucketCount
// change (docs/design.md §13). Writers go on at once under the new count,
// and stamp each message with the epoch its sequence number was reserved
// at (Entry.Epoch); a relay publishes a bucket's messages of the new epoch
// only once the old buckets whose keys they could share have decided
// every message of the old epoch.
type EpochGate interface {
	// GateOpen reports whether bucket's messages stamped with epoch may be
	// published: the config item's epoch is past epoch, or no old epoch
	// drains, or every old bucket of OldBucketsOf(bucket) decided every
	// sequence number up to its cut point (the last one reserved before
	// its counter moved to the new epoch). waiting names the old buckets
	// not drained yet (for the log and outbox status). A gate never closes
	// again once open.
	GateOpen(ctx context.Context, bucket int, epoch int64) (open bool, waiting []int, err error)
	// EndOldEpoch ends the old epoch stored (the config item as just read)
	// says drains, when every old bucket decided every number up to its
	// cut point: the config item's OldBucketCount and ChangeDeadline are
	// cleared, conditional on it still saying stored's epoch and old
	// count. ended reports that this call's write ended it; waiting names
	// the old buckets not drained yet. A change begun by a version before
	// the cut-over (stored.Frozen()) is aborted instead: the count stays,
	// at the next epoch. Nothing happens when stored shows neither.
	EndOldEpoch(ctx context.Context, stored Config) (ended bool, waiting []int, err error)
}

// OldBucketsOf returns the buckets of count oldCount whose keys can land
// in bucket under count newCount: a message's bucket is h mod count for a
// hash h that does not depend on the count, and h mod oldCount ≡ h mod
// newCount modulo g = gcd(oldCount, newCount), so they are the buckets
// b < oldCount with b ≡ bucket (mod g). For 8 → 16 that is one bucket
// (bucket mod 8); for 16 → 8, bucket and bucket+8; for 8 → 9, all eight.
func OldBucketsOf(bucket, oldCount, newCount int) []int {
	g := gcd(oldCount, newCount)
	var out []int
	for b := bucket % g; b < oldCount; b += g {
		out = append(out, b)
	}
	return out
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

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
	if g, ok := r.store.(EpochGate); ok {
		open, waiting, err = g.GateOpen(ctx, bucket, epoch)
	} else {
		// Without the drained check, only the config item can open it:
		// once the old epoch ended (or a later change began).
		var stored Config
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
	pending := fmt.Errorf("outbox: bucket %d's message %d of BucketCount epoch %d waits for old buckets %v to drain: %w", d.b, seq, epoch, waiting, ErrGatePending)
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
