package sim

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// schedules is how many seeded schedules TestSchedules runs: a few thousand
// in make test; `make sim` (or -sim.schedules, or OUTBOX_SIM_SCHEDULES) runs
// more.
var schedules = flag.Int("sim.schedules", 0, "schedules to run (default OUTBOX_SIM_SCHEDULES, or 3000; 300 with -short)")

// seed replays one schedule.
var seed = flag.Uint64("sim.seed", 0, "run only this seed")

// trace prints a replayed schedule's story.
var trace = flag.Bool("sim.trace", false, "with -sim.seed: log every store call and drain")

// TestSchedules runs seeded random schedules of 2-4 relays, writers that
// commit, abandon and fail, stream hints with targets, crashes, stalls,
// skewed clocks and publish faults, and no sweeper; after each, every
// committed message must have been published (or parked), first deliveries
// in sequence order. A failure prints its seed: go test ./internal/sim
// -run TestSchedules -sim.seed N replays it.
func TestSchedules(t *testing.T) {
	n := 3000
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_SIM_SCHEDULES")); err == nil && v > 0 {
		n = v
	}
	if testing.Short() {
		n = 300
	}
	if *schedules > 0 {
		n = *schedules
	}
	first := uint64(1)
	if *seed != 0 {
		first, n = *seed, 1
		if *trace {
			Trace = func(s string) { t.Log(s) }
			defer func() { Trace = nil }()
		}
	}
	var sum Result
	var finals, steps, overlaps, watermark int
	for s := first; s < first+uint64(n); s++ {
		res, err := Run(s)
		if err != nil {
			t.Fatalf("seed %d: %v (config %+v)", s, err, res.Config)
		}
		if res.Failed() {
			t.Fatalf("seed %d: stranded %v, out of order %v, overlapping publishes %d (config %+v, committed %d, crashes %d, stalls %d)",
				s, res.Stranded, res.OutOfOrder, res.Overlaps, res.Config, res.Committed, res.Crashes, res.Stalls)
		}
		sum.Committed += res.Committed
		sum.Published += res.Published
		sum.Parked += res.Parked
		sum.Crashes += res.Crashes
		sum.Stalls += res.Stalls
		steps += res.Steps
		overlaps += res.Overlaps
		if res.FinalDrain {
			finals++
		}
		if res.Config.Watermark {
			watermark++
		}
	}
	t.Logf("sim: schedules=%d watermark_mode=%d committed=%d published=%d parked=%d crashes=%d stalls=%d final_drains=%d overlaps_where_allowed=%d steps=%d stranded=0",
		n, watermark, sum.Committed, sum.Published, sum.Parked, sum.Crashes, sum.Stalls, finals, overlaps, steps)
}
