package outbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// SweepReport summarises one Sweep.
type SweepReport struct {
	Live  int // live relays, this one included
	Share int // buckets this relay may drain in this sweep
	// Pending is the number of pending messages seen (each bucket's look is
	// bounded by the probe limit, so this is a lower bound when Truncated).
	Pending   int
	Truncated bool
	// Oldest is the creation time of the oldest pending message seen.
	Oldest time.Time
	// Buckets with pending messages, and what became of them.
	Ready   []int
	Drained []int
	Held    []int // held by another owner, which was woken to drain again
	Skipped []int // beyond this relay's fair share; left to the others
	// OutOfRange maps buckets outside 0..BucketCount-1 to the number of
	// messages seen in them: a writer uses another BucketCount.
	OutOfRange map[int]int
	Errors     map[int]error
}

// probeLimit bounds the items one bucket probe reads.
const probeLimit = 100

// OutOfRangeProbe is how far beyond BucketCount Sweep looks for stray
// messages: buckets BucketCount..max(2*BucketCount, 64)-1.
func OutOfRangeProbe(bucketCount int) int {
	return min(max(2*bucketCount, 64), MaxBucketCount)
}

// Sweep is one round of polling recovery, for a scheduled sweeper or a
// long-running relay: it heartbeats, looks at every bucket with one bounded
// read (no table scan), drains the buckets with pending messages up to its
// fair share of the live relays, and reports the backlog. It also looks at
// the buckets just above the configured range and reports messages there
// loudly: the returned error is then a *BucketRangeError.
//
// The store must implement BucketProbe.
func (r *Relay) Sweep(ctx context.Context) (SweepReport, error) {
	return r.sweep(ctx, true)
}

func (r *Relay) sweep(ctx context.Context, probeOutOfRange bool) (SweepReport, error) {
	rep := SweepReport{OutOfRange: map[int]int{}, Errors: map[int]error{}}
	probe, ok := r.store.(BucketProbe)
	if !ok {
		return rep, &OptionError{Option: "Store", Value: fmt.Sprintf("%T", r.store), Reason: "Sweep needs a store that implements outbox.BucketProbe"}
	}
	cfg := &r.cfg
	now := cfg.clock.Now()
	if err := r.store.Heartbeat(ctx, cfg.relayID, now, cfg.leaseDuration); err != nil {
		return rep, fmt.Errorf("outbox: heartbeat: %w", err)
	}
	live, err := r.store.LiveRelays(ctx, now, cfg.leaseDuration)
	if err != nil {
		return rep, fmt.Errorf("outbox: list live relays: %w", err)
	}
	share, rank := LiveShare(r.bucketCount, live, cfg.relayID)
	rep.Live, rep.Share = max(len(live), rank+1), share

	type look struct {
		bucket  int
		pending int
		oldest  time.Time
		lease   Lease
		err     error
	}
	upper := r.bucketCount
	if probeOutOfRange {
		upper = OutOfRangeProbe(r.bucketCount)
	}
	looks := make([]look, upper)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for b := range upper {
		wg.Add(1)
		sem <- struct{}{}
		go func(b int) {
			defer func() { <-sem; wg.Done() }()
			lk := look{bucket: b}
			after := int64(0)
			if b < r.bucketCount {
				lk.lease, lk.err = r.store.ReadLease(ctx, b)
				after = lk.lease.Cleaned
			}
			if lk.err == nil {
				lk.pending, lk.oldest, lk.err = probe.Peek(ctx, b, after, probeLimit)
			}
			looks[b] = lk
		}(b)
	}
	wg.Wait()

	for _, lk := range looks {
		switch {
		case lk.err != nil:
			rep.Errors[lk.bucket] = fmt.Errorf("outbox: probe bucket %d: %w", lk.bucket, lk.err)
			continue
		case lk.pending == 0:
			continue
		}
		rep.Pending += lk.pending
		rep.Truncated = rep.Truncated || lk.pending >= probeLimit
		if rep.Oldest.IsZero() || lk.oldest.Before(rep.Oldest) {
			rep.Oldest = lk.oldest
		}
		if lk.bucket >= r.bucketCount {
			rep.OutOfRange[lk.bucket] = lk.pending
			cfg.logger.ErrorContext(ctx, "outbox: messages in a bucket outside the configured range; a writer uses another BucketCount and these messages will not be relayed",
				"bucket", lk.bucket, "bucket_count", r.bucketCount, "pending_seen", lk.pending)
			continue
		}
		rep.Ready = append(rep.Ready, lk.bucket)
	}

	// Fair share: start at this relay's rank so live relays prefer disjoint
	// buckets, and prefer buckets nobody holds.
	n := r.bucketCount
	pos := func(b int) int { return ((b-rank*share)%n + n) % n }
	ready := append([]int(nil), rep.Ready...)
	sort.SliceStable(ready, func(i, j int) bool {
		hi, hj := heldAt(looks[ready[i]].lease, now), heldAt(looks[ready[j]].lease, now)
		if hi != hj {
			return !hi
		}
		return pos(ready[i]) < pos(ready[j])
	})
	if len(ready) > share {
		rep.Skipped = append(rep.Skipped, ready[share:]...)
		ready = ready[:share]
	}
	for b, err := range r.drainBuckets(ctx, ready, false) {
		if errors.Is(err, ErrLeaseHeld) {
			rep.Held = append(rep.Held, b)
		} else {
			rep.Errors[b] = err
		}
	}
	for _, b := range ready {
		if _, failed := rep.Errors[b]; !failed && !contains(rep.Held, b) {
			rep.Drained = append(rep.Drained, b)
		}
	}
	sort.Ints(rep.Drained)
	sort.Ints(rep.Held)
	sort.Ints(rep.Skipped)
	cfg.logger.InfoContext(ctx, "outbox: sweep", "live", rep.Live, "share", rep.Share, "pending", rep.Pending, "truncated", rep.Truncated,
		"oldest_age_s", ageSeconds(now, rep.Oldest), "ready", rep.Ready, "drained", rep.Drained, "held", rep.Held,
		"skipped", rep.Skipped, "errors", len(rep.Errors), "out_of_range", rep.OutOfRange)
	if len(rep.OutOfRange) > 0 {
		worst := -1
		for b := range rep.OutOfRange {
			worst = max(worst, b)
		}
		return rep, &BucketRangeError{Bucket: worst, BucketCount: r.bucketCount}
	}
	return rep, nil
}

func heldAt(l Lease, now time.Time) bool { return l.Owner != "" && l.Expires.After(now) }

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func ageSeconds(now, t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return max(0, now.Sub(t).Seconds())
}

// rangeProbeInterval is how often Run looks above the bucket range.
const rangeProbeInterval = time.Minute

// Run sweeps every PollInterval until ctx is done: a long-running relay for
// containers and tests. It looks for stray buckets above the range once a
// minute rather than on every sweep. Errors of one sweep are logged and the
// next sweep tries again; a misconfiguration (*BucketRangeError) is returned.
func (r *Relay) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.pollInterval)
	defer t.Stop()
	var lastRangeProbe time.Time
	for {
		probe := time.Since(lastRangeProbe) >= rangeProbeInterval
		if probe {
			lastRangeProbe = time.Now()
		}
		_, err := r.sweep(ctx, probe)
		var re *BucketRangeError
		if errors.As(err, &re) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			r.cfg.logger.ErrorContext(ctx, "outbox: sweep failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
