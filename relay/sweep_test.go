package relay_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

func TestSweepFairShareAndBacklog(t *testing.T) {
	s := memory.New(8)
	for b := 0; b < 8; b++ {
		fill(t, s, b, span(1, 5)...)
	}
	clk := &fakeClock{}
	// Another live relay: this one may take half the buckets.
	if err := s.Heartbeat(context.Background(), "peer", clk.Now(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	p := &recorder{}
	r := newRelay(t, s, p, relay.RelayID("me"), relay.WithClock(clk), relay.DeadlineMargin(0))
	rep, err := r.Sweep(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Live != 2 || rep.Share != 4 || len(rep.Ready) != 8 || len(rep.Drained) != 4 || len(rep.Skipped) != 4 {
		t.Fatalf("report = %+v; want 2 live, share 4, 8 ready, 4 drained, 4 skipped", rep)
	}
	if rep.Pending != 40 || !rep.Oldest.Equal(base) {
		t.Fatalf("backlog = %d oldest %v; want 40 at %v", rep.Pending, rep.Oldest, base)
	}
	// The peer is gone: the next sweep (after its heartbeat expired) takes the rest.
	clk.Advance(31 * time.Second)
	rep, err = r.Sweep(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Live != 1 || len(rep.Drained) != 4 {
		t.Fatalf("second sweep = %+v", rep)
	}
	for b := 0; b < 8; b++ {
		if got := fmt.Sprint(p.seqs(b)); got != fmt.Sprint(span(1, 5)) {
			t.Fatalf("bucket %d published %s", b, got)
		}
	}
}

func TestSweepReportsOutOfRangeBucketsLoudly(t *testing.T) {
	s := memory.New(4)
	fill(t, s, 1, 1)
	fill(t, s, 6, 1, 2) // a writer configured with BucketCount >= 7
	p := &recorder{}
	r := newRelay(t, s, p, relay.DeadlineMargin(0))
	rep, err := r.Sweep(ctxFor(t, 10*time.Second))
	var re *outbox.BucketRangeError
	if !errors.As(err, &re) || re.Bucket != 6 {
		t.Fatalf("err = %v, want a BucketRangeError for bucket 6", err)
	}
	if rep.OutOfRange[6] != 2 || fmt.Sprint(rep.Drained) != "[1]" {
		t.Fatalf("report = %+v; in-range buckets must still be drained", rep)
	}
	if s.Count(6) != 2 {
		t.Fatal("out-of-range messages were touched")
	}
}

// exclusive is a Publisher probe: it fails the test if two publishes of the
// same bucket overlap, whichever relay makes them.
type exclusive struct {
	recorder
	mu     sync.Mutex
	active map[int]bool
	t      *testing.T
}

func (e *exclusive) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	b := msgs[0].Bucket
	e.mu.Lock()
	if e.active[b] {
		e.t.Errorf("two concurrent publishes of bucket %d", b)
	}
	e.active[b] = true
	e.mu.Unlock()
	time.Sleep(time.Millisecond)
	n, err := e.recorder.Publish(ctx, msgs)
	e.mu.Lock()
	e.active[b] = false
	e.mu.Unlock()
	return n, err
}

func TestConcurrentSweepersNeverOverlapOnABucket(t *testing.T) {
	s := memory.New(8)
	p := &exclusive{active: map[int]bool{}, t: t}
	var relays []*relay.Relay
	for i := 0; i < 3; i++ {
		relays = append(relays, newRelay(t, s, p, relay.RelayID(fmt.Sprint("r", i)), relay.BatchSize(7), relay.DeadlineMargin(0)))
	}
	ctx := ctxFor(t, 20*time.Second)
	var wg sync.WaitGroup
	// Writers keep committing while three relays sweep.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 200; i++ {
			b := i % 8
			if err := s.Put(message(b, s.Reserve(b, 1))); err != nil {
				t.Error(err)
			}
		}
	}()
	for _, r := range relays {
		wg.Add(1)
		go func(r *relay.Relay) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if _, err := r.Sweep(ctx); err != nil {
					t.Error(err)
				}
			}
		}(r)
	}
	wg.Wait()
	// Whatever is left, one final sweep drains.
	if _, err := newRelay(t, s, p, relay.DeadlineMargin(0)).Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	for b := 0; b < 8; b++ {
		got := p.seqs(b)
		seen := map[int64]bool{}
		var first []int64
		for _, q := range got {
			if !seen[q] {
				seen[q] = true
				first = append(first, q)
			}
		}
		if fmt.Sprint(first) != fmt.Sprint(span(1, 25)) {
			t.Fatalf("bucket %d first deliveries %v; want 1..25 in order", b, first)
		}
	}
}

// Issue 8 item 2: a bucket whose first items above the cleaned mark are
// fences (two failed 99-message writes) with one message behind them must be
// seen and drained by the sweeper; its stream hint was lost.
func TestSweepSeesAMessageBehindManyFences(t *testing.T) {
	s := memory.New(4)
	ctx := ctxFor(t, 10*time.Second)
	const fences = 2 * 99
	for seq := int64(1); seq <= fences; seq++ {
		if err := s.Fence(ctx, 3, seq, base); err != nil {
			t.Fatal(err)
		}
	}
	fill(t, s, 3, fences+1)
	p := &recorder{}
	r := newRelay(t, s, p, relay.DeadlineMargin(0))
	rep, err := r.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rep.Ready) != "[3]" || fmt.Sprint(rep.Drained) != "[3]" || rep.Pending != 1 {
		t.Fatalf("report = %+v; want bucket 3 ready and drained with 1 pending", rep)
	}
	if got := fmt.Sprint(p.seqs(3)); got != fmt.Sprint([]int64{fences + 1}) {
		t.Fatalf("published %s, want [%d]", got, fences+1)
	}
	if s.Count(3) != 0 {
		t.Fatalf("%d messages left in bucket 3", s.Count(3))
	}
}
