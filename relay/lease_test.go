package relay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/seam"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// manualSched is a seam.Scheduler whose time moves only when the test calls
// Advance: a drain's ResumeWindow, its resumed-publish bound and the
// watchdog that looks at the lease all wait on it, so a test decides what
// happens before a window ends instead of racing the machine's speed.
type manualSched struct {
	mu       sync.Mutex
	cond     *sync.Cond
	now      time.Time
	sleeping map[*int]time.Time // until when each Sleep waits
	timers   []*manualTimer
}

type manualTimer struct {
	s      *manualSched
	at     time.Time
	f      func()
	active bool
}

func newManualSched() *manualSched {
	s := &manualSched{now: base, sleeping: map[*int]time.Time{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *manualSched) option() relay.Option {
	return seam.With(seam.Hooks{Scheduler: s}).(relay.Option)
}

func (s *manualSched) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *manualSched) Go(f func()) func() {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	return func() { <-done }
}

func (s *manualSched) Sleep(stop <-chan struct{}, d time.Duration) bool {
	s.mu.Lock()
	until := s.now.Add(d)
	key, stopped, returned := new(int), false, make(chan struct{})
	s.sleeping[key] = until
	s.cond.Broadcast()
	go func() {
		select {
		case <-stop:
			s.mu.Lock()
			stopped = true
			s.cond.Broadcast()
			s.mu.Unlock()
		case <-returned:
		}
	}()
	for !stopped && s.now.Before(until) {
		s.cond.Wait()
	}
	reached := !s.now.Before(until)
	delete(s.sleeping, key)
	s.cond.Broadcast()
	s.mu.Unlock()
	close(returned)
	return reached
}

func (s *manualSched) AfterFunc(d time.Duration, f func()) seam.Timer {
	s.mu.Lock()
	t := &manualTimer{s: s, f: f}
	s.timers = append(s.timers, t)
	s.mu.Unlock()
	t.Reset(d)
	return t
}

func (t *manualTimer) Stop() bool {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

func (t *manualTimer) Reset(d time.Duration) {
	t.s.mu.Lock()
	t.at, t.active = t.s.now.Add(d), true
	t.s.mu.Unlock()
	t.s.Advance(0)
}

// Advance moves time by d, fires the timers due and wakes the sleepers due.
func (s *manualSched) Advance(d time.Duration) {
	s.mu.Lock()
	s.now = s.now.Add(d)
	var due []func()
	for _, t := range s.timers {
		if t.active && !t.at.After(s.now) {
			t.active = false
			due = append(due, t.f)
		}
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	for _, f := range due {
		go f()
	}
}

// sleepers counts the Sleeps that wait at least d from now.
func (s *manualSched) sleepers(d time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, until := range s.sleeping {
		if !until.Before(s.now.Add(d)) {
			n++
		}
	}
	return n
}

// eventually waits (real time, generously) until cond holds; it reports
// whether it did. It only bounds how long a failing test takes.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// overlapPublisher acknowledges everything, counts publishes per sequence,
// counts overlaps (a publish of a bucket starting while another of the same
// bucket is in flight: I4), and holds a publish that carries sequence hold
// until release is closed.
type overlapPublisher struct {
	mu       sync.Mutex
	sent     map[int64]int
	inflight map[int]int
	overlaps int
	hold     int64
	held     chan struct{}
	release  chan struct{}
	once     sync.Once
}

func newOverlapPublisher() *overlapPublisher {
	return &overlapPublisher{sent: map[int64]int{}, inflight: map[int]int{}, held: make(chan struct{}), release: make(chan struct{})}
}

func (p *overlapPublisher) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	b := msgs[0].Bucket
	p.mu.Lock()
	if p.inflight[b] > 0 {
		p.overlaps++
	}
	p.inflight[b]++
	hold := p.hold != 0 && slices.ContainsFunc(msgs, func(m outbox.Message) bool { return m.Sequence == p.hold })
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inflight[b]--
		p.mu.Unlock()
	}()
	if hold {
		p.once.Do(func() { close(p.held) })
		<-p.release
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.sent[m.Sequence]++
	}
	return len(msgs), nil
}

func (p *overlapPublisher) overlapCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.overlaps
}

func (p *overlapPublisher) checkOnce(t *testing.T, seqs []int64) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range seqs {
		if p.sent[s] != 1 {
			t.Errorf("sequence %d published %d times, want once", s, p.sent[s])
		}
	}
}

type drainResult struct {
	st  relay.DrainStats
	err error
}

func drainAsync(ctx context.Context, r *relay.Relay) chan drainResult {
	ch := make(chan drainResult, 1)
	go func() {
		st, err := r.DrainBucket(ctx, 0)
		ch <- drainResult{st, err}
	}()
	return ch
}

// TestOwedResumeWaitSurvivesAContainerSwitch (issue 16, defect 1): the
// sweeper released bucket 0 and resumes it, its publish in flight. A relay
// function container acquires the bucket from the sweeper's release and owes
// the ResumeWindow wait; its invocation ends during the wait (the lease is
// abandoned). The next container, with the same owner id, must not publish
// while the sweeper still may: the wait was owed by the lease's hold, not by
// one process's memory. Before the fix it resumed "its own" lease at once
// and published beside the sweeper.
func TestOwedResumeWaitSurvivesAContainerSwitch(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	s := memory.New(1)
	sched, pub := newManualSched(), newOverlapPublisher()
	opts := []relay.Option{sched.option(), relay.HolderWait(0)}
	sweeper := newRelay(t, s, pub, append(opts, relay.RelayID("sweeper"))...)
	first := newRelay(t, s, pub, append(opts, relay.RelayID("relay/fn"))...)
	second := newRelay(t, s, pub, append(opts, relay.RelayID("relay/fn"))...)
	const window = relay.DefaultResumeWindow

	fill(t, s, 0, 1, 2, 3)
	if _, err := sweeper.DrainBucket(ctx, 0); err != nil {
		t.Fatal(err)
	}
	fill(t, s, 0, 4, 5, 6)
	pub.hold = 4
	sweeping := drainAsync(ctx, sweeper) // resumes its release: no write
	<-pub.held

	fctx, cancelFirst := context.WithCancel(ctx)
	firstDone := drainAsync(fctx, first)
	if !eventually(func() bool { return sched.sleepers(window) == 1 }) {
		t.Fatal("the first container does not wait out the sweeper's ResumeWindow")
	}
	cancelFirst() // its invocation ends while it owes the wait
	if r := <-firstDone; !r.st.Acquired || !errors.Is(r.err, outbox.ErrDeadline) {
		t.Fatalf("first container: acquired %v, err %v; want an acquisition ended by its deadline", r.st.Acquired, r.err)
	}

	secondDone := drainAsync(ctx, second)
	if !eventually(func() bool {
		return pub.overlapCount() > 0 || sched.sleepers(window) == 1 || len(secondDone) > 0
	}) {
		t.Fatal("the second container neither published nor waited")
	}
	if n := pub.overlapCount(); n > 0 {
		t.Errorf("the second container published beside the sweeper (%d overlapping publishes of bucket 0)", n)
	}
	close(pub.release)
	if r := <-sweeping; r.err != nil || !r.st.Resumed {
		t.Fatalf("sweeper: resumed %v, err %v", r.st.Resumed, r.err)
	}
	sched.Advance(window)
	if r := <-secondDone; r.err != nil {
		t.Fatalf("second container: %v", r.err)
	}
	pub.checkOnce(t, span(1, 6))
}

// TestConcurrentInvocationsOfOneFunctionExcludeEachOther (issue 16, defect
// 5): AWS orders stream records per item, so two invocations of the relay
// function (one owner id) can drain one bucket at once. Neither a write-free
// resume nor an acquisition by the same owner name may let the second
// publish beside the first. Before the fix the second resumed the shared
// release, or "re-acquired" the held lease, and published at once.
func TestConcurrentInvocationsOfOneFunctionExcludeEachOther(t *testing.T) {
	for _, tc := range []struct {
		name   string
		resume bool
	}{{"released lease", true}, {"held lease", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			s := memory.New(1)
			sched, pub := newManualSched(), newOverlapPublisher()
			opts := []relay.Option{sched.option(), relay.HolderWait(0), relay.RelayID("relay/fn"), relay.ResumeReleased(tc.resume)}
			a, b := newRelay(t, s, pub, opts...), newRelay(t, s, pub, opts...)
			const window = relay.DefaultResumeWindow

			fill(t, s, 0, 1, 2, 3)
			if _, err := a.DrainBucket(ctx, 0); err != nil {
				t.Fatal(err)
			}
			fill(t, s, 0, 4, 5, 6)
			pub.hold = 4
			aDone := drainAsync(ctx, a)
			<-pub.held
			bDone := drainAsync(ctx, b)
			if !eventually(func() bool { return pub.overlapCount() > 0 || sched.sleepers(window) == 1 || len(bDone) > 0 }) {
				t.Fatal("the second invocation neither published, waited nor returned")
			}
			if n := pub.overlapCount(); n > 0 {
				t.Errorf("two invocations of one function published bucket 0 at once (%d overlaps)", n)
			}
			close(pub.release)
			if r := <-aDone; r.err != nil {
				t.Fatalf("first invocation: %v", r.err)
			}
			sched.Advance(window)
			r := <-bDone
			switch {
			case tc.resume && r.err != nil:
				t.Fatalf("second invocation: %v", r.err)
			case !tc.resume && !errors.Is(r.err, outbox.ErrLeaseHeld):
				t.Fatalf("second invocation on a held lease: %v, want ErrLeaseHeld (a wake-up for the holder)", r.err)
			}
			pub.checkOnce(t, span(1, 6))
		})
	}
}

// markGate is a store whose MarkPublished of a batch that contains sequence
// hold waits until its context ends or release is closed; it logs the
// events the test orders.
type markGate struct {
	outbox.Store
	name    string
	hold    int64
	entered chan struct{}
	release chan struct{}
	log     *eventLog
}

type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *eventLog) has(e string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.events, e)
}

func (l *eventLog) index(e string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Index(l.events, e)
}

func (g *markGate) MarkPublished(ctx context.Context, bucket int, seqs []int64, now time.Time) error {
	if g.hold == 0 || !slices.Contains(seqs, g.hold) {
		return g.Store.MarkPublished(ctx, bucket, seqs, now)
	}
	close(g.entered)
	var err error
	select {
	case <-ctx.Done():
		err = ctx.Err()
	case <-g.release:
		err = g.Store.MarkPublished(ctx, bucket, seqs, now)
	}
	g.log.add(g.name + ": mark ended")
	return err
}

func (g *markGate) Pending(ctx context.Context, bucket int, after int64, limit int) ([]outbox.Entry, bool, error) {
	g.log.add(g.name + ": read")
	return g.Store.Pending(ctx, bucket, after, limit)
}

// TestResumerMarkBoundedByWindow (issue 16, defect 2): relay a resumes
// bucket 0, Kafka acknowledges 4..6 inside its window, and its tombstone
// write is slow. Relay b acquires from a's release and waits ResumeWindow
// before it reads. a's marking must end (done or cancelled) before that
// read, or b reads 4..6 as pending while a's tombstones are still to land.
// Before the fix the marking ran on the drain's context, unbounded.
func TestResumerMarkBoundedByWindow(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	s := memory.New(1)
	sched, pub, log := newManualSched(), newOverlapPublisher(), &eventLog{}
	ga := &markGate{Store: s, name: "a", entered: make(chan struct{}), release: make(chan struct{}), log: log}
	gb := &markGate{Store: s, name: "b", log: log}
	const window = relay.DefaultResumeWindow
	clk := &fakeClock{} // leases never expire while the test waits
	a := newRelay(t, ga, pub, sched.option(), relay.WithClock(clk), relay.RelayID("a"), relay.HolderWait(0))
	b := newRelay(t, gb, pub, sched.option(), relay.WithClock(clk), relay.RelayID("b"), relay.HolderWait(0))

	fill(t, s, 0, 1, 2, 3)
	if _, err := a.DrainBucket(ctx, 0); err != nil {
		t.Fatal(err)
	}
	fill(t, s, 0, 4, 5, 6)
	ga.hold = 4
	aDone := drainAsync(ctx, a) // resumes; Kafka acknowledges at once
	<-ga.entered
	bDone := drainAsync(ctx, b)
	if !eventually(func() bool { return sched.sleepers(window) == 1 }) {
		t.Fatal("b does not wait ResumeWindow after acquiring from a's release")
	}
	sched.Advance(window / 4) // a's watchdog looks: the lease is b's
	sched.Advance(window / 4) // a's bound: half a window after its look
	eventually(func() bool { return log.has("a: mark ended") })
	sched.Advance(window / 2) // b's wait is over: it reads
	rb := <-bDone
	close(ga.release)
	ra := <-aDone
	if rb.err != nil || !rb.st.Acquired || !ra.st.Resumed {
		t.Fatalf("a resumed %v; b acquired %v, err %v: the race was not set up", ra.st.Resumed, rb.st.Acquired, rb.err)
	}
	if m, r := log.index("a: mark ended"), log.index("b: read"); m < 0 || m > r {
		t.Fatalf("events %v: a's tombstone write was still pending when b read the bucket", log.events)
	}
	if ra.err == nil || !strings.Contains(ra.err.Error(), "window") {
		t.Errorf("a's drain returned %v; want its marking reported cut off by its window", ra.err)
	}
}

// TestLeaseDurationMustOutlastResumeWindow (issue 16, defect 4): a takeover
// at expiry owes no ResumeWindow wait, so the lease must outlast the window
// its holder owed, plus the clock skew a contender may have.
func TestLeaseDurationMustOutlastResumeWindow(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	common := []relay.Option{relay.LeaseRenewInterval(time.Second), relay.LeaseMargin(time.Second), relay.MaxClockSkew(time.Second)}
	_, err := relay.New(ctx, memory.New(1), &recorder{}, append(common, relay.LeaseDuration(10*time.Second), relay.ResumeWindow(10*time.Second))...)
	var oe *outbox.OptionError
	if !errors.As(err, &oe) || oe.Option != "LeaseDuration" || !strings.Contains(oe.Error(), "ResumeWindow") || !strings.Contains(oe.Error(), "MaxClockSkew") {
		t.Fatalf("LeaseDuration 10s with ResumeWindow 10s: err = %v; want an *OptionError on LeaseDuration naming ResumeWindow and MaxClockSkew", err)
	}
	if _, err := relay.New(ctx, memory.New(1), &recorder{}, append(common, relay.LeaseDuration(11*time.Second), relay.ResumeWindow(10*time.Second))...); err != nil {
		t.Fatalf("LeaseDuration 11s with ResumeWindow 10s and MaxClockSkew 1s: %v", err)
	}
}

// TestWatermarkResumedDrainKeepsProgress (issue 16, defect 6): in
// WatermarkMode a resumed drain's head is the only record of what Kafka
// acknowledged. A resumed drain that stops after acknowledged batches —
// a fatal publish error, a failed read — must keep them, so that the next
// drain goes on from there instead of publishing them again (and a drain
// too long for one invocation still reaches the tail). Before the fix the
// stored head stayed at 3.
func TestWatermarkResumedDrainKeepsProgress(t *testing.T) {
	for _, tc := range []string{"fatal publish error", "read error"} {
		t.Run(tc, func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			mem := memory.New(1)
			st := modeStore{mem, outbox.WatermarkMode}
			var (
				mu    sync.Mutex
				fail  bool
				sent  = map[int64]int{}
				reads int
			)
			pub := &recorder{before: func(ctx context.Context, msgs []outbox.Message) (int, error, bool) {
				mu.Lock()
				defer mu.Unlock()
				if fail && tc == "fatal publish error" && msgs[0].Sequence == 7 {
					return 0, outbox.WithClass(errors.New("topic deleted"), outbox.Fatal), true
				}
				for _, m := range msgs {
					sent[m.Sequence]++
				}
				return len(msgs), nil, true
			}}
			mem.Hook = func(method string, bucket int) error {
				mu.Lock()
				defer mu.Unlock()
				if method == "Pending" && fail && tc == "read error" {
					if reads++; reads == 2 {
						return errors.New("throttled")
					}
				}
				return nil
			}
			r := newRelay(t, st, pub, relay.BatchSize(3), relay.RelayID("a"))
			fill(t, mem, 0, 1, 2, 3)
			if _, err := r.DrainBucket(ctx, 0); err != nil {
				t.Fatal(err)
			}
			fill(t, mem, 0, span(4, 9)...)
			mu.Lock()
			fail = true
			mu.Unlock()
			stats, err := r.DrainBucket(ctx, 0)
			if err == nil || !stats.Resumed {
				t.Fatalf("resumed %v, err %v: want a resumed drain that fails after 4..6", stats.Resumed, err)
			}
			if h := mem.Lease(0).Head; h != 6 {
				t.Errorf("stored head after the failed resumed drain = %d, want 6: what Kafka acknowledged was forgotten", h)
			}
			mu.Lock()
			fail = false
			mu.Unlock()
			if _, err := r.DrainBucket(ctx, 0); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for seq := int64(1); seq <= 9; seq++ {
				if sent[seq] != 1 {
					t.Errorf("sequence %d published %d times, want once", seq, sent[seq])
				}
			}
		})
	}
}

// TestHandoverWaitsResumeWindowFromItsAcquisition (issue 28): a releaser
// resumes its release however long ago it released it — a look at the
// lease, no write — and a process that acquires a lease another process
// released waits ResumeWindow (500 ms by default) from its acquisition,
// however old the release: the releaser may be resuming it right now.
// With a HolderFencer publisher the acquirer does not wait at all: its
// fence shuts the resumer out. Before issue 28 a resume lasted only
// 5 s after a release (a write to stretch it every 1.25 s) and an
// acquirer waited up to 10 s: every hand-over of a busy bucket stalled it.
func TestHandoverWaitsResumeWindowFromItsAcquisition(t *testing.T) {
	const window = relay.DefaultResumeWindow
	for _, tc := range []struct {
		name       string
		after      time.Duration // since a's release, on both clocks
		drainer    string        // "a" (the releaser) or "b" (another container)
		fencer     bool
		resumed    bool
		resumeWait time.Duration
	}{
		{name: "releaser resumes right after its release", drainer: "a", resumed: true},
		{name: "releaser resumes an hour after its release, no write", after: time.Hour, drainer: "a", resumed: true},
		{name: "another container right after the release waits ResumeWindow", drainer: "b", resumeWait: window},
		{name: "another container an hour later waits ResumeWindow", after: time.Hour, drainer: "b", resumeWait: window},
		{name: "another container with a fencing publisher waits nothing", drainer: "b", fencer: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			s := memory.New(1)
			sched, pub, clk := newManualSched(), newOverlapPublisher(), &fakeClock{}
			var p outbox.Publisher = pub
			if tc.fencer {
				p = fencingOverlap{pub}
			}
			opts := []relay.Option{sched.option(), relay.WithClock(clk), relay.RelayID("relay/fn"), relay.HolderWait(0)}
			relays := map[string]*relay.Relay{"a": newRelay(t, s, p, opts...), "b": newRelay(t, s, p, opts...)}
			fill(t, s, 0, 1, 2, 3)
			if st, err := relays["a"].DrainBucket(ctx, 0); err != nil || !st.Acquired {
				t.Fatalf("a's first drain: acquired %v, err %v", st.Acquired, err)
			}
			fill(t, s, 0, 4, 5)
			sched.Advance(tc.after)
			clk.Advance(tc.after)
			done := drainAsync(ctx, relays[tc.drainer])
			if tc.resumeWait > 0 {
				if !eventually(func() bool { return sched.sleepers(tc.resumeWait) == 1 }) {
					t.Fatalf("%s does not wait %v before reading", tc.drainer, tc.resumeWait)
				}
				sched.Advance(tc.resumeWait)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.st.Resumed != tc.resumed || r.st.Acquired == tc.resumed || r.st.ResumeWait != tc.resumeWait {
				t.Errorf("%s's drain %v after the release: resumed %v, acquired %v, waited %v; want resumed %v, waited %v",
					tc.drainer, tc.after, r.st.Resumed, r.st.Acquired, r.st.ResumeWait, tc.resumed, tc.resumeWait)
			}
			pub.checkOnce(t, []int64{1, 2, 3, 4, 5})
		})
	}
}

// fencingOverlap is an overlapPublisher that is a HolderFencer whose
// fences always succeed.
type fencingOverlap struct{ *overlapPublisher }

func (fencingOverlap) FenceHolders(context.Context, int) error { return nil }

// TestResumedPublishEndsHalfAWindowAfterItsLook (issue 28): relay a
// resumes bucket 0 and its publish hangs; relay b acquires the bucket at
// once and waits ResumeWindow. a's watchdog finds the lease taken, so a's
// publish is cancelled half a window after a's look, before b reads at a
// whole window after its acquisition. Without the bound (a publishing on
// after its look) b published beside it.
func TestResumedPublishEndsHalfAWindowAfterItsLook(t *testing.T) {
	const window = relay.DefaultResumeWindow
	ctx := ctxFor(t, time.Minute)
	mem := memory.New(1)
	log := &eventLog{}
	sched, clk := newManualSched(), &fakeClock{}
	entered := make(chan struct{})
	var once sync.Once
	pub := &recorder{before: func(ctx context.Context, msgs []outbox.Message) (int, error, bool) {
		if msgs[0].Sequence != 4 {
			log.add(fmt.Sprint("publish ", msgs[0].Sequence))
			return len(msgs), nil, true
		}
		hang := false
		once.Do(func() { hang = true })
		if !hang {
			log.add("publish 4 again")
			return len(msgs), nil, true
		}
		close(entered)
		<-ctx.Done() // a broker that does not answer
		log.add("a: publish cancelled")
		return 0, ctx.Err(), true
	}}
	ga := &markGate{Store: mem, name: "a", log: log}
	gb := &markGate{Store: mem, name: "b", log: log}
	a := newRelay(t, ga, pub, sched.option(), relay.WithClock(clk), relay.RelayID("a"), relay.HolderWait(0))
	b := newRelay(t, gb, pub, sched.option(), relay.WithClock(clk), relay.RelayID("b"), relay.HolderWait(0))
	fill(t, mem, 0, 1, 2, 3)
	if _, err := a.DrainBucket(ctx, 0); err != nil {
		t.Fatal(err)
	}
	fill(t, mem, 0, 4, 5)
	aDone := drainAsync(ctx, a) // resumes: its look is at scheduler time 0
	<-entered
	bDone := drainAsync(ctx, b)
	if !eventually(func() bool { return sched.sleepers(window) == 1 }) {
		t.Fatal("b does not wait ResumeWindow after acquiring from a's release")
	}
	sched.Advance(window / 4) // a's watchdog looks: the lease is b's
	sched.Advance(window / 4) // half a window after a's look: cancelled
	if !eventually(func() bool { return log.has("a: publish cancelled") }) {
		t.Fatal("a's publish is still running half a window after its look")
	}
	ra := <-aDone
	sched.Advance(window / 2) // b's wait is over
	rb := <-bDone
	if !ra.st.Resumed || rb.err != nil || !rb.st.Acquired || rb.st.ResumeWait != window {
		t.Fatalf("a resumed %v (err %v); b acquired %v, waited %v, err %v: the race was not set up", ra.st.Resumed, ra.err, rb.st.Acquired, rb.st.ResumeWait, rb.err)
	}
	if c, r := log.index("a: publish cancelled"), log.index("b: read"); c < 0 || r < c {
		t.Fatalf("events %v: b read the bucket while a's publish still ran", log.events)
	}
}

// TestResumedPublishRunsOnWhileNobodyTakesTheBucket (issue 28): a resumed
// publish that outlasts many windows is not cut off while the lease stays
// released by its hold: the watchdog's looks (reads, no writes) move its
// bound every quarter window.
func TestResumedPublishRunsOnWhileNobodyTakesTheBucket(t *testing.T) {
	const window = relay.DefaultResumeWindow
	ctx := ctxFor(t, time.Minute)
	mem := memory.New(1)
	s := &gateStore{countingStore: &countingStore{Store: mem, writes: map[string]int{}}}
	sched, clk := newManualSched(), &fakeClock{}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	pub := &recorder{before: func(ctx context.Context, msgs []outbox.Message) (int, error, bool) {
		if msgs[0].Sequence == 4 {
			once.Do(func() { close(entered) })
			select {
			case <-release:
			case <-ctx.Done():
				return 0, ctx.Err(), true
			}
		}
		return len(msgs), nil, true
	}}
	a := newRelay(t, s, pub, sched.option(), relay.WithClock(clk), relay.RelayID("a"), relay.HolderWait(0))
	fill(t, mem, 0, 1, 2, 3)
	if _, err := a.DrainBucket(ctx, 0); err != nil {
		t.Fatal(err)
	}
	fill(t, mem, 0, 4, 5)
	looks := s.get("ReadLease")
	done := drainAsync(ctx, a)
	<-entered
	for i := 1; i <= 40; i++ { // ten windows, a quarter at a time
		n := s.get("ReadLease")
		sched.Advance(window / 4)
		if !eventually(func() bool { return s.get("ReadLease") > n }) {
			t.Fatalf("the watchdog did not look at the lease after %d quarter windows", i)
		}
	}
	close(release)
	r := <-done
	if r.err != nil || !r.st.Resumed || r.st.Acquired {
		t.Fatalf("resumed %v, acquired %v, err %v; want the publish to run on, resumed", r.st.Resumed, r.st.Acquired, r.err)
	}
	if got := pub.seqs(0); !slices.Equal(got, span(1, 5)) {
		t.Fatalf("published %v, want 1..5 once", got)
	}
	if n := s.get("ReadLease") - looks; n < 40 {
		t.Errorf("looks at the lease: %d, want one per quarter window", n)
	}
	if n := s.get("Acquire"); n != 1 {
		t.Errorf("acquisitions: %d, want only the first drain's", n)
	}
}

// markOnce is a store whose first MarkPublished of hold blocks until its
// context ends (a slow BatchWriteItem that the SDK keeps retrying); later
// ones go through. While it blocks, lease reads fail (the store throttles
// them).
type markOnce struct {
	outbox.Store
	hold     int64
	entered  chan struct{}
	once     sync.Once
	blocking atomic.Bool
}

func (g *markOnce) MarkPublished(ctx context.Context, bucket int, seqs []int64, now time.Time) error {
	first := false
	if slices.Contains(seqs, g.hold) {
		g.once.Do(func() { first = true })
	}
	if !first {
		return g.Store.MarkPublished(ctx, bucket, seqs, now)
	}
	g.blocking.Store(true)
	defer g.blocking.Store(false)
	close(g.entered)
	<-ctx.Done()
	return ctx.Err()
}

func (g *markOnce) ReadLease(ctx context.Context, bucket int) (outbox.Lease, error) {
	if g.blocking.Load() {
		return outbox.Lease{}, errors.New("throttled by the test")
	}
	return g.Store.ReadLease(ctx, bucket)
}

// TestResumerFinishesMarkingUnderItsOwnRelease (issue 16): a resumed drain
// whose window ends while its tombstone write is still pending — its
// watchdog could not look at the lease to move the bound — with nobody
// else on the bucket. The process acquires its own release (no wait: the
// released hold is its own) and writes the tombstones under the lease: the
// drain succeeds and nothing is published twice. Before, the drain failed
// with "outlasted a resumed drain's window" and left the acknowledged
// messages unmarked.
func TestResumerFinishesMarkingUnderItsOwnRelease(t *testing.T) {
	const window = relay.DefaultResumeWindow
	ctx := ctxFor(t, time.Minute)
	s := memory.New(1)
	sched, pub, clk := newManualSched(), newOverlapPublisher(), &fakeClock{}
	g := &markOnce{Store: s, hold: 4, entered: make(chan struct{})}
	a := newRelay(t, g, pub, sched.option(), relay.WithClock(clk), relay.RelayID("a"), relay.HolderWait(0))
	fill(t, s, 0, 1, 2, 3)
	if _, err := a.DrainBucket(ctx, 0); err != nil {
		t.Fatal(err)
	}
	fill(t, s, 0, 4, 5, 6)
	done := drainAsync(ctx, a) // resumes; Kafka acknowledges at once; the marking hangs
	<-g.entered
	sched.Advance(window / 4) // the watchdog's look fails: the bound stands
	sched.Advance(window / 4) // the window's end cancels the marking
	r := <-done
	if r.err != nil || !r.st.Resumed || !r.st.ResumeMarkHeld || r.st.ResumeWait != 0 {
		t.Fatalf("resumed %v, marked under its own release %v, waited %v, err %v; want the marking finished under the lease, no wait",
			r.st.Resumed, r.st.ResumeMarkHeld, r.st.ResumeWait, r.err)
	}
	if n := s.Count(0); n != 0 {
		t.Errorf("%d messages are not tombstones after the drain", n)
	}
	if _, err := a.DrainBucket(ctx, 0); err != nil {
		t.Fatal(err)
	}
	pub.checkOnce(t, []int64{1, 2, 3, 4, 5, 6})
}

// countingStore counts a store's lease writes by operation.
type countingStore struct {
	outbox.Store
	mu     sync.Mutex
	writes map[string]int
}

func (c *countingStore) count(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes[op]++
}

func (c *countingStore) get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes[op]
}

func (c *countingStore) Acquire(ctx context.Context, b int, o string, now time.Time, d time.Duration) (outbox.Lease, error) {
	c.count("Acquire")
	return c.Store.Acquire(ctx, b, o, now, d)
}

func (c *countingStore) Release(ctx context.Context, l outbox.Lease, head, cleaned int64) (outbox.Lease, error) {
	c.count("Release")
	return c.Store.Release(ctx, l, head, cleaned)
}

func (c *countingStore) Update(ctx context.Context, l outbox.Lease, u outbox.LeaseUpdate, now time.Time) (outbox.Lease, error) {
	c.count("Update")
	return c.Store.Update(ctx, l, u, now)
}

// TestBusyBucketResumesWithoutLeaseWrites (issue 28): a warm container
// that drains a bucket every 2 s for two minutes writes its lease only to
// flush the head, once per HeadFlushInterval (30 s): every drain after the
// first resumes with a look, however long since the release. Before issue
// 28 a resume lasted 5 s after its release or last restamp: the bucket
// cost a restamp every 1.25 s of drains, and at a message every 8 s an
// acquire and a release per message.
func TestBusyBucketResumesWithoutLeaseWrites(t *testing.T) {
	for _, every := range []time.Duration{2 * time.Second, 8 * time.Second} {
		t.Run(fmt.Sprint("every ", every), func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			mem := memory.New(1)
			s := &gateStore{countingStore: &countingStore{Store: mem, writes: map[string]int{}}}
			sched, clk, pub := newManualSched(), &fakeClock{}, newOverlapPublisher()
			a := newRelay(t, s, pub, sched.option(), relay.WithClock(clk), relay.RelayID("relay/fn"), relay.HolderWait(0))
			fill(t, mem, 0, 1)
			if _, err := a.DrainBucket(ctx, 0); err != nil {
				t.Fatal(err)
			}
			seq := int64(2)
			for elapsed := every; elapsed <= 2*time.Minute; elapsed += every {
				sched.Advance(every)
				clk.Advance(every)
				fill(t, mem, 0, seq)
				st, err := a.DrainBucket(ctx, 0)
				if err != nil || !st.Resumed {
					t.Fatalf("drain at %v: resumed %v, err %v", elapsed, st.Resumed, err)
				}
				seq++
			}
			if n := s.get("Acquire") + s.get("Release"); n != 2 {
				t.Errorf("acquisitions and releases: %d, want 2 (the first drain's)", n)
			}
			if !eventually(func() bool { return mem.Lease(0).Head > 1 }) {
				t.Errorf("stored head %d: no head flush landed", mem.Lease(0).Head)
			}
			if n := s.get("Advance"); n > 5 {
				t.Errorf("head flushes in two minutes: %d, want one per 30 s at most", n)
			}
			pub.checkOnce(t, span(1, seq-1))
		})
	}
}

// gateStore holds each Advance until its gate is closed (nil: no gate),
// and counts them and the lease reads.
type gateStore struct {
	*countingStore
	advanceGate chan struct{}
}

func (g *gateStore) ReadLease(ctx context.Context, b int) (outbox.Lease, error) {
	defer g.count("ReadLease")
	return g.countingStore.ReadLease(ctx, b)
}

func (g *gateStore) Advance(ctx context.Context, l outbox.Lease, head, cleaned int64, now time.Time) (outbox.Lease, error) {
	g.count("Advance")
	if g.advanceGate != nil {
		<-g.advanceGate
	}
	return g.countingStore.Advance(ctx, l, head, cleaned, now)
}

// TestResumedDrainLeavesItsHeadFlushInFlight (issue 21): a resumed
// DeleteMode drain returns with its head flush still in flight (it would
// otherwise be on the invocation's path), and a later drain sends no
// second flush while one is out.
func TestResumedDrainLeavesItsHeadFlushInFlight(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	mem := memory.New(1)
	s := &gateStore{countingStore: &countingStore{Store: mem, writes: map[string]int{}}, advanceGate: make(chan struct{})}
	sched, pub, clk := newManualSched(), newOverlapPublisher(), &fakeClock{}
	a := newRelay(t, s, pub, sched.option(), relay.WithClock(clk), relay.RelayID("relay/fn"), relay.HolderWait(0),
		relay.HeadFlushInterval(time.Second))
	fill(t, mem, 0, 1, 2)
	if st, err := a.DrainBucket(ctx, 0); err != nil || !st.Acquired {
		t.Fatalf("first drain: acquired %v, err %v", st.Acquired, err)
	}
	step := func(d time.Duration, seq int64) {
		sched.Advance(d)
		clk.Advance(d)
		fill(t, mem, 0, seq)
	}
	// 2 s after the release: a head flush is due; it is held at its gate,
	// and the drain returns.
	step(2*time.Second, 3)
	if st, err := a.DrainBucket(ctx, 0); err != nil || !st.Resumed {
		t.Fatalf("drain at 2 s: resumed %v, err %v", st.Resumed, err)
	}
	if !eventually(func() bool { return s.get("Advance") == 1 }) {
		t.Fatalf("head flushes sent: %d, want 1", s.get("Advance"))
	}
	// 4 s: another flush would be due, but one is still out.
	step(2*time.Second, 4)
	if st, err := a.DrainBucket(ctx, 0); err != nil || !st.Resumed || st.Acquired {
		t.Fatalf("drain at 4 s with a flush in flight: resumed %v, acquired %v, err %v", st.Resumed, st.Acquired, err)
	}
	if n := s.get("Advance"); n != 1 {
		t.Errorf("head flushes sent with one in flight: %d, want 1", n)
	}
	close(s.advanceGate)
	if !eventually(func() bool { return mem.Lease(0).Head == 3 }) {
		t.Fatalf("stored head after the flush landed: %d, want 3", mem.Lease(0).Head)
	}
	if n := s.get("Acquire"); n != 1 {
		t.Errorf("acquisitions: %d, want 1", n)
	}
	pub.checkOnce(t, []int64{1, 2, 3, 4})
}
