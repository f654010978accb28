package soak

import (
	"testing"

	"github.com/dynakafka/outbox/internal/seam"
)

// TestCrasherCrashesEveryReachedPoint: a point reached 1/chance times
// without its draw coming up crashes at the next reach, so a run's
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
