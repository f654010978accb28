package integration_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/checker"
	"github.com/dynakafka/outbox/internal/seam"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
)

// stallingClient holds the first TransactWriteItems call until released,
// after the writer reserved its sequence numbers.
type stallingClient struct {
	*dynamodb.Client
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (c *stallingClient) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.once.Do(func() {
		close(c.entered)
		<-c.release
	})
	return c.Client.TransactWriteItems(ctx, in, o...)
}

// probe wraps a publisher: it records every published message and can hold
// a publish.
type probe struct {
	inner   outbox.Publisher
	mu      sync.Mutex
	got     []outbox.Message
	at      []time.Time
	calls   atomic.Int32
	holdOne chan struct{} // when non-nil, the first publish waits on it
	entered chan struct{}
}

func (p *probe) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	if p.calls.Add(1) == 1 && p.holdOne != nil {
		close(p.entered)
		<-p.holdOne
	}
	n, err := p.inner.Publish(ctx, msgs)
	p.mu.Lock()
	for _, m := range msgs[:n] {
		p.got = append(p.got, m)
		p.at = append(p.at, time.Now())
	}
	p.mu.Unlock()
	return n, err
}

func (p *probe) values() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, m := range p.got {
		out = append(out, string(m.Value))
	}
	return out
}

func msgKV(topic, key, value string) outbox.Message {
	return outbox.Message{Topic: topic, Key: []byte(key), Value: []byte(value)}
}

// Writer A reserves s and stalls; writer B commits s+1. The relay must not
// publish s+1 before s is decided; after A resumes the order is (s, s+1) if A
// made it within GapTimeout, else (s+1, s') with s fenced and A resubmitted.
func TestWriterStallsBetweenReserveAndCommit(t *testing.T) {
	for _, c := range []struct {
		name       string
		gapTimeout time.Duration
		resumeAt   time.Duration
		want       string
	}{
		{"resumes within GapTimeout", 10 * time.Second, 700 * time.Millisecond, "[A B]"},
		{"resumes after GapTimeout", 400 * time.Millisecond, 1500 * time.Millisecond, "[B A]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 1)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sc := &stallingClient{Client: e.dynamo.Client, entered: make(chan struct{}), release: make(chan struct{})}
			wa, err := dynamo.NewWriter(ctx, sc, e.tables)
			if err != nil {
				t.Fatal(err)
			}
			aDone := make(chan dynamo.Result, 1)
			go func() {
				res, err := wa.Write(ctx, nil, msgKV(e.topic, "k", "A"))
				if err != nil {
					t.Errorf("writer A: %v", err)
				}
				aDone <- res
			}()
			<-sc.entered // A holds sequence s
			resB, err := e.writer.Write(ctx, nil, msgKV(e.topic, "k", "B"))
			if err != nil {
				t.Fatal(err)
			}
			s := resB.Messages[0].Sequence - 1

			p := &probe{inner: e.pub}
			r, err := relay.New(ctx, e.store, p, relay.GapTimeout(c.gapTimeout), relay.GapPollInterval(20*time.Millisecond), relay.DeadlineMargin(0))
			if err != nil {
				t.Fatal(err)
			}
			drained := make(chan error, 1)
			go func() { _, err := r.DrainBucket(ctx, 0); drained <- err }()

			time.Sleep(c.resumeAt / 2)
			if got := p.values(); len(got) != 0 && c.resumeAt < c.gapTimeout {
				t.Fatalf("published %v while sequence %d was undecided", got, s)
			}
			time.Sleep(c.resumeAt / 2)
			close(sc.release)
			resA := <-aDone
			if err := <-drained; err != nil {
				t.Fatal(err)
			}
			// Drain once more: a resubmitted A lands after the first drain.
			if _, err := r.DrainBucket(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(p.values()); got != c.want {
				t.Fatalf("published %s, want %s", got, c.want)
			}
			seqA := resA.Messages[0].Sequence
			switch c.want {
			case "[A B]":
				if seqA != s {
					t.Fatalf("A committed at %d, want its reservation %d", seqA, s)
				}
			case "[B A]":
				if seqA <= s+1 {
					t.Fatalf("A committed at %d after being fenced at %d; want a fresh sequence above %d", seqA, s, s+1)
				}
			}
		})
	}
}

// A message committed while another relay holds its bucket is published by
// that holder's drain (woken), within a second of its commit.
func TestCommitDuringAnotherHoldersDrain(t *testing.T) {
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.writer.Write(ctx, nil, msgKV(e.topic, "k", "first")); err != nil {
		t.Fatal(err)
	}
	p := &probe{inner: e.pub, holdOne: make(chan struct{}), entered: make(chan struct{})}
	holder, err := relay.New(ctx, e.store, p, relay.RelayID("holder"), relay.DeadlineMargin(0))
	if err != nil {
		t.Fatal(err)
	}
	// The other relay leaves a wake-up rather than waiting for the holder
	// (which this test keeps publishing until the other relay returned).
	other, err := relay.New(ctx, e.store, p, relay.RelayID("other"), relay.DeadlineMargin(0), relay.HolderWait(0))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := holder.DrainBucket(ctx, 0); done <- err }()
	<-p.entered // the holder has read "first" and is publishing it
	if _, err := e.writer.Write(ctx, nil, msgKV(e.topic, "k", "second")); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	// The stream hint for "second" reaches the other relay.
	if _, err := other.DrainBucket(ctx, 0); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf("other relay: %v, want ErrLeaseHeld", err)
	}
	close(p.holdOne)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.values()); got != "[first second]" {
		t.Fatalf("published %s", got)
	}
	p.mu.Lock()
	latency := p.at[1].Sub(committed)
	p.mu.Unlock()
	t.Logf("commit during another holder's drain published after %v", latency)
	if latency > time.Second {
		t.Fatalf("published %v after its commit, want within 1s", latency)
	}
}

// crashAt crashes a drain once at the armed crash point.
type crashAt struct{ point atomic.Value }

func (c *crashAt) arm(p seam.CrashPoint) { c.point.Store(p) }

func (c *crashAt) At(ctx context.Context, p seam.CrashPoint, bucket int) error {
	if c.point.CompareAndSwap(p, seam.CrashPoint("")) {
		return errCrash
	}
	return nil
}

var errCrash = errors.New("injected crash")

// Crash points on real parts: after produce before the head update (the
// batch is redelivered: duplicates, none lost), and between the head update
// and the marking (leftovers marked without republishing). A crashed drain
// keeps its lease, as a dead process would; the same relay takes it up again.
func TestCrashPointsOnRealParts(t *testing.T) {
	e := newEnv(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	chk := checker.New()
	write := func(n int) {
		for i := 0; i < n; i += 10 {
			var msgs []outbox.Message
			for j := i; j < i+10; j++ {
				msgs = append(msgs, msgKV(e.topic, fmt.Sprint("key-", j%3), fmt.Sprint(j)))
			}
			res, err := e.writer.Write(ctx, nil, msgs...)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range res.Messages {
				chk.Committed(m.ID, string(m.Key), m.Sequence)
			}
		}
	}
	consumerCtx, stop := context.WithCancel(ctx)
	done := e.consume(consumerCtx, t, func(id string, key, value []byte) {
		chk.Delivered(id, id, string(key), 0)
	})
	inj := &crashAt{}
	// Every drain holds its lease (no resuming), so each batch advances the
	// head before marking: the crash points below are on every batch's path.
	r, err := relay.New(ctx, e.store, e.pub, relay.DeadlineMargin(0), relay.ResumeReleased(false),
		seam.With(seam.Hooks{Faults: inj}).(relay.Option))
	if err != nil {
		t.Fatal(err)
	}
	drainAll := func() (errs map[int]error) { return r.DrainBuckets(ctx, []int{0, 1}) }

	write(100)
	inj.arm(seam.AfterProduce)
	// The crash before the head update puts everything written so far at
	// risk of a second delivery.
	chk.AtRisk("crash:"+string(seam.AfterProduce), chk.CommittedIDs()...)
	if errs := drainAll(); len(errs) != 1 || !errors.Is(firstErr(errs), errCrash) {
		t.Fatalf("crash after produce: %v", errs)
	}
	if errs := drainAll(); len(errs) != 0 {
		t.Fatal(errs)
	}
	waitFor(t, func() bool { return chk.Missing() == 0 })
	afterFirst := chk.Result()
	if afterFirst.Duplicates == 0 || afterFirst.Lost != 0 {
		t.Fatalf("after a crash before the head update: %+v; want duplicates and no loss", afterFirst)
	}

	write(100)
	inj.arm(seam.AfterHeadUpdate)
	if errs := drainAll(); len(errs) != 1 || !errors.Is(firstErr(errs), errCrash) {
		t.Fatalf("crash before marking: %v", errs)
	}
	if errs := drainAll(); len(errs) != 0 {
		t.Fatal(errs)
	}
	waitFor(t, func() bool { return chk.Missing() == 0 })
	time.Sleep(300 * time.Millisecond)
	stop()
	<-done
	r2 := chk.Result()
	if !r2.OK() || r2.Duplicates != afterFirst.Duplicates {
		t.Fatalf("after a crash between head update and delete: %+v; want no loss and no new duplicates (had %d)", r2, afterFirst.Duplicates)
	}
	if left := e.pendingMessages(ctx, t); left != 0 {
		t.Fatalf("%d leftovers not deleted", left)
	}
	t.Logf("crash points: committed=%d duplicates=%d (all from the crash before the head update)", r2.Committed, r2.Duplicates)
}

// A relay that stalls past its lease is taken over; it then produces nothing.
//
// The interleaving is driven, not timed: the stalled relay's read blocks on a
// gate, and the lease clock both relays use moves only when the test moves it
// (past the stalled lease's expiry once the taker is waiting for the holder).
// So the outcome does not depend on how fast the machine is: under load the
// version that slept 3 s against a 2 s lease saw the taker give up first
// ("takeover: ... held by stalled until ...").
func TestStalledHolderOnRealParts(t *testing.T) {
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var values []string
	for i := range 20 {
		values = append(values, fmt.Sprint(i))
	}
	var msgs []outbox.Message
	for _, v := range values {
		msgs = append(msgs, msgKV(e.topic, "k", v))
	}
	if _, err := e.writer.Write(ctx, nil, msgs...); err != nil {
		t.Fatal(err)
	}
	clk := &testClock{now: time.Now()}
	common := []relay.Option{relay.WithClock(clk), relay.LeaseMargin(500 * time.Millisecond),
		relay.MaxClockSkew(200 * time.Millisecond), relay.ResumeWindow(time.Second), relay.DeadlineMargin(0)}
	gated := &gatedStore{Store: e.store, entered: make(chan struct{}), release: make(chan struct{})}
	stalledPub := &probe{inner: e.pub}
	stalled, err := relay.New(ctx, gated, stalledPub, append(common, relay.RelayID("stalled"),
		relay.LeaseDuration(2*time.Second), relay.LeaseRenewInterval(500*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	// The taker's own lease is long: its publish watchdog runs on the
	// runtime's timers, and this test is not about the taker's renewals.
	watched := &watchedStore{Store: e.store, reads: make(chan struct{}, 100)}
	takerPub := &probe{inner: e.pub}
	taker, err := relay.New(ctx, watched, takerPub, append(common, relay.RelayID("taker"),
		relay.LeaseDuration(time.Minute), relay.LeaseRenewInterval(20*time.Second), relay.HolderWait(10*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := stalled.DrainBucket(ctx, 0); done <- err }()
	<-gated.entered // the stalled relay holds the lease and hangs in its read
	type result struct {
		st  relay.DrainStats
		err error
	}
	took := make(chan result, 1)
	go func() { st, err := taker.DrainBucket(ctx, 0); took <- result{st, err} }()
	// The taker's first look finds the bucket held; its second is inside its
	// wait for the holder, which neither renews nor releases. Then the
	// stalled lease expires (by the clock the store is given).
	<-watched.reads
	<-watched.reads
	clk.advance(2500 * time.Millisecond)
	res := <-took
	if res.err != nil {
		t.Fatalf("takeover: %v", res.err)
	}
	if st := res.st; !st.TakenOver || st.Waited < 2*time.Second {
		t.Fatalf("taker: %+v; want a takeover after waiting out the lease", st)
	}
	close(gated.release)
	if err := <-done; !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("stalled relay: %v, want ErrLeaseLost", err)
	}
	if got := stalledPub.values(); len(got) != 0 {
		t.Fatalf("the stalled relay published %v after its lease expired", got)
	}
	if got := fmt.Sprint(takerPub.values()); got != fmt.Sprint(values) {
		t.Fatalf("taker published %s", got)
	}
}

// testClock is a lease clock that moves only when the test moves it.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *testClock) advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// gatedStore holds the first read of the bucket's messages until released.
type gatedStore struct {
	outbox.Store
	once             sync.Once
	entered, release chan struct{}
}

func (g *gatedStore) Pending(ctx context.Context, b int, after int64, limit int) ([]outbox.Entry, bool, error) {
	g.once.Do(func() {
		close(g.entered)
		select {
		case <-g.release:
		case <-ctx.Done():
		}
	})
	return g.Store.Pending(ctx, b, after, limit)
}

// watchedStore signals every look at a lease.
type watchedStore struct {
	outbox.Store
	reads chan struct{}
}

func (w *watchedStore) ReadLease(ctx context.Context, b int) (outbox.Lease, error) {
	l, err := w.Store.ReadLease(ctx, b)
	select {
	case w.reads <- struct{}{}:
	default:
	}
	return l, err
}

func firstErr(m map[int]error) error {
	for _, err := range m {
		return err
	}
	return nil
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
