package sim

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestSchedulesRebucket runs seeded schedules of online BucketCount changes
// by cut-over (rebucket.go): one or two changes (some back to the first
// count), writers that write per key, abandon attempts and never wait for
// a change, 1–3 engine relays gated by the memory store's EpochGate, a
// sweeper that ends drained old epochs, and a changer that may crash at
// any step (the writers then cut the counters they meet). Every committed
// message must be published and every key's first deliveries come in its
// writer's order. make sim runs -sim.schedules of them too.
func TestSchedulesRebucket(t *testing.T) {
	n := 300
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_SIM_SCHEDULES")); err == nil && v > 0 {
		n = v
	}
	if testing.Short() {
		n = 50
	}
	if *schedules > 0 {
		n = *schedules
	}
	first := uint64(1)
	if *seed != 0 {
		first, n = *seed, 1
	}
	var committed, published, changes, aborted, ended, crashed int
	var maxPause time.Duration
	for s := first; s < first+uint64(n); s++ {
		res, err := RunRebucket(s, false)
		if err != nil {
			t.Fatalf("seed %d: %v (config %+v)", s, err, res.Config)
		}
		if res.Failed() {
			t.Fatalf("seed %d: stranded %v, out of order %v (config %+v, committed %d, changes %d, aborted %d, ended %d)",
				s, first5(res.Stranded), first5(res.OutOfOrder), res.Config, res.Committed, res.Changes, res.Aborted, res.Ended)
		}
		committed += res.Committed
		published += res.Published
		changes += res.Changes
		aborted += res.Aborted
		ended += res.Ended
		if res.Config.CrashAt != 0 {
			crashed++
		}
		maxPause = max(maxPause, res.MaxPause)
	}
	t.Logf("rebucket-sim: schedules=%d changes=%d aborted_before_flip=%d old_epochs_ended=%d crashed_changers=%d committed=%d published=%d max_pause=%v stranded=0 out_of_order=0",
		n, changes, aborted, ended, crashed, committed, published, maxPause)
}

// The checker catches an open gate: relays that publish a new epoch's
// messages without waiting for the old buckets that share their keys.
func TestRebucketSimCatchesAnOpenGate(t *testing.T) {
	for s := uint64(1); s <= 200; s++ {
		res, err := RunRebucket(s, true)
		if err != nil {
			t.Fatalf("seed %d: %v", s, err)
		}
		if res.Failed() {
			t.Logf("seed %d: stranded %v, out of order %v", s, first5(res.Stranded), first5(res.OutOfOrder))
			return
		}
	}
	t.Fatal("no schedule of 200 failed with every epoch gate open: the checker cannot see a reordering change")
}
