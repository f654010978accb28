package relay_test

import (
	"context"
	"fmt"
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
// b resumes without a wait), bucket 5 (never acquired: its hints come) and
// bucket 6 (released by a third process, c, which may be serving another
// shard). Without the trigger b waits for bucket 0 alone and drains no
// companion.
func TestHandoverDrainsTheReleasersOtherBucketsBesideIt(t *testing.T) {
	const window = relay.DefaultResumeWindow
	ctx := ctxFor(t, time.Minute)
	s := memory.New(7)
	sched, clk := newManualSched(), &fakeClock{}
	pub := &recorder{}
	opts := []relay.Option{sched.option(), relay.WithClock(clk), relay.RelayID("relay/fn"), relay.HolderWait(0)}
	a, b, c := newRelay(t, s, pub, opts...), newRelay(t, s, pub, opts...), newRelay(t, s, pub, opts...)
	for bucket := range 7 {
		if bucket != 5 {
			fill(t, s, bucket, 1, 2)
		}
	}
	if _, err := c.DrainBucket(ctx, 6); err != nil {
		t.Fatal(err)
	}
	for bucket := range 4 {
		if _, err := a.DrainBucket(ctx, bucket); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.DrainBucket(ctx, 4); err != nil {
		t.Fatal(err)
	}
	for _, bucket := range []int{0, 1, 2, 4, 6} {
		fill(t, s, bucket, 3)
	}
	fill(t, s, 5, 1)
	before := map[int]string{}
	for _, bucket := range []int{3, 4, 5, 6} {
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

// batchOn runs one batch on r, hinting buckets up to seq, moving the
// manual scheduler past every ResumeWindow its drains wait, and says which
// buckets waited a window and which were companions.
func batchOn(t *testing.T, ctx context.Context, sched *manualSched, r *relay.Relay, seq int64, buckets ...int) string {
	t.Helper()
	targets := map[int]int64{}
	for _, bucket := range buckets {
		targets[bucket] = seq
	}
	type res struct{ h, c []relay.BucketResult }
	done := make(chan res, 1)
	go func() { h, cs := r.DrainBucketsTo(ctx, targets); done <- res{h, cs} }()
	for {
		select {
		case got := <-done:
			var waited, comps []int
			for _, x := range append(got.h, got.c...) {
				if x.Err != nil {
					t.Errorf("bucket %d: %v", x.Bucket, x.Err)
				}
				if x.Stats.ResumeWait > 0 {
					waited = append(waited, x.Bucket)
				}
				if x.Stats.Companion {
					comps = append(comps, x.Bucket)
				}
			}
			sort.Ints(waited)
			sort.Ints(comps)
			return fmt.Sprintf("waited %v, companions %v", waited, comps)
		case <-time.After(2 * time.Millisecond):
			if sched.sleepers(relay.DefaultResumeWindow) > 0 {
				sched.Advance(relay.DefaultResumeWindow)
			}
		}
	}
}

// shards sets up four buckets, the first two of stream shard 1, the other
// two of shard 2; first[b] drains bucket b first; next commits a message to
// every bucket and returns its sequence.
func shards(t *testing.T, first [4]*relay.Relay, s *memory.Store, ctx context.Context) (next func() int64) {
	t.Helper()
	for bucket := range 4 {
		fill(t, s, bucket, 1, 2)
	}
	for bucket, r := range first {
		if _, err := r.DrainBucket(ctx, bucket); err != nil {
			t.Fatal(err)
		}
	}
	seq := int64(2)
	return func() int64 {
		seq++
		for bucket := range 4 {
			fill(t, s, bucket, seq)
		}
		return seq
	}
}

// TestCompanionsAcrossShards: four buckets, 0 and 1 of stream shard 1, 2
// and 3 of shard 2, each shard served by its own container at once, as a
// table with several stream shards is (docs/design.md §4.3.7). Containers
// a, b and c share an owner name; each step is one batch of one container,
// with what it must wait for and take beside it.
//
//   - stay within the releaser's buckets: shard 1 moves from a to c, b
//     keeps shard 2. c's first batch owes ResumeWindow for bucket 0 and
//     takes a's bucket 1 beside it; then nobody waits or takes anything.
//     Companions chosen by owner name alone took b's buckets too, and b
//     took them back with a window's wait, on every batch after.
//   - one process served both shards (a partition split's parent shard, a
//     sweep, a reused container): c's first hand-over takes all four; a
//     takes shard 2's back once, with a wait, and that starts nothing (a
//     companion's hold is marked, and a marked release starts no
//     companions). Unmarked, a and c traded them on every batch.
func TestCompanionsAcrossShards(t *testing.T) {
	type step struct {
		by      string
		buckets []int
		want    string
	}
	quiet := "waited [], companions []"
	for _, tc := range []struct {
		name  string
		first string // who drained buckets 0-3 first
		steps []step
	}{
		{"stay within the releaser's buckets", "aabb", []step{
			{"c", []int{0}, "waited [0 1], companions [1]"},
			{"b", []int{2, 3}, quiet}, {"c", []int{0, 1}, quiet},
			{"b", []int{2, 3}, quiet}, {"c", []int{0, 1}, quiet},
		}},
		{"one process served both shards", "aaaa", []step{
			{"c", []int{0}, "waited [0 1 2 3], companions [1 2 3]"},
			{"a", []int{2, 3}, "waited [2 3], companions []"},
			{"c", []int{0, 1}, quiet}, {"a", []int{2, 3}, quiet},
			{"c", []int{0, 1}, quiet}, {"a", []int{2, 3}, quiet},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			s := memory.New(4)
			sched, clk := newManualSched(), &fakeClock{}
			opts := []relay.Option{sched.option(), relay.WithClock(clk), relay.RelayID("relay/fn"), relay.HolderWait(0)}
			relays := map[string]*relay.Relay{}
			for _, name := range []string{"a", "b", "c"} {
				relays[name] = newRelay(t, s, &recorder{}, opts...)
			}
			var first [4]*relay.Relay
			for i, name := range tc.first {
				first[i] = relays[string(name)]
			}
			next := shards(t, first, s, ctx)
			for i, st := range tc.steps {
				if got := batchOn(t, ctx, sched, relays[st.by], next(), st.buckets...); got != st.want {
					t.Fatalf("step %d, %s's batch of %v: %s; want %s", i, st.by, st.buckets, got, st.want)
				}
			}
		})
	}
}

// TestAHandOverRecordsItsOwnProcessAfterManyBatches: the store's answers
// under a hold (head writes between batches, renewals) name the previous
// releaser; the release still names the holder. b takes bucket 0 from a
// and drains it in three batches; c, taking a's bucket 1, must not take b's
// bucket 0 beside it.
func TestAHandOverRecordsItsOwnProcessAfterManyBatches(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	s := memory.New(2)
	sched, clk := newManualSched(), &fakeClock{}
	opts := []relay.Option{sched.option(), relay.WithClock(clk), relay.RelayID("relay/fn"), relay.HolderWait(0), relay.BatchSize(1)}
	a, b, c := newRelay(t, s, &recorder{}, opts...), newRelay(t, s, &recorder{}, opts...), newRelay(t, s, &recorder{}, opts...)
	fill(t, s, 0, 1)
	fill(t, s, 1, 1)
	for bucket := range 2 {
		if _, err := a.DrainBucket(ctx, bucket); err != nil {
			t.Fatal(err)
		}
	}
	byA := s.Lease(0).Process
	fill(t, s, 0, 2, 3, 4)
	if got := batchOn(t, ctx, sched, b, 4, 0); got != "waited [0], companions []" {
		t.Fatalf("b's batch: %s; want bucket 0 alone (a's bucket 1 is quiet)", got)
	}
	if got := s.Lease(0).Process; got == byA || got == "" {
		t.Fatalf("b released bucket 0 after three batches, and the lease names %q (a's: %q)", got, byA)
	}
	fill(t, s, 0, 5)
	fill(t, s, 1, 2)
	if got := batchOn(t, ctx, sched, c, 2, 1); got != "waited [1], companions []" {
		t.Fatalf("c's batch: %s; want a's bucket 1 alone (bucket 0 is b's release)", got)
	}
}
