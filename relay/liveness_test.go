package relay_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// Regression tests for the lost wake-ups of issue 8: each one builds the
// interleaving that stranded a committed message and checks that the message
// is published by the time every drain involved has returned.

// A contender's wake-up lands on the lease before a read that stops at
// BatchSize; the holder then reaches its target. It must not release as if
// it had seen the contender's message.
func TestWakeBeforePartialReadIsNotAbsorbedByATargetedDrain(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, span(1, 4)...)
	p := &recorder{}
	holder := newRelay(t, s, p, relay.RelayID("holder"), relay.BatchSize(2), relay.DeadlineMargin(0))
	contender := newRelay(t, s, p, relay.RelayID("contender"), relay.DeadlineMargin(0))
	var (
		updates    atomic.Int32
		contendErr error
	)
	s.Hook = func(method string, bucket int) error {
		// After the holder published 1, 2 and before its second read (3, 4:
		// stops at BatchSize), a writer commits 5 and its hint reaches the
		// contender, whose wake-up the holder sees in its head update.
		if method == "Update" && updates.Add(1) == 1 {
			fill(t, s, 0, 5)
			// Its deadline is too short to wait for the holder: it leaves
			// a wake-up.
			_, contendErr = contender.DrainBucket(ctxFor(t, 50*time.Millisecond), 0)
		}
		return nil
	}
	if _, err := holder.DrainBucketTo(ctxFor(t, 10*time.Second), 0, 3); err != nil {
		t.Fatal(err)
	}
	s.Hook = nil
	if !errors.Is(contendErr, outbox.ErrLeaseHeld) {
		t.Fatalf("contender: %v, want ErrLeaseHeld (the setup did not interleave)", contendErr)
	}
	if got := p.seqs(0); len(got) != 5 || got[4] != 5 {
		t.Fatalf("published %v: the contender's message 5 was stranded", got)
	}
}

// Wake-ups left on the lease of a holder that crashed must be honoured by
// the next holder, even if its own target is already decided.
func TestWakeLeftOnACrashedHoldersLeaseIsHonoured(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, 1, 2)
	clk := &fakeClock{}
	p := &recorder{}
	first := newRelay(t, s, p, relay.RelayID("first"), relay.WithClock(clk), relay.DeadlineMargin(0))
	if _, err := first.DrainBucket(ctxFor(t, 5*time.Second), 0); err != nil {
		t.Fatal(err)
	}
	// A holder takes the lease and dies with it.
	if _, err := s.Acquire(context.Background(), 0, "dead", clk.Now(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// A writer commits 3; its hint finds the lease held and leaves a wake-up.
	fill(t, s, 0, 3)
	contender := newRelay(t, s, p, relay.RelayID("contender"), relay.WithClock(clk), relay.DeadlineMargin(0))
	if _, err := contender.DrainBucketTo(ctxFor(t, 50*time.Millisecond), 0, 3); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf("contender: %v, want ErrLeaseHeld", err)
	}
	// The lease expires; a redelivered hint for sequence 2 (already
	// decided) reaches a relay.
	clk.Advance(31 * time.Second)
	late := newRelay(t, s, p, relay.RelayID("late"), relay.WithClock(clk), relay.DeadlineMargin(0))
	if _, err := late.DrainBucketTo(ctxFor(t, 5*time.Second), 0, 2); err != nil {
		t.Fatal(err)
	}
	if got := p.seqs(0); len(got) != 3 || got[2] != 3 {
		t.Fatalf("published %v: message 3, whose hint was absorbed by the dead holder's lease, was stranded", got)
	}
}

// In one process, a second DrainBucket that arrives while the first is
// releasing must not be lost: it waits for the first and drains after it.
func TestLocalDrainDuringReleaseIsNotLost(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, 1, 2)
	p := &recorder{}
	r := newRelay(t, s, p, relay.DeadlineMargin(0))
	var (
		once   sync.Once
		second = make(chan error, 1)
	)
	s.Hook = func(method string, bucket int) error {
		if method == "Release" {
			once.Do(func() {
				// A writer commits 3; its hint reaches the same relay.
				fill(t, s, 0, 3)
				go func() {
					_, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0)
					second <- err
				}()
				time.Sleep(50 * time.Millisecond) // let it find the first drain running
			})
		}
		return nil
	}
	if _, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second drain: %v", err)
	}
	s.Hook = nil
	if got := p.seqs(0); len(got) != 3 {
		t.Fatalf("published %v: message 3 of the second DrainBucket was stranded", got)
	}
}

// skewed is a clock that runs ahead of another by a fixed amount.
type skewed struct {
	c    outbox.Clock
	skew time.Duration
}

func (s skewed) Now() time.Time { return s.c.Now().Add(s.skew) }

// stallingStore runs after, once, when the first read of a bucket returns:
// a holder stalled between its renewal check and its publish.
type stallingStore struct {
	outbox.Store
	once  sync.Once
	after func()
}

func (s *stallingStore) Pending(ctx context.Context, bucket int, after int64, limit int) ([]outbox.Entry, bool, error) {
	e, end, err := s.Store.Pending(ctx, bucket, after, limit)
	s.once.Do(s.after)
	return e, end, err
}

// A holder that stalls in a read must not start a publish after a relay
// whose clock runs ahead by up to MaxClockSkew took the lease over; beyond
// that bound it may (duplicates), and nothing is lost either way.
func TestClockSkewBoundHoldsForAStalledHolder(t *testing.T) {
	for _, tt := range []struct {
		name  string
		skew  time.Duration // contender's clock ahead of the holder's
		stall time.Duration // holder stalls this long (its clock) after its read
		// publishAfterTakeover: whether the holder may still publish.
		publishAfterTakeover bool
	}{
		{"at the bound", 10 * time.Second, 20 * time.Second, false},
		{"beyond the bound", 16 * time.Second, 14500 * time.Millisecond, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mem := memory.New(1)
			fill(t, mem, 0, 1, 2, 3)
			clk := &fakeClock{}
			var tookOver atomic.Bool
			s := &stallingStore{Store: mem}
			s.after = func() {
				clk.Advance(tt.stall)
				if _, err := mem.Acquire(context.Background(), 0, "contender", skewed{clk, tt.skew}.Now(), 30*time.Second); err != nil {
					t.Errorf("contender could not take the lease over: %v", err)
				}
				tookOver.Store(true)
			}
			var afterTakeover atomic.Int32
			p := &recorder{before: func(ctx context.Context, msgs []outbox.Message) (int, error, bool) {
				if tookOver.Load() {
					afterTakeover.Add(1)
				}
				return 0, nil, false
			}}
			holder := newRelay(t, s, p, relay.RelayID("holder"), relay.WithClock(clk), relay.DeadlineMargin(0),
				relay.MaxClockSkew(10*time.Second))
			_, err := holder.DrainBucket(ctxFor(t, 5*time.Second), 0)
			if got := afterTakeover.Load() > 0; got != tt.publishAfterTakeover {
				t.Fatalf("holder published after the takeover: %v, want %v (drain: %v)", got, tt.publishAfterTakeover, err)
			}
			if !errors.Is(err, outbox.ErrLeaseLost) {
				t.Fatalf("holder: %v, want ErrLeaseLost", err)
			}
			// Nothing is lost: what the holder's publish did not decide, the
			// contender's side publishes (beyond the bound the holder's
			// batch was acknowledged and its tombstones, which go out beside
			// its release, landed although the release failed: I1).
			clk.Advance(time.Minute)
			p2 := &recorder{}
			if _, err := newRelay(t, mem, p2, relay.RelayID("next"), relay.WithClock(clk), relay.DeadlineMargin(0)).DrainBucket(ctxFor(t, 5*time.Second), 0); err != nil {
				t.Fatal(err)
			}
			seen := map[int64]bool{}
			for _, s := range append(p.seqs(0), p2.seqs(0)...) {
				seen[s] = true
			}
			if !seen[1] || !seen[2] || !seen[3] || len(p2.seqs(0)) == 0 && mem.Count(0) != 0 {
				t.Fatalf("holder published %v, the contender's side %v after the takeover (%d messages left); want each of 1..3 at least once",
					p.seqs(0), p2.seqs(0), mem.Count(0))
			}
		})
	}
}

// A publish longer than the lease is fine while renewals succeed: every
// renewal moves the publish's deadline.
func TestRenewalsExtendThePublishDeadline(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, 1, 2)
	slow := &recorder{before: func(ctx context.Context, msgs []outbox.Message) (int, error, bool) {
		select {
		case <-time.After(3 * time.Second): // a slow broker: longer than the lease
			return 0, nil, false
		case <-ctx.Done():
			return 0, ctx.Err(), true
		}
	}}
	r := newRelay(t, s, slow, relay.DeadlineMargin(0), relay.LeaseDuration(time.Second),
		relay.LeaseRenewInterval(200*time.Millisecond), relay.LeaseMargin(200*time.Millisecond), relay.MaxClockSkew(100*time.Millisecond),
		relay.ResumeWindow(500*time.Millisecond))
	st, err := r.DrainBucket(ctxFor(t, 30*time.Second), 0)
	if err != nil {
		t.Fatalf("a slow publish on a healthy lease failed: %v", err)
	}
	if st.Published != 2 {
		t.Fatalf("published %d, want 2", st.Published)
	}
}

// A record-level rejection of a publish that was not of that record alone
// (franz-go fails every record of a rejected batch, other buckets' records
// included) must not park it: only a publish of the record alone decides.
func TestHealthyRecordIsNeverParkedForABatchMatesRejection(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, 1)
	var calls atomic.Int32
	p := &recorder{before: func(ctx context.Context, msgs []outbox.Message) (int, error, bool) {
		if calls.Add(1) == 1 {
			// Another bucket's oversized record shared the partition's batch.
			return 0, outbox.WithClass(errors.New("MESSAGE_TOO_LARGE"), outbox.RecordPermanent), true
		}
		return 0, nil, false
	}}
	r := newRelay(t, s, p, relay.DeadlineMargin(0))
	st, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Parked != 0 || len(s.Parked(0)) != 0 {
		t.Fatalf("a healthy record was parked: %+v", st)
	}
	if got := p.seqs(0); len(got) != 1 {
		t.Fatalf("published %v, want [1]", got)
	}
}

// A drain that stops because it passed its own publish cut-off (it stalled)
// while the store still names it the holder gives the lease up, wake-ups
// kept: a contender must not leave a wake-up on a lease whose holder has
// already returned (found by internal/harness/sim, seed 5383).
func TestDrainPastItsCutOffGivesTheLeaseUp(t *testing.T) {
	mem := memory.New(1)
	fill(t, mem, 0, 1, 2)
	clk := &fakeClock{}
	s := &stallingStore{Store: mem, after: func() { clk.Advance(20 * time.Second) }} // past the cut-off, not the expiry
	r := newRelay(t, s, &recorder{}, relay.RelayID("stalls"), relay.WithClock(clk), relay.DeadlineMargin(0))
	if _, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("drain: %v, want ErrLeaseLost", err)
	}
	if l := mem.Lease(0); l.HeldAt(clk.Now()) {
		t.Fatalf("lease %+v still held by a drain that returned", l)
	}
	other := newRelay(t, mem, &recorder{}, relay.RelayID("other"), relay.WithClock(clk), relay.DeadlineMargin(0), relay.HolderWait(0),
		relay.ResumeWindow(relay.MinResumeWindow))
	if _, err := other.DrainBucket(ctxFor(t, 5*time.Second), 0); err != nil {
		t.Fatalf("the next relay: %v, want it to drain at once", err)
	}
}
