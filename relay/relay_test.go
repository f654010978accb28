package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// recorder is a Publisher that records what it acknowledged.
type recorder struct {
	mu      sync.Mutex
	got     []outbox.Message
	batches int
	// before, when set, runs before each batch; it can block or fail.
	before func(ctx context.Context, msgs []outbox.Message) (acked int, err error, handled bool)
}

func (r *recorder) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	if r.before != nil {
		if acked, err, handled := r.before(ctx, msgs); handled {
			r.mu.Lock()
			r.got = append(r.got, msgs[:acked]...)
			r.mu.Unlock()
			return acked, err
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, msgs...)
	r.batches++
	return len(msgs), nil
}

func (r *recorder) seqs(bucket int) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for _, m := range r.got {
		if m.Bucket == bucket {
			out = append(out, m.Sequence)
		}
	}
	return out
}

// fakeClock is a test clock. With step set, every Now advances it by step.
type fakeClock struct {
	off  atomic.Int64
	step time.Duration
}

var base = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func (c *fakeClock) Now() time.Time          { return base.Add(time.Duration(c.off.Add(int64(c.step)))) }
func (c *fakeClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

func message(bucket int, seq int64) outbox.Message {
	return outbox.Message{ID: outbox.NewID(), Bucket: bucket, Sequence: seq, Topic: "t",
		Key: []byte(fmt.Sprint("k", seq)), Value: []byte("v"), CreatedAt: base}
}

func fill(t *testing.T, s *memory.Store, bucket int, seqs ...int64) {
	t.Helper()
	var msgs []outbox.Message
	for _, seq := range seqs {
		msgs = append(msgs, message(bucket, seq))
	}
	if err := s.Put(msgs...); err != nil {
		t.Fatal(err)
	}
}

func span(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func newRelay(t *testing.T, s outbox.Store, p outbox.Publisher, opts ...relay.Option) *relay.Relay {
	t.Helper()
	r, err := relay.New(context.Background(), s, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// failOn makes s's method fail with reason until the returned switch is
// turned off.
func failOn(s *memory.Store, method, reason string) *atomic.Bool {
	fail := new(atomic.Bool)
	fail.Store(true)
	s.Hook = func(m string, bucket int) error {
		if m == method && fail.Load() {
			return errors.New(reason)
		}
		return nil
	}
	return fail
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestDrainPublishesInOrderAndDeletes(t *testing.T) {
	s := memory.New(4)
	fill(t, s, 1, span(1, 1200)...)
	fill(t, s, 2, 1, 2)
	p := &recorder{}
	r := newRelay(t, s, p, relay.DeadlineMargin(0))
	st, err := r.DrainBucket(ctxFor(t, 10*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.seqs(1); fmt.Sprint(got) != fmt.Sprint(span(1, 1200)) {
		t.Fatalf("published %d messages out of order or incomplete", len(got))
	}
	if st.Published != 1200 || st.Batches != 3 || st.Head != 1200 || st.Deleted != 1200 {
		t.Fatalf("stats = %+v; want 1200 published in 3 batches of at most 500", st)
	}
	if n := s.Count(1); n != 0 {
		t.Fatalf("%d messages left in bucket 1", n)
	}
	if n := s.Count(2); n != 2 {
		t.Fatalf("bucket 2 was touched: %d left", n)
	}
	// The last batch's tombstones went out beside the release, which wrote
	// the head: cleaned stays below them until a later write.
	if l := s.Lease(1); !l.Released() || l.Owner != r.ID() || l.Head != 1200 || l.Cleaned != 1000 {
		t.Fatalf("lease after drain = %+v; want released (owner kept) with head 1200 and cleaned 1000", l)
	}
	if st, err := r.DrainBucket(ctxFor(t, 10*time.Second), 1); err != nil || st.Published != 0 || st.Leftovers != 0 {
		t.Fatalf("second drain: %+v, %v; want the tombstones above cleaned passed over", st, err)
	}
}

func TestGapIsWaitedOnThenWriterWins(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, 2, 3)
	p := &recorder{}
	r := newRelay(t, s, p, relay.GapTimeout(5*time.Second), relay.GapPollInterval(5*time.Millisecond), relay.DeadlineMargin(0))
	go func() {
		time.Sleep(100 * time.Millisecond)
		fill(t, s, 0, 1) // the slow writer commits sequence 1
	}()
	if _, err := r.DrainBucket(ctxFor(t, 10*time.Second), 0); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.seqs(0)); got != "[1 2 3]" {
		t.Fatalf("published %s, want [1 2 3]: 2 must not pass the missing 1", got)
	}
}

func TestGapTimeoutFencesAndWriterIsRefused(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, 3, 4) // 1 and 2 reserved by an abandoned writer
	p := &recorder{}
	r := newRelay(t, s, p, relay.GapTimeout(50*time.Millisecond), relay.GapPollInterval(5*time.Millisecond), relay.DeadlineMargin(0))
	st, err := r.DrainBucket(ctxFor(t, 10*time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.seqs(0)); got != "[3 4]" {
		t.Fatalf("published %s, want [3 4]", got)
	}
	if st.Fenced != 2 || st.Head != 4 {
		t.Fatalf("stats = %+v; want 2 fences and head 4", st)
	}
	// The abandoned writer comes back: its transaction is refused.
	if err := s.Put(message(0, 1)); !errors.Is(err, outbox.ErrAlreadyWritten) {
		t.Fatalf("late writer at a fenced sequence: %v, want ErrAlreadyWritten", err)
	}
}

func TestGapTimeoutHoldsAcrossRelays(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, 2)
	clk := &fakeClock{}
	p := &recorder{}
	// A short ResumeWindow: r2 takes over a bucket r1 released.
	opts := []relay.Option{relay.GapTimeout(10 * time.Second), relay.GapPollInterval(time.Millisecond), relay.WithClock(clk), relay.DeadlineMargin(0),
		relay.ResumeWindow(relay.MinResumeWindow)}
	// Invocation 1 sees the gap and runs out of time.
	r1 := newRelay(t, s, p, append(opts, relay.RelayID("r1"))...)
	_, err := r1.DrainBucket(ctxFor(t, 50*time.Millisecond), 0)
	if !errors.Is(err, outbox.ErrGapPending) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, outbox.ErrDeadline) {
		t.Fatalf("first drain: %v, want it to stop while waiting", err)
	}
	if l := s.Lease(0); l.Gap != 1 || !l.GapSince.Equal(clk.Now()) {
		t.Fatalf("gap not recorded on the lease: %+v", l)
	}
	// Another relay, 11 s later by the clock: the wait already elapsed, so it
	// fences at once instead of starting a new 10 s wait.
	clk.Advance(11 * time.Second)
	r2 := newRelay(t, s, p, append(opts, relay.RelayID("r2"))...)
	st, err := r2.DrainBucket(ctxFor(t, 5*time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Fenced != 1 || fmt.Sprint(p.seqs(0)) != "[2]" {
		t.Fatalf("second drain: %+v, published %v", st, p.seqs(0))
	}
	if l := s.Lease(0); l.Gap != 0 {
		t.Fatalf("gap not cleared after it was decided: %+v", l)
	}
}

// A head update that fails after Kafka acknowledged a batch that is not the
// drain's last (BatchSize 5 of 10): nothing is marked; the relay gives the
// bucket up with the head it knows (the batch was acknowledged), so the next
// drain marks those messages without publishing them again. (A crash there,
// which gives nothing up, republishes: see TestCrashPoints. The last batch's
// head goes out with the release: TestFailedReleaseAfterTheLastBatch.)
func TestFailedHeadUpdateAfterProduce(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, span(1, 10)...)
	p := &recorder{}
	fail := failOn(s, "Update", "crash: head update never happened")
	r := newRelay(t, s, p, relay.DeadlineMargin(0), relay.BatchSize(5))
	if _, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0); err == nil {
		t.Fatal("drain succeeded through a failed head update")
	}
	if s.Count(0) != 10 {
		t.Fatalf("messages marked without a head update: %d left", s.Count(0))
	}
	fail.Store(false)
	st, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.seqs(0); fmt.Sprint(got) != fmt.Sprint(span(1, 10)) {
		t.Fatalf("published %v; want 1..10 once", got)
	}
	if s.Count(0) != 0 || st.Leftovers != 5 {
		t.Fatalf("%d messages left, %d leftovers; want the first batch's 5 marked as leftovers", s.Count(0), st.Leftovers)
	}
}

// The last batch of a held drain writes no head of its own: the release
// carries it, and the batch's tombstones go out beside it. A release that
// fails then leaves the batch decided all the same: tombstones, and the
// head Abandon writes; nothing is published twice.
func TestFailedReleaseAfterTheLastBatch(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, span(1, 10)...)
	p := &recorder{}
	fail := failOn(s, "Release", "release never happened")
	var updates atomic.Int32
	failing := s.Hook
	s.Hook = func(method string, bucket int) error {
		if method == "Update" {
			updates.Add(1)
		}
		return failing(method, bucket)
	}
	r := newRelay(t, s, p, relay.DeadlineMargin(0))
	if _, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0); err == nil {
		t.Fatal("drain succeeded through a failed release")
	}
	if n := updates.Load(); n != 0 {
		t.Fatalf("%d head updates before the release; want none (the release carries the head)", n)
	}
	if s.Count(0) != 0 {
		t.Fatalf("%d messages left; want the batch's tombstones, written beside the release", s.Count(0))
	}
	if l := s.Lease(0); l.Head != 10 || l.Cleaned != 10 || !l.Released() {
		t.Fatalf("lease = %+v; want it given up (Abandon, after the tombstones landed) with head and cleaned 10", l)
	}
	fail.Store(false)
	st, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.seqs(0); fmt.Sprint(got) != fmt.Sprint(span(1, 10)) || st.Published != 0 || st.Leftovers != 0 {
		t.Fatalf("published %v, second drain %+v; want 1..10 once and nothing left to do", got, st)
	}
}

func TestCrashBetweenHeadUpdateAndDeleteLeavesLeftovers(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, span(1, 10)...)
	p := &recorder{}
	fail := failOn(s, "MarkPublished", "crash: marking never happened")
	r := newRelay(t, s, p, relay.DeadlineMargin(0))
	if _, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0); err == nil {
		t.Fatal("drain succeeded through a failed mark")
	}
	if l := s.Lease(0); l.Head != 10 || l.Cleaned != 0 {
		t.Fatalf("lease = %+v; want head 10 and cleaned 0", l)
	}
	fail.Store(false)
	fill(t, s, 0, 11)
	st, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.seqs(0)); got != fmt.Sprint(span(1, 11)) {
		t.Fatalf("published %s; leftovers at or below head must not be republished", got)
	}
	if st.Leftovers != 10 || s.Count(0) != 0 {
		t.Fatalf("stats %+v, %d left; want 10 leftovers deleted", st, s.Count(0))
	}
}

func TestPartialPublishDeletesOnlyThePrefix(t *testing.T) {
	for _, c := range []struct {
		name  string
		class outbox.ErrorClass
	}{{"retriable", outbox.Retriable}, {"fatal", outbox.Fatal}} {
		t.Run(c.name, func(t *testing.T) {
			s := memory.New(1)
			fill(t, s, 0, 1, 2, 4, 5, 6)
			if err := s.Fence(context.Background(), 0, 3, base); err != nil {
				t.Fatal(err)
			}
			boom := outbox.WithClass(errors.New("broker said no"), c.class)
			var calls atomic.Int32
			p := &recorder{before: func(ctx context.Context, msgs []outbox.Message) (int, error, bool) {
				if calls.Add(1) == 1 {
					return 3, boom, true // 1, 2 and 4 acknowledged; 5 failed
				}
				return 0, nil, false
			}}
			r := newRelay(t, s, p, relay.DeadlineMargin(0), relay.RetryBackoff(time.Millisecond, 10*time.Millisecond))
			st, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0)
			if c.class == outbox.Retriable {
				// Backed off and retried within the drain, from the new head.
				if err != nil || st.Retries != 1 || st.Head != 6 || s.Count(0) != 0 {
					t.Fatalf("err=%v stats=%+v left=%d; want a retry that published 5 and 6", err, st, s.Count(0))
				}
			} else {
				var pe *outbox.PublishError
				if !errors.As(err, &pe) || !errors.Is(err, boom) || pe.Sequence != 5 {
					t.Fatalf("err = %v; want a PublishError at sequence 5 wrapping the broker error", err)
				}
				if st.Head != 4 || s.Count(0) != 2 || st.Retries != 0 {
					t.Fatalf("head %d, %d left, stats %+v; want head 4 (past the fence at 3), 5 and 6 kept, no retry", st.Head, s.Count(0), st)
				}
				if len(s.Parked(0)) != 0 {
					t.Fatal("a fatal error parked something")
				}
				// The cause is fixed: the bucket resumes by itself.
				if _, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0); err != nil {
					t.Fatal(err)
				}
			}
			if got := fmt.Sprint(p.seqs(0)); got != "[1 2 4 5 6]" {
				t.Fatalf("published %s", got)
			}
		})
	}
}

func TestRecordErrorPolicies(t *testing.T) {
	tooLarge := outbox.WithClass(errors.New("MESSAGE_TOO_LARGE"), outbox.RecordPermanent)
	for _, policy := range []outbox.RecordErrorPolicy{outbox.Park, outbox.Block} {
		t.Run(policy.String(), func(t *testing.T) {
			s := memory.New(1)
			fill(t, s, 0, 1, 2, 3)
			p := &recorder{before: func(ctx context.Context, msgs []outbox.Message) (int, error, bool) {
				for i, m := range msgs {
					if m.Sequence == 2 {
						return i, tooLarge, true
					}
				}
				return 0, nil, false
			}}
			r := newRelay(t, s, p, relay.DeadlineMargin(0), relay.OnRecordError(policy))
			st, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0)
			switch policy {
			case outbox.Park:
				if err != nil || st.Parked != 1 || st.Head != 3 || s.Count(0) != 0 {
					t.Fatalf("err=%v stats=%+v left=%d", err, st, s.Count(0))
				}
				if got := fmt.Sprint(p.seqs(0)); got != "[1 3]" {
					t.Fatalf("published %s, want [1 3]", got)
				}
				parked := s.Parked(0)
				if len(parked) != 1 || parked[0].Sequence != 2 || parked[0].Attempts != 2 || !strings.Contains(parked[0].Reason, "MESSAGE_TOO_LARGE") ||
					parked[0].Message.ID == "" || parked[0].FirstFailure.IsZero() {
					t.Fatalf("parked %+v", parked)
				}
			case outbox.Block:
				var pe *outbox.PublishError
				if !errors.As(err, &pe) || pe.Sequence != 2 || !errors.Is(err, tooLarge) {
					t.Fatalf("err = %v, want the bucket blocked at 2", err)
				}
				if st.Head != 1 || s.Count(0) != 2 || len(s.Parked(0)) != 0 {
					t.Fatalf("stats %+v, %d left, parked %v", st, s.Count(0), s.Parked(0))
				}
			}
		})
	}
}
func TestWakeUpDuringDrainIsNotLost(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, 1)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var first atomic.Bool
	first.Store(true)
	p := &recorder{before: func(ctx context.Context, msgs []outbox.Message) (int, error, bool) {
		if first.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-release
		}
		return 0, nil, false
	}}
	holder := newRelay(t, s, p, relay.RelayID("holder"), relay.DeadlineMargin(0))
	other := newRelay(t, s, p, relay.RelayID("other"), relay.DeadlineMargin(0))
	done := make(chan error, 1)
	go func() { _, err := holder.DrainBucket(ctxFor(t, 10*time.Second), 0); done <- err }()
	<-entered
	// A message commits while the holder is past its read; its hint reaches
	// another relay, which finds the bucket held.
	fill(t, s, 0, 2)
	if _, err := other.DrainBucket(ctxFor(t, 5*time.Second), 0); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf("contender: %v, want ErrLeaseHeld", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.seqs(0)); got != "[1 2]" {
		t.Fatalf("published %s: the holder must drain again after a wake-up", got)
	}
}

func TestLeaseLostDuringPublishCancelsIt(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, 1, 2)
	clk := &fakeClock{}
	cancelled := make(chan struct{})
	p := &recorder{before: func(ctx context.Context, msgs []outbox.Message) (int, error, bool) {
		// A slow broker: the publish hangs until the relay gives up.
		<-ctx.Done()
		close(cancelled)
		return 0, ctx.Err(), true
	}}
	r := newRelay(t, s, p, relay.WithClock(clk), relay.LeaseDuration(3*time.Second), relay.LeaseRenewInterval(time.Second),
		relay.LeaseMargin(500*time.Millisecond), relay.MaxClockSkew(500*time.Millisecond), relay.DeadlineMargin(0), relay.RelayID("stalled"),
		relay.ResumeWindow(time.Second))
	s.Hook = func(method string, bucket int) error {
		if method == "Renew" {
			return errors.New("store unreachable")
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { _, err := r.DrainBucket(ctxFor(t, 30*time.Second), 0); done <- err }()
	// The lease cannot be renewed. The watchdog must cancel the publish
	// before LeaseMargin ahead of the expiry, by the real clock as well.
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("publish not cancelled although the lease could not be renewed")
	}
	err := <-done
	if !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("err = %v, want ErrLeaseLost", err)
	}
	if l := s.Lease(0); l.Head != 0 {
		t.Fatalf("head advanced by a holder that lost its lease: %+v", l)
	}
	if len(p.seqs(0)) != 0 {
		t.Fatal("something was acknowledged")
	}
}

func TestStalledHolderStopsAfterTakeover(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, span(1, 3)...)
	clk := &fakeClock{}
	var stalled sync.WaitGroup
	stalled.Add(1)
	resume := make(chan struct{})
	var once sync.Once
	s.Hook = func(method string, bucket int) error {
		if method == "Pending" && clk.Now().Equal(base) {
			once.Do(func() { stalled.Done(); <-resume })
		}
		return nil
	}
	p := &recorder{}
	opts := []relay.Option{relay.WithClock(clk), relay.DeadlineMargin(0)}
	a := newRelay(t, s, p, append(opts, relay.RelayID("a"))...)
	b := newRelay(t, s, p, append(opts, relay.RelayID("b"))...)
	done := make(chan error, 1)
	go func() { _, err := a.DrainBucket(ctxFor(t, 10*time.Second), 0); done <- err }()
	stalled.Wait()
	clk.Advance(31 * time.Second) // a's lease expired while it stalled
	if _, err := b.DrainBucket(ctxFor(t, 5*time.Second), 0); err != nil {
		t.Fatalf("takeover: %v", err)
	}
	close(resume)
	err := <-done
	if !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("stalled holder: %v, want ErrLeaseLost", err)
	}
	if got := fmt.Sprint(p.seqs(0)); got != "[1 2 3]" {
		t.Fatalf("published %s; the stalled holder must produce nothing after its lease expired", got)
	}
}

// Kafka rejects a whole batch for one record's sake (MESSAGE_TOO_LARGE for
// the batch): the relay isolates the named record before parking it, so only
// the culprit is parked.
func TestBatchRejectionParksOnlyTheCulprit(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, 1, 2, 3, 4)
	tooLarge := outbox.WithClass(errors.New("MESSAGE_TOO_LARGE"), outbox.RecordPermanent)
	p := &recorder{before: func(ctx context.Context, msgs []outbox.Message) (int, error, bool) {
		for _, m := range msgs {
			if m.Sequence == 3 {
				return 0, tooLarge, true // the whole batch fails, naming its first record
			}
		}
		return 0, nil, false
	}}
	r := newRelay(t, s, p, relay.DeadlineMargin(0))
	st, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.seqs(0)); got != "[1 2 4]" {
		t.Fatalf("published %s, want [1 2 4]", got)
	}
	if parked := s.Parked(0); st.Parked != 1 || len(parked) != 1 || parked[0].Sequence != 3 {
		t.Fatalf("parked %+v; want only 3", parked)
	}
}

func TestUndecodableItemIsParkedOrBlocks(t *testing.T) {
	for _, policy := range []outbox.RecordErrorPolicy{outbox.Park, outbox.Block} {
		t.Run(policy.String(), func(t *testing.T) {
			s := memory.New(1)
			fill(t, s, 0, 1)
			s.PutUndecodable(0, 2, outbox.WithClass(errors.New("bad item"), outbox.RecordPermanent))
			fill(t, s, 0, 3)
			p := &recorder{}
			r := newRelay(t, s, p, relay.DeadlineMargin(0), relay.OnRecordError(policy))
			_, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0)
			if policy == outbox.Block {
				if err == nil || fmt.Sprint(p.seqs(0)) != "[1]" || s.Count(0) != 2 {
					t.Fatalf("err=%v published %v left %d; want blocked at 2 with nothing deleted", err, p.seqs(0), s.Count(0))
				}
				return
			}
			if err != nil || fmt.Sprint(p.seqs(0)) != "[1 3]" || len(s.Parked(0)) != 1 || s.Parked(0)[0].Sequence != 2 {
				t.Fatalf("err=%v published %v parked %+v", err, p.seqs(0), s.Parked(0))
			}
		})
	}
}

func TestNewerItemFormatStopsTheBucket(t *testing.T) {
	s := memory.New(1)
	s.PutUndecodable(0, 1, outbox.WithClass(errors.New("format version 2"), outbox.Fatal))
	r := newRelay(t, s, &recorder{}, relay.DeadlineMargin(0))
	if _, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0); err == nil || outbox.Classify(err) != outbox.Fatal {
		t.Fatalf("err = %v, want a fatal error", err)
	}
	if len(s.Parked(0)) != 0 || s.Count(0) != 1 {
		t.Fatal("an item of a newer format was parked or deleted")
	}
}

// The relay sizes records by the config item: its MaxMessageBytes and its
// stamped header names. A record above the bound is parked; with the
// item's longer names a record that fits under the default names is too.
func TestOversizedStoredRecordIsParked(t *testing.T) {
	long := func(c byte) string { return strings.Repeat(string(c), 200) }
	cases := []struct {
		name   string
		stored outbox.Config
		value  int
	}{
		{"above MaxMessageBytes", outbox.Config{MaxMessageBytes: 1024}, 2048},
		{"above it with the stored header names", outbox.Config{MaxMessageBytes: 1024,
			Headers: outbox.HeaderNames{MessageID: long('i'), Bucket: long('b'), Sequence: long('s')}}, 600},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			big := message(0, 1)
			big.Value = make([]byte, c.value)
			if n := c.stored.SharedHeaders().RecordSize(big); n <= 1024 {
				t.Fatalf("record size %d with the stored names; the case needs one above 1024", n)
			}
			s := memory.New(1)
			if err := s.Put(big, message(0, 2)); err != nil {
				t.Fatal(err)
			}
			s.SetConfig(c.stored)
			p := &recorder{}
			r := newRelay(t, s, p, relay.DeadlineMargin(0))
			if _, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(p.seqs(0)) != "[2]" || len(s.Parked(0)) != 1 || !strings.Contains(s.Parked(0)[0].Reason, "MaxMessageBytes") {
				t.Fatalf("published %v parked %+v; want the first parked above MaxMessageBytes", p.seqs(0), s.Parked(0))
			}
		})
	}
	// The second case's record fits under the default names.
	m := message(0, 1)
	m.Value = make([]byte, 600)
	if n := (outbox.HeaderNames{}).RecordSize(m); n > 1024 {
		t.Fatalf("record size %d with the default names; the second case needs one within 1024", n)
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		err  error
		want outbox.ErrorClass
	}{
		{errors.New("unknown"), outbox.Retriable},
		{context.DeadlineExceeded, outbox.Retriable},
		{outbox.WithClass(errors.New("x"), outbox.Fatal), outbox.Fatal},
		{fmt.Errorf("wrapped: %w", outbox.WithClass(errors.New("x"), outbox.RecordPermanent)), outbox.RecordPermanent},
		{&outbox.PublishError{Err: outbox.WithClass(errors.New("x"), outbox.Fatal)}, outbox.Fatal},
	}
	for _, c := range cases {
		if got := outbox.Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if outbox.WithClass(nil, outbox.Fatal) != nil {
		t.Error("WithClass(nil) is not nil")
	}
}

func TestDeadlineMarginStopsClaimingWork(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, 1)
	r := newRelay(t, s, &recorder{}, relay.DeadlineMargin(time.Second))
	if _, err := r.DrainBucket(ctxFor(t, 500*time.Millisecond), 0); !errors.Is(err, outbox.ErrDeadline) {
		t.Fatalf("err = %v, want ErrDeadline", err)
	}
	if l := s.Lease(0); l.Owner != "" {
		t.Fatalf("lease taken although the deadline was inside the margin: %+v", l)
	}
}

func TestBucketOutOfRange(t *testing.T) {
	r := newRelay(t, memory.New(4), &recorder{})
	var re *outbox.BucketRangeError
	if _, err := r.DrainBucket(context.Background(), 4); !errors.As(err, &re) || re.Bucket != 4 || re.BucketCount != 4 {
		t.Fatalf("err = %v, want a BucketRangeError", err)
	}
}

func TestOptionValidation(t *testing.T) {
	cases := []struct {
		name   string
		opt    relay.Option
		option string
	}{
		{"batch zero", relay.BatchSize(0), "BatchSize"},
		{"batch huge", relay.BatchSize(10001), "BatchSize"},
		{"short lease", relay.LeaseDuration(time.Millisecond), "LeaseDuration"},
		{"renew too slow", relay.LeaseRenewInterval(26 * time.Second), "LeaseRenewInterval"},
		{"gap zero", relay.GapTimeout(0), "GapTimeout"},
		{"negative margin", relay.DeadlineMargin(-1), "DeadlineMargin"},
		{"empty id", relay.RelayID(""), "RelayID"},
		{"concurrency", relay.Concurrency(-1), "Concurrency"},
		{"max in flight", relay.MaxInFlight(0), "MaxInFlight"},
		{"policy", relay.OnRecordError(7), "OnRecordError"},
		{"backoff", relay.RetryBackoff(time.Second, time.Millisecond), "RetryBackoff"},
		{"park stuck after", relay.ParkStuckAfter(-time.Second), "ParkStuckAfter"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := relay.New(context.Background(), memory.New(8), &recorder{}, c.opt)
			var oe *outbox.OptionError
			if !errors.As(err, &oe) || oe.Option != c.option {
				t.Fatalf("err = %v, want an OptionError for %s", err, c.option)
			}
		})
	}
}

// checkingPublisher is a ConfigChecker: it records the config item it is
// checked against and answers err.
type checkingPublisher struct {
	recorder
	err     error
	checked []outbox.Config
}

func (p *checkingPublisher) CheckConfig(c outbox.Config) error {
	p.checked = append(p.checked, c)
	return p.err
}

// relay.New checks a ConfigChecker publisher against the config item it
// runs on, and refuses it on an error: a publisher with other shared
// settings than the item's cannot publish for it.
func TestNewRelayChecksThePublishersConfig(t *testing.T) {
	s := memory.New(4)
	s.SetConfig(outbox.Config{BucketCount: 4, MaxMessageBytes: 2048})
	ok := &checkingPublisher{}
	if _, err := relay.New(context.Background(), s, ok); err != nil {
		t.Fatal(err)
	}
	if len(ok.checked) != 1 || ok.checked[0].MaxMessageBytes != 2048 {
		t.Fatalf("checked against %+v, want the config item once", ok.checked)
	}
	refusal := &outbox.MisconfigurationError{Setting: "MaxMessageBytes", Configured: "1048576", Stored: "2048"}
	if _, err := relay.New(context.Background(), s, &checkingPublisher{err: refusal}); !errors.Is(err, refusal) {
		t.Fatalf("relay.New = %v, want the publisher's refusal", err)
	}
}

// A nil store or publisher, also a nil pointer in the interface (the
// *recorder a failed constructor would return), fails relay.New with an
// OptionError instead of a panic at the first drain.
func TestNewRelayRefusesNilCollaborators(t *testing.T) {
	var nilPub *recorder
	var nilStore *memory.Store
	cases := []struct {
		name  string
		store outbox.Store
		pub   outbox.Publisher
		want  string
	}{
		{"nil publisher", memory.New(1), nil, "publisher"},
		{"nil pointer publisher", memory.New(1), nilPub, "publisher"},
		{"nil store", nil, &recorder{}, "store"},
		{"nil pointer store", nilStore, &recorder{}, "store"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var oe *outbox.OptionError
			r, err := relay.New(context.Background(), c.store, c.pub)
			if !errors.As(err, &oe) || oe.Option != "relay.New" || !strings.Contains(oe.Reason, c.want) || r != nil {
				t.Fatalf("relay.New = %v, %v; want an OptionError naming the %s", r, err, c.want)
			}
		})
	}
}

func TestDrainBucketsConcurrently(t *testing.T) {
	s := memory.New(8)
	for b := 0; b < 8; b++ {
		fill(t, s, b, span(1, 50)...)
	}
	p := &recorder{}
	r := newRelay(t, s, p, relay.Concurrency(3), relay.DeadlineMargin(0))
	errs := r.DrainBuckets(ctxFor(t, 10*time.Second), []int{0, 1, 2, 3, 4, 5, 6, 7, 7, 9})
	if len(errs) != 1 {
		t.Fatalf("errors = %v; want only bucket 9 (out of range)", errs)
	}
	var re *outbox.BucketRangeError
	if !errors.As(errs[9], &re) {
		t.Fatalf("bucket 9: %v", errs[9])
	}
	for b := 0; b < 8; b++ {
		if got := fmt.Sprint(p.seqs(b)); got != fmt.Sprint(span(1, 50)) {
			t.Fatalf("bucket %d published %s", b, got)
		}
	}
}

// Two drains of one bucket through the same Relay (same owner id, so the
// store's lease cannot tell them apart) never run at once; the second waits
// for the first and then drains what is left.
func TestSameRelayDrainsABucketOnceAtATime(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, 1)
	entered := make(chan struct{})
	release := make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	var active atomic.Int32
	p := &recorder{before: func(ctx context.Context, msgs []outbox.Message) (int, error, bool) {
		if active.Add(1) > 1 {
			t.Error("two publishes of one bucket at once")
		}
		defer active.Add(-1)
		if first.CompareAndSwap(true, false) {
			close(entered)
			<-release
		}
		return 0, nil, false
	}}
	r := newRelay(t, s, p, relay.DeadlineMargin(0))
	done := make(chan error, 1)
	go func() { _, err := r.DrainBucket(ctxFor(t, 10*time.Second), 0); done <- err }()
	<-entered
	fill(t, s, 0, 2)
	second := make(chan error, 1)
	go func() { _, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0); second <- err }()
	select {
	case err := <-second:
		t.Fatalf("second drain returned while the first ran: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second drain: %v", err)
	}
	if got := fmt.Sprint(p.seqs(0)); got != "[1 2]" {
		t.Fatalf("published %s", got)
	}
}

func TestDrainBucketToStopsOnceTheTargetIsDecided(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, span(1, 100)...)
	p := &recorder{}
	r := newRelay(t, s, p, relay.DeadlineMargin(0), relay.BatchSize(10))
	st, err := r.DrainBucketTo(ctxFor(t, 5*time.Second), 0, 45)
	if err != nil {
		t.Fatal(err)
	}
	if st.Head != 50 || fmt.Sprint(p.seqs(0)) != fmt.Sprint(span(1, 50)) {
		t.Fatalf("head %d, published %v; want to stop after the batch that reached 45", st.Head, p.seqs(0))
	}
	if s.Count(0) != 50 {
		t.Fatalf("%d left, want 50", s.Count(0))
	}
	// A target already behind the head costs an acquire and a release.
	if st, err := r.DrainBucketTo(ctxFor(t, 5*time.Second), 0, 30); err != nil || st.Published != 0 {
		t.Fatalf("%+v %v", st, err)
	}
	if _, err := r.DrainBucket(ctxFor(t, 5*time.Second), 0); err != nil || s.Count(0) != 0 {
		t.Fatalf("drain until empty: %v, %d left", err, s.Count(0))
	}
}

// configCounter is a store that counts its config item reads.
type configCounter struct {
	outbox.Store
	reads atomic.Int32
}

func (c *configCounter) Config(ctx context.Context) (outbox.Config, error) {
	c.reads.Add(1)
	return c.Store.Config(ctx)
}

func TestRelayStoredConfig(t *testing.T) {
	ctx := context.Background()
	mem := memory.New(8)
	stored, err := mem.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("default reads the config item", func(t *testing.T) {
		s := &configCounter{Store: mem}
		if _, err := relay.New(ctx, s, &recorder{}); err != nil {
			t.Fatal(err)
		}
		if n := s.reads.Load(); n != 1 {
			t.Fatalf("relay.New read the config item %d times, want 1", n)
		}
	})
	t.Run("given: no read", func(t *testing.T) {
		s := &configCounter{Store: mem}
		r, err := relay.New(ctx, s, &recorder{}, relay.StoredConfig(stored))
		if err != nil {
			t.Fatal(err)
		}
		if n := s.reads.Load(); n != 0 {
			t.Fatalf("relay.New read the config item %d times with StoredConfig, want 0", n)
		}
		if r.BucketCount() != 8 || r.Mode() != stored.Mode {
			t.Fatalf("relay has %d buckets in %v, want the given config's 8 in %v", r.BucketCount(), r.Mode(), stored.Mode)
		}
	})
	t.Run("given: checked as a read one", func(t *testing.T) {
		var me *outbox.MisconfigurationError
		if _, err := relay.New(ctx, mem, &recorder{}, relay.StoredConfig(outbox.Config{})); !errors.As(err, &me) || me.Setting != "BucketCount" {
			t.Fatalf("err = %v for an empty config item, want a MisconfigurationError for BucketCount", err)
		}
	})
}

// barrierStore holds every drain's first lease read until n of them are
// waiting (all the drains have begun), and its first read of the bucket
// until n of those are waiting (none has finished), and records the limit
// of each bucket's first read.
type barrierStore struct {
	outbox.Store
	n                int
	mu               sync.Mutex
	looks, reads     int
	allLook, allRead chan struct{}
	first            map[int]int
}

func (b *barrierStore) arrive(count *int, all chan struct{}) {
	b.mu.Lock()
	*count++
	if *count == b.n {
		close(all)
	}
	b.mu.Unlock()
}

func (b *barrierStore) ReadLease(ctx context.Context, bucket int) (outbox.Lease, error) {
	b.arrive(&b.looks, b.allLook)
	select {
	case <-b.allLook:
	case <-ctx.Done():
		return outbox.Lease{}, ctx.Err()
	}
	return b.Store.ReadLease(ctx, bucket)
}

func (b *barrierStore) Pending(ctx context.Context, bucket int, after int64, limit int) ([]outbox.Entry, bool, error) {
	b.mu.Lock()
	_, seen := b.first[bucket]
	if !seen {
		b.first[bucket] = limit
	}
	b.mu.Unlock()
	if !seen {
		b.arrive(&b.reads, b.allRead)
		select {
		case <-b.allRead:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	return b.Store.Pending(ctx, bucket, after, limit)
}

// TestDrainBucketsFollowsTheBucketsWithinMaxInFlight (issue 28, item 2):
// by default DrainBuckets drains every bucket it is given at once — 16
// here, whose drains all wait at a barrier in their first lease read and
// again in their first read of the bucket, which the former default of 8
// at once never passed — and the drains running share MaxInFlight: while
// all 16 run, each read takes at most MaxInFlight / 16 messages. Before,
// 8 drains at a time held the rest back (a drain waiting on a gap held its
// slot: the scale stage's p99 grew with the bucket count).
func TestDrainBucketsFollowsTheBucketsWithinMaxInFlight(t *testing.T) {
	const buckets, budget = 16, 64
	ctx := ctxFor(t, time.Minute)
	mem := memory.New(buckets)
	s := &barrierStore{Store: mem, n: buckets, allLook: make(chan struct{}), allRead: make(chan struct{}), first: map[int]int{}}
	pub := &recorder{}
	r := newRelay(t, s, pub, relay.MaxInFlight(budget), relay.DeadlineMargin(0))
	var all []int
	for b := range buckets {
		fill(t, mem, b, span(1, 10)...)
		all = append(all, b)
	}
	if errs := r.DrainBuckets(ctx, all); len(errs) > 0 {
		t.Fatalf("drains failed: %v (with fewer drains at once than buckets, the barriers are never passed)", errs)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for b, limit := range s.first {
		if limit > budget/buckets {
			t.Errorf("bucket %d's first read took up to %d messages, above MaxInFlight/%d = %d", b, limit, buckets, budget/buckets)
		}
	}
	for b := range buckets {
		if got := pub.seqs(b); len(got) != 10 {
			t.Errorf("bucket %d: published %v, want 1..10", b, got)
		}
	}
}
