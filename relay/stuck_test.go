package relay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// missingTopic is a publisher whose topic "gone" does not exist: every
// message for it fails with a Fatal (topic-wide) error; others go out.
func missingTopic() *recorder {
	fatal := outbox.WithClass(errors.New(`topic "gone" does not exist`), outbox.Fatal)
	return &recorder{before: func(ctx context.Context, msgs []outbox.Message) (int, error, bool) {
		for i, m := range msgs {
			if m.Topic == "gone" {
				return i, &outbox.PublishError{Bucket: m.Bucket, Sequence: m.Sequence, MessageID: m.ID, Err: fatal}, true
			}
		}
		return 0, nil, false
	}}
}

// stuckBucket is bucket 0 with messages 1..3, 2 for the missing topic.
func stuckBucket(t *testing.T) (*memory.Store, outbox.Message) {
	t.Helper()
	s := memory.New(1)
	fill(t, s, 0, 1, 3)
	stuck := message(0, 2)
	stuck.Topic = "gone"
	if err := s.Put(stuck); err != nil {
		t.Fatal(err)
	}
	return s, stuck
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines(level string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, "level="+level) {
			out = append(out, l)
		}
	}
	return out
}

// A bucket stopped by a topic-wide error carries the reason on its lease,
// is logged once a minute with a count (not twice per drain), and an
// operator's Park of its head lets the rest flow; the parked message keeps
// its id for a replay.
func TestStuckBucketIsNamedRateLimitedAndParkedByAnOperator(t *testing.T) {
	s, stuck := stuckBucket(t)
	clk := &fakeClock{}
	logs := &syncBuffer{}
	p := missingTopic()
	r := newRelay(t, s, p, relay.DeadlineMargin(0), relay.WithClock(clk), relay.ResumeReleased(false),
		relay.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	ctx := ctxFor(t, 10*time.Second)
	for i := range 5 {
		_, err := r.DrainBucket(ctx, 0)
		var pe *outbox.PublishError
		if !errors.As(err, &pe) || pe.Sequence != 2 || outbox.Classify(err) != outbox.Fatal {
			t.Fatalf("drain %d: err = %v, want the bucket stopped at 2 (Fatal)", i, err)
		}
		clk.Advance(10 * time.Second)
	}
	l := s.Lease(0)
	if !l.Stuck.Current(l.Head) || l.Stuck.Sequence != 2 || l.Stuck.Class != outbox.Fatal || !strings.Contains(l.Stuck.Reason, `"gone" does not exist`) ||
		l.Stuck.Topic != "gone" || l.Stuck.MessageID != stuck.ID || l.Stuck.Since.IsZero() {
		t.Fatalf("lease %+v: want the reason it stopped at 2", l)
	}
	if e := logs.lines("ERROR"); len(e) != 1 || !strings.Contains(e[0], "failures=1") {
		t.Fatalf("5 drains in 50s logged %d ERROR lines, want 1:\n%s", len(e), strings.Join(e, "\n"))
	}
	clk.Advance(20 * time.Second)
	if _, err := r.DrainBucket(ctx, 0); err == nil {
		t.Fatal("the bucket drained with its topic missing")
	}
	if e := logs.lines("ERROR"); len(e) != 2 || !strings.Contains(e[1], "failures=5") {
		t.Fatalf("after a minute: %d ERROR lines, want 2, the second counting 5 failures:\n%s", len(e), strings.Join(e, "\n"))
	}
	if got := s.Lease(0).Stuck; got.Count != 6 || !got.Since.Equal(l.Stuck.Since) {
		t.Fatalf("stuck %+v: want 6 failures since %v", got, l.Stuck.Since)
	}

	// Park refuses what is not the first pending message, writing nothing.
	var pke *relay.ParkError
	if _, err := r.Park(ctx, 0, 3, ""); !errors.As(err, &pke) || pke.FirstPending != 2 {
		t.Fatalf("Park(3) = %v, want a *ParkError naming 2", err)
	}
	if _, err := r.Park(ctx, 0, 1, ""); !errors.As(err, &pke) || pke.FirstPending != 2 {
		t.Fatalf("Park(1) = %v, want a *ParkError naming 2", err)
	}
	if len(s.Parked(0)) != 0 {
		t.Fatal("a refused Park parked something")
	}
	parked, err := r.Park(ctx, 0, 0, "topic typo")
	if err != nil || parked.Sequence != 2 || parked.Message.ID != stuck.ID {
		t.Fatalf("Park(head) = %+v, %v", parked, err)
	}
	if ps := s.Parked(0); len(ps) != 1 || !strings.Contains(ps[0].Reason, "topic typo") || !strings.Contains(ps[0].Reason, "does not exist") || ps[0].Attempts != 6 {
		t.Fatalf("parked %+v: want the operator's and the bucket's reasons, 6 attempts", ps)
	}
	if _, err := r.DrainBucket(ctx, 0); err != nil {
		t.Fatalf("drain after park: %v", err)
	}
	if got := fmt.Sprint(p.seqs(0)); got != "[1 3]" {
		t.Fatalf("published %s, want [1 3]", got)
	}
	if l := s.Lease(0); l.Stuck.Current(l.Head) {
		t.Fatalf("lease %+v still reads stuck", l)
	}
	if _, err := r.Park(ctx, 0, 0, ""); !errors.As(err, &pke) || pke.FirstPending != 0 {
		t.Fatalf("Park of an empty bucket = %v, want a *ParkError", err)
	}
}

// ParkStuckAfter parks the message after it has stopped its bucket that
// long (across drains), and not before.
func TestParkStuckAfter(t *testing.T) {
	s, _ := stuckBucket(t)
	clk := &fakeClock{}
	p := missingTopic()
	r := newRelay(t, s, p, relay.DeadlineMargin(0), relay.WithClock(clk), relay.ParkStuckAfter(5*time.Minute))
	ctx := ctxFor(t, 10*time.Second)
	for range 4 {
		if _, err := r.DrainBucket(ctx, 0); err == nil {
			t.Fatal("parked before ParkStuckAfter")
		}
		clk.Advance(time.Minute)
	}
	clk.Advance(time.Minute)
	st, err := r.DrainBucket(ctx, 0)
	if err != nil || st.Parked != 1 {
		t.Fatalf("after 5 minutes: %+v, %v; want the message parked and the bucket drained", st, err)
	}
	if got := fmt.Sprint(p.seqs(0)); got != "[1 3]" {
		t.Fatalf("published %s, want [1 3]", got)
	}
	if ps := s.Parked(0); len(ps) != 1 || ps[0].Sequence != 2 || ps[0].Class != outbox.Fatal || !strings.Contains(ps[0].Reason, "ParkStuckAfter") {
		t.Fatalf("parked %+v", ps)
	}
}

// A drain stopped by its caller's cancellation is a shutdown: logged at
// INFO, not ERROR.
func TestCancelledDrainIsNotAnError(t *testing.T) {
	s := memory.New(1)
	fill(t, s, 0, 1)
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	p := &recorder{before: func(pctx context.Context, msgs []outbox.Message) (int, error, bool) {
		cancel()
		return 0, fmt.Errorf("produce: %w", context.Canceled), true
	}}
	r := newRelay(t, s, p, relay.DeadlineMargin(0),
		relay.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if _, err := r.DrainBucket(ctx, 0); err == nil {
		t.Fatal("a cancelled drain succeeded")
	}
	if e := logs.lines("ERROR"); len(e) != 0 {
		t.Fatalf("a cancelled drain logged ERROR:\n%s", strings.Join(e, "\n"))
	}
}

// A sweep leaves a bucket that a drain stopped with a Fatal error alone for
// stoppedRetry (5 s at this PollInterval), so that its lease is free for
// outbox park and outbox drain between attempts, and tries it again after.
func TestSweepRetriesAStoppedBucketAfterABackoff(t *testing.T) {
	s, _ := stuckBucket(t)
	clk := &fakeClock{}
	var attempts atomic.Int32
	p := missingTopic()
	fail := p.before
	p.before = func(ctx context.Context, msgs []outbox.Message) (int, error, bool) {
		if slices.ContainsFunc(msgs, func(m outbox.Message) bool { return m.Topic == "gone" }) {
			attempts.Add(1)
		}
		return fail(ctx, msgs)
	}
	r := newRelay(t, s, p, relay.DeadlineMargin(0), relay.WithClock(clk), relay.PollInterval(200*time.Millisecond), relay.ResumeReleased(false),
		relay.ResumeWindow(relay.MinResumeWindow))
	ctx := ctxFor(t, 10*time.Second)
	sweep := func() relay.SweepReport {
		t.Helper()
		rep, err := r.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := sweep(); attempts.Load() != 1 || rep.Errors[0] == nil {
		t.Fatalf("first sweep: %d attempts at 2, errors %v; want 1 and bucket 0 stopped", attempts.Load(), rep.Errors)
	}
	for i := range 24 { // 4.8 s of sweeps at PollInterval
		clk.Advance(200 * time.Millisecond)
		if rep := sweep(); !slices.Contains(rep.Skipped, 0) {
			t.Fatalf("the sweep %v after the bucket stopped did not skip it: %+v", time.Duration(i+1)*200*time.Millisecond, rep)
		}
	}
	if n := attempts.Load(); n != 1 {
		t.Fatalf("sweeps within 5 s of the stop tried the bucket %d more times; want none", n-1)
	}
	clk.Advance(200 * time.Millisecond)
	sweep()
	if n := attempts.Load(); n != 2 {
		t.Fatalf("5 s after the stop: %d attempts; want the sweep to try the bucket again", n)
	}
	// An operator parks the head (another process): the next sweep drains
	// the rest at once.
	op := newRelay(t, s, p, relay.DeadlineMargin(0), relay.WithClock(clk), relay.RelayID("operator"),
		relay.ResumeWindow(relay.MinResumeWindow))
	if _, err := op.Park(ctx, 0, 0, "topic typo"); err != nil {
		t.Fatalf("Park: %v", err)
	}
	clk.Advance(200 * time.Millisecond)
	if rep := sweep(); len(rep.Errors) != 0 || fmt.Sprint(p.seqs(0)) != "[1 3]" {
		t.Fatalf("the sweep after the park: %+v, published %v; want the rest of the bucket published", rep, p.seqs(0))
	}
}
