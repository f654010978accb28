package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/fanout"
	"github.com/dynakafka/outbox/sequence"
)

// Online BucketCount changes (docs/design.md §13). A change from count N
// at epoch E to count M:
//
//  1. begin: the config item says NextBucketCount M and a deadline
//     (conditional on it still saying N at E, not changing);
//  2. freeze: every counter of buckets 0..max(N,M)-1 refuses reservations
//     (sequence.Freeze) and records its fence point, the last number
//     reserved at epoch E;
//  3. drain: wait until every bucket has decided (published, fenced or
//     parked) every sequence number up to its fence point — the relays
//     keep running and do it;
//  4. flip: the config item says M at epoch E+1 (N at E+1 when the drain
//     did not end by the deadline: the change is aborted);
//  5. thaw: every frozen counter serves epoch E+1 (sequence.Thaw).
//
// Writers pause between 2 and 5: their reservation fails on the frozen
// counter, they read the config item until it stops changing, put their
// messages in the new count's buckets and reserve again. Every message
// written at epoch E is decided before any is written at E+1, so per-key
// order holds across the change whatever the relays know of it.

// changeAPI is what flipping and aborting a change need: the config item
// and the counters.
type changeAPI interface {
	getItemAPI
	updateItemAPI
}

// DefaultChangeTimeout is how long a BucketCount change waits for the
// buckets to drain before it is aborted: the longest pause a change puts on
// writers.
const DefaultChangeTimeout = 30 * time.Second

// DefaultChangeMargin is the time a change keeps, before its context's deadline,
// for the flip and the thaw.
const DefaultChangeMargin = 2 * time.Second

// endTimeout bounds the flip and the thaw, which run even when the caller's
// context ended (the counters are frozen).
const endTimeout = 10 * time.Second

// changeOpts are ChangeBucketCount's settings (ChangeTimeout,
// ChangeGapTimeout); poll is how often draining buckets are looked at.
type changeOpts struct {
	timeout, poll, gap time.Duration
}

// ChangeResult is what ChangeBucketCount did.
type ChangeResult struct {
	From, To int
	// Epoch is the outbox's BucketCount epoch afterwards.
	Epoch int64
	// Frozen is how long reservations were refused: the longest pause the
	// change put on a writer (0 when nothing changed).
	Frozen time.Duration
	// Resumed is set when an interrupted change (a crashed tool) was
	// finished first.
	Resumed bool
}

// ChangeAbortedError is ChangeBucketCount giving up: the buckets did not
// drain by the deadline (a stopped relay, a stuck bucket), another party
// (a writer, a relay, the sweeper) aborted the change after its deadline,
// or the caller's context ended first (Interrupted: Ctrl-C, a timeout).
// The outbox keeps its count, at a new epoch; nothing is lost and writers
// resume.
type ChangeAbortedError struct {
	From, To int
	Draining []int // buckets not drained at the deadline (when known)
	// Interrupted is the caller's context's error when the change was
	// aborted because the context ended (nil otherwise).
	Interrupted error
}

func (e *ChangeAbortedError) Error() string {
	if e.Interrupted != nil {
		return fmt.Sprintf("dynamo: the BucketCount change from %d to %d was aborted because it was interrupted (%v); BucketCount stays %d and writers resume",
			e.From, e.To, e.Interrupted, e.From)
	}
	return fmt.Sprintf("dynamo: the BucketCount change from %d to %d was aborted: buckets %v did not drain to their fence points by the deadline; "+
		"BucketCount stays %d. Check that the relays run and no bucket is stuck (outbox status), then try again", e.From, e.To, e.Draining, e.From)
}

// Unwrap returns Interrupted.
func (e *ChangeAbortedError) Unwrap() error { return e.Interrupted }

// ChangeBucketCount changes the outbox's BucketCount to to while writers
// and relays run, and waits until the change is over (at most
// opts.timeout, plus the writes). A change left unfinished by a crashed
// caller is finished first (Resumed). Relays must be running: the change
// waits for them to drain every bucket up to the change point, and is
// aborted (a *ChangeAbortedError) when they do not by the deadline.
func ChangeBucketCount(ctx context.Context, client StoreAPI, tables Tables, to int, options ...ChangeOption) (ChangeResult, error) {
	set, stored, err := prepareChange(ctx, client, tables, to, options)
	if err != nil {
		return ChangeResult{}, err
	}
	opts := changeOpts{timeout: set.changeTimeout, poll: 50 * time.Millisecond, gap: set.changeGap}
	if dl, ok := ctx.Deadline(); ok {
		// Leave the flip and the thaw time within ctx.
		opts.timeout = max(min(opts.timeout, time.Until(dl)-DefaultChangeMargin), 0)
	}
	resumed := false
	if stored.Changing() {
		// An interrupted change that ends aborted (its deadline passed) is
		// over all the same.
		var ae *ChangeAbortedError
		if res, err := runChange(ctx, client, tables, stored, opts); errors.As(err, &ae) && ae.Interrupted != nil {
			res.Resumed = true
			return res, err
		} else if err != nil && ae == nil {
			return ChangeResult{}, fmt.Errorf("dynamo: finish the interrupted BucketCount change to %d first: %w", stored.NextBucketCount, err)
		}
		resumed = true
		if stored, err = readConfig(ctx, client, tables.Control); err != nil {
			return ChangeResult{}, err
		}
	}
	if stored.BucketCount == to {
		return ChangeResult{From: to, To: to, Epoch: stored.BucketEpoch, Resumed: resumed}, nil
	}
	begin := stored
	begin.NextBucketCount, begin.ChangeDeadline = to, time.UnixMilli(time.Now().Add(opts.timeout).UnixMilli())
	if err := replaceConfig(ctx, client, tables.Control, stored, begin); err != nil {
		return ChangeResult{}, err
	}
	res, err := runChange(ctx, client, tables, begin, opts)
	res.Resumed = resumed
	return res, err
}

// ChangePlan is what ChangeBucketCount would do now, as PlanBucketCountChange
// reads it (outbox buckets set --dry-run); nothing is written.
type ChangePlan struct {
	From, To int
	// Epoch is the BucketCount epoch now; the change ends at Epoch+1.
	Epoch int64
	// Finish is the count a change already in progress goes to (0: none):
	// ChangeBucketCount finishes that change first, and to pauses the
	// writers again.
	Finish int
	// Frozen is how many counters freeze (buckets 0..Frozen-1): every
	// writer, Go or Python, pauses at its next reservation from then on.
	Frozen int
	// Timeout is the longest pause: the change is aborted after it.
	Timeout time.Duration
	// Pending maps each bucket with messages the relays must decide before
	// the change can end to their count (at most PlanProbeLimit each);
	// Oldest is the creation time of the oldest of them.
	Pending map[int]int
	Oldest  time.Time
}

// PlanProbeLimit bounds the messages PlanBucketCountChange counts per bucket.
const PlanProbeLimit = 1000

// PlanBucketCountChange says what ChangeBucketCount(ctx, client, tables, to,
// options...) would pause and for how long, reading the config item and
// each bucket's backlog; it writes nothing. It refuses what
// ChangeBucketCount refuses (an invalid count or option, region mode).
func PlanBucketCountChange(ctx context.Context, client StoreAPI, tables Tables, to int, options ...ChangeOption) (ChangePlan, error) {
	set, stored, err := prepareChange(ctx, client, tables, to, options)
	if err != nil {
		return ChangePlan{}, err
	}
	p := ChangePlan{From: stored.BucketCount, To: to, Epoch: stored.BucketEpoch, Finish: stored.NextBucketCount, Timeout: set.changeTimeout, Pending: map[int]int{}}
	if p.From == to && p.Finish == 0 {
		return p, nil
	}
	p.Frozen = max(p.From, p.Finish, to)
	s := &Store{client: client, tables: tables, cfg: set}
	var mu sync.Mutex
	err = forBuckets(ctx, max(p.From, p.Finish), func(ctx context.Context, b int) error {
		l, err := s.ReadLease(ctx, b)
		if err != nil {
			return err
		}
		n, oldest, err := s.Peek(ctx, b, l.Head, PlanProbeLimit)
		if err != nil || n == 0 {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		p.Pending[b] = n
		if p.Oldest.IsZero() || oldest.Before(p.Oldest) {
			p.Oldest = oldest
		}
		return nil
	})
	return p, err
}

// prepareChange validates a change to to and its options, and reads the
// config item: how ChangeBucketCount and PlanBucketCountChange begin.
func prepareChange(ctx context.Context, client StoreAPI, tables Tables, to int, options []ChangeOption) (settings, outbox.Config, error) {
	set := defaultSettings()
	if !outbox.ValidBucketCount(to) {
		return set, outbox.Config{}, &outbox.OptionError{Option: "BucketCount", Value: to, Reason: fmt.Sprintf("must be 1..%d", outbox.MaxBucketCount)}
	}
	applyOptions(&set, options)
	if err := set.validate(); err != nil {
		return set, outbox.Config{}, err
	}
	if err := tables.validate(); err != nil {
		return set, outbox.Config{}, err
	}
	stored, err := readConfig(ctx, client, tables.Control)
	if err != nil {
		return set, outbox.Config{}, err
	}
	if stored.RegionMode() && (stored.BucketCount != to || stored.Changing()) {
		return set, outbox.Config{}, &RegionModeBucketCountError{Stored: stored.BucketCount, Requested: to, Regions: slices.Clone(stored.Regions)}
	}
	return set, stored, nil
}

// runChange carries out steps 2–5 of the change c says is in progress. It
// is safe to run again (a resumed change) and concurrently with another
// runChange or abortChange of the same change: every step is conditional
// and recognises its own applied write.
func runChange(ctx context.Context, client StoreAPI, tables Tables, c outbox.Config, opts changeOpts) (ChangeResult, error) {
	from, to, epoch := c.BucketCount, c.NextBucketCount, c.BucketEpoch
	n := max(from, to)
	fences := make([]int64, n)
	start := time.Now()
	// The counters freeze from here on: a caller whose context ends
	// (Ctrl-C, a timeout) aborts the change on a context of its own rather
	// than leave every writer paused until the deadline.
	interrupted := func(err error) (ChangeResult, error) {
		if ctx.Err() == nil {
			return ChangeResult{}, err
		}
		endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
		defer cancel()
		if _, aerr := abortChange(endCtx, client, tables, c); aerr != nil {
			return ChangeResult{}, fmt.Errorf("dynamo: BucketCount change %d → %d interrupted (%w); aborting it failed, writers wait until its deadline %s: %w",
				from, to, ctx.Err(), c.ChangeDeadline.UTC().Format(time.RFC3339), aerr)
		}
		return ChangeResult{From: from, To: to, Epoch: epoch + 1, Frozen: time.Since(start)}, &ChangeAbortedError{From: from, To: to, Interrupted: context.Cause(ctx)}
	}
	err := forBuckets(ctx, n, func(ctx context.Context, b int) (err error) {
		fences[b], err = sequence.Freeze(ctx, client, tables.Control, b, epoch)
		return err
	})
	if err != nil {
		return interrupted(fmt.Errorf("dynamo: BucketCount change %d → %d: freeze the counters: %w", from, to, err))
	}
	s := &Store{client: client, tables: tables, cfg: defaultSettings()}
	draining, err := s.waitDrained(ctx, fences, c.ChangeDeadline, opts)
	if err != nil {
		return interrupted(fmt.Errorf("dynamo: BucketCount change %d → %d: %w", from, to, err))
	}
	final := to
	if len(draining) > 0 {
		final = from
	}
	// The counters are frozen: end the change even if ctx ended meanwhile,
	// or writers wait for its deadline.
	endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	if _, err := flipChange(endCtx, client, tables, c, final, fences); err != nil {
		return ChangeResult{}, err
	}
	res := ChangeResult{From: from, To: to, Epoch: epoch + 1, Frozen: time.Since(start)}
	after, err := readConfig(endCtx, client, tables.Control)
	switch {
	case err != nil:
		return res, err
	case after.BucketEpoch == epoch+1 && after.BucketCount != to:
		return res, &ChangeAbortedError{From: from, To: to, Draining: draining}
	}
	return res, nil
}

// flipChange ends the change c describes with count final (c's target, or
// its old count for an abort) at the next epoch, then thaws the counters
// that were frozen (fences: their fence points; nil: read them from the
// counters). Whoever flips first decides; a later flip finds the config
// item at the next epoch and only thaws. flipped reports that this call's
// write (or its resend) is the one that ended the change: false when
// another caller had.
func flipChange(ctx context.Context, client changeAPI, tables Tables, c outbox.Config, final int, fences []int64) (flipped bool, err error) {
	done := c
	done.BucketCount, done.BucketEpoch, done.NextBucketCount, done.ChangeDeadline = final, c.BucketEpoch+1, 0, time.Time{}
	flipped = true
	if err := replaceConfig(ctx, client, tables.Control, c, done); err != nil {
		now, rerr := readConfig(ctx, client, tables.Control)
		if rerr != nil || now.BucketEpoch <= c.BucketEpoch {
			return false, err
		}
		// Another caller (a writer's abort, a resumed change) flipped it.
		flipped = false
	}
	n := max(c.BucketCount, c.NextBucketCount)
	err = forBuckets(ctx, n, func(ctx context.Context, b int) error {
		var f int64
		if fences != nil {
			f = fences[b]
		} else {
			var err error
			// Freeze returns the fence point recorded by the first freeze;
			// on a counter not frozen yet (an abort before every counter
			// was frozen) it freezes it now, which is harmless: the count
			// does not change.
			if f, err = sequence.Freeze(ctx, client, tables.Control, b, c.BucketEpoch); err != nil {
				return err
			}
		}
		return sequence.Thaw(ctx, client, tables.Control, b, c.BucketEpoch+1, f)
	})
	if err != nil {
		return flipped, fmt.Errorf("dynamo: BucketCount change %d → %d: thaw the counters (writers thaw the ones they need): %w", c.BucketCount, c.NextBucketCount, err)
	}
	return flipped, nil
}

// abortChange ends the change c says is in progress without changing the
// count: what a writer, a relay or the sweeper does when it finds a change
// past its deadline (its caller crashed, or the relays do not drain), and
// what an interrupted ChangeBucketCount does. Safe at any step of the
// change, since writers on either side of it use the same count. aborted
// reports that this call ended it (false: another caller had).
func abortChange(ctx context.Context, client changeAPI, tables Tables, c outbox.Config) (aborted bool, err error) {
	return flipChange(ctx, client, tables, c, c.BucketCount, nil)
}

// EndExpiredChange aborts the online BucketCount change stored (the config
// item as just read) says is in progress, when now is at or past its
// deadline: what the relays and the sweeper do (outbox.ChangeEnder), with
// the function Go writers use. ended reports that this call's write ended
// it; false when no change is in progress, its deadline is still ahead, or
// another party ended it first (the counters are thawed all the same).
func (s *Store) EndExpiredChange(ctx context.Context, stored outbox.Config, now time.Time) (ended bool, err error) {
	if !stored.Changing() || now.Before(stored.ChangeDeadline) {
		return false, nil
	}
	return abortChange(ctx, s.client, s.tables, stored)
}

// waitDrained waits until every bucket b has decided every sequence number
// up to fences[b], or the deadline passed (it returns the buckets still
// draining), or ctx ended.
func (s *Store) waitDrained(ctx context.Context, fences []int64, deadline time.Time, opts changeOpts) ([]int, error) {
	left := make([]int, 0, len(fences))
	for b := range fences {
		left = append(left, b)
	}
	type hole struct {
		seq   int64
		since time.Time
	}
	holes := map[int]hole{} // per bucket: the first missing number and since when
	for {
		var mu sync.Mutex
		var still []int
		err := forBuckets(ctx, len(left), func(ctx context.Context, i int) error {
			b := left[i]
			ok, missing, err := s.drainedTo(ctx, b, fences[b])
			if err != nil || ok {
				return err
			}
			mu.Lock()
			still = append(still, b)
			h, seen := holes[b]
			if !seen || h.seq != missing {
				holes[b] = hole{missing, time.Now()}
			}
			mu.Unlock()
			if missing > 0 && seen && h.seq == missing && time.Since(h.since) >= opts.gap {
				// A relay would fence it if anything followed it.
				if err := putFence(ctx, s.client, s.tables.Messages, b, missing, time.Now(), s.cfg.fenceTTL); err != nil && !errors.Is(err, outbox.ErrAlreadyWritten) {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		slices.Sort(still)
		left = still
		if len(left) == 0 || !time.Now().Before(deadline) {
			return left, nil
		}
		if err := sleep(ctx, min(opts.poll, time.Until(deadline))); err != nil {
			return nil, err
		}
	}
}

// drainedTo reports whether bucket b has decided every sequence number up
// to fence: its lease's head is there, or every item from the head to it
// is a tombstone (DeleteMode relays advance the stored head lazily). When
// it has not, missing is the first number up to fence with no item after a
// decided run (0: the first undecided number holds a message).
func (s *Store) drainedTo(ctx context.Context, b int, fence int64) (ok bool, missing int64, err error) {
	l, err := s.ReadLease(ctx, b)
	if err != nil || l.Head >= fence {
		return err == nil, 0, err
	}
	next := l.Head + 1
	for next <= fence {
		entries, _, err := s.Pending(ctx, b, next-1, int(min(fence-next+1, maxQueryLimit)))
		if err != nil {
			return false, 0, err
		}
		if len(entries) == 0 {
			return false, next, nil
		}
		for _, e := range entries {
			switch {
			case e.Sequence > fence:
				return false, next, nil
			case e.Sequence != next:
				return false, next, nil
			case !e.Fence:
				return false, 0, nil
			}
			next++
		}
	}
	return true, 0, nil
}

// forBuckets runs f for 0..n-1, emptyProbeConcurrency at a time, and
// returns the first error (fanout.Each).
func forBuckets(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	return fanout.Each(ctx, n, emptyProbeConcurrency, f)
}

// decodeEpoch reads the BucketCount epoch attributes of a config item.
func decodeEpoch(item map[string]types.AttributeValue, c *outbox.Config) error {
	for _, f := range []struct {
		attr string
		set  func(int64)
	}{
		{attrBktEpoch, func(v int64) { c.BucketEpoch = v }},
		{attrNextBkts, func(v int64) { c.NextBucketCount = int(v) }},
		{attrChangeDL, func(v int64) { c.ChangeDeadline = time.UnixMilli(v) }},
	} {
		v, err := intAttr(item, f.attr, false)
		switch {
		case errors.Is(err, errMissing):
		case err != nil:
			return err
		case v < 0:
			return &ItemError{Attribute: f.attr, Reason: fmt.Sprintf("%d is negative", v)}
		default:
			f.set(v)
		}
	}
	switch {
	case c.NextBucketCount != 0 && !outbox.ValidBucketCount(c.NextBucketCount):
		return &ItemError{Attribute: attrNextBkts, Reason: fmt.Sprintf("next bucket count %d is outside 1..%d", c.NextBucketCount, outbox.MaxBucketCount)}
	case c.Changing() && c.ChangeDeadline.IsZero():
		return &ItemError{Attribute: attrChangeDL, Reason: "a BucketCount change in progress without a deadline"}
	}
	return nil
}

// bucketView is the BucketCount a writer puts messages under and the epoch
// it reserves at.
type bucketView struct {
	count int
	epoch int64
}

func (w *Writer) currentView() bucketView {
	w.viewMu.Lock()
	defer w.viewMu.Unlock()
	return w.view
}

// Writers read the config item again at most this often while a change is
// in progress.
const (
	changePollMin = 10 * time.Millisecond
	changePollMax = 100 * time.Millisecond
)

// awaitEpoch is a writer's answer to a reservation refused by ee: it reads
// the config item until no change is in progress (aborting one past its
// deadline), adopts its count and epoch, and returns them; when the config
// item already says the writer's epoch, it brings the counter there (a
// change whose caller stopped between the flip and the thaw, or an abort
// that did), which is safe because every counter below both counts was
// frozen before a flip that changed the count. The caller reserves again.
func (w *Writer) awaitEpoch(ctx context.Context, had bucketView, ee *sequence.EpochError) (bucketView, error) {
	api := writerCalls{w}
	pause := changePollMin
	for {
		c, err := readConfig(ctx, w.client, w.tables.Control)
		switch {
		case err != nil:
			return had, err
		case c.Changing() && !w.cfg.clock.Now().Before(c.ChangeDeadline):
			w.cfg.logger.WarnContext(ctx, "outbox writer: aborting a BucketCount change past its deadline", "from", c.BucketCount, "to", c.NextBucketCount,
				"deadline", c.ChangeDeadline)
			if _, err := abortChange(ctx, changeCalls{api, w.client}, w.tables, c); err != nil {
				return had, err
			}
			continue
		case c.Changing():
			if err := sleep(ctx, w.cfg.jitter(pause)); err != nil {
				return had, err
			}
			pause = min(2*pause, changePollMax)
			continue
		}
		now := bucketView{count: c.BucketCount, epoch: c.BucketEpoch}
		switch {
		case now.epoch > had.epoch:
		case now.epoch < had.epoch || ee.Counter > now.epoch:
			return had, fmt.Errorf("dynamo: bucket %d's counter serves BucketCount epoch %d, the config item says %d and this writer had %d: the control table was edited by hand",
				ee.Bucket, ee.Counter, now.epoch, had.epoch)
		case ee.Counter == -now.epoch:
			if err := sequence.Thaw(ctx, api, w.tables.Control, ee.Bucket, now.epoch, ee.Fence); err != nil {
				return had, err
			}
		default: // a counter left behind at an earlier epoch
			f, err := sequence.Freeze(ctx, api, w.tables.Control, ee.Bucket, now.epoch-1)
			if err == nil {
				err = sequence.Thaw(ctx, api, w.tables.Control, ee.Bucket, now.epoch, f)
			}
			if err != nil {
				return had, err
			}
		}
		w.viewMu.Lock()
		if now.epoch > w.view.epoch {
			w.view = now
		}
		w.viewMu.Unlock()
		return now, nil
	}
}

// changeCalls is the Writer's client for aborting a change: its UpdateItems
// through the Writer's retry layer, its GetItems as they are.
type changeCalls struct {
	writerCalls
	get getItemAPI
}

func (c changeCalls) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return c.get.GetItem(ctx, in, opts...)
}

// rebucket moves the messages to view's buckets (nothing is reserved).
func (t *txn) rebucket(view bucketView) error {
	for i := range t.msgs {
		m := &t.msgs[i]
		b, err := t.w.bucketIn(*m, view.count)
		if err != nil {
			return err
		}
		m.Bucket, m.Sequence = b, maxSeqForSize
		if n := itemSize(t.w.item(*m)); n > MaxItemBytes {
			return itemTooLarge(i, *m, n)
		}
		m.Sequence = 0
	}
	t.view = view
	return nil
}
