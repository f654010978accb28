package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ChangeEnder is an optional Store capability (store/dynamo's Store has
// it): ending an online BucketCount change whose deadline passed
// (docs/design.md §13). A relay that reads the config item (RefreshConfig,
// every full Sweep) and finds a change in progress past its deadline ends
// it through this, so that writers do not stay paused when the tool that
// began the change died.
type ChangeEnder interface {
	// EndExpiredChange aborts the change stored (the config item as just
	// read) says is in progress, when now is at or past its deadline: the
	// count stays, at the next epoch, and the frozen counters are thawed.
	// ended reports that this call ended it; false when no change is in
	// progress, its deadline is ahead, or another party ended it first.
	EndExpiredChange(ctx context.Context, stored Config, now time.Time) (ended bool, err error)
}

// ChangeSeen is what a relay saw of an online BucketCount change in
// progress when it read the config item.
type ChangeSeen struct {
	From, To int
	Deadline time.Time
	// Overdue is how far past its deadline the change was when seen (0:
	// within it, and left alone).
	Overdue time.Duration
	// Aborted: this relay ended the overdue change (the count stays From).
	Aborted bool
	// Err is why an overdue change could not be ended: it is still in
	// progress and writers stay paused (nil otherwise; with Aborted false
	// and Overdue > 0, another party ended it first).
	Err error
}

// ChangesAborted returns how many overdue BucketCount changes this relay
// ended (aborted) since NewRelay.
func (r *Relay) ChangesAborted() int64 { return r.changesAborted.Load() }

var errNoChangeEnder = errors.New("the store does not implement outbox.ChangeEnder")

// meetChange ends the change stored says is in progress when it is past
// its deadline, and returns the config item to adopt (read again after an
// abort) and what it saw (nil: no change in progress).
func (r *Relay) meetChange(ctx context.Context, stored Config) (Config, *ChangeSeen) {
	if !stored.Changing() {
		return stored, nil
	}
	now := r.cfg.clock.Now()
	seen := &ChangeSeen{From: stored.BucketCount, To: stored.NextBucketCount, Deadline: stored.ChangeDeadline}
	if now.Before(stored.ChangeDeadline) {
		return stored, seen
	}
	seen.Overdue = now.Sub(stored.ChangeDeadline)
	ender, ok := r.store.(ChangeEnder)
	if !ok {
		seen.Err = errNoChangeEnder
		return stored, seen
	}
	ended, err := ender.EndExpiredChange(ctx, stored, now)
	if err != nil {
		seen.Err = fmt.Errorf("outbox: abort the BucketCount change %d → %d, %s past its deadline: %w", seen.From, seen.To, seen.Overdue.Round(time.Millisecond), err)
		r.cfg.logger.ErrorContext(ctx, "outbox: a BucketCount change past its deadline could not be aborted; writers stay paused", "err", seen.Err)
		return stored, seen
	}
	if ended {
		seen.Aborted = true
		r.changesAborted.Add(1)
		r.cfg.logger.WarnContext(ctx, "outbox: aborted a BucketCount change past its deadline (its tool stopped, or the buckets did not drain); the count stays",
			"from", seen.From, "to", seen.To, "deadline", seen.Deadline, "overdue", seen.Overdue)
	}
	if after, err := r.store.Config(ctx); err == nil {
		return after, seen
	}
	return stored, seen
}
