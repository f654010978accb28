package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/seam"
	"github.com/dynakafka/outbox/store/memory"
)

// The online BucketCount change (docs/design.md §13) under the scheduler:
// writers that write per key, relays driven by stream hints and a sweeper,
// and a changer that runs the change's steps — begin, freeze, drain, flip,
// thaw — one bucket at a time, and may crash at any step; a crashed change
// is resumed by another changer or aborted by a writer past its deadline.
// The config item and the counters' epochs are modelled here, as
// store/dynamo keeps them (rebucket.go, sequence/epoch.go); the relays are
// the engine's, over the memory store.

// RebucketConfig is one rebucket schedule's shape.
type RebucketConfig struct {
	From, To   []int // the counts: From[0] first, then each change to To[i]
	Writers    int
	Keys       int // per writer
	PerWriter  int
	Relays     int
	CrashAt    int  // the changer crashes at this step of its first change (0: never)
	Resume     bool // a crashed change is resumed (else a writer aborts it)
	AbandonPct int
}

// RebucketResult is what a schedule did and found.
type RebucketResult struct {
	Config     RebucketConfig
	Committed  int
	Published  int
	Changes    int // changes that changed the count
	Aborted    int
	Stranded   []string
	OutOfOrder []string
	MaxPause   time.Duration
	Steps      int
}

// Failed reports a broken promise.
func (r RebucketResult) Failed() bool { return len(r.Stranded) > 0 || len(r.OutOfOrder) > 0 }

type rbWorld struct {
	s   *Scheduler
	cfg RebucketConfig
	mem *memory.Store
	// The config item.
	count, next int
	epoch       int64
	deadline    time.Time
	// The counters' epochs (ce, negative while frozen) and fence points.
	ce, cf map[int]int64
	maxB   int

	relays    []*outbox.Relay
	hints     []int
	writing   int
	changing  int
	committed map[string]rbRecord
	published []rbRecord
	res       RebucketResult
	// skipDrain: a mutation for checking the checker (the flip does not
	// wait for the drain).
	skipDrain bool
}

type rbRecord struct {
	id, key string
	order   int // the writer's count for the key
}

const (
	rbTimeout = 20 * time.Second
	rbGap     = time.Second
)

// DrawRebucket picks a rebucket schedule's shape from the seed.
func DrawRebucket(s *Scheduler) RebucketConfig {
	r := s.Rand()
	counts := []int{1 + r.IntN(4)}
	n := 1 + r.IntN(2)
	var to []int
	for range n {
		c := 1 + r.IntN(5)
		if r.IntN(4) == 0 && len(to) > 0 {
			c = counts[0] // a change back
		}
		to = append(to, c)
	}
	c := RebucketConfig{From: counts, To: to, Writers: 1 + r.IntN(3), Keys: 1 + r.IntN(3), PerWriter: 3 + r.IntN(8), Relays: 1 + r.IntN(3),
		Resume: r.IntN(2) == 0, AbandonPct: 5 * r.IntN(2)}
	if r.IntN(3) == 0 {
		c.CrashAt = 1 + r.IntN(12)
	}
	return c
}

// RunRebucket runs the rebucket schedule of seed and checks it.
func RunRebucket(seed uint64, skipDrain bool) (RebucketResult, error) {
	s := New(seed)
	cfg := DrawRebucket(s)
	w := &rbWorld{s: s, cfg: cfg, mem: memory.New(cfg.From[0]), count: cfg.From[0], ce: map[int]int64{}, cf: map[int]int64{},
		committed: map[string]rbRecord{}, skipDrain: skipDrain}
	w.maxB = cfg.From[0]
	for _, c := range cfg.To {
		w.maxB = max(w.maxB, c)
	}
	w.res.Config = cfg
	store := &rbStore{Store: w.mem, s: s}
	for i := range cfg.Relays {
		r, err := outbox.NewRelay(context.Background(), store, &rbPublisher{w}, outbox.RelayID(fmt.Sprint("r", i)), outbox.WithClock(s),
			outbox.DeadlineMargin(0), outbox.GapTimeout(rbGap), outbox.GapPollInterval(200*time.Millisecond), outbox.BatchSize(1+s.Rand().IntN(3)),
			seam.With(seam.Hooks{Scheduler: s, Rand: s.Rand().Int64N}).(outbox.Option))
		if err != nil {
			return w.res, err
		}
		w.relays = append(w.relays, r)
	}
	w.writing = cfg.Writers
	for i := range cfg.Writers {
		s.Spawn(fmt.Sprint("writer", i), func() { w.write(i) })
	}
	s.Spawn("stream", w.deliver)
	s.Spawn("sweeper", w.sweep)
	w.changing = 1
	s.Spawn("changer", w.changer)
	err := s.Run(2_000_000)
	w.res.Steps = s.Steps()
	if err != nil {
		return w.res, err
	}
	return w.res, w.check()
}

// rbStore lets another actor run before each store call a drain makes.
type rbStore struct {
	*memory.Store
	s *Scheduler
}

func (y *rbStore) Config(ctx context.Context) (outbox.Config, error) {
	y.s.Yield()
	return y.Store.Config(ctx)
}

func (y *rbStore) Acquire(ctx context.Context, b int, o string, now time.Time, d time.Duration) (outbox.Lease, error) {
	y.s.Yield()
	return y.Store.Acquire(ctx, b, o, now, d)
}

func (y *rbStore) Pending(ctx context.Context, b int, after int64, limit int) ([]outbox.Entry, bool, error) {
	y.s.Yield()
	return y.Store.Pending(ctx, b, after, limit)
}

func (y *rbStore) MarkPublished(ctx context.Context, b int, seqs []int64, now time.Time) error {
	y.s.Yield()
	return y.Store.MarkPublished(ctx, b, seqs, now)
}

func (y *rbStore) Release(ctx context.Context, l outbox.Lease, head, cleaned int64) (outbox.Lease, error) {
	y.s.Yield()
	return y.Store.Release(ctx, l, head, cleaned)
}

type rbPublisher struct{ w *rbWorld }

func (p *rbPublisher) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	s := p.w.s
	s.Yield()
	s.Sleep(ctx.Done(), time.Duration(s.Rand().Int64N(int64(200*time.Millisecond))))
	acked := len(msgs)
	var err error
	if s.Rand().IntN(10) == 0 {
		acked, err = s.Rand().IntN(len(msgs)+1), errRetriable
		if acked == len(msgs) {
			err = nil
		}
	}
	for _, m := range msgs[:acked] {
		p.w.published = append(p.w.published, p.w.committed[m.ID])
	}
	return acked, err
}

// errEpoch is a reservation refused for its epoch: the counter's ce and cf.
type errEpoch struct{ counter, fence int64 }

func (e *errEpoch) Error() string {
	return fmt.Sprintf("counter at epoch %d (fence %d)", e.counter, e.fence)
}

// reserve is sequence.ReserveAt: one number of bucket b, if its counter
// serves epoch.
func (w *rbWorld) reserve(b int, epoch int64) (int64, error) {
	w.s.Yield()
	if w.ce[b] != epoch {
		return 0, &errEpoch{w.ce[b], w.cf[b]}
	}
	return w.mem.Reserve(b, 1), nil
}

// freeze is sequence.Freeze.
func (w *rbWorld) freeze(b int, from int64) (int64, error) {
	w.s.Yield()
	switch ce := w.ce[b]; {
	case ce >= 0 && ce <= from:
		last, _ := w.mem.LastSequence(context.Background(), b)
		w.cf[b], w.ce[b] = last, -(from + 1)
		return last, nil
	case ce == -(from+1) || ce == from+1:
		return w.cf[b], nil
	default:
		return 0, &errEpoch{ce, w.cf[b]}
	}
}

// thaw is sequence.Thaw (the memory counter did not move while frozen).
func (w *rbWorld) thaw(b int, to int64) error {
	w.s.Yield()
	switch w.ce[b] {
	case -to:
		w.ce[b] = to
	case to:
	default:
		return &errEpoch{w.ce[b], w.cf[b]}
	}
	return nil
}

// flip is the change's conditional flip of the config item: from the
// change in progress at epoch, to final at epoch+1. False: someone else
// flipped it.
func (w *rbWorld) flip(epoch int64, final int) bool {
	w.s.Yield()
	if w.epoch != epoch || w.next == 0 {
		return false
	}
	w.count, w.epoch, w.next, w.deadline = final, epoch+1, 0, time.Time{}
	w.mem.SetBucketCount(final, epoch+1)
	return true
}

// end flips (if nobody did) and thaws every counter of the change: what
// flipChange does; fences nil reads them (an abort).
func (w *rbWorld) end(from, to int, epoch int64, final int) {
	w.flip(epoch, final)
	for b := range max(from, to) {
		if _, err := w.freeze(b, epoch); err != nil {
			panic(fmt.Sprintf("end of the change: freeze bucket %d: %v", b, err))
		}
		if err := w.thaw(b, epoch+1); err != nil {
			panic(fmt.Sprintf("end of the change: thaw bucket %d: %v", b, err))
		}
	}
}

// changer runs the configured changes one after another, after the writers
// got going; with CrashAt it stops for good at that step of its first
// change, and, with Resume, a second changer finishes it later.
func (w *rbWorld) changer() {
	defer func() { w.changing-- }()
	step := 0
	crash := func() bool {
		step++
		return w.cfg.CrashAt != 0 && step == w.cfg.CrashAt
	}
	for i, to := range w.cfg.To {
		w.s.Sleep(nil, time.Duration(w.s.Rand().Int64N(int64(2*time.Second))))
		if w.next != 0 {
			if !w.runChange(crash) {
				return
			}
		}
		if w.count == to {
			continue
		}
		w.s.Yield()
		w.next, w.deadline = to, w.s.Now().Add(rbTimeout) // begin
		if i == 0 && crash() {
			w.crashed()
			return
		}
		if !w.runChange(crash) {
			w.crashed()
			return
		}
	}
}

// crashed: the changer died; with Resume another one finishes its change
// after a while.
func (w *rbWorld) crashed() {
	if !w.cfg.Resume {
		return
	}
	w.changing++
	w.s.Spawn("resumer", func() {
		defer func() { w.changing-- }()
		w.s.Sleep(nil, time.Duration(w.s.Rand().Int64N(int64(30*time.Second))))
		if w.next != 0 {
			w.runChange(func() bool { return false })
		}
	})
}

// runChange is dynamo's runChange for the change in progress; false when it
// crashed.
func (w *rbWorld) runChange(crash func() bool) bool {
	from, to, epoch, deadline := w.count, w.next, w.epoch, w.deadline
	n := max(from, to)
	fences := make([]int64, n)
	start := w.s.Now()
	for b := range n {
		f, err := w.freeze(b, epoch)
		if err != nil {
			panic(fmt.Sprintf("freeze bucket %d: %v", b, err))
		}
		fences[b] = f
		if crash() {
			return false
		}
	}
	holes := map[int][2]int64{} // bucket -> missing number, since (ns)
	final := to
	for !w.skipDrain {
		left := 0
		for b := range n {
			ok, missing := w.drainedTo(b, fences[b])
			if ok {
				continue
			}
			left++
			if h, seen := holes[b]; !seen || h[0] != missing {
				holes[b] = [2]int64{missing, w.s.Now().UnixNano()}
			} else if missing > 0 && w.s.Now().UnixNano()-h[1] >= int64(rbGap) {
				_ = w.mem.Fence(context.Background(), b, missing, w.s.Now())
			}
		}
		if left == 0 {
			break
		}
		if !w.s.Now().Before(deadline) {
			final = from
			break
		}
		w.s.Sleep(nil, 50*time.Millisecond)
		if w.epoch != epoch {
			break // a writer aborted it
		}
	}
	if crash() {
		return false
	}
	if !w.flip(epoch, final) {
		final = w.count
	}
	if crash() {
		return false
	}
	for b := range n {
		if err := w.thaw(b, epoch+1); err != nil {
			panic(fmt.Sprintf("thaw bucket %d: %v", b, err))
		}
		if crash() {
			return false
		}
	}
	if final == to && from != to {
		w.res.Changes++
	} else {
		w.res.Aborted++
	}
	_ = start
	return true
}

// drainedTo is dynamo's drainedTo over the memory store.
func (w *rbWorld) drainedTo(b int, fence int64) (bool, int64) {
	w.s.Yield()
	l := w.mem.Lease(b)
	if l.Head >= fence {
		return true, 0
	}
	next := l.Head + 1
	entries, _, _ := w.mem.Pending(context.Background(), b, l.Head, int(fence-l.Head))
	for _, e := range entries {
		switch {
		case e.Sequence > fence, e.Sequence != next:
			return false, next
		case !e.Fence:
			return false, 0
		}
		next++
	}
	if next <= fence {
		return false, next
	}
	return true, 0
}

// view is what a writer puts messages under.
type view struct {
	count int
	epoch int64
}

// awaitEpoch is the dynamo Writer's awaitEpoch.
func (w *rbWorld) awaitEpoch(had view, e *errEpoch, b int) view {
	pause := 10 * time.Millisecond
	for {
		w.s.Yield()
		switch {
		case w.next != 0 && !w.s.Now().Before(w.deadline):
			w.end(w.count, w.next, w.epoch, w.count) // abort
			w.res.Aborted++
			continue
		case w.next != 0:
			w.s.Sleep(nil, pause)
			pause = min(2*pause, 100*time.Millisecond)
			continue
		}
		now := view{w.count, w.epoch}
		switch {
		case now.epoch > had.epoch:
		case now.epoch < had.epoch || e.counter > now.epoch:
			panic(fmt.Sprintf("bucket %d's counter at %d, config %d, writer %d", b, e.counter, now.epoch, had.epoch))
		case e.counter == -now.epoch:
			_ = w.thaw(b, now.epoch)
		default:
			if _, err := w.freeze(b, now.epoch-1); err == nil {
				_ = w.thaw(b, now.epoch)
			}
		}
		return now
	}
}

// write is one writer: it writes its keys' messages in order, each once
// committed; a reservation refused for its epoch waits for the change.
func (w *rbWorld) write(n int) {
	defer func() { w.writing-- }()
	r := w.s.Rand()
	v := view{w.count, w.epoch}
	orders := map[string]int{}
	for i := range w.cfg.PerWriter {
		key := fmt.Sprintf("w%d-k%d", n, r.IntN(w.cfg.Keys))
		orders[key]++
		id := fmt.Sprintf("%s-%d", key, orders[key])
		start := w.s.Now()
		for {
			b := outbox.BucketForKey([]byte(key), v.count)
			seq, err := w.reserve(b, v.epoch)
			var ee *errEpoch
			if errors.As(err, &ee) {
				v = w.awaitEpoch(v, ee, b)
				continue
			}
			w.s.Sleep(nil, time.Duration(r.Int64N(int64(50*time.Millisecond))))
			m := outbox.Message{ID: id, Bucket: b, Sequence: seq, Topic: "t", Key: []byte(key), Value: []byte("v"), CreatedAt: w.s.Now()}
			if r.IntN(100) < w.cfg.AbandonPct {
				// Abandoned (a crashed attempt): a relay or the change fences
				// it; the writer's retry reserves again.
				continue
			}
			w.s.Yield()
			if err := w.mem.Put(m); errors.Is(err, outbox.ErrAlreadyWritten) {
				continue // fenced meanwhile
			}
			w.committed[id] = rbRecord{id: id, key: key, order: orders[key]}
			w.res.Committed++
			w.hints = append(w.hints, b)
			break
		}
		w.res.MaxPause = max(w.res.MaxPause, w.s.Now().Sub(start))
		_ = i
		w.s.Sleep(nil, time.Duration(r.Int64N(int64(300*time.Millisecond))))
	}
}

func (w *rbWorld) busy() bool { return w.writing > 0 || w.changing > 0 || len(w.hints) > 0 }

// deliver is the stream: hinted buckets drained by a random relay.
func (w *rbWorld) deliver() {
	for w.busy() {
		if len(w.hints) == 0 {
			w.s.Sleep(nil, 20*time.Millisecond)
			continue
		}
		b := w.hints[0]
		w.hints = w.hints[1:]
		rl := w.relays[w.s.Rand().IntN(len(w.relays))]
		w.s.Spawn("drain", func() {
			if _, err := rl.DrainBucket(context.Background(), b); err != nil && !errors.Is(err, outbox.ErrLeaseHeld) {
				w.s.Sleep(nil, time.Second)
				w.hints = append(w.hints, b)
			}
		})
	}
}

// sweep drains every bucket either count uses every few seconds.
func (w *rbWorld) sweep() {
	for w.busy() {
		w.s.Sleep(nil, time.Duration(2+w.s.Rand().IntN(4))*time.Second)
		for b := range w.maxB {
			_, _ = w.relays[0].DrainBucket(context.Background(), b)
		}
	}
}

// check: after a final drain, every committed message was published, and
// every key's first deliveries came in its writer's order.
func (w *rbWorld) check() error {
	for b := range w.maxB {
		w.s.Spawn("final", func() {
			for range 20 {
				if _, err := w.relays[0].DrainBucket(context.Background(), b); err == nil || errors.As(err, new(*outbox.BucketRangeError)) {
					return
				}
				w.s.Sleep(nil, time.Second)
			}
		})
	}
	if err := w.s.Run(2_000_000); err != nil {
		return err
	}
	seen := map[string]bool{}
	last := map[string]int{}
	for _, rec := range w.published {
		if seen[rec.id] {
			continue
		}
		seen[rec.id] = true
		if rec.order <= last[rec.key] {
			w.res.OutOfOrder = append(w.res.OutOfOrder, fmt.Sprintf("key %s: %d after %d", rec.key, rec.order, last[rec.key]))
		}
		last[rec.key] = rec.order
	}
	for id := range w.committed {
		if !seen[id] {
			w.res.Stranded = append(w.res.Stranded, id)
		}
	}
	w.res.Published = len(seen)
	return nil
}
