package relay_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// readLog records where each read of a bucket started, and can hold a
// lease read until a read of the bucket has begun (beside).
type readLog struct {
	outbox.Store
	mu     sync.Mutex
	afters []int64
	read   chan struct{} // closed by the first read after beside is set
	beside bool
}

func (r *readLog) Pending(ctx context.Context, b int, after int64, limit int) ([]outbox.Entry, bool, error) {
	r.mu.Lock()
	r.afters = append(r.afters, after)
	if r.beside && r.read != nil {
		close(r.read)
		r.read = nil
	}
	r.mu.Unlock()
	return r.Store.Pending(ctx, b, after, limit)
}

// ReadLease, while beside is set, returns only once a read of the bucket
// has begun: a drain that reads only after its look at the lease waits
// here until its context ends.
func (r *readLog) ReadLease(ctx context.Context, b int) (outbox.Lease, error) {
	r.mu.Lock()
	ch := r.read
	r.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return outbox.Lease{}, ctx.Err()
		}
	}
	return r.Store.ReadLease(ctx, b)
}

func (r *readLog) reads() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.afters)
}

// TestResumedDrainReadsFromItsOwnMarks (issue 21, the 200 msgs/s tail): a
// resumed DeleteMode drain writes its head only every HeadFlushInterval, so
// the stored cleaned mark lags by up to that long. A drain that resumes this
// process's own hold starts from the marks its last drain ended with, not
// from the stored ones: it does not read again the tombstones its process
// wrote (up to a flush interval of them, on every drain of a busy bucket),
// and a hinted drain whose target that process already published returns
// without reading at all. Before, every resumed drain read from the stored
// cleaned mark.
func TestResumedDrainReadsFromItsOwnMarks(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	mem := memory.New(1)
	s := &readLog{Store: mem}
	sched, pub, clk := newManualSched(), newOverlapPublisher(), &fakeClock{}
	a := newRelay(t, s, pub, sched.option(), relay.WithClock(clk), relay.RelayID("relay/fn"), relay.HolderWait(0))
	step := func(seqs ...int64) {
		sched.Advance(500 * time.Millisecond)
		clk.Advance(500 * time.Millisecond)
		fill(t, mem, 0, seqs...)
	}
	fill(t, mem, 0, 1, 2)
	if st, err := a.DrainBucket(ctx, 0); err != nil || !st.Acquired {
		t.Fatalf("first drain: acquired %v, err %v", st.Acquired, err)
	}
	step(3, 4)
	if st, err := a.DrainBucket(ctx, 0); err != nil || !st.Resumed || st.Published != 2 {
		t.Fatalf("second drain: resumed %v, published %d, err %v", st.Resumed, st.Published, err)
	}
	step(5)
	if st, err := a.DrainBucket(ctx, 0); err != nil || !st.Resumed || st.Published != 1 {
		t.Fatalf("third drain: resumed %v, published %d, err %v", st.Resumed, st.Published, err)
	}
	l, err := mem.ReadLease(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Cleaned >= 4 {
		t.Fatalf("the stored cleaned mark is %d: the test needs it behind the drains (no head flush yet)", l.Cleaned)
	}
	// The first drain read from 0; the next ones from what the drain before
	// had marked (2, then 4), not from the stored cleaned mark (0).
	if got, want := s.reads(), []int64{0, 2, 4}; !slices.Equal(got, want) {
		t.Errorf("reads started after %v, want %v (stored cleaned %d)", got, want, l.Cleaned)
	}
	// A hint for 5, which the third drain published: nothing to read.
	step()
	if st, err := a.DrainBucketTo(ctx, 0, 5); err != nil || !st.Resumed || st.Head != 5 {
		t.Fatalf("hinted drain: resumed %v, head %d, err %v", st.Resumed, st.Head, err)
	}
	if n := len(s.reads()); n != 3 {
		t.Errorf("a hinted drain of a published target read the bucket: %d reads, want 3", n)
	}
	pub.checkOnce(t, []int64{1, 2, 3, 4, 5})
}

// TestResumedDrainReadsBesideItsLook (issue 21): a drain that expects to
// resume its own hold sends its first read beside its look at the lease,
// not after it: a warm container's drain waits one round trip before it
// publishes instead of two. The store here answers the lease read only once
// a read of the bucket has begun; a drain that reads after the look never
// gets its answer (its context ends) and fails.
func TestResumedDrainReadsBesideItsLook(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	mem := memory.New(1)
	s := &readLog{Store: mem}
	sched, pub, clk := newManualSched(), newOverlapPublisher(), &fakeClock{}
	a := newRelay(t, s, pub, sched.option(), relay.WithClock(clk), relay.RelayID("relay/fn"), relay.HolderWait(0))
	fill(t, mem, 0, 1, 2)
	if st, err := a.DrainBucket(ctx, 0); err != nil || !st.Acquired {
		t.Fatalf("first drain: acquired %v, err %v", st.Acquired, err)
	}
	sched.Advance(time.Second)
	clk.Advance(time.Second)
	fill(t, mem, 0, 3)
	s.mu.Lock()
	s.read, s.beside = make(chan struct{}), true
	s.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, err := a.DrainBucket(dctx, 0)
	if err != nil || !st.Resumed || st.Published != 1 {
		t.Fatalf("resumed drain: resumed %v, published %d, err %v (a read after the look at the lease waits for ever here)", st.Resumed, st.Published, err)
	}
	pub.checkOnce(t, []int64{1, 2, 3})
}

// TestReadBesideALookThatFindsAnotherHolderIsDropped (issue 21): the read a
// drain sends beside its look at the lease is of no use when the look finds
// that another process sharing the relay's name took the bucket meanwhile:
// the drain publishes nothing from it, leaves its wake-up like any drain
// that finds the bucket held, and the holder publishes everything once.
func TestReadBesideALookThatFindsAnotherHolderIsDropped(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	mem := memory.New(1)
	s := &readLog{Store: mem}
	sched, pub, clk := newManualSched(), newOverlapPublisher(), &fakeClock{}
	opts := []relay.Option{sched.option(), relay.WithClock(clk), relay.RelayID("relay/fn"), relay.HolderWait(0)}
	a, b := newRelay(t, s, pub, opts...), newRelay(t, s, pub, opts...)
	fill(t, mem, 0, 1, 2)
	if st, err := a.DrainBucket(ctx, 0); err != nil || !st.Acquired {
		t.Fatalf("a's first drain: acquired %v, err %v", st.Acquired, err)
	}
	// b, another container of the function, takes the bucket from a's
	// release and waits out a's window before it reads.
	fill(t, mem, 0, 3)
	done := drainAsync(ctx, b)
	if !eventually(func() bool { return sched.sleepers(time.Nanosecond) == 1 }) {
		t.Fatal("b does not wait out a's window")
	}
	// a, with its whole window left, expects to resume its own hold and
	// reads beside its look; the look finds b holding the bucket.
	fill(t, mem, 0, 4)
	before := len(s.reads())
	st, err := a.DrainBucket(ctx, 0)
	if !errors.Is(err, outbox.ErrLeaseHeld) || st.Resumed || st.Published != 0 {
		t.Fatalf("a's drain beside b's hold: resumed %v, published %d, err %v; want ErrLeaseHeld, nothing published", st.Resumed, st.Published, err)
	}
	if n := len(s.reads()) - before; n != 1 {
		t.Errorf("a's drain read the bucket %d times, want 1 (beside its look)", n)
	}
	sched.Advance(15 * time.Second)
	clk.Advance(15 * time.Second)
	if r := <-done; r.err != nil || !r.st.Acquired || r.st.Published != 2 {
		t.Fatalf("b's drain: acquired %v, published %d, err %v; want 3 and 4", r.st.Acquired, r.st.Published, r.err)
	}
	pub.checkOnce(t, []int64{1, 2, 3, 4})
	if n := pub.overlapCount(); n != 0 {
		t.Errorf("%d overlapping publishes", n)
	}
}
