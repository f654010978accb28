package relay_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/seam"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// crashOnce crashes the first time the drain reaches point.
type crashOnce struct {
	point seam.CrashPoint
	fired atomic.Int32
}

func (c *crashOnce) At(ctx context.Context, p seam.CrashPoint, bucket int) error {
	if p == c.point && c.fired.Add(1) == 1 {
		return errors.New("kill -9")
	}
	return nil
}

// Every crash point: the crashed relay keeps its lease (it is dead), another
// relay takes the bucket over after expiry, and every message is published,
// in order; only a crash after produce duplicates (that batch).
func TestCrashPoints(t *testing.T) {
	for _, point := range seam.CrashPoints {
		t.Run(string(point), func(t *testing.T) {
			s := memory.New(1)
			clk := &fakeClock{step: time.Millisecond}
			fill(t, s, 0, 1, 2, 3, 5, 6) // 4 is an abandoned reservation: a gap to fence
			fill(t, s, 0, span(7, 40)...)
			p := &recorder{}
			inj := &crashOnce{point: point}
			// Renewal is due on every batch (interval 1ns), so the renewal
			// point is reached; the gap is fenced at once.
			common := []relay.Option{relay.WithClock(clk), relay.DeadlineMargin(0), relay.BatchSize(10),
				relay.GapTimeout(5 * time.Millisecond), relay.GapPollInterval(time.Millisecond), relay.LeaseRenewInterval(time.Nanosecond)}
			crashing := newRelay(t, s, p, append(common, relay.RelayID("crashing"), seam.With(seam.Hooks{Faults: inj}).(relay.Option))...)
			_, err := crashing.DrainBucket(ctxFor(t, 5*time.Second), 0)
			var ce *seam.CrashError
			if !errors.As(err, &ce) || ce.Point != point {
				t.Fatalf("err = %v, want a crash at %s", err, point)
			}
			if l := s.Lease(0); l.Owner != "crashing" {
				t.Fatalf("a crashed relay released its lease: %+v", l)
			}
			survivor := newRelay(t, s, p, append(common, relay.RelayID("survivor"))...)
			// Before expiry, with no time to wait: a wake-up.
			if _, err := survivor.DrainBucket(ctxFor(t, 20*time.Millisecond), 0); !errors.Is(err, outbox.ErrLeaseHeld) {
				t.Fatalf("before expiry: %v, want ErrLeaseHeld", err)
			}
			clk.Advance(31 * time.Second)
			if _, err := survivor.DrainBucket(ctxFor(t, 5*time.Second), 0); err != nil {
				t.Fatal(err)
			}
			seen := map[int64]int{}
			var first []int64
			for _, q := range p.seqs(0) {
				if seen[q]++; seen[q] == 1 {
					first = append(first, q)
				}
			}
			want := append([]int64{1, 2, 3}, span(5, 40)...)
			if fmt.Sprint(first) != fmt.Sprint(want) {
				t.Fatalf("first deliveries %v, want %v", first, want)
			}
			dups := len(p.seqs(0)) - len(first)
			if point == seam.AfterProduce && dups == 0 {
				t.Fatal("a crash after produce must republish that batch")
			}
			if point != seam.AfterProduce && point != seam.DuringRenewal && dups != 0 {
				t.Fatalf("%d duplicates after a crash at %s", dups, point)
			}
			if s.Count(0) != 0 {
				t.Fatalf("%d messages left (leftovers not cleaned)", s.Count(0))
			}
			if inj.fired.Load() == 0 {
				t.Fatal("the crash point was never reached")
			}
		})
	}
}
