package soak

import (
	"testing"

	"github.com/dynakafka/outbox/internal/seam"
)

// TestCrasherCrashesEveryReachedPoint: a point (or the stall) reached
// 1/chance times without its draw coming up fires at that reach, so a run's
// MinEachFault check fails only on a point the relay did not reach often
// enough, not on the draw; with FaultRate 0 nothing crashes.
func TestCrasherCrashesEveryReachedPoint(t *testing.T) {
	never := func(float64) bool { return false }
	c := &crasher{chance: never, rate: 1}
	var at []int
	for i := 1; i <= 40; i++ {
		if c.crashes(seam.AfterProduce) {
			at = append(at, i)
		}
	}
	// AfterProduce's chance is 0.06: surely at the 17th reach (17 × 0.06 ≥ 1).
	if len(at) != 2 || at[0] != 17 || at[1] != 34 {
		t.Fatalf("crashes at reaches %v, want [17 34]", at)
	}
	// A stall (StallChance's default 0.05) the same way, at the 20th reach,
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
	off := &crasher{chance: never, rate: 0}
	for range 1000 {
		if off.crashes(seam.AfterProduce) {
			t.Fatal("a crash with FaultRate 0")
		}
	}
	always := &crasher{chance: func(float64) bool { return true }, rate: 1}
	if !always.crashes(seam.MidDelete) || !always.crashes(seam.MidDelete) {
		t.Fatal("a drawn crash did not crash")
	}
}
