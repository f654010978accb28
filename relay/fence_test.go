package relay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// fencingPublisher is a recorder that is also an outbox.HolderFencer; it
// logs its fences and publishes, and its store (fenceReadLog) the reads.
type fencingPublisher struct {
	recorder
	log *eventLog
	// fence, when set, runs in FenceHolders and gives its result.
	fence func(ctx context.Context) error
}

func (p *fencingPublisher) FenceHolders(ctx context.Context, bucket int) error {
	p.log.add(fmt.Sprintf("fence %d", bucket))
	if p.fence != nil {
		return p.fence(ctx)
	}
	return nil
}

func (p *fencingPublisher) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	p.log.add("publish")
	return p.recorder.Publish(ctx, msgs)
}

// fenceReadLog logs the reads of the bucket's messages.
type fenceReadLog struct {
	outbox.Store
	log *eventLog
}

func (s fenceReadLog) Pending(ctx context.Context, bucket int, after int64, limit int) ([]outbox.Entry, bool, error) {
	s.log.add("read")
	return s.Store.Pending(ctx, bucket, after, limit)
}

// since returns the events logged after the first n.
func (l *eventLog) since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events[n:])
}

func (l *eventLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// TestRelayFencesEarlierHoldersBeforeItsFirstRead (issue 29, item 8): a
// drain that acquires a bucket has a HolderFencer publisher fence the
// bucket's earlier holders once, before its first read (a stalled holder's
// commit must not land between that read and the drain's first publish);
// not again for its later batches, and not at all for a drain that resumes
// this process's own release. Another relay's acquisition fences again.
func TestRelayFencesEarlierHoldersBeforeItsFirstRead(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	mem := memory.New(1)
	log := &eventLog{}
	s := fenceReadLog{Store: mem, log: log}
	p := &fencingPublisher{log: log}
	// The scheduler's clock stands still (a's resume window never runs out
	// on a busy machine); the lease clock moves when the test says.
	sched, clk := newManualSched(), &fakeClock{}
	a := newRelay(t, s, p, sched.option(), relay.RelayID("a"), relay.WithClock(clk), relay.BatchSize(2), relay.DeadlineMargin(0))
	fill(t, mem, 0, 1, 2, 3, 4, 5)

	check := func(who string, from int, st relay.DrainStats, err error, fences int) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		got := log.since(from)
		if n := strings.Count(strings.Join(got, ","), "fence 0"); n != fences {
			t.Fatalf("%s (acquired %v, resumed %v): %d fences in %v, want %d", who, st.Acquired, st.Resumed, n, got, fences)
		}
		if fences > 0 && (len(got) == 0 || got[0] != "fence 0") {
			t.Fatalf("%s: events %v: the fence must come before the first read", who, got)
		}
		if !slices.Contains(got, "publish") {
			t.Fatalf("%s: events %v: nothing published", who, got)
		}
	}
	st, err := a.DrainBucket(ctx, 0)
	if !st.Acquired {
		t.Fatalf("a's first drain did not acquire: %+v", st)
	}
	check("a's first drain, three batches", 0, st, err, 1)

	fill(t, mem, 0, 6, 7)
	n := log.len()
	st, err = a.DrainBucket(ctx, 0)
	if !st.Resumed {
		t.Fatalf("a's second drain did not resume its release: %+v", st)
	}
	check("a's resumed drain", n, st, err, 0)

	clk.Advance(time.Minute) // a's resume window is long over: b owes it no wait
	fill(t, mem, 0, 8)
	n = log.len()
	b := newRelay(t, s, p, sched.option(), relay.RelayID("b"), relay.WithClock(clk), relay.DeadlineMargin(0))
	st, err = b.DrainBucket(ctx, 0)
	if !st.Acquired {
		t.Fatalf("b's drain did not acquire: %+v", st)
	}
	check("b's drain", n, st, err, 1)
	if got := p.seqs(0); !slices.Equal(got, span(1, 8)) {
		t.Fatalf("published %v, want 1..8 once", got)
	}
}

// TestFailedFenceReadsAndPublishesNothing: a FenceHolders error stops the
// drain before its read: nothing is read or published, the lease is given
// up (the next drain need not wait for it to expire), and the error keeps
// its class. The next drain acquires, fences and publishes.
func TestFailedFenceReadsAndPublishesNothing(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	mem := memory.New(1)
	log := &eventLog{}
	refused := outbox.WithClass(errors.New("TRANSACTIONAL_ID_AUTHORIZATION_FAILED"), outbox.Fatal)
	var fail atomic.Bool
	fail.Store(true)
	p := &fencingPublisher{log: log, fence: func(context.Context) error {
		if fail.Load() {
			return refused
		}
		return nil
	}}
	sched, clk := newManualSched(), &fakeClock{} // the hold given up stays resumable by the clocks
	r := newRelay(t, fenceReadLog{Store: mem, log: log}, p, sched.option(), relay.RelayID("a"), relay.WithClock(clk), relay.DeadlineMargin(0))
	fill(t, mem, 0, 1, 2)

	st, err := r.DrainBucket(ctx, 0)
	if !errors.Is(err, refused) || outbox.Classify(err) != outbox.Fatal || st.Class != outbox.Fatal {
		t.Fatalf("drain: %v (class %v, stats' %v); want the fence's error, Fatal", err, outbox.Classify(err), st.Class)
	}
	if got := log.since(0); !slices.Equal(got, []string{"fence 0"}) {
		t.Fatalf("events %v, want the fence alone: no read, no publish after a failed fence", got)
	}
	if l := mem.Lease(0); l.HeldAt(clk.Now()) {
		t.Fatalf("the lease is still held after the failed fence (%+v): contenders wait for its expiry", l)
	}

	fail.Store(false)
	n := log.len()
	if st, err := r.DrainBucket(ctx, 0); err != nil || !st.Acquired {
		t.Fatalf("the next drain: acquired %v, %v", st.Acquired, err)
	}
	if got := log.since(n); len(got) < 3 || got[0] != "fence 0" || got[1] != "read" {
		t.Fatalf("the next drain's events %v, want a fence, then reads and a publish", got)
	}
	if got := p.seqs(0); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("published %v, want 1, 2", got)
	}
}

// TestFenceIsBoundedByTheLeaseCutOff: a FenceHolders that does not return
// is cancelled at the lease's publish cut-off (nothing renews the lease
// while it runs), and the drain stops with ErrLeaseLost without reading.
func TestFenceIsBoundedByTheLeaseCutOff(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	mem := memory.New(1)
	log := &eventLog{}
	entered := make(chan struct{})
	p := &fencingPublisher{log: log, fence: func(ctx context.Context) error {
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	}}
	sched, clk := newManualSched(), &fakeClock{}
	r := newRelay(t, fenceReadLog{Store: mem, log: log}, p, sched.option(), relay.WithClock(clk), relay.DeadlineMargin(0))
	fill(t, mem, 0, 1)
	done := make(chan error, 1)
	go func() {
		_, err := r.DrainBucket(ctx, 0)
		done <- err
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the drain never fenced")
	}
	// The cut-off: LeaseMargin + MaxClockSkew (5 s each) before the 30 s
	// lease expires. Just before it the fence still runs.
	sched.Advance(19 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("the drain ended before the cut-off: %v", err)
	default:
	}
	sched.Advance(time.Second)
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the fence was not cancelled at the lease's cut-off")
	}
	if !errors.Is(err, outbox.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
		t.Fatalf("drain: %v, want ErrLeaseLost with the fence's cancellation", err)
	}
	if got := log.since(0); !slices.Equal(got, []string{"fence 0"}) {
		t.Fatalf("events %v, want the fence alone", got)
	}
}

// slowReads is a store whose reads of the bucket's messages take the lease
// clock read forward by read.
type slowReads struct {
	outbox.Store
	clk  *fakeClock
	read time.Duration
}

func (s slowReads) Pending(ctx context.Context, bucket int, after int64, limit int) ([]outbox.Entry, bool, error) {
	s.clk.Advance(s.read)
	return s.Store.Pending(ctx, bucket, after, limit)
}

// TestSlowFenceRenewsTheLease (issue 29, item 8's review): a fence that
// returns just before the lease's publish cut-off (19 s of a 30 s lease
// whose cut-off is at 20 s) is followed by a renewal, so the read after it
// (2 s) and the publish still hold the lease; without it the publish fails
// with ErrLeaseLost and every later drain fences again, and a slow
// coordinator livelocks the bucket. The drain fences once and publishes.
func TestSlowFenceRenewsTheLease(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	mem := memory.New(1)
	log := &eventLog{}
	sched, clk := newManualSched(), &fakeClock{}
	p := &fencingPublisher{log: log, fence: func(context.Context) error {
		clk.Advance(19 * time.Second)
		return nil
	}}
	r := newRelay(t, slowReads{Store: mem, clk: clk, read: 2 * time.Second}, p, sched.option(), relay.WithClock(clk), relay.DeadlineMargin(0))
	fill(t, mem, 0, 1)
	st, err := r.DrainBucket(ctx, 0)
	if err != nil || !st.Acquired {
		t.Fatalf("drain after a 19 s fence: acquired %v, %v; want the lease renewed after the fence", st.Acquired, err)
	}
	if got := p.seqs(0); !slices.Equal(got, []int64{1}) {
		t.Fatalf("published %v, want 1", got)
	}
	if got := log.since(0); !slices.Equal(got, []string{"fence 0", "publish"}) {
		t.Fatalf("events %v, want one fence and one publish", got)
	}
}
