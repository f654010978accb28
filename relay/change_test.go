package relay_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// keyed is a message of key k at bucket/seq.
func keyed(k string, bucket int, seq int64) outbox.Message {
	return outbox.Message{ID: outbox.NewID(), Bucket: bucket, Sequence: seq, Topic: "t", Key: []byte(k), Value: []byte(k), CreatedAt: base}
}

// gateOptions make a drain held back by the gate give up after one
// re-check: the test then drains the old bucket and asks again.
var gateOptions = []relay.Option{relay.GapPollInterval(time.Millisecond), relay.GapTimeout(time.Millisecond), relay.DeadlineMargin(0)}

// The gate (docs/design.md §13): after a change 2 → 4, new bucket 3's
// messages of the new epoch wait until old bucket 1 (deps(3) = {1}) has
// decided every number up to its cut point, then flow; new bucket 2's,
// whose old bucket 0 is drained, flow at once. The relay read the config
// item before the flip: the stamp alone makes it ask. Mutation: a gate
// always open publishes key a's new message before its old one.
func TestGateHoldsANewEpochUntilItsOldBucketsDrain(t *testing.T) {
	s := memory.New(2)
	p := &recorder{}
	r := newRelay(t, s, p, gateOptions...)
	// Key a wrote at epoch 0 into bucket 1 (seq 1); bucket 0 is empty.
	if err := s.Put(keyed("a", 1, 1)); err != nil {
		t.Fatal(err)
	}
	epoch := s.Flip(4, base.Add(time.Minute))
	for b := range 4 {
		s.Cut(b)
	}
	// After the flip key a writes into bucket 3, key b into bucket 2.
	if err := s.PutStamped(epoch, keyed("a", 3, 1), keyed("b", 2, 1)); err != nil {
		t.Fatal(err)
	}
	st, err := r.DrainBucket(ctxFor(t, 10*time.Second), 3)
	if !errors.Is(err, outbox.ErrGatePending) || st.Published != 0 {
		t.Fatalf("drain of new bucket 3 before old bucket 1 drained: published %d, err %v; want 0 and ErrGatePending", st.Published, err)
	}
	if st, err := r.DrainBucket(ctxFor(t, 10*time.Second), 2); err != nil || st.Published != 1 {
		t.Fatalf("drain of new bucket 2, whose old bucket 0 is empty: published %d, err %v; want 1", st.Published, err)
	}
	for _, b := range []int{1, 3} {
		if _, err := r.DrainBucket(ctxFor(t, 10*time.Second), b); err != nil {
			t.Fatalf("drain bucket %d: %v", b, err)
		}
	}
	var order []string
	for _, m := range p.got {
		order = append(order, fmt.Sprintf("%s@%d", m.Key, m.Bucket))
	}
	if want := []string{"b@2", "a@1", "a@3"}; !slices.Equal(order, want) {
		t.Fatalf("published %v, want %v (key a's old message first)", order, want)
	}
}

// A message of the new epoch behind a gap waits for the gap, not the gate;
// classify never lets a run cross into an epoch not seen open.
func TestGateStopsTheRunAtTheFirstNewEpochMessage(t *testing.T) {
	s := memory.New(1)
	p := &recorder{}
	r := newRelay(t, s, p, gateOptions...)
	if err := s.Put(keyed("a", 0, 1), keyed("a", 0, 2)); err != nil {
		t.Fatal(err)
	}
	// 1 → 2: old bucket 0 is the only dependency of both new buckets.
	epoch := s.Flip(2, base.Add(time.Minute))
	s.Cut(0)
	if err := s.PutStamped(epoch, keyed("a", 0, 3)); err != nil {
		t.Fatal(err)
	}
	// Bucket 0 holds 1, 2 (epoch 0) and 3 (epoch 1): the drain publishes
	// 1 and 2, then finds bucket 0 itself drained to its cut point (2),
	// opens the gate and publishes 3.
	if _, err := r.DrainBucket(ctxFor(t, 10*time.Second), 0); err != nil {
		t.Fatal(err)
	}
	if got := p.seqs(0); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("published %v of bucket 0, want [1 2 3]", got)
	}
}

// After a shrink 4 → 2 the relays still drain old buckets 2 and 3 while
// the old epoch drains; a full sweep ends the old epoch once they are
// drained (EndOldEpoch), and reports it overdue (naming the waiting
// buckets) while they are not past the change's deadline.
func TestSweepEndsADrainedOldEpoch(t *testing.T) {
	clk := &fakeClock{}
	s := memory.New(4)
	p := &recorder{}
	r := newRelay(t, s, p, append(gateOptions, relay.WithClock(clk), relay.SweepMinAge(time.Hour))...)
	if err := s.Put(keyed("a", 3, 1)); err != nil {
		t.Fatal(err)
	}
	deadline := clk.Now().Add(30 * time.Second)
	epoch := s.Flip(2, deadline)
	for b := range 4 {
		s.Cut(b)
	}
	clk.Advance(45 * time.Second)
	rep, err := r.Sweep(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Change
	if c == nil || c.From != 4 || c.To != 2 || c.Epoch != epoch || c.Completed || !slices.Equal(c.Waiting, []int{3}) || c.Overdue < 15*time.Second {
		t.Fatalf("sweep with old bucket 3 undrained past the deadline: change %+v; want 4 → 2 waiting for [3], ≥ 15s overdue", c)
	}
	if r.BucketSpan() != 4 || r.BucketCount() != 2 {
		t.Fatalf("relay span %d, count %d; want 4 and 2 while the old epoch drains", r.BucketSpan(), r.BucketCount())
	}
	if _, err := r.DrainBucket(ctxFor(t, 10*time.Second), 3); err != nil {
		t.Fatalf("drain old bucket 3 after the shrink: %v", err)
	}
	if rep, err = r.Sweep(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if c := rep.Change; c == nil || !c.Completed || r.ChangesCompleted() != 1 {
		t.Fatalf("sweep once drained: change %+v, %d completed; want it completed by this sweep", c, r.ChangesCompleted())
	}
	if stored, _ := s.Config(ctxFor(t, time.Second)); stored.Draining() || r.BucketSpan() != 2 {
		t.Fatalf("after the end: config %+v, relay span %d; want no old epoch, span 2", stored, r.BucketSpan())
	}
	if rep, err = r.Sweep(ctxFor(t, 10*time.Second)); err != nil || rep.Change != nil {
		t.Fatalf("sweep after the end: change %+v, err %v; want none", rep.Change, err)
	}
}
