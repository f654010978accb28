package soak

import (
	"testing"
	"time"

	"github.com/dynakafka/outbox/internal/seam"
)

// last draws the last reach of every block.
func last(n int) int { return n - 1 }

// TestCrasherCrashesEveryReachedPoint: a point (or the stall) fires once in
// every block of ⌈1/chance⌉ reaches, at the drawn reach, so a run's
// MinEachFault check fails only on a point the relay did not reach often
// enough, not on the draw; with FaultRate 0 nothing crashes.
func TestCrasherCrashesEveryReachedPoint(t *testing.T) {
	c := &crasher{dice: &dice{intn: last, rate: 1}}
	var at []int
	for i := 1; i <= 40; i++ {
		if c.crashes(seam.AfterProduce) {
			at = append(at, i)
		}
	}
	// AfterProduce's chance is 0.06: blocks of 17 reaches (⌈16.7⌉).
	if len(at) != 2 || at[0] != 17 || at[1] != 34 {
		t.Fatalf("crashes at reaches %v, want [17 34]", at)
	}
	// A stall (StallChance's default 0.05) the same way, in blocks of 20,
	// counted apart from the crashes.
	stalls := 0
	for i := 1; i <= 20; i++ {
		if c.fires("relay:stall", 0.05) {
			stalls++
			if i != 20 {
				t.Fatalf("a stall at reach %d, want the 20th", i)
			}
		}
	}
	if stalls != 1 {
		t.Fatalf("stalls in 20 reaches: %d, want 1", stalls)
	}
	off := &crasher{dice: &dice{intn: last, rate: 0}}
	for range 1000 {
		if off.crashes(seam.AfterProduce) {
			t.Fatal("a crash with FaultRate 0")
		}
	}
}

// TestDiceFiresAtTheDrawnReach: the draw places the firing within its
// block (here the 4th reach of each block of 17), and FaultRate scales
// the chance (0.5 × 0.06: blocks of 34).
func TestDiceFiresAtTheDrawnReach(t *testing.T) {
	var blocks []int
	d := &dice{intn: func(n int) int { blocks = append(blocks, n); return 3 }, rate: 1}
	var at []int
	for i := 1; i <= 51; i++ {
		if d.fires("crash:mid-delete", 0.06) {
			at = append(at, i)
		}
	}
	if len(at) != 3 || at[0] != 4 || at[1] != 21 || at[2] != 38 {
		t.Fatalf("fired at reaches %v, want [4 21 38]", at)
	}
	half := &dice{intn: last, rate: 0.5}
	for i := 1; i <= 34; i++ {
		if half.fires("crash:mid-delete", 0.06) != (i == 34) {
			t.Fatalf("at FaultRate 0.5, reach %d fired wrongly (want only the 34th)", i)
		}
	}
	if len(blocks) != 3 || blocks[0] != 17 {
		t.Fatalf("drew in blocks %v, want three of 17", blocks)
	}
}

// TestDiceKeepsEachKindApart: every fault kind (a writer's crash, a Kafka
// error, a stream replay) has its own blocks, which another kind's firing
// does not touch, so a rare kind still fires once in every 1/chance of its
// own reaches.
func TestDiceKeepsEachKindApart(t *testing.T) {
	d := &dice{intn: last, rate: 1}
	var at []int
	for i := 1; i <= 100; i++ {
		d.fires("stream:duplicate", 0.3) // fires every 4th reach
		if d.fires("writer:crash", 0.02) {
			at = append(at, i)
		}
	}
	if len(at) != 2 || at[0] != 50 || at[1] != 100 {
		t.Fatalf("writer crashes at reaches %v, want [50 100]", at)
	}
}

// TestStoppedBeforeOffExcusesOnlyBucketsLeftAlone: a sweep that began
// within the relay's memory of a stop after the faults went off is
// excused only if every bucket it failed on is one it left alone as
// stopped recently (no publish tried with the faults off).
func TestStoppedBeforeOffExcusesOnlyBucketsLeftAlone(t *testing.T) {
	for _, c := range []struct {
		failed, skipped []int
		since           time.Duration
		want            bool
	}{
		{[]int{9}, []int{9}, time.Second, true},
		{[]int{9}, []int{9, 3}, 5 * time.Second, true},
		{[]int{9, 4}, []int{9}, time.Second, false},  // bucket 4 was tried and failed
		{[]int{9}, []int{9}, 7 * time.Second, false}, // past the relay's memory
		{[]int{9}, []int{9}, -time.Second, false},    // began before the faults went off
		{nil, nil, time.Second, false},
	} {
		if got := stoppedBeforeOff(c.failed, c.skipped, c.since); got != c.want {
			t.Errorf("failed %v, skipped %v, %v after: %v, want %v", c.failed, c.skipped, c.since, got, c.want)
		}
	}
}
