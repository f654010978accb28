package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"math/rand/v2"
	"os"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/attrib"
	"github.com/dynakafka/outbox/internal/harness/checker"
	"github.com/dynakafka/outbox/internal/ownerid"
	"github.com/dynakafka/outbox/internal/seam"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// Config is one schedule's shape, drawn from its seed.
type Config struct {
	Buckets    int
	Relays     int
	SharedID   bool // two relays share an owner id (the relay function's containers)
	Writers    int
	PerWriter  int
	BatchSize  int
	Resume     bool
	HolderWait bool // contenders wait for a holder (else they leave a wake-up at once)
	Deliverers int  // stream deliveries in flight at once
	PerBucket  bool // at most one delivery of a bucket in flight (the event-source mapping)
	CrashRate  float64
	StallRate  float64
	FaultRate  float64 // publish errors
	Skew       time.Duration
	// Watermark: the outbox is in WatermarkMode (no tombstones; the head is
	// the only record of progress). Every third seed, chosen from the seed
	// rather than drawn, so that adding it left every other seed's schedule
	// as it was.
	Watermark bool

	// What we deploy, drawn from a second random source of the seed (so the
	// shapes above stay as they were):
	// Function: the relays are the relay function's containers, each a
	// process of its own, with the owner id lambda/wiring gives them.
	Function bool
	// Sweeper: a sweeper relay (its own owner id) sweeps every few seconds.
	Sweeper bool
	// ResendRate: the share of conditional writes whose response is lost
	// after they applied; the SDK sends them again.
	ResendRate float64
	// ReadFaultRate: the share of reads of a bucket that fail, so drains
	// (watermark drains too) stop mid-way.
	ReadFaultRate float64
	// Pauses: writers sometimes pause 4–20 s between messages, so that
	// buckets go idle for longer than ResumeWindow + MaxClockSkew: an
	// acquirer then owes a shorter wait or none (the release time on the
	// lease), and a releaser must have stopped resuming by then.
	Pauses bool
	// Txn: every process publishes through a transactional publisher
	// (txn.go), drawn from a third random source of the seed.
	Txn bool

	// Handovers, drawn from a fourth random source of the seed (so the
	// schedules above stay as they were): the schedule hands busy buckets
	// over (docs/design.md §4.3). ResumeWindow and MaxClockSkew are drawn
	// (Skew is then up to MaxClockSkew, and exactly it in half of them),
	// writers commit every tenth of a window to two windows (drains
	// resume, and acquirers come while they do), and a look at a bucket's
	// lease — a resumer's, its watchdog's — brings another process's drain
	// of the bucket (a container of the relay function, with the same
	// owner id, where Function) right then or within a window, half of the
	// times while writers write (yieldStore.ReadLease).
	Handovers             bool
	ResumeWindow, MaxSkew time.Duration
}

// drawHandovers draws the hand-over schedules' shape from r.
func drawHandovers(c *Config, r *rand.Rand) {
	c.Handovers = r.IntN(3) == 0
	if !c.Handovers {
		return
	}
	c.MaxSkew = time.Second + time.Duration(r.Int64N(int64(4*time.Second)))
	c.ResumeWindow = relay.MinResumeWindow + time.Duration(r.Int64N(int64(3*time.Second)))
	c.Skew = c.MaxSkew
	if r.IntN(2) == 0 {
		c.Skew = time.Duration(r.Int64N(int64(c.MaxSkew)))
	}
	c.PerWriter = 5 + r.IntN(15)
	c.Resume = true
}

// resumeWindow is the schedule's ResumeWindow.
func (c Config) resumeWindow() time.Duration {
	if !c.Handovers {
		return relay.DefaultResumeWindow
	}
	return c.ResumeWindow
}

// window is how long after a look at the lease a resumed drain may still
// publish and mark (half a ResumeWindow) under the schedule's options.
func (c Config) window() time.Duration { return c.resumeWindow() / 2 }

// windowOpts are the resume window's options every process of the schedule
// runs with (none: the defaults).
func (c Config) windowOpts() []relay.Option {
	if !c.Handovers {
		return nil
	}
	return []relay.Option{relay.ResumeWindow(c.ResumeWindow), relay.MaxClockSkew(c.MaxSkew)}
}

// drawDeployed draws the deployment's shape from r.
func drawDeployed(c *Config, r *rand.Rand) {
	c.Function = r.IntN(4) != 0
	c.Sweeper = r.IntN(2) == 0
	if r.IntN(2) == 0 {
		c.ResendRate = 0.05
	}
	if r.IntN(3) == 0 {
		c.ReadFaultRate = 0.05
	}
	c.Pauses = r.IntN(3) == 0
}

// Draw picks a schedule's shape.
func Draw(s *Scheduler) Config {
	r := s.Rand()
	c := Config{
		Buckets:    1 + r.IntN(2),
		Relays:     2 + r.IntN(3),
		SharedID:   r.IntN(4) == 0,
		Writers:    1 + r.IntN(3),
		PerWriter:  2 + r.IntN(8),
		BatchSize:  1 + r.IntN(4),
		Resume:     r.IntN(4) != 0,
		HolderWait: r.IntN(3) != 0,
		Deliverers: 1 + r.IntN(3),
		PerBucket:  r.IntN(2) == 0,
		Skew:       time.Duration(r.Int64N(int64(2 * time.Second))),
	}
	if r.IntN(2) == 0 {
		c.CrashRate = 0.03
	}
	if r.IntN(3) == 0 {
		c.StallRate = 0.05
	}
	if r.IntN(2) == 0 {
		c.FaultRate = 0.1
	}
	return c
}

// Result is what a schedule did and what the checker found.
type Result struct {
	Config     Config
	Committed  int
	Published  int // records appended to the log
	Parked     int
	Crashes    int
	Stalls     int
	FinalDrain bool // a wake-up left on a dead holder's lease needed one more drain
	Steps      int
	// Stranded: committed messages neither published nor parked.
	Stranded []string
	// Duplicates counts records appended more than once, ByCause by the
	// recorded event that explains each (internal/harness/attrib); Unexplained are
	// the ids of duplicates no recorded event explains.
	Duplicates  int
	ByCause     map[string]int
	Unexplained []string
	// Story: what internal/harness/attrib recorded of the first unexplained
	// duplicate, to explain a failure.
	Story []string
	// Resends counts conditional writes the SDK sent twice.
	Resends int
	// Handovers counts acquisitions of a lease another process released
	// (DrainStats.HandedOver): each waited ResumeWindow, or fenced.
	Handovers int
	// Companions counts drains of buckets no hint named, beside a
	// hand-over (relay.DrainBucketsTo, DrainStats.Companion).
	Companions int
	// OutOfOrder: first deliveries of a bucket out of sequence order.
	OutOfOrder []string
	// Overlaps counts publishes of a bucket by one process that began while
	// another process's publish of the bucket was under way (I4), Admitted
	// those where that other publish was already cancelled (§7.3: its client
	// may still deliver what it had accepted) or one of whose producers a
	// broker fence made stale (Fenced of them: Kafka transactions, §4.3.5);
	// Unadmitted describes some of the others.
	Overlaps, Admitted, Fenced int
	Unadmitted                 []string

	// With Txn (txn.go): records visible to a read_committed consumer of a
	// transaction its publisher reported failed; transactions of a bucket
	// interleaved, or out of sequence order within one; duplicated
	// transactions, whole or partial; and the duplicates not admitted (twice
	// in one transaction, or part of a transaction without a recorded
	// partial marking).
	StaleVisible, Interleavings, PartialDuplicates     []string
	DupTxnsWhole, DupTxnsPartial, DupTxnsPartialParked int
	// LateCommits: transactions that committed after another process
	// acquired their bucket and read it, their producer initialised before
	// that acquisition (docs/design.md §7.3: the acquirer fences first);
	// CommitStalls counts the processes frozen between produce and commit.
	CommitStalls int
	// LateCommitFaults counts the commits the broker applied late.
	LateCommits      []string
	LateCommitFaults int
}

// Failed reports whether the schedule broke a promise.
func (r Result) Failed() bool {
	return len(r.Stranded) > 0 || len(r.OutOfOrder) > 0 || len(r.Unadmitted) > 0 || len(r.Unexplained) > 0 ||
		len(r.StaleVisible) > 0 || len(r.Interleavings) > 0 || len(r.PartialDuplicates) > 0 || len(r.LateCommits) > 0
}

type record struct {
	id     string
	bucket int
	seq    int64
	txn    int // 1-based index of its transaction in publisher.txns; 0: none
}

type hint struct {
	bucket int
	seq    int64
}

// world is one schedule's system: a memory store, relays, writers, the
// stream and Kafka, all under one scheduler.
type world struct {
	s     *Scheduler
	cfg   Config
	mem   *memory.Store
	store *yieldStore
	pub   *publisher

	relays []*process
	nextID int
	// noHandoverWait: the relays skip the hand-over's wait (a mutation the
	// checker must catch).
	noHandoverWait bool

	committed map[string]record
	at        *attrib.Attribution
	chk       *checker.Checker
	hints     []hint
	inFlight  map[int]int // bucket -> deliveries running
	// contending: bucket -> contenders (contend) running; a look spawns
	// one only while none runs, so contenders' own looks do not multiply.
	contending map[int]int
	writing    int
	running    int // deliveries running
	res        Result
}

// process is one relay process.
type process struct {
	id    string
	name  string // the process (owner ids may be shared)
	r     *relay.Relay
	dead  bool
	crash *faults
}

// Trace, when set, receives a line for every store call and drain: set it
// to replay a failing seed with its story (go test -sim.seed N -sim.trace).
var Trace func(string)

func (w *world) tracef(format string, args ...any) {
	if Trace != nil {
		Trace(fmt.Sprintf("%9.3fs ", w.s.Now().Sub(Epoch).Seconds()) + fmt.Sprintf(format, args...))
	}
}

// Run runs the schedule of seed and checks it.
func Run(seed uint64) (Result, error) { return run(seed, false) }

// RunWithoutHandoverWait runs the schedule of seed with relays whose
// acquisitions from another process's release skip the ResumeWindow wait
// (seam.Hooks.NoHandoverWait): the checker must catch what that lets
// overlap (TestSimCatchesAHandoverWithoutItsWait).
func RunWithoutHandoverWait(seed uint64) (Result, error) { return run(seed, true) }

func run(seed uint64, noHandoverWait bool) (Result, error) {
	s := New(seed)
	cfg := Draw(s)
	cfg.Watermark = seed%3 == 0
	drawDeployed(&cfg, rand.New(rand.NewPCG(seed, 0xdeb10e)))
	cfg.Txn = rand.New(rand.NewPCG(seed, 0x7c0de)).IntN(3) == 0
	drawHandovers(&cfg, rand.New(rand.NewPCG(seed, 0x5e57a3b)))
	w := &world{s: s, cfg: cfg, mem: memory.New(cfg.Buckets), committed: map[string]record{}, inFlight: map[int]int{}, contending: map[int]int{},
		noHandoverWait: noHandoverWait}
	w.res.Config = cfg
	w.store = &yieldStore{Store: w.mem, s: s, w: w}
	w.pub = &publisher{w: w, epoch: map[int]int{}}
	w.chk = checker.New()
	w.at = attrib.New(w.store, w.pub, w.chk)
	w.at.Now, w.at.Watermark = s.Now, cfg.Watermark
	if cfg.Txn {
		w.pub.txns = []*txn{}
		w.pub.stalls, w.pub.frozen = rand.New(rand.NewPCG(seed, 0x57a11)), map[string]bool{}
		w.at.Fenced = w.pub.fenced
		// An aborted transaction publishes nothing.
		w.at.PublishRisk = func(err error) string {
			if errors.Is(err, errCommitUnknown) {
				return "commit-unknown"
			}
			return ""
		}
	}
	for i := range cfg.Relays {
		if err := w.startRelay(fmt.Sprint("r", i)); err != nil {
			return w.res, err
		}
	}
	w.writing = cfg.Writers
	for i := range cfg.Writers {
		s.Spawn(fmt.Sprint("writer", i), func() { w.write(i) })
	}
	for i := range cfg.Deliverers {
		s.Spawn(fmt.Sprint("stream", i), w.deliver)
	}
	if cfg.Sweeper {
		if err := w.startSweeper(); err != nil {
			return w.res, err
		}
	}
	err := s.Run(2_000_000)
	w.res.Steps = s.Steps()
	if err != nil {
		return w.res, err
	}
	if err := w.check(); err != nil {
		return w.res, err
	}
	return w.res, nil
}

func (w *world) startRelay(id string) error {
	name := id
	switch {
	case w.cfg.Function:
		// Each relay is a container of the relay function: its owner id is
		// what lambda/wiring (internal/ownerid) gives that container, as deployed.
		id = functionOwnerID(len(w.relays))
	case w.cfg.SharedID && len(w.relays) == 1:
		id = w.relays[0].id // two polling relays configured with one id
	}
	f := &faults{w: w}
	opts := []relay.Option{
		relay.RelayID(id),
		relay.WithClock(skewed{w.s, time.Duration(len(w.relays)%2) * w.cfg.Skew}),
		relay.BatchSize(w.cfg.BatchSize),
		relay.DeadlineMargin(0),
		relay.ResumeReleased(w.cfg.Resume),
		relay.GapPollInterval(200 * time.Millisecond),
		seam.With(seam.Hooks{Faults: f, Scheduler: w.s, Rand: w.s.Rand().Int64N, NoHandoverWait: w.noHandoverWait}).(relay.Option),
	}
	if !w.cfg.HolderWait {
		opts = append(opts, relay.HolderWait(0))
	}
	opts = append(opts, w.cfg.windowOpts()...)
	r, err := relay.New(context.Background(), w.storeFor(name), w.at.ViaAs(name, w.pubFor(name)), opts...)
	if err != nil {
		return err
	}
	w.relays = append(w.relays, &process{id: id, name: name, r: r, crash: f})
	f.relay = w.relays[len(w.relays)-1]
	return nil
}

// functionOwnerID is the owner id lambda/wiring gives the relay function's
// container n (its environment: the function's name, the container's log
// stream).
func functionOwnerID(n int) string {
	env := map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "outbox-relay",
		"AWS_LAMBDA_LOG_STREAM_NAME": fmt.Sprintf("2026/06/01/[$LATEST]container%d", n)}
	old := map[string]*string{}
	for k, v := range env {
		if o, ok := os.LookupEnv(k); ok {
			old[k] = &o
		} else {
			old[k] = nil
		}
		os.Setenv(k, v)
	}
	defer func() {
		for k, o := range old {
			if o == nil {
				os.Unsetenv(k)
			} else {
				os.Setenv(k, *o)
			}
		}
	}()
	return ownerid.Stream()
}

// startSweeper starts the sweeper: a relay with its own owner id that, every
// few seconds while anything may still be written or drained, looks at every
// bucket and drains those with pending messages without waiting for a holder
// (as Relay.Sweep does; Sweep itself probes the buckets on goroutines of its
// own, outside the simulator's scheduler).
func (w *world) startSweeper() error {
	f := &faults{w: w}
	r, err := relay.New(context.Background(), w.storeFor("sweeper"), w.at.ViaAs("sweeper", w.pubFor("sweeper")), append([]relay.Option{relay.RelayID("sweeper"),
		relay.WithClock(skewed{w.s, 0}), relay.BatchSize(w.cfg.BatchSize), relay.DeadlineMargin(0),
		relay.ResumeReleased(w.cfg.Resume), relay.GapPollInterval(200 * time.Millisecond), relay.HolderWait(0),
		seam.With(seam.Hooks{Faults: f, Scheduler: w.s, Rand: w.s.Rand().Int64N, NoHandoverWait: w.noHandoverWait}).(relay.Option)}, w.cfg.windowOpts()...)...)
	if err != nil {
		return err
	}
	sw := &process{id: "sweeper", name: "sweeper", r: r, crash: f}
	f.relay = sw
	w.s.Spawn("sweeper", func() {
		for !sw.dead && (w.writing > 0 || w.running > 0 || len(w.hints) > 0) {
			w.s.Sleep(nil, time.Duration(2+w.s.Rand().IntN(5))*time.Second)
			for b := range w.cfg.Buckets {
				l, err := w.store.ReadLease(context.Background(), b)
				if err != nil {
					continue
				}
				if n, _, err := w.store.Peek(context.Background(), b, l.Cleaned, 10); err != nil || n == 0 {
					continue
				}
				st, err := r.DrainBucket(context.Background(), b)
				w.tracef("sweeper drained b%d: head %d published %d err=%v", b, st.Head, st.Published, err)
			}
		}
	})
	return nil
}

// skewed is a relay's lease clock: simulated time plus its skew.
type skewed struct {
	s    *Scheduler
	skew time.Duration
}

func (c skewed) Now() time.Time { return c.s.Now().Add(c.skew) }

// write is one writer: it reserves sequence numbers, then commits, abandons
// (a gap) or fails its business condition (fences), and hints every commit.
func (w *world) write(n int) {
	r := w.s.Rand()
	defer func() { w.writing-- }()
	for i := range w.cfg.PerWriter {
		b := r.IntN(w.cfg.Buckets)
		k := 1 + r.IntN(3)
		for {
			w.s.Yield()
			first := w.mem.Reserve(b, k)
			w.s.Sleep(nil, time.Duration(r.Int64N(int64(50*time.Millisecond))))
			var msgs []outbox.Message
			for j := range k {
				seq := first + int64(j)
				msgs = append(msgs, outbox.Message{ID: fmt.Sprintf("w%d-%d-%d", n, i, seq), Bucket: b, Sequence: seq,
					Topic: "t", Key: []byte(fmt.Sprint("k", b)), Value: []byte("v"), CreatedAt: w.s.Now()})
			}
			switch x := r.Float64(); {
			case x < 0.05: // abandoned: the relay fences it after GapTimeout
			case x < 0.10: // business condition failed: the writer fences its numbers
				for _, m := range msgs {
					w.s.Yield()
					_ = w.mem.Fence(context.Background(), b, m.Sequence, w.s.Now())
				}
			default:
				w.s.Yield()
				if err := w.mem.Put(msgs...); errors.Is(err, outbox.ErrAlreadyWritten) {
					continue // fenced by a relay: reserve again
				}
				w.tracef("commit b%d %d..%d", b, msgs[0].Sequence, msgs[len(msgs)-1].Sequence)
				for _, m := range msgs {
					w.committed[m.ID] = record{id: m.ID, bucket: b, seq: m.Sequence}
					w.res.Committed++
					w.hints = append(w.hints, hint{b, m.Sequence})
				}
			}
			break
		}
		w.s.Sleep(nil, time.Duration(r.Int64N(int64(200*time.Millisecond))))
		if w.cfg.Handovers {
			// Drains of the bucket resume; acquirers come while they do.
			win := w.cfg.resumeWindow()
			w.s.Sleep(nil, win/10+time.Duration(r.Int64N(int64(2*win))))
		}
		if w.cfg.Pauses && r.Float64() < 0.15 {
			w.s.Sleep(nil, 4*time.Second+time.Duration(r.Int64N(int64(16*time.Second))))
		}
	}
}

// deliver is the stream: it takes hints in order and hands a batch's
// buckets to random live relays (DrainBucketTo the highest hinted sequence),
// redelivering the hints of a bucket whose drain failed.
func (w *world) deliver() {
	r := w.s.Rand()
	for {
		if len(w.hints) == 0 {
			if w.writing == 0 && w.running == 0 {
				return
			}
			w.s.Sleep(nil, 20*time.Millisecond)
			continue
		}
		n := 1 + r.IntN(min(4, len(w.hints)))
		upTo := map[int]int64{}
		var batch, rest []hint
		for _, h := range w.hints {
			if len(batch) < n && (!w.cfg.PerBucket || w.inFlight[h.bucket] == 0 || upTo[h.bucket] > 0) {
				batch = append(batch, h)
				upTo[h.bucket] = max(upTo[h.bucket], h.seq)
			} else {
				rest = append(rest, h)
			}
		}
		if len(batch) == 0 {
			w.s.Sleep(nil, 20*time.Millisecond)
			continue
		}
		w.hints = rest
		// One invocation: one container drains the batch's buckets, and
		// beside a hand-over the other process's busy buckets too
		// (relay.DrainBucketsTo, as lambda/handler does).
		rl := w.liveRelay()
		for b := range upTo {
			w.inFlight[b]++
		}
		w.running++
		w.s.Spawn("invoke", func() {
			defer func() {
				for b := range upTo {
					w.inFlight[b]--
				}
				w.running--
			}()
			w.tracef("%s invoke %v", rl.id, upTo)
			hinted, companions := rl.r.DrainBucketsTo(context.Background(), upTo)
			var failed []int
			for _, c := range append(hinted, companions...) {
				st, err := c.Stats, c.Err
				if st.HandedOver {
					w.res.Handovers++
				}
				if st.Companion {
					w.res.Companions++
				}
				w.tracef("%s drained b%d: head %d published %d resumed=%v acquired=%v companion=%v err=%v", rl.id, c.Bucket, st.Head, st.Published, st.Resumed, st.Acquired, st.Companion, err)
				if err != nil && !errors.Is(err, outbox.ErrLeaseHeld) && !st.Companion {
					failed = append(failed, c.Bucket)
				}
			}
			if len(failed) > 0 {
				// The mapping retries the batch after a while.
				w.s.Sleep(nil, time.Second)
				for _, h := range batch {
					if slices.Contains(failed, h.bucket) {
						w.hints = append(w.hints, h)
					}
				}
			}
		})
	}
}

// contend has a random live relay (another container, often) drain bucket
// b now or within a ResumeWindow: an acquisition next to a look at the
// lease, which may be a resumer's.
func (w *world) contend(b int) {
	rl := w.liveRelay()
	d := time.Duration(0)
	if w.s.Rand().IntN(2) == 0 {
		d = time.Duration(w.s.Rand().Int64N(int64(w.cfg.resumeWindow())))
	}
	w.contending[b]++
	w.s.Spawn("contender", func() {
		defer func() { w.contending[b]-- }()
		w.s.Sleep(nil, d)
		if rl.dead {
			return
		}
		st, err := rl.r.DrainBucket(context.Background(), b)
		if st.HandedOver {
			w.res.Handovers++
		}
		w.tracef("%s contended b%d: head %d published %d resumed=%v acquired=%v err=%v", rl.id, b, st.Head, st.Published, st.Resumed, st.Acquired, err)
	})
}

// liveRelay picks a live relay, starting a new one if all died.
func (w *world) liveRelay() *process {
	var live []*process
	for _, r := range w.relays {
		if !r.dead {
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		w.nextID++
		if err := w.startRelay(fmt.Sprint("restarted", w.nextID)); err != nil {
			panic(err)
		}
		return w.relays[len(w.relays)-1]
	}
	return live[w.s.Rand().IntN(len(live))]
}

// check verifies the promises: every committed message published or parked,
// and first deliveries of each bucket in sequence order.
func (w *world) check() error {
	parked := map[string]bool{}
	for b := range w.cfg.Buckets {
		for _, p := range w.mem.Parked(b) {
			parked[p.Message.ID] = true
		}
	}
	w.res.Parked = len(parked)
	missing := w.missing(parked)
	if len(missing) > 0 && w.wakeLeftBehind() {
		// Wake-ups on the lease of a holder that died or failed stay there
		// for the next holder (a sweep, in production): one more drain.
		w.res.FinalDrain = true
		r, err := relay.New(context.Background(), w.storeFor("final"), w.at.ViaAs("final", w.pubFor("final")), append([]relay.Option{relay.RelayID("final"), relay.WithClock(skewed{w.s, 0}),
			relay.DeadlineMargin(0), seam.With(seam.Hooks{Scheduler: w.s, Rand: w.s.Rand().Int64N}).(relay.Option)}, w.cfg.windowOpts()...)...)
		if err != nil {
			return err
		}
		for b := range w.cfg.Buckets {
			w.s.Spawn("final", func() {
				// As a sweeper would, on its next schedule: publish faults
				// are transient here, so retry until it drains.
				for attempt := 1; ; attempt++ {
					_, err := r.DrainBucket(context.Background(), b)
					if err == nil {
						return
					}
					if attempt == 20 {
						w.s.mu.Lock()
						w.s.err = fmt.Errorf("final drain of bucket %d: %w", b, err)
						w.s.mu.Unlock()
						return
					}
					w.s.Sleep(nil, time.Minute)
				}
			})
		}
		if err := w.s.Run(2_000_000); err != nil {
			return err
		}
		for b := range w.cfg.Buckets {
			for _, p := range w.mem.Parked(b) {
				parked[p.Message.ID] = true
			}
		}
		missing = w.missing(parked)
	}
	w.res.Stranded = missing
	first := map[string]bool{}
	last := map[int]int64{}
	vis := w.pub.visible()
	for _, rec := range vis {
		if first[rec.id] || parked[rec.id] {
			continue
		}
		first[rec.id] = true
		if rec.seq <= last[rec.bucket] {
			w.res.OutOfOrder = append(w.res.OutOfOrder, fmt.Sprintf("bucket %d: %d after %d", rec.bucket, rec.seq, last[rec.bucket]))
		}
		last[rec.bucket] = rec.seq
	}
	w.res.Published = len(vis)
	w.duplicates(vis)
	if w.cfg.Txn {
		w.checkTxns(vis, parked)
	}
	ov := w.at.Overlaps()
	w.res.Overlaps, w.res.Admitted, w.res.Fenced, w.res.Unadmitted = ov.Overlaps, ov.Admitted, ov.Fenced, ov.Unadmitted
	return nil
}

// duplicates counts the records appended more than once and attributes each
// to the event internal/harness/attrib recorded for its message.
func (w *world) duplicates(vis []record) {
	for id, rec := range w.committed {
		w.chk.Committed(id, fmt.Sprint("k", rec.bucket), rec.seq)
	}
	for _, rec := range vis {
		w.chk.Delivered(rec.id, rec.id, fmt.Sprint("k", rec.bucket), rec.seq)
	}
	r := w.chk.Result()
	w.res.Duplicates, w.res.ByCause = r.Duplicates, r.ByCause
	w.res.Unexplained = r.UnexplainedIDs
	if len(r.UnexplainedIDs) > 0 {
		w.res.Story = w.at.Trace(r.UnexplainedIDs[0])
	}
}

func (w *world) missing(parked map[string]bool) []string {
	published := map[string]bool{}
	for _, rec := range w.pub.visible() {
		published[rec.id] = true
	}
	var out []string
	for id := range w.committed {
		if !published[id] && !parked[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// wakeLeftBehind reports whether some bucket's lease still carries
// wake-ups now that every drain has ended: their holder died or failed, and
// left them to whoever holds the bucket next (I3).
func (w *world) wakeLeftBehind() bool {
	for b := range w.cfg.Buckets {
		if w.mem.Lease(b).Wake > 0 {
			return true
		}
	}
	return false
}

// faults crashes or stalls a relay's drains at crash points. A crash kills
// the relay's process: it gets no more hints, and keeps its leases.
type faults struct {
	w     *world
	relay *process
}

var errKilled = errors.New("process killed")

func (f *faults) At(ctx context.Context, p seam.CrashPoint, bucket int) error {
	r := f.w.s.Rand()
	if f.relay.dead {
		f.w.at.Crashed(bucket, string(p))
		return errKilled // its other drains die with it
	}
	if r.Float64() < f.w.cfg.StallRate {
		f.w.res.Stalls++
		d := time.Duration(r.Int64N(int64(45 * time.Second))) // past the lease, sometimes
		if d >= f.w.cfg.window() {
			// The shortest stall recorded as one is the publish window of
			// a resumed drain (half a ResumeWindow, Config.window).
			// A process paused this long may outlast a resume window or its
			// lease's cut-off with the bucket's messages undecided.
			f.w.at.Stalled(bucket, string(p))
		}
		f.w.s.Sleep(nil, d)
	}
	if r.Float64() < f.w.cfg.CrashRate {
		f.w.res.Crashes++
		f.relay.dead = true
		f.w.at.Crashed(bucket, string(p))
		return errKilled
	}
	return nil
}

// publisher is Kafka: an append-only log. With transactions (txn.go) it
// also keeps each bucket's transactional id's epoch and every transaction.
type publisher struct {
	w     *world
	log   []record
	epoch map[int]int
	txns  []*txn   // nil: no transactions
	fl    fenceLog // with transactions: acquisitions and reads (txn.go)
	// stalls draws the processes frozen between a produce and its commit
	// (txn.go), from a fifth random source of the seed, so that the
	// schedules without such a freeze are what they were; frozen are the
	// processes frozen now (their lease renewals do not happen).
	stalls *rand.Rand
	frozen map[string]bool
	// procs: each process's transactional publisher (txnFor).
	procs map[string]*txnProc
}

// pubFor is the publisher of the process who: the shared log, or with
// transactions its own producers.
func (w *world) pubFor(who string) outbox.Publisher {
	if w.cfg.Txn {
		return w.pub.txnFor(who)
	}
	return w.pub
}

var (
	errRetriable = errors.New("NOT_LEADER_FOR_PARTITION")
	errTooLarge  = outbox.WithClass(errors.New("MESSAGE_TOO_LARGE"), outbox.RecordPermanent)
	errAuth      = outbox.WithClass(errors.New("TOPIC_AUTHORIZATION_FAILED"), outbox.Fatal)
)

func (p *publisher) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	s, r := p.w.s, p.w.s.Rand()
	s.Yield()
	// The broker takes a while; the context may end meanwhile.
	s.Sleep(ctx.Done(), time.Duration(r.Int64N(int64(300*time.Millisecond))))
	if r.Float64() < p.w.cfg.FaultRate/10 {
		s.Sleep(ctx.Done(), 30*time.Second) // a very slow broker
	}
	acked := len(msgs)
	var err error
	switch x := r.Float64(); {
	case x < p.w.cfg.FaultRate/3:
		acked, err = r.IntN(len(msgs)+1), errRetriable
		if acked == len(msgs) {
			err = nil
		}
	case x < p.w.cfg.FaultRate*2/3:
		acked, err = r.IntN(len(msgs)), errTooLarge
	case x < p.w.cfg.FaultRate*3/4:
		acked, err = 0, errAuth
	}
	if ctx.Err() != nil && err == nil {
		// Cancelled: what was sent may still be appended.
		acked, err = r.IntN(len(msgs)+1), ctx.Err()
	}
	for _, m := range msgs[:acked] {
		p.log = append(p.log, record{id: m.ID, bucket: m.Bucket, seq: m.Sequence})
	}
	return acked, err
}

// PublishAlone: a record rejected alone is a real poison record, one time
// in three.
func (p *publisher) PublishAlone(ctx context.Context, m outbox.Message) error {
	s, r := p.w.s, p.w.s.Rand()
	s.Yield()
	s.Sleep(ctx.Done(), time.Duration(r.Int64N(int64(100*time.Millisecond))))
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if r.Float64() < p.w.cfg.FaultRate/3 {
		return errTooLarge
	}
	p.log = append(p.log, record{id: m.ID, bucket: m.Bucket, seq: m.Sequence})
	return nil
}

// yieldStore lets another actor run before every store call.
type yieldStore struct {
	*memory.Store
	s *Scheduler
	w *world
}

func (y *yieldStore) lease(op string, b int, owner string, l outbox.Lease, err error) {
	y.w.tracef("  %s b%d by %s -> o=%s e=%v w=%d hd=%d err=%v", op, b, owner, l.Owner, !l.Expires.IsZero(), l.Wake, l.Head, err)
}

func (y *yieldStore) Config(ctx context.Context) (outbox.Config, error) {
	c, err := y.Store.Config(ctx)
	if y.w.cfg.Watermark {
		c.Mode = outbox.WatermarkMode
	}
	return c, err
}
func (y *yieldStore) ReadLease(ctx context.Context, b int) (outbox.Lease, error) {
	y.s.Yield()
	if y.w.cfg.Handovers && y.w.writing > 0 && y.w.contending[b] == 0 && y.s.Rand().IntN(2) == 0 {
		// An acquisition by another process next to this look, which may
		// be a resumer's (its first look, a recheck, its watchdog's).
		y.w.contend(b)
	}
	return y.Store.ReadLease(ctx, b)
}

// resent runs a conditional write; with the schedule's ResendRate its
// response is lost after it applied and the SDK sends it again: the caller
// gets the answer to the resend (every conditional write must survive one).
func (y *yieldStore) resent(op string, b int, write func() error) error {
	err := write()
	if err == nil && y.w.s.Rand().Float64() < y.w.cfg.ResendRate {
		y.w.res.Resends++
		y.w.tracef("  %s b%d applied, response lost: resent", op, b)
		y.s.Yield()
		err = write()
	}
	return err
}

func (y *yieldStore) Acquire(ctx context.Context, b int, o string, now time.Time, d time.Duration) (outbox.Lease, error) {
	y.s.Yield()
	var nl outbox.Lease
	err := y.resent("Acquire", b, func() (err error) { nl, err = y.Store.Acquire(ctx, b, o, y.clock(now), d); return err })
	y.lease("Acquire", b, o, nl, err)
	return nl, err
}
func (y *yieldStore) Renew(ctx context.Context, l outbox.Lease, now time.Time, d time.Duration) (outbox.Lease, error) {
	y.s.Yield()
	var nl outbox.Lease
	err := y.resent("Renew", l.Bucket, func() (err error) { nl, err = y.Store.Renew(ctx, l, now, d); return err })
	return nl, err
}
func (y *yieldStore) Update(ctx context.Context, l outbox.Lease, u outbox.LeaseUpdate, now time.Time) (outbox.Lease, error) {
	y.s.Yield()
	var nl outbox.Lease
	err := y.resent("Update", l.Bucket, func() (err error) { nl, err = y.Store.Update(ctx, l, u, now); return err })
	return nl, err
}
func (y *yieldStore) Release(ctx context.Context, l outbox.Lease, head, cleaned int64) (outbox.Lease, error) {
	y.s.Yield()
	var nl outbox.Lease
	err := y.resent("Release", l.Bucket, func() (err error) { nl, err = y.Store.Release(ctx, l, head, cleaned); return err })
	y.lease("Release", l.Bucket, l.Owner, nl, err)
	return nl, err
}
func (y *yieldStore) Abandon(ctx context.Context, l outbox.Lease, head, cleaned int64) error {
	y.s.Yield()
	err := y.resent("Abandon", l.Bucket, func() error { return y.Store.Abandon(ctx, l, head, cleaned) })
	y.lease("Abandon", l.Bucket, l.Owner, y.Store.Lease(l.Bucket), err)
	return err
}

func (y *yieldStore) Advance(ctx context.Context, l outbox.Lease, head, cleaned int64, now time.Time) (outbox.Lease, error) {
	y.s.Yield()
	var nl outbox.Lease
	err := y.resent("Advance", l.Bucket, func() (err error) { nl, err = y.Store.Advance(ctx, l, head, cleaned, now); return err })
	y.lease("Advance", l.Bucket, l.Owner, nl, err)
	return nl, err
}

// errReadFault is a failed read (throttled): the drain stops mid-way.
var errReadFault = errors.New("sim: read of the bucket failed (throttled)")

func (y *yieldStore) Pending(ctx context.Context, b int, after int64, limit int) ([]outbox.Entry, bool, error) {
	y.s.Yield()
	if y.w.s.Rand().Float64() < y.w.cfg.ReadFaultRate {
		return nil, false, errReadFault
	}
	return y.Store.Pending(ctx, b, after, limit)
}
func (y *yieldStore) MarkPublished(ctx context.Context, b int, seqs []int64, now time.Time) error {
	y.s.Yield()
	y.w.tracef("  mark b%d %v", b, seqs)
	if y.w.cfg.Watermark {
		return fmt.Errorf("sim: tombstones written in WatermarkMode (bucket %d, %v)", b, seqs)
	}
	return y.resent("MarkPublished", b, func() error { return y.Store.MarkPublished(ctx, b, seqs, now) })
}
func (y *yieldStore) Fence(ctx context.Context, b int, seq int64, now time.Time) error {
	y.s.Yield()
	return y.resent("Fence", b, func() error { return y.Store.Fence(ctx, b, seq, now) })
}
func (y *yieldStore) Park(ctx context.Context, l outbox.Lease, p outbox.Parked, now time.Time) (outbox.Lease, error) {
	y.s.Yield()
	var nl outbox.Lease
	err := y.resent("Park", l.Bucket, func() (err error) { nl, err = y.Store.Park(ctx, l, p, now); return err })
	y.w.tracef("  park b%d %d (%s): err=%v", l.Bucket, p.Message.Sequence, p.Message.ID, err)
	return nl, err
}

// clock returns now unchanged: relays pass their own (skewed) lease clock.
func (y *yieldStore) clock(now time.Time) time.Time { return now }
