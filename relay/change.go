package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/dynakafka/outbox"
)

// ChangeSeen is what a relay's full sweep saw of an online BucketCount
// change whose old epoch still drained when it read the config item.
type ChangeSeen struct {
	// From is the old epoch's count, To the count in force, Epoch the new
	// epoch.
	From, To int
	Epoch    int64
	Deadline time.Time
	// Completed: this sweep found the old epoch drained and ended it.
	Completed bool
	// Waiting names the old buckets not yet drained (when known).
	Waiting []int
	// Overdue is how far past its deadline the old epoch still drained
	// after the sweep (0: within it, or ended). Its buckets' residue
	// classes' new messages wait meanwhile (a stopped relay, a stuck
	// bucket: outbox status names them).
	Overdue time.Duration
	// Err is why the sweep could not look (nil otherwise).
	Err error
}

// ChangesCompleted returns how many online BucketCount changes this relay
// completed since New: it found their old epoch drained and ended it
// (or aborted a change begun by a version before the cut-over).
func (r *Relay) ChangesCompleted() int64 { return r.changesCompleted.Load() }

// endOldEpoch ends the old epoch stored says drains when every old bucket
// has drained (EpochGate.EndOldEpoch), and returns the config item to adopt
// (read again after it ended one) and what it saw (nil: no old epoch
// drains). A store without EpochGate is only reported on.
func (r *Relay) endOldEpoch(ctx context.Context, stored outbox.Config) (outbox.Config, *ChangeSeen) {
	if !stored.Draining() && !stored.Frozen() {
		return stored, nil
	}
	seen := &ChangeSeen{From: stored.OldBucketCount, To: stored.BucketCount, Epoch: stored.BucketEpoch, Deadline: stored.ChangeDeadline}
	if stored.Frozen() {
		seen.From, seen.To, seen.Epoch = stored.BucketCount, stored.NextBucketCount, stored.BucketEpoch+1
	}
	g, ok := r.store.(outbox.EpochGate)
	if !ok {
		seen.Err = fmt.Errorf("outbox: the store does not implement outbox.EpochGate: the old epoch of the BucketCount change %d → %d is ended by its tool or the sweeper", seen.From, seen.To)
	} else {
		ended, waiting, err := g.EndOldEpoch(ctx, stored)
		seen.Completed, seen.Waiting = ended, waiting
		if err != nil {
			seen.Err = fmt.Errorf("outbox: end the old epoch of the BucketCount change %d → %d: %w", seen.From, seen.To, err)
		}
	}
	if seen.Completed {
		r.changesCompleted.Add(1)
		r.cfg.logger.InfoContext(ctx, "outbox: the old BucketCount epoch drained; the change is complete", "from", seen.From, "to", seen.To, "epoch", seen.Epoch)
		if after, err := r.store.Config(ctx); err == nil {
			return after, seen
		}
		return stored, seen
	}
	if now := r.cfg.clock.Now(); !stored.ChangeDeadline.IsZero() && now.After(stored.ChangeDeadline) {
		seen.Overdue = now.Sub(stored.ChangeDeadline)
		r.cfg.logger.WarnContext(ctx, "outbox: the old BucketCount epoch has not drained by the change's deadline; the new messages of these buckets' keys wait",
			"from", seen.From, "to", seen.To, "waiting_for", seen.Waiting, "overdue", seen.Overdue)
	}
	return stored, seen
}
