package dynamo

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dynakafka/outbox"
)

// combiner serves concurrent requests of one kind (lease looks, tombstone
// puts) with shared batch calls: the relay drains every hinted bucket of an
// invocation at once, and each drain's look and tombstones, sent alone, would
// be a DynamoDB call of their own (docs/design.md §4.3.2, "Combined
// looks", and §5, step 8).
//
// The rules, which the look's bound and the callers' contexts rely on:
//
//   - Opportunistic, never delayed: a request that finds a free call slot
//     (fewer than calls in flight) is sent at once, with whatever else is
//     queued. Requests that arrive while every slot is busy queue and go
//     together, at most perCall keys a call, when a call returns.
//   - Spread while slots are free: what is sent at once is cut evenly over
//     up to spread calls (as many as are free), not packed into the
//     fewest: a call takes as long as its slowest key, so a lone drain's
//     25 tombstones go as 4 calls of 7, 7, 7 and 4. Packing is what the
//     queue does once every slot is busy.
//   - Sent after enqueued: a request joins only the queue, never a call in
//     flight, so every participant of a call enqueued before it was sent. A
//     combined look is therefore read at some instant between each of its
//     callers' start and return, as a GetItem of their own would be.
//   - Duplicate keys in the queue are sent once (BatchGetItem and
//     BatchWriteItem refuse duplicates in one request); each caller waiting
//     on the key gets its answer. The first enqueued value of a key is sent.
//   - Every caller returns within its own context, with the context's error
//     when it ends first. A caller that leaves takes its keys out of the
//     queue (no other caller waits on them): they are never sent. Keys
//     already sent may still land after it left, as a single call's would
//     when its context ends mid-flight.
//   - A call runs on context.WithoutCancel of its first live participant's
//     context (its values), bounded by the latest deadline among its
//     participants, and is cancelled once every participant has left: one
//     caller's end does not cancel the call the others wait on.
//   - Keys the table left unprocessed are retried here, within the call,
//     with jittered backoff, at most attempts calls in all ("one layer
//     retries"); then their callers get outbox.ErrThrottled.
//   - Attribution: a call's error fails every caller with a key in it that
//     is still waiting; a caller returns when each of its keys is answered,
//     or at its first error.
type combiner[K comparable, V, R any] struct {
	what     string // for errors: "read leases", "mark published"
	perCall  int    // keys in one call (DynamoDB's limit)
	calls    int    // calls in flight at most
	spread   int    // calls at most to cut one dispatch's keys over (1: pack)
	attempts int    // calls per key, unprocessed retries included
	// send makes one call for items (distinct keys) and returns the
	// answers of the keys it processed: a key without one was left
	// unprocessed.
	send func(ctx context.Context, items []ask[K, V]) (map[K]R, error)

	mu       sync.Mutex
	queue    []*pending[K, V, R] // FIFO; entries with no waiters are skipped
	queued   map[K]*pending[K, V, R]
	inFlight int
}

type ask[K comparable, V any] struct {
	key K
	val V
}

// pending is one queued (or sent) key and the callers waiting on it.
type pending[K comparable, V, R any] struct {
	ask[K, V]
	waiters []*waiter[K, V, R]
}

type waiter[K comparable, V, R any] struct {
	ctx     context.Context
	keys    []K
	left    int // keys not yet answered
	results map[K]R
	err     error
	done    chan struct{} // closed when answered (or failed)
	over    bool          // answered, failed or left
	flights map[*flight[K, V, R]]bool
}

// flight is one call in flight and the callers still waiting on it.
type flight[K comparable, V, R any] struct {
	ctx     context.Context
	cancel  context.CancelFunc
	waiters map[*waiter[K, V, R]]bool
}

func newCombiner[K comparable, V, R any](what string, perCall, calls, spread, attempts int,
	send func(context.Context, []ask[K, V]) (map[K]R, error)) *combiner[K, V, R] {
	return &combiner[K, V, R]{what: what, perCall: perCall, calls: calls, spread: max(spread, 1), attempts: attempts, send: send,
		queued: map[K]*pending[K, V, R]{}}
}

// do enqueues items (duplicate keys are asked once; the first value
// counts) and waits for every key's answer, an error, or the end of ctx.
func (c *combiner[K, V, R]) do(ctx context.Context, items []ask[K, V]) (map[K]R, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := &waiter[K, V, R]{ctx: ctx, results: make(map[K]R, len(items)), done: make(chan struct{}),
		flights: map[*flight[K, V, R]]bool{}}
	seen := make(map[K]bool, len(items))
	c.mu.Lock()
	for _, it := range items {
		if seen[it.key] {
			continue
		}
		seen[it.key] = true
		w.keys = append(w.keys, it.key)
		p := c.queued[it.key]
		if p == nil {
			p = &pending[K, V, R]{ask: it}
			c.queued[it.key] = p
			c.queue = append(c.queue, p)
		}
		p.waiters = append(p.waiters, w)
	}
	w.left = len(w.keys)
	if w.left == 0 {
		c.mu.Unlock()
		return w.results, nil
	}
	c.dispatch()
	c.mu.Unlock()

	select {
	case <-w.done:
		if w.err != nil {
			ownDeadline(ctx)
		}
		return w.results, w.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !w.over {
		c.leave(w)
	}
	// Answered in the meantime: the answer stands.
	select {
	case <-w.done:
		return w.results, w.err
	default:
		return nil, ctx.Err()
	}
}

// ownDeadline waits, when ctx's deadline has passed, for ctx to end (a
// second at most: a context of another make may report a deadline it
// never ends on). A call's deadline is the latest of its participants'
// deadlines on a timer of its own, which may fire before a participant's:
// a caller that gets the call's deadline error then finds its own ctx
// ended too, as a call on its own ctx would leave it (callers tell an
// interruption from a failure by ctx.Err()).
func ownDeadline(ctx context.Context) {
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// leave takes w out of the queue (keys no one else waits on are dropped,
// never sent) and out of its calls (a call no one waits on is cancelled).
// c.mu is held.
func (c *combiner[K, V, R]) leave(w *waiter[K, V, R]) {
	w.over = true
	for _, k := range w.keys {
		p := c.queued[k]
		if p == nil {
			continue
		}
		p.waiters = slices.DeleteFunc(p.waiters, func(o *waiter[K, V, R]) bool { return o == w })
		if len(p.waiters) == 0 {
			delete(c.queued, k)
		}
	}
	for f := range w.flights {
		delete(f.waiters, w)
		if len(f.waiters) == 0 {
			f.cancel()
		}
	}
	w.flights = nil
}

// finish answers w (err nil: every key answered). c.mu is held.
func (c *combiner[K, V, R]) finish(w *waiter[K, V, R], err error) {
	if w.over {
		return
	}
	w.err = err
	c.leave(w)
	close(w.done)
}

// dispatch starts calls while a slot is free and live keys are queued.
// c.mu is held.
func (c *combiner[K, V, R]) dispatch() {
	// per: the live keys queued, cut evenly over the calls this dispatch
	// may make (free slots, at most spread), at most perCall a call.
	per := c.perCall
	if calls := min(c.calls-c.inFlight, c.spread); calls > 1 {
		live := 0
		for _, p := range c.queue {
			if len(p.waiters) > 0 {
				if live++; live == calls*c.perCall {
					break
				}
			}
		}
		per = max(1, (live+calls-1)/calls)
	}
	for c.inFlight < c.calls {
		var batch []*pending[K, V, R]
		for len(c.queue) > 0 && len(batch) < per {
			p := c.queue[0]
			c.queue = c.queue[1:]
			if len(p.waiters) == 0 {
				continue // every caller of it left
			}
			delete(c.queued, p.key)
			batch = append(batch, p)
		}
		if len(batch) == 0 {
			return
		}
		c.inFlight++
		go c.run(c.board(batch), batch)
	}
}

// board builds the call's flight: its participants, and its context (the
// first participant's values, the latest deadline, no cancellation but its
// own). c.mu is held.
func (c *combiner[K, V, R]) board(batch []*pending[K, V, R]) *flight[K, V, R] {
	f := &flight[K, V, R]{waiters: map[*waiter[K, V, R]]bool{}}
	var base context.Context
	var latest time.Time
	bounded := true
	for _, p := range batch {
		for _, w := range p.waiters {
			if w.over || f.waiters[w] {
				continue
			}
			f.waiters[w] = true
			w.flights[f] = true
			if base == nil {
				base = w.ctx
			}
			d, ok := w.ctx.Deadline()
			bounded = bounded && ok
			if ok && d.After(latest) {
				latest = d
			}
		}
	}
	base = context.WithoutCancel(base)
	if bounded {
		f.ctx, f.cancel = context.WithDeadline(base, latest)
	} else {
		f.ctx, f.cancel = context.WithCancel(base)
	}
	return f
}

// run makes the call for batch, retries its unprocessed keys, answers the
// waiters and frees the slot.
func (c *combiner[K, V, R]) run(f *flight[K, V, R], batch []*pending[K, V, R]) {
	defer func() {
		c.mu.Lock()
		for w := range f.waiters {
			delete(w.flights, f)
		}
		f.cancel()
		c.inFlight--
		c.dispatch()
		c.mu.Unlock()
	}()
	for attempt := 0; ; attempt++ {
		items := make([]ask[K, V], len(batch))
		for i, p := range batch {
			items[i] = p.ask
		}
		got, err := c.send(f.ctx, items)
		if batch = c.answer(batch, got, err, attempt); len(batch) == 0 {
			return
		}
		if err := sleep(f.ctx, backoff(attempt, 50*time.Millisecond, 2*time.Second)); err != nil {
			c.fail(batch, fmt.Errorf("dynamo: %s: %d keys unprocessed: %w", c.what, len(batch), err))
			return
		}
	}
}

// answer hands a call's outcome to its waiters and returns the keys to
// retry: those unprocessed that someone still waits on.
func (c *combiner[K, V, R]) answer(batch []*pending[K, V, R], got map[K]R, err error, attempt int) []*pending[K, V, R] {
	if err != nil {
		c.fail(batch, err)
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var retry []*pending[K, V, R]
	for _, p := range batch {
		r, ok := got[p.key]
		if !ok {
			if slices.ContainsFunc(p.waiters, func(w *waiter[K, V, R]) bool { return !w.over }) {
				retry = append(retry, p)
			}
			continue
		}
		for _, w := range p.waiters {
			if w.over {
				continue
			}
			w.results[p.key] = r
			if w.left--; w.left == 0 {
				c.finish(w, nil)
			}
		}
	}
	if len(retry) > 0 && attempt+1 == c.attempts {
		for _, p := range retry {
			for _, w := range p.waiters {
				c.finish(w, fmt.Errorf("dynamo: %s: %d keys still unprocessed after %d attempts: %w",
					c.what, len(retry), c.attempts, outbox.ErrThrottled))
			}
		}
		return nil
	}
	return retry
}

// fail fails every waiter of batch still waiting.
func (c *combiner[K, V, R]) fail(batch []*pending[K, V, R], err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range batch {
		for _, w := range p.waiters {
			c.finish(w, err)
		}
	}
}
