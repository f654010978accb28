package sim

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestSchedulesRebucket runs seeded schedules of online BucketCount changes
// (rebucket.go): one or two changes (some back to the first count), writers
// that write per key and abandon attempts, 1–3 relays, a sweeper, and a
// changer that may crash at any step, its change then resumed or aborted by
// a writer past its deadline. Every committed message must be published and
// every key's first deliveries come in its writer's order. make sim runs
// -sim.schedules of them too.
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
	var committed, published, changes, aborted, crashed int
	var maxPause time.Duration
	for s := first; s < first+uint64(n); s++ {
		res, err := RunRebucket(s, false)
		if err != nil {
			t.Fatalf("seed %d: %v (config %+v)", s, err, res.Config)
		}
		if res.Failed() {
			t.Fatalf("seed %d: stranded %v, out of order %v (config %+v, committed %d, changes %d, aborted %d)",
				s, first5(res.Stranded), first5(res.OutOfOrder), res.Config, res.Committed, res.Changes, res.Aborted)
		}
		committed += res.Committed
		published += res.Published
		changes += res.Changes
		aborted += res.Aborted
		if res.Config.CrashAt != 0 {
			crashed++
		}
		maxPause = max(maxPause, res.MaxPause)
	}
	t.Logf("rebucket-sim: schedules=%d changes=%d aborted=%d crashed_changers=%d committed=%d published=%d max_pause=%v stranded=0 out_of_order=0",
		n, changes, aborted, crashed, committed, published, maxPause)
}

// The checker catches a change that flips without waiting for the drain.
func TestRebucketSimCatchesAFlipBeforeTheDrain(t *testing.T) {
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
	t.Fatal("no schedule of 200 failed with the drain wait skipped: the checker cannot see a reordering change")
}
