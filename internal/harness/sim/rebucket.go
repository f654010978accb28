package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/seam"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// The online BucketCount change by cut-over (docs/design.md §13) under the
// scheduler: writers that write per key, relays driven by stream hints and
// a sweeper, and a changer that runs the change's steps — wait for the
// previous old epoch, flip, cut each counter, watch the old epoch drain
// and end it — one store call at a time, and may crash at any step (then
// the writers cut the counters they meet and the sweeper ends the old
// epoch). The config item, the counters' epochs and cut points and the
// epoch gate are the memory store's (Flip, ReserveAt, CutTo, GateOpen,
// EndOldEpoch), modelled on store/dynamo's; the relays are the engine's.

// RebucketConfig is one rebucket schedule's shape.
type RebucketConfig struct {
	From, To   []int // the counts: From[0] first, then each change to To[i]
	Writers    int
	Keys       int // per writer
	PerWriter  int
	Relays     int
	CrashAt    int // the changer crashes at this step (0: never)
	AbandonPct int
}

// RebucketResult is what a schedule did and found.
type RebucketResult struct {
	Config     RebucketConfig
	Committed  int
	Published  int
	Changes    int // flips that changed the count
	Aborted    int // changes given up before their flip (the previous old epoch did not drain in time)
	Ended      int // old epochs ended (by the changer or the sweeper)
	Stranded   []string
	OutOfOrder []string
	// MaxPause is the longest a write took from its first reservation to
	// its commit beyond its own steps' sleeps: what a change adds.
	MaxPause time.Duration
	Steps    int
}

// Failed reports a broken promise.
func (r RebucketResult) Failed() bool { return len(r.Stranded) > 0 || len(r.OutOfOrder) > 0 }

type rbWorld struct {
	s    *Scheduler
	cfg  RebucketConfig
	mem  *memory.Store
	maxB int

	relays    []*relay.Relay
	hints     []int
	writing   int
	changing  int
	draining  int // hinted drains in flight
	committed map[string]rbRecord
	published []rbRecord
	res       RebucketResult
	// holes: per old bucket, a missing number up to its cut point and
	// since when (the trailing-hole fence of dynamo's EndOldEpoch).
	holes map[int]rbHole
}

type rbHole struct {
	seq   int64
	since time.Time
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
		AbandonPct: 5 * r.IntN(2)}
	if r.IntN(3) == 0 {
		c.CrashAt = 1 + r.IntN(12)
	}
	return c
}

// RunRebucket runs the rebucket schedule of seed and checks it; openGate
// is a mutation for checking the checker (every epoch gate open).
func RunRebucket(seed uint64, openGate bool) (RebucketResult, error) {
	s := New(seed)
	cfg := DrawRebucket(s)
	w := &rbWorld{s: s, cfg: cfg, mem: memory.New(cfg.From[0]), committed: map[string]rbRecord{}, holes: map[int]rbHole{}}
	w.maxB = cfg.From[0]
	for _, c := range cfg.To {
		w.maxB = max(w.maxB, c)
	}
	w.res.Config = cfg
	store := &rbStore{Store: w.mem, s: s, open: openGate}
	for i := range cfg.Relays {
		r, err := relay.New(context.Background(), store, &rbPublisher{w}, relay.RelayID(fmt.Sprint("r", i)), relay.WithClock(s),
			relay.DeadlineMargin(0), relay.GapTimeout(rbGap), relay.GapPollInterval(200*time.Millisecond), relay.BatchSize(1+s.Rand().IntN(3)),
			seam.With(seam.Hooks{Scheduler: s, Rand: s.Rand().Int64N}).(relay.Option))
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

// rbStore lets another actor run before each store call a drain makes;
// open makes every epoch gate open (the mutation).
type rbStore struct {
	*memory.Store
	s    *Scheduler
	open bool
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

func (y *rbStore) GateOpen(ctx context.Context, b int, epoch int64) (bool, []int, error) {
	y.s.Yield()
	if y.open {
		return true, nil, nil
	}
	return y.Store.GateOpen(ctx, b, epoch)
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

// config reads the config item (one store call).
func (w *rbWorld) config() outbox.Config {
	w.s.Yield()
	c, _ := w.mem.Config(context.Background())
	return c
}

// endOld is dynamo's EndOldEpoch: it fences a number up to an old
// bucket's cut point that stayed missing, nothing after it, for rbGap
// (a crashed writer's; relays fence only what something follows), then
// ends the old epoch if every old bucket drained. True when it ended.
func (w *rbWorld) endOld(c outbox.Config) bool {
	if !c.Draining() {
		return false
	}
	for b := range c.OldBucketCount {
		w.s.Yield()
		cut, err := w.mem.CutTo(b, c.BucketEpoch)
		if err != nil {
			return false // a later change: this look is stale
		}
		ok, missing := w.drainedTo(b, cut)
		switch h, seen := w.holes[b]; {
		case ok:
			delete(w.holes, b)
		case !seen || h.seq != missing:
			w.holes[b] = rbHole{missing, w.s.Now()}
		case missing > 0 && w.s.Now().Sub(h.since) >= rbGap:
			_ = w.mem.Fence(context.Background(), b, missing, w.s.Now())
		}
	}
	w.s.Yield()
	ended, _, _ := w.mem.EndOldEpoch(context.Background(), c)
	if ended {
		w.res.Ended++
	}
	return ended
}

// changer runs the configured changes one after another, after the writers
// got going; with CrashAt it stops for good at that step (the writers and
// the sweeper finish what it left).
func (w *rbWorld) changer() {
	defer func() { w.changing-- }()
	step := 0
	crash := func() bool {
		step++
		return w.cfg.CrashAt != 0 && step == w.cfg.CrashAt
	}
	for _, to := range w.cfg.To {
		w.s.Sleep(nil, time.Duration(w.s.Rand().Int64N(int64(2*time.Second))))
		if !w.change(to, crash) {
			return
		}
	}
}

// change is dynamo's ChangeBucketCount to to; false when it crashed.
func (w *rbWorld) change(to int, crash func() bool) bool {
	// Prepare: wait for the previous old epoch (two changes never
	// overlap), up to the timeout; then nothing is written.
	deadline := w.s.Now().Add(rbTimeout)
	c := w.config()
	for c.Draining() && c.BucketCount != to {
		if w.endOld(c) {
			c = w.config()
			continue
		}
		if !w.s.Now().Before(deadline) {
			w.res.Aborted++
			return true
		}
		w.s.Sleep(nil, 50*time.Millisecond)
		c = w.config()
	}
	if crash() {
		return false
	}
	if c.BucketCount != to {
		w.s.Yield()
		w.mem.Flip(to, w.s.Now().Add(rbTimeout))
		w.res.Changes++
		if crash() {
			return false
		}
		c = w.config()
		for b := range c.Span() {
			w.s.Yield()
			if _, err := w.mem.CutTo(b, c.BucketEpoch); err != nil {
				panic(fmt.Sprintf("cut bucket %d: %v", b, err))
			}
			if crash() {
				return false
			}
		}
	}
	// Watch the old epoch until it ends or the deadline passes (the
	// change stands either way; the sweeper ends it later).
	for c.Draining() && w.s.Now().Before(c.ChangeDeadline) {
		if w.endOld(c) {
			break
		}
		if crash() {
			return false
		}
		w.s.Sleep(nil, 50*time.Millisecond)
		c = w.config()
	}
	return true
}

// drainedTo is dynamo's drainedTo over the memory store.
func (w *rbWorld) drainedTo(b int, cut int64) (bool, int64) {
	w.s.Yield()
	l := w.mem.Lease(b)
	if l.Head >= cut {
		return true, 0
	}
	next := l.Head + 1
	entries, _, _ := w.mem.Pending(context.Background(), b, l.Head, int(cut-l.Head))
	for _, e := range entries {
		switch {
		case e.Sequence > cut, e.Sequence != next:
			return false, next
		case !e.Fence:
			return false, 0
		}
		next++
	}
	if next <= cut {
		return false, next
	}
	return true, 0
}

// view is what a writer puts messages under.
type view struct {
	count int
	epoch int64
}

// write is one writer: it writes its keys' messages in order, each once
// committed. A reservation refused for its epoch is the dynamo Writer's
// meetEpoch: a counter at an earlier epoch is cut (by the writer itself),
// a later one makes it read the config item and re-bucket; it never
// waits for the change.
func (w *rbWorld) write(n int) {
	defer func() { w.writing-- }()
	r := w.s.Rand()
	c := w.config()
	v := view{c.BucketCount, c.BucketEpoch}
	orders := map[string]int{}
	for range w.cfg.PerWriter {
		key := fmt.Sprintf("w%d-k%d", n, r.IntN(w.cfg.Keys))
		orders[key]++
		id := fmt.Sprintf("%s-%d", key, orders[key])
		start, own := w.s.Now(), time.Duration(0)
		for {
			b := outbox.BucketForKey([]byte(key), v.count)
			w.s.Yield()
			seq, err := w.mem.ReserveAt(b, 1, v.epoch)
			var ee *memory.EpochError
			if errors.As(err, &ee) {
				if ee.Counter > v.epoch {
					c := w.config()
					v = view{c.BucketCount, c.BucketEpoch}
				} else {
					w.s.Yield()
					if _, err := w.mem.CutTo(b, v.epoch); err != nil {
						c := w.config() // cut by a later change meanwhile
						v = view{c.BucketCount, c.BucketEpoch}
					}
				}
				continue
			}
			d := time.Duration(r.Int64N(int64(50 * time.Millisecond)))
			w.s.Sleep(nil, d)
			own += d
			m := outbox.Message{ID: id, Bucket: b, Sequence: seq, Topic: "t", Key: []byte(key), Value: []byte("v"), CreatedAt: w.s.Now()}
			if r.IntN(100) < w.cfg.AbandonPct {
				// Abandoned (a crashed attempt): a relay or the change fences
				// it; the writer's retry reserves again.
				continue
			}
			w.s.Yield()
			if err := w.mem.PutStamped(v.epoch, m); errors.Is(err, outbox.ErrAlreadyWritten) {
				continue // fenced meanwhile
			}
			w.committed[id] = rbRecord{id: id, key: key, order: orders[key]}
			w.res.Committed++
			w.hints = append(w.hints, b)
			break
		}
		w.res.MaxPause = max(w.res.MaxPause, w.s.Now().Sub(start)-own)
		w.s.Sleep(nil, time.Duration(r.Int64N(int64(300*time.Millisecond))))
	}
}

// busy: writers, the changer or hinted drains at work (a failed drain
// hints its bucket again), hints to deliver, or an old epoch still
// draining (the sweeper ends it).
func (w *rbWorld) busy() bool {
	c, _ := w.mem.Config(context.Background())
	return w.writing > 0 || w.changing > 0 || w.draining > 0 || len(w.hints) > 0 || c.Draining()
}

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
		w.draining++
		w.s.Spawn("drain", func() {
			defer func() { w.draining-- }()
			if _, err := rl.DrainBucket(context.Background(), b); err != nil && !errors.Is(err, outbox.ErrLeaseHeld) {
				w.s.Sleep(nil, time.Second)
				w.hints = append(w.hints, b)
			}
		})
	}
}

// sweep drains every bucket either count uses every few seconds, and
// ends a drained old epoch, as the sweeper function's full sweep does.
func (w *rbWorld) sweep() {
	for w.busy() {
		w.s.Sleep(nil, time.Duration(2+w.s.Rand().IntN(4))*time.Second)
		for b := range w.maxB {
			_, _ = w.relays[0].DrainBucket(context.Background(), b)
		}
		w.endOld(w.config())
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
