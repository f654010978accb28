package relay_test

import (
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// TestHandoverDrainsTheReleasersOtherBucketsBesideIt (issue 28): container
// a drained buckets 0–3; container b (the same owner name, another
// process) gets a batch that hints only bucket 0. b owes ResumeWindow
// after acquiring it, and in the same call acquires and drains beside it
// buckets 1 and 2, which a released with messages above their heads: three
// waits of one window at once, where b's next batch would otherwise have
// waited a second window for them. Left alone, with no write: bucket 3
// (a released it, nothing above its head), bucket 4 (b's own release, which
// b resumes without a wait) and bucket 5 (never acquired: its hints come).
// Without the trigger b waits for bucket 0 alone and drains no companion.
func TestHandoverDrainsTheReleasersOtherBucketsBesideIt(t *testing.T) {
	const window = relay.DefaultResumeWindow
	ctx := ctxFor(t, time.Minute)
	s := memory.New(6)
	sched, clk := newManualSched(), &fakeClock{}
	pub := &recorder{}
	opts := []relay.Option{sched.option(), relay.WithClock(clk), relay.RelayID("relay/fn"), relay.HolderWait(0)}
	a, b := newRelay(t, s, pub, opts...), newRelay(t, s, pub, opts...)
	for bucket := range 5 {
		fill(t, s, bucket, 1, 2)
	}
	for bucket := range 4 {
		if _, err := a.DrainBucket(ctx, bucket); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.DrainBucket(ctx, 4); err != nil {
		t.Fatal(err)
	}
	for _, bucket := range []int{0, 1, 2, 4} {
		fill(t, s, bucket, 3)
	}
	fill(t, s, 5, 1)
	before := map[int]string{}
	for _, bucket := range []int{3, 4, 5} {
		before[bucket] = s.Lease(bucket).Token
	}

	type result struct{ hinted, companions []relay.BucketResult }
	done := make(chan result, 1)
	go func() {
		h, c := b.DrainBucketsTo(ctx, map[int]int64{0: 3})
		done <- result{h, c}
	}()
	if !eventually(func() bool { return sched.sleepers(window) == 3 }) {
		t.Fatalf("%d drains wait ResumeWindow at once, want 3 (bucket 0 and its companions 1 and 2)", sched.sleepers(window))
	}
	sched.Advance(window)
	r := <-done

	if len(r.hinted) != 1 || r.hinted[0].Bucket != 0 || r.hinted[0].Err != nil || !r.hinted[0].Stats.HandedOver || r.hinted[0].Stats.Companion {
		t.Fatalf("hinted drains %+v, want bucket 0 handed over", r.hinted)
	}
	var got []int
	for _, c := range r.companions {
		if c.Err != nil || !c.Stats.Companion || !c.Stats.HandedOver || c.Stats.ResumeWait != window {
			t.Errorf("companion %d: err %v, companion %v, handed over %v, waited %v; want a hand-over that waited %v",
				c.Bucket, c.Err, c.Stats.Companion, c.Stats.HandedOver, c.Stats.ResumeWait, window)
		}
		got = append(got, c.Bucket)
	}
	sort.Ints(got)
	if !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("companions %v, want [1 2]", got)
	}
	for _, bucket := range []int{0, 1, 2} {
		if seqs := pub.seqs(bucket); !slices.Equal(seqs, []int64{1, 2, 3}) {
			t.Errorf("bucket %d published %v, want [1 2 3]", bucket, seqs)
		}
	}
	for bucket, token := range before {
		if now := s.Lease(bucket).Token; now != token {
			t.Errorf("bucket %d's lease was written (token %q, was %q)", bucket, now, token)
		}
	}
}
