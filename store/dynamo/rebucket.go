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
//  1. prepare: read the config item; wait for the previous change's old
//     epoch to end, if it still drains (two changes never overlap);
//  2. flip: the config item says M at epoch E+1 and that the old epoch,
//     of count N, drains (ob = N), in one conditional write. Writers
//     reading it write under M at once;
//  3. cut: every counter below max(N, M) moves to epoch E+1 and records
//     its cut point, the last number reserved on it at E (sequence.Cut).
//     A writer of epoch E+1 that meets a counter not cut yet cuts it
//     itself: nobody waits for the changer;
//  4. watch: the relays drain the old buckets; once every old bucket has
//     decided every number up to its cut point, whoever finds it (this
//     change, the sweeper, a relay's full sweep, buckets set run again)
//     ends the old epoch: ob is cleared.
//
// Writers stamp each message item with the epoch it was reserved at, and
// relays publish a bucket's messages of epoch E+1 only once the old
// buckets that could share their keys are drained to their cut points
// (GateOpen): per-key order holds although writers never pause.

// changeAPI is what cutting counters and ending a change need: the config
// item and the counters.
type changeAPI interface {
	getItemAPI
	updateItemAPI
}

// DefaultChangeTimeout is how long the old epoch of a BucketCount change
// may take to drain: ChangeBucketCount watches it that long, and past it
// the change is overdue (the sweeper reports it, outbox status shows it).
// Writers do not wait for it.
const DefaultChangeTimeout = 30 * time.Second

// DefaultChangeMargin is the time ChangeBucketCount keeps, before its
// context's deadline, to return: its watch of the old epoch ends that much
// earlier (a caller such as SetBucketCount goes on with the context).
const DefaultChangeMargin = 2 * time.Second

// endTimeout bounds the writes ChangeBucketCount makes after its
// caller's context ended (the cut, the end of the old epoch).
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
	// Waited is how long the change waited, before the flip, for a
	// previous change's old epoch to end.
	Waited time.Duration
	// Flip is how long the change took from the end of that wait to the
	// end of the cut: writers reading the config item after the flip write
	// under the new count; none waits for more than a config read and a
	// second reservation. 0 when nothing changed.
	Flip time.Duration
	// Watched is how long ChangeBucketCount then watched the old epoch
	// drain; Ended reports that the old epoch ended before it returned
	// (by its own write or another party's).
	Watched time.Duration
	Ended   bool
	// Draining names the old buckets still draining when ChangeBucketCount
	// returned (interrupted, or at its timeout). The change stands; the old
	// epoch is ended by whoever finds it drained (the sweeper, a relay's
	// full sweep, buckets set run again).
	Draining []int
}

// ChangeAbortedError is ChangeBucketCount giving up before the flip, with
// nothing written: the previous change's old epoch did not drain by the
// timeout (a stopped relay, a stuck bucket: Draining names its buckets),
// or the caller's context ended while it waited (Interrupted: Ctrl-C, a
// timeout).
type ChangeAbortedError struct {
	From, To int
	Draining []int // the previous change's old buckets not drained (when known)
	// Interrupted is the caller's context's error when the change was
	// aborted because the context ended (nil otherwise).
	Interrupted error
}

func (e *ChangeAbortedError) Error() string {
	if e.Interrupted != nil {
		return fmt.Sprintf("dynamo: the BucketCount change from %d to %d was aborted before the flip because it was interrupted (%v) "+
			"while the previous change's old epoch drained (buckets %v); nothing was written, BucketCount stays %d", e.From, e.To, e.Interrupted, e.Draining, e.From)
	}
	return fmt.Sprintf("dynamo: the BucketCount change from %d to %d was aborted before the flip: the previous change's old epoch did not drain "+
		"by the timeout (buckets %v); nothing was written, BucketCount stays %d. Check that the relays run and no bucket is stuck (outbox status), then try again",
		e.From, e.To, e.Draining, e.From)
}

// Unwrap returns Interrupted.
func (e *ChangeAbortedError) Unwrap() error { return e.Interrupted }

// ChangeBucketCount changes the outbox's BucketCount to to while writers
// and relays run (docs/design.md §13). It waits first, up to the timeout,
// for the previous change's old epoch to end if it still drains (a
// *ChangeAbortedError when it does not, or when ctx ends meanwhile:
// nothing was written); a change begun by a version before the cut-over
// is aborted first. Then it flips the config item (writers switch at
// once), cuts the counters, and watches the old epoch drain until it ends
// it or its timeout passes or ctx ends: there is no abort after the flip,
// and Result.Draining names the old buckets still draining when it
// returned. Relays must be running: they drain the old buckets, and hold
// back the new buckets' messages that wait for them.
func ChangeBucketCount(ctx context.Context, client StoreAPI, tables Tables, to int, options ...ChangeOption) (ChangeResult, error) {
	set, stored, err := prepareChange(ctx, client, tables, to, options)
	if err != nil && ctx.Err() != nil {
		// Interrupted before anything was written.
		return ChangeResult{}, &ChangeAbortedError{From: stored.BucketCount, To: to, Interrupted: context.Cause(ctx)}
	}
	if err != nil {
		return ChangeResult{}, err
	}
	opts := changeOpts{timeout: set.changeTimeout, poll: 50 * time.Millisecond, gap: set.changeGap}
	s := &Store{client: client, tables: tables, cfg: set}
	start := time.Now()
	stored, err = s.waitPrevious(ctx, stored, to, start.Add(opts.timeout), opts)
	if err != nil {
		return ChangeResult{}, err
	}
	res := ChangeResult{From: stored.BucketCount, To: to, Epoch: stored.BucketEpoch, Waited: time.Since(start)}
	if stored.Draining() {
		// This count's own change, its old epoch still draining (buckets
		// set run again): watch it as the change would.
		res.From = stored.OldBucketCount
		err := s.watch(ctx, stored, opts, &res)
		res.From = to
		return res, err
	}
	if stored.BucketCount == to {
		return res, nil
	}
	flipped := stored
	flipped.BucketCount, flipped.BucketEpoch, flipped.OldBucketCount = to, stored.BucketEpoch+1, stored.BucketCount
	flipped.ChangeDeadline = time.UnixMilli(time.Now().Add(opts.timeout).UnixMilli())
	if ctx.Err() != nil {
		return ChangeResult{}, &ChangeAbortedError{From: stored.BucketCount, To: to, Interrupted: context.Cause(ctx)}
	}
	// The flip and the cut run to their end once begun, even if ctx ends
	// meanwhile (bounded): an interrupted flip must not leave the caller
	// unsure whether it applied. From the flip on the change stands; what
	// fails is left to the writers (the cut) and to whoever finds the old
	// epoch drained.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	if err := replaceConfig(wctx, client, tables.Control, stored, flipped); err != nil {
		return ChangeResult{}, err
	}
	res.Epoch = flipped.BucketEpoch
	cutErr := s.cutAll(context.WithoutCancel(ctx), flipped)
	res.Flip = time.Since(start) - res.Waited
	if cutErr != nil && ctx.Err() != nil {
		res.Draining = upTo(flipped.OldBucketCount)
		return res, fmt.Errorf("dynamo: BucketCount changed from %d to %d (epoch %d), but cutting the counters failed (writers cut the ones they meet; "+
			"the sweeper ends the old epoch once drained): %w", res.From, res.To, res.Epoch, cutErr)
	}
	// A cut that failed (each is bounded: endTimeout) is no reason to
	// stop: writers cut the counters they meet, and the watch cuts each
	// old bucket it looks at on ctx (a table slow for a while catches up).
	// Only when the watch fails too does the cut's error come back.
	err = s.watch(ctx, flipped, opts, &res)
	if err != nil && cutErr != nil {
		err = fmt.Errorf("%w (cutting the counters after the flip failed before: %w)", err, cutErr)
	}
	return res, err
}

// watch waits until every old bucket of the change c describes has
// decided every number up to its cut point, fencing a trailing hole a
// crashed writer left, then ends the old epoch; it stops at c's deadline,
// DefaultChangeMargin before ctx's deadline, or when ctx ends, with
// res.Draining naming the old buckets not drained yet (one last look, on
// a context of its own, when ctx ended). Errors are the store's, other
// than ctx's.
func (s *Store) watch(ctx context.Context, c outbox.Config, opts changeOpts, res *ChangeResult) error {
	start := time.Now()
	defer func() { res.Watched = time.Since(start) }()
	until := c.ChangeDeadline
	if dl, ok := ctx.Deadline(); ok && dl.Add(-DefaultChangeMargin).Before(until) {
		until = dl.Add(-DefaultChangeMargin)
	}
	// The last look's context, and the end's: bounded, made when needed.
	var (
		wctx   context.Context
		cancel = func() {}
	)
	defer func() { cancel() }()
	bounded := func() context.Context {
		if wctx == nil {
			wctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
		}
		return wctx
	}
	waiting := upTo(c.OldBucketCount)
	for {
		look := ctx
		if ctx.Err() != nil || !time.Now().Before(until) {
			look = bounded() // the last look
		}
		still, err := s.undrainedOf(look, c, waiting, true)
		if err != nil && look == ctx && ctx.Err() != nil {
			continue // ctx ended during this look: the last look, bounded, decides
		}
		if err != nil {
			res.Draining = waiting
			return fmt.Errorf("dynamo: BucketCount change %d → %d (epoch %d): watching the old epoch drain failed (the sweeper ends it once drained): %w",
				c.OldBucketCount, c.BucketCount, c.BucketEpoch, err)
		}
		if waiting = still; len(waiting) == 0 {
			break
		}
		if look != ctx || sleep(ctx, min(opts.poll, time.Until(until))) != nil {
			res.Draining = waiting
			return nil
		}
	}
	if _, err := s.clearOld(bounded(), c); err != nil {
		return fmt.Errorf("dynamo: BucketCount change %d → %d (epoch %d): the old epoch drained, but ending it failed (the sweeper ends it): %w",
			c.OldBucketCount, c.BucketCount, c.BucketEpoch, err)
	}
	res.Ended = true
	return nil
}

// ChangePlan is what ChangeBucketCount would do now, as PlanBucketCountChange
// reads it (outbox buckets set --dry-run); nothing is written.
type ChangePlan struct {
	From, To int
	// Epoch is the BucketCount epoch now; the change flips to Epoch+1.
	Epoch int64
	// Previous is the old count of the previous change whose old epoch
	// still drains (0: none): ChangeBucketCount waits for its buckets
	// (PreviousDraining) before the flip. Frozen is the target of a
	// change begun by a version before the cut-over, which it aborts
	// first (0: none).
	Previous         int
	PreviousDraining []int
	Frozen           int
	// Waits maps each new bucket to the old buckets whose keys can land in
	// it (outbox.OldBucketsOf): its messages of the new epoch wait until
	// those decided their old-epoch messages.
	Waits map[int][]int
	// Timeout is how long the old epoch may take before the change is
	// overdue.
	Timeout time.Duration
	// Pending maps each old bucket with messages the relays must decide
	// before the gates open to their count (at most PlanProbeLimit each);
	// Oldest is the creation time of the oldest of them.
	Pending map[int]int
	Oldest  time.Time
}

// PlanProbeLimit bounds the messages PlanBucketCountChange counts per bucket.
const PlanProbeLimit = 1000

// PlanBucketCountChange says what ChangeBucketCount(ctx, client, tables, to,
// options...) would do: writers switch at once, which new buckets' messages
// wait for which old buckets, and each old bucket's backlog; it writes
// nothing. It refuses what ChangeBucketCount refuses (an invalid count or
// option, region mode).
func PlanBucketCountChange(ctx context.Context, client StoreAPI, tables Tables, to int, options ...ChangeOption) (ChangePlan, error) {
	set, stored, err := prepareChange(ctx, client, tables, to, options)
	if err != nil {
		return ChangePlan{}, err
	}
	p := ChangePlan{From: stored.BucketCount, To: to, Epoch: stored.BucketEpoch, Previous: stored.OldBucketCount, Frozen: stored.NextBucketCount,
		Timeout: set.changeTimeout, Pending: map[int]int{}, Waits: map[int][]int{}}
	s := &Store{client: client, tables: tables, cfg: set}
	if stored.Draining() {
		if p.PreviousDraining, err = s.undrained(ctx, stored, false); err != nil {
			return p, err
		}
	}
	if p.From == to {
		return p, nil
	}
	for b := range to {
		p.Waits[b] = outbox.OldBucketsOf(b, p.From, to)
	}
	var mu sync.Mutex
	err = forBuckets(ctx, p.From, func(ctx context.Context, b int) error {
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
	if stored.RegionMode() && (stored.BucketCount != to || stored.Draining() || stored.Frozen()) {
		return set, outbox.Config{}, &RegionModeBucketCountError{Stored: stored.BucketCount, Requested: to, Regions: slices.Clone(stored.Regions)}
	}
	return set, stored, nil
}

// waitPrevious ends what stored says is left of an earlier change before a
// new one flips: it aborts a change begun by a version before the cut-over,
// and waits until the previous change's old epoch drained and ends it.
// It gives up at deadline or when ctx ends (a *ChangeAbortedError; nothing
// of the change to to was written), and returns the config item to flip
// from.
func (s *Store) waitPrevious(ctx context.Context, stored outbox.Config, to int, deadline time.Time, opts changeOpts) (outbox.Config, error) {
	var waiting []int
	for stored.Draining() && stored.BucketCount != to || stored.Frozen() {
		var err error
		if _, waiting, err = s.EndOldEpoch(ctx, stored); err != nil && ctx.Err() == nil {
			return stored, err
		}
		if len(waiting) == 0 && err == nil {
			now, err := readConfig(ctx, s.client, s.tables.Control)
			if err != nil {
				return stored, err
			}
			stored = now
			continue
		}
		if ctx.Err() != nil {
			return stored, &ChangeAbortedError{From: stored.BucketCount, To: to, Draining: waiting, Interrupted: context.Cause(ctx)}
		}
		if !time.Now().Before(deadline) {
			return stored, &ChangeAbortedError{From: stored.BucketCount, To: to, Draining: waiting}
		}
		if err := sleep(ctx, min(opts.poll, time.Until(deadline))); err != nil {
			return stored, &ChangeAbortedError{From: stored.BucketCount, To: to, Draining: waiting, Interrupted: context.Cause(ctx)}
		}
		now, err := readConfig(ctx, s.client, s.tables.Control)
		switch {
		case err != nil && ctx.Err() != nil:
			return stored, &ChangeAbortedError{From: stored.BucketCount, To: to, Draining: waiting, Interrupted: context.Cause(ctx)}
		case err != nil:
			return stored, err
		}
		stored = now // a failed read keeps what was read before (the error names its count)
	}
	return stored, nil
}

// cutAll cuts every counter below max(old, new count) of the change c
// describes (c.Draining()) into its epoch, at most emptyProbeConcurrency
// at a time (the cut points are remembered: cutPoint).
func (s *Store) cutAll(ctx context.Context, c outbox.Config) error {
	return forBuckets(ctx, c.Span(), func(ctx context.Context, b int) error {
		// Each cut is bounded on its own (endTimeout), not the lot: a
		// slow table must not fail the last cuts for the first ones' time.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
		defer cancel()
		_, err := s.cutPoint(cctx, b, c.BucketEpoch)
		return err
	})
}

// clearOld ends the old epoch c describes: the config item's ob and cd go,
// conditional on it still saying c. ended is false when another party
// ended it first.
func (s *Store) clearOld(ctx context.Context, c outbox.Config) (ended bool, err error) {
	done := c
	done.OldBucketCount, done.ChangeDeadline = 0, time.Time{}
	if err := replaceConfig(ctx, s.client, s.tables.Control, c, done); err != nil {
		now, rerr := readConfig(ctx, s.client, s.tables.Control)
		if rerr == nil && (now.BucketEpoch > c.BucketEpoch || now.BucketEpoch == c.BucketEpoch && !now.Draining()) {
			return false, nil // another party ended it
		}
		return false, err
	}
	return true, nil
}

// EndOldEpoch implements outbox.EpochGate: it ends the old epoch stored
// says drains once every old bucket decided every number up to its cut
// point (cutting a counter nobody cut yet, and fencing a number up to a
// cut point that stayed missing with nothing after it for the
// ChangeGapTimeout, as seen by this Store), or aborts a change begun by a
// version before the cut-over. What the sweeper and a relay's full sweep
// call; ChangeBucketCount and buckets set run again end it the same way.
func (s *Store) EndOldEpoch(ctx context.Context, stored outbox.Config) (ended bool, waiting []int, err error) {
	switch {
	case stored.Frozen():
		ended, err = abortFrozen(ctx, s.client, s.tables, stored)
		return ended, nil, err
	case !stored.Draining():
		return false, nil, nil
	}
	if waiting, err = s.undrained(ctx, stored, true); err != nil || len(waiting) > 0 {
		return false, waiting, err
	}
	ended, err = s.clearOld(ctx, stored)
	return ended, nil, err
}

// GateOpen implements outbox.EpochGate: bucket's messages stamped with
// epoch may be published once the config item's epoch is past epoch, or
// no old epoch drains, or every old bucket whose keys can land in bucket
// decided every number up to its cut point. One consistent config read;
// while the old epoch drains, a counter read per old bucket the first
// time (cutting it when nobody did yet), and the drained check (a lease
// read, a bounded query) of those not yet seen drained.
func (s *Store) GateOpen(ctx context.Context, bucket int, epoch int64) (bool, []int, error) {
	c, err := readConfig(ctx, s.client, s.tables.Control)
	switch {
	case err != nil:
		return false, nil, err
	case epoch <= c.OpenEpoch():
		return true, nil, nil
	case epoch > c.BucketEpoch:
		return false, nil, fmt.Errorf("dynamo: bucket %d holds a message of BucketCount epoch %d, but the config item says epoch %d: the control table was edited by hand",
			bucket, epoch, c.BucketEpoch)
	}
	waiting, err := s.undrainedOf(ctx, c, outbox.OldBucketsOf(bucket, c.OldBucketCount, c.BucketCount), true)
	return err == nil && len(waiting) == 0, waiting, err
}

// OldBucketsDraining returns the old buckets of the change stored (the
// config item as read) describes that have not yet decided every number up
// to their cut points (none when no old epoch drains): outbox status. It
// may cut a counter nobody cut yet, as any writer of the new epoch would;
// it writes nothing else.
func (s *Store) OldBucketsDraining(ctx context.Context, stored outbox.Config) ([]int, error) {
	if !stored.Draining() {
		return nil, nil
	}
	return s.undrained(ctx, stored, false)
}

// undrained is undrainedOf every old bucket of c.
func (s *Store) undrained(ctx context.Context, c outbox.Config, fence bool) ([]int, error) {
	return s.undrainedOf(ctx, c, upTo(c.OldBucketCount), fence)
}

// upTo is the buckets 0..n-1.
func upTo(n int) []int {
	out := make([]int, n)
	for b := range out {
		out[b] = b
	}
	return out
}

// undrainedOf returns the buckets of old (old buckets of the change c
// describes) that have not decided every number up to their cut points,
// sorted. With fence set, a number up to a cut point that this Store saw
// missing, with nothing after it up to the cut point, for the
// ChangeGapTimeout is fenced (a writer reserved it and crashed; relays
// fence only what something follows).
func (s *Store) undrainedOf(ctx context.Context, c outbox.Config, old []int, fence bool) ([]int, error) {
	var (
		mu    sync.Mutex
		still []int
	)
	err := fanout.Each(ctx, len(old), emptyProbeConcurrency, func(ctx context.Context, i int) error {
		b := old[i]
		if s.seenDrained(c.BucketEpoch, b) {
			return nil
		}
		cut, err := s.cutPoint(ctx, b, c.BucketEpoch)
		if err != nil {
			return err
		}
		ok, missing, err := s.drainedTo(ctx, b, cut)
		if err != nil {
			return err
		}
		if ok {
			s.markDrained(c.BucketEpoch, b)
			return nil
		}
		mu.Lock()
		still = append(still, b)
		mu.Unlock()
		if fence && s.holeOverdue(c.BucketEpoch, b, missing) {
			if err := putFence(ctx, s.client, s.tables.Messages, b, missing, time.Now(), s.cfg.fenceTTL); err != nil && !errors.Is(err, outbox.ErrAlreadyWritten) {
				return err
			}
		}
		return nil
	})
	slices.Sort(still)
	return still, err
}

// epochMemo is what a Store remembers of the old epoch of the change to
// epoch: each bucket's cut point once read (it never changes), the old
// buckets seen drained to it (they stay drained), and the holes seen (a
// missing number and since when), for the fence of a trailing hole.
type epochMemo struct {
	epoch   int64
	cuts    map[int]int64
	drained map[int]bool
	holes   map[int]hole
}

type hole struct {
	seq   int64
	since time.Time
}

// memo returns the Store's memo of epoch, nil when it already remembers a
// later one (a newer epoch replaces it); the caller holds s.memoMu.
func (s *Store) memo(epoch int64) *epochMemo {
	if s.epochs == nil || s.epochs.epoch < epoch {
		s.epochs = &epochMemo{epoch: epoch, cuts: map[int]int64{}, drained: map[int]bool{}, holes: map[int]hole{}}
	}
	if s.epochs.epoch != epoch {
		return nil
	}
	return s.epochs
}

func (s *Store) seenDrained(epoch int64, b int) bool {
	s.memoMu.Lock()
	defer s.memoMu.Unlock()
	m := s.memo(epoch)
	return m != nil && m.drained[b]
}

func (s *Store) markDrained(epoch int64, b int) {
	s.memoMu.Lock()
	defer s.memoMu.Unlock()
	if m := s.memo(epoch); m != nil {
		m.drained[b] = true
		delete(m.holes, b)
	}
}

// holeOverdue records that bucket b's first undecided number up to its cut
// point is missing (0: it holds a message) and reports whether it has been
// missing, the same number, for the ChangeGapTimeout.
func (s *Store) holeOverdue(epoch int64, b int, missing int64) bool {
	s.memoMu.Lock()
	defer s.memoMu.Unlock()
	m := s.memo(epoch)
	if m == nil {
		return false
	}
	h, seen := m.holes[b]
	if !seen || h.seq != missing {
		m.holes[b] = hole{missing, time.Now()}
		return false
	}
	return missing > 0 && time.Since(h.since) >= s.cfg.changeGap
}

// cutPoint returns bucket b's cut point for the change to epoch: read from
// its counter once cut (remembered), or cut now (sequence.Cut) when nobody
// cut it yet.
func (s *Store) cutPoint(ctx context.Context, b int, epoch int64) (int64, error) {
	s.memoMu.Lock()
	var (
		cut int64
		ok  bool
	)
	if m := s.memo(epoch); m != nil {
		cut, ok = m.cuts[b]
	}
	s.memoMu.Unlock()
	if ok {
		return cut, nil
	}
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: str(s.tables.Control), Key: controlKey(sequence.PartitionKey(b), sequence.SortKey), ConsistentRead: new(true),
		ProjectionExpression: str("#ce, #cf"), ExpressionAttributeNames: map[string]string{"#ce": "ce", "#cf": "cf"},
	})
	if err != nil {
		return 0, fmt.Errorf("dynamo: read the counter of bucket %d: %w", b, err)
	}
	ce, err1 := intAttr(out.Item, "ce", false)
	cf, err2 := intAttr(out.Item, "cf", false)
	switch {
	case err1 == nil && err2 == nil && ce == epoch:
		cut = cf
	case err1 == nil && ce > epoch:
		return 0, fmt.Errorf("dynamo: bucket %d's counter serves BucketCount epoch %d, past the change to %d being looked at: read the config item again", b, ce, epoch)
	default:
		if cut, err = sequence.Cut(ctx, s.client, s.tables.Control, b, epoch); err != nil {
			return 0, err
		}
	}
	s.memoMu.Lock()
	if m := s.memo(epoch); m != nil {
		m.cuts[b] = cut
	}
	s.memoMu.Unlock()
	return cut, nil
}

// abortFrozen aborts the change c describes that a version before the
// cut-over began (c.Frozen(): it froze the counters until the old buckets
// drained): the config item moves to the next epoch with the count
// unchanged, conditional on it still saying c, then every counter of that
// change is cut (thawed) into the next epoch. Safe at any step of that
// change, since writers on either side of it use the same count, and by
// several parties at once. aborted reports that this call's write did it.
func abortFrozen(ctx context.Context, client changeAPI, tables Tables, c outbox.Config) (aborted bool, err error) {
	done := c
	done.BucketEpoch, done.NextBucketCount, done.ChangeDeadline = c.BucketEpoch+1, 0, time.Time{}
	aborted = true
	if err := replaceConfig(ctx, client, tables.Control, c, done); err != nil {
		now, rerr := readConfig(ctx, client, tables.Control)
		if rerr != nil || now.BucketEpoch <= c.BucketEpoch {
			return false, err
		}
		aborted = false
	}
	err = forBuckets(ctx, max(c.BucketCount, c.NextBucketCount), func(ctx context.Context, b int) error {
		_, err := sequence.Cut(ctx, client, tables.Control, b, c.BucketEpoch+1)
		return err
	})
	if err != nil {
		return aborted, fmt.Errorf("dynamo: abort an older version's BucketCount change %d → %d: cut the counters (writers cut the ones they need): %w",
			c.BucketCount, c.NextBucketCount, err)
	}
	return aborted, nil
}

// drainedTo reports whether bucket b has decided every sequence number up
// to cut: its lease's head is there, or every item from the head to it is
// a tombstone (DeleteMode relays advance the stored head lazily). When it
// has not, missing is the first number up to cut with no item after a
// decided run (0: the first undecided number holds a message).
func (s *Store) drainedTo(ctx context.Context, b int, cut int64) (ok bool, missing int64, err error) {
	l, err := s.ReadLease(ctx, b)
	if err != nil || l.Head >= cut {
		return err == nil, 0, err
	}
	next := l.Head + 1
	for next <= cut {
		entries, _, err := s.Pending(ctx, b, next-1, int(min(cut-next+1, maxQueryLimit)))
		if err != nil {
			return false, 0, err
		}
		if len(entries) == 0 {
			return false, next, nil
		}
		for _, e := range entries {
			switch {
			case e.Sequence > cut:
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
		{attrOldBkts, func(v int64) { c.OldBucketCount = int(v) }},
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
	case c.OldBucketCount != 0 && !outbox.ValidBucketCount(c.OldBucketCount):
		return &ItemError{Attribute: attrOldBkts, Reason: fmt.Sprintf("old bucket count %d is outside 1..%d", c.OldBucketCount, outbox.MaxBucketCount)}
	case c.Draining() && c.BucketEpoch < 1:
		return &ItemError{Attribute: attrOldBkts, Reason: "an old epoch draining at BucketCount epoch 0"}
	case c.Draining() && c.Frozen():
		return &ItemError{Attribute: attrNextBkts, Reason: "an old epoch draining and an older version's change in progress at once"}
	case c.NextBucketCount != 0 && !outbox.ValidBucketCount(c.NextBucketCount):
		return &ItemError{Attribute: attrNextBkts, Reason: fmt.Sprintf("next bucket count %d is outside 1..%d", c.NextBucketCount, outbox.MaxBucketCount)}
	case (c.Draining() || c.Frozen()) && c.ChangeDeadline.IsZero():
		return &ItemError{Attribute: attrChangeDL, Reason: "a BucketCount change without a deadline"}
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

// meetEpoch is a writer's answer to a reservation refused by ee (nothing
// reserved), and returns the view to reserve at next: a counter at an
// earlier epoch than the writer's is one nobody cut yet (the changer is
// on its way, or stopped): the writer cuts it and reserves again, same
// view. A counter at a later epoch means the count changed: the writer
// reads the config item and takes its count and epoch (the caller moves
// the messages to the new buckets). A counter frozen by a version before
// the cut-over: for the writer's epoch it is cut (thawed); otherwise that
// version's change is aborted (abortFrozen) when the config item still
// describes it, and the writer takes the config item's count and epoch.
// No waiting: the pause is a config read and a second reservation.
func (w *Writer) meetEpoch(ctx context.Context, had bucketView, ee *sequence.EpochError) (bucketView, error) {
	api := writerCalls{w}
	if ee.Counter >= 0 && ee.Counter < had.epoch || ee.Counter == -had.epoch && had.epoch > 0 {
		_, err := sequence.Cut(ctx, api, w.tables.Control, ee.Bucket, had.epoch)
		var later *sequence.EpochError
		if !errors.As(err, &later) || !later.Later() {
			return had, err
		}
		// A later change cut the counter between the refusal and this
		// cut (a change leaves counters no writer met uncut): follow the
		// config item as for a counter found at the later epoch.
		ee = later
	}
	c, err := readConfig(ctx, w.client, w.tables.Control)
	if err == nil && c.Frozen() {
		w.cfg.logger.WarnContext(ctx, "outbox writer: aborting a BucketCount change begun by an older version (it froze the counters)",
			"from", c.BucketCount, "to", c.NextBucketCount)
		if _, err = abortFrozen(ctx, changeCalls{api, w.client}, w.tables, c); err == nil {
			c, err = readConfig(ctx, w.client, w.tables.Control)
		}
	}
	if err != nil {
		return had, err
	}
	now := bucketView{count: c.BucketCount, epoch: c.BucketEpoch}
	if now.epoch <= had.epoch || ee.Counter > now.epoch {
		return had, fmt.Errorf("dynamo: bucket %d's counter serves BucketCount epoch %d, the config item says %d and this writer had %d: the control table was edited by hand",
			ee.Bucket, ee.Counter, now.epoch, had.epoch)
	}
	w.viewMu.Lock()
	if now.epoch > w.view.epoch {
		w.view = now
	}
	w.viewMu.Unlock()
	return now, nil
}

// changeCalls is the Writer's client for aborting an older version's
// change: its UpdateItems through the Writer's retry layer, its GetItems as
// they are.
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
		if n := itemSize(t.w.item(*m, view.epoch)); n > MaxItemBytes {
			return itemTooLarge(i, *m, n)
		}
		m.Sequence = 0
	}
	t.view = view
	return nil
}
