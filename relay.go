package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Relay publishes the messages of each bucket strictly in sequence order,
// under the bucket's lease, and deletes only the contiguous acknowledged
// prefix. It is safe for concurrent use; the lease makes concurrent drains of
// one bucket (in this process or any other) mutually exclusive.
type Relay struct {
	store       Store
	pub         Publisher
	cfg         config
	bucketCount int

	// Drains running in this process, by bucket. The store's lease is per
	// owner id, so it cannot keep two drains of one Relay apart: this can.
	mu     sync.Mutex
	active map[int]*atomic.Bool // bucket -> woken while draining
}

// NewRelay reads the outbox's config item and returns a relay for it. It
// fails with a *MisconfigurationError when the BucketCount option differs from
// the stored one or the stored format is newer than this code, and with an
// *OptionError for an invalid option.
func NewRelay(ctx context.Context, store Store, pub Publisher, opts ...Option) (*Relay, error) {
	if store == nil || pub == nil {
		return nil, &OptionError{Option: "NewRelay", Value: nil, Reason: "store and publisher are required"}
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	stored, err := store.Config(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox: read config item: %w", err)
	}
	if err := CheckConfig(stored, cfg.bucketCount); err != nil {
		return nil, err
	}
	return &Relay{store: store, pub: pub, cfg: cfg, bucketCount: stored.BucketCount, active: map[int]*atomic.Bool{}}, nil
}

// CheckConfig verifies a stored configuration against a process's expected
// bucket count (0 = accept the stored one) and this code's format version.
func CheckConfig(stored Config, bucketCount int) error {
	if stored.BucketCount < 1 || stored.BucketCount > MaxBucketCount {
		return &MisconfigurationError{Setting: "BucketCount", Configured: fmt.Sprint(bucketCount), Stored: fmt.Sprint(stored.BucketCount),
			Fix: fmt.Sprintf("the config item is corrupt: BucketCount must be 1..%d", MaxBucketCount)}
	}
	if bucketCount != 0 && bucketCount != stored.BucketCount {
		return &MisconfigurationError{Setting: "BucketCount", Configured: fmt.Sprint(bucketCount), Stored: fmt.Sprint(stored.BucketCount),
			Fix: "every writer and relay of one outbox must use the table's BucketCount; changing it requires draining the outbox first"}
	}
	if stored.FormatVersion > FormatVersion {
		return &MisconfigurationError{Setting: "FormatVersion", Configured: fmt.Sprint(FormatVersion), Stored: fmt.Sprint(stored.FormatVersion),
			Fix: "the outbox was created by a newer version of this library; upgrade this process"}
	}
	return nil
}

// BucketCount returns the outbox's bucket count.
func (r *Relay) BucketCount() int { return r.bucketCount }

// ID returns the relay's id as written in leases and heartbeats.
func (r *Relay) ID() string { return r.cfg.relayID }

// DrainStats summarises one DrainBucket call.
type DrainStats struct {
	Bucket    int
	Batches   int
	Published int   // messages acknowledged by the broker
	Deleted   int   // messages deleted (acknowledged and leftovers)
	Leftovers int   // messages found at or below head and deleted without republishing
	Fenced    int   // fence tombstones written by this drain
	Parked    int   // records moved to the dead letters
	Retries   int   // publish attempts retried after a retriable error
	Head      int64 // the bucket's head when the drain stopped
}

// DrainBucket takes the bucket's lease and publishes its pending messages in
// sequence order until the bucket is empty, the lease is lost, or the
// context's deadline minus DeadlineMargin is reached. It returns nil only when
// the bucket was drained (everything that was pending when the lease was
// released is published). ErrLeaseHeld means another owner holds the bucket;
// it has been woken and will drain again before releasing, so the caller's
// hint is not lost.
func (r *Relay) DrainBucket(ctx context.Context, bucket int) (DrainStats, error) {
	return r.DrainBucketTo(ctx, bucket, 0)
}

// DrainBucketTo is DrainBucket that may stop as soon as the bucket's head
// has reached seq (0: drain until empty). A stream hint names the sequence
// number of the message it announces, and every committed message's hint
// arrives in some batch, so a relay invocation need only drain each bucket
// up to the highest sequence hinted in its batch: messages committed later
// are announced to the next invocation. This keeps invocations short, so a
// busy bucket cannot hold back the hints of the others. A wake-up from a
// contender still drains until empty.
func (r *Relay) DrainBucketTo(ctx context.Context, bucket int, seq int64) (DrainStats, error) {
	st := DrainStats{Bucket: bucket}
	if bucket < 0 || bucket >= r.bucketCount {
		return st, &BucketRangeError{Bucket: bucket, BucketCount: r.bucketCount}
	}
	if r.pastDeadline(ctx) {
		return st, ErrDeadline
	}
	// One drain per bucket in this process: a second one wakes the first.
	r.mu.Lock()
	if woken, busy := r.active[bucket]; busy {
		woken.Store(true)
		r.mu.Unlock()
		return st, ErrLeaseHeld
	}
	localWake := new(atomic.Bool)
	r.active[bucket] = localWake
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.active, bucket)
		r.mu.Unlock()
	}()
	lease, err := r.store.Acquire(ctx, bucket, r.cfg.relayID, r.cfg.clock.Now(), r.cfg.leaseDuration)
	if err != nil {
		if errors.Is(err, ErrLeaseHeld) {
			return st, err
		}
		return st, fmt.Errorf("outbox: acquire bucket %d: %w", bucket, err)
	}
	d := &drain{r: r, lease: lease, deletedThrough: lease.Cleaned, st: &st, target: seq, wakeAtRead: lease.Wake}
	if err := d.inject(ctx, AfterAcquire); err != nil {
		return st, err
	}
	for {
		err := d.untilEmpty(ctx)
		st.Head = d.lease.Head
		if err != nil {
			var crash *CrashError
			if !errors.Is(err, ErrLeaseLost) && !errors.As(err, &crash) {
				d.releaseAfterError()
			}
			r.cfg.logger.Log(ctx, levelFor(err), "outbox: drain stopped", "bucket", bucket, "head", d.lease.Head, "err", err)
			return st, err
		}
		if localWake.Swap(false) {
			d.target = 0
			continue // a drain of this process was asked for meanwhile
		}
		rl := d.lease
		rl.Wake = d.wakeAtRead
		l, err := r.store.Release(ctx, rl, d.deletedThrough)
		if errors.Is(err, ErrWoken) {
			// A contender found the bucket held while we drained: what it
			// saw committed may have landed after our last read. Drain
			// again, until empty.
			d.lease, d.target = l, 0
			continue
		}
		if err != nil {
			return st, fmt.Errorf("outbox: release bucket %d: %w", bucket, err)
		}
		return st, nil
	}
}

func levelFor(err error) slog.Level {
	if errors.Is(err, ErrDeadline) || errors.Is(err, ErrGapPending) || errors.Is(err, ErrLeaseLost) {
		return slog.LevelInfo
	}
	return slog.LevelError
}

// DrainBuckets drains the given buckets, at most Concurrency at once, and
// returns the error of each bucket that was not drained (nil map entries are
// omitted). Duplicates in buckets are drained once.
func (r *Relay) DrainBuckets(ctx context.Context, buckets []int) map[int]error {
	seen := make(map[int]bool, len(buckets))
	var uniq []int
	for _, b := range buckets {
		if !seen[b] {
			seen[b] = true
			uniq = append(uniq, b)
		}
	}
	var (
		mu   sync.Mutex
		errs = make(map[int]error)
		wg   sync.WaitGroup
		sem  = make(chan struct{}, r.cfg.concurrency)
	)
	for _, b := range uniq {
		sem <- struct{}{}
		wg.Add(1)
		go func(b int) {
			defer func() { <-sem; wg.Done() }()
			if _, err := r.DrainBucket(ctx, b); err != nil {
				mu.Lock()
				errs[b] = err
				mu.Unlock()
			}
		}(b)
	}
	wg.Wait()
	return errs
}

func (r *Relay) pastDeadline(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) <= r.cfg.deadlineMargin
}

// drain is the state of one lease-holding drain of one bucket.
type drain struct {
	r     *Relay
	mu    sync.Mutex // guards lease while a publish renews it concurrently
	lease Lease
	// deletedThrough: every message at or below it is known deleted; reads
	// start above it. Written to the lease as Cleaned.
	deletedThrough int64
	st             *DrainStats
	// wakeAtRead is the lease's wake count when the bucket was last read.
	wakeAtRead int64
	// target: stop once head reaches it (0: drain until empty).
	target int64
	// isolate: the next publish is the head record alone, to tell whether
	// a record-level rejection is really its own.
	isolate bool
	// Consecutive publish failures, and the sequence and time of the first.
	failures     int
	failedSeq    int64
	firstFailure time.Time
}

func (d *drain) getLease() Lease {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lease
}

// untilEmpty runs batches until the bucket has nothing pending.
func (d *drain) untilEmpty(ctx context.Context) error {
	r := d.r
	cfg := &r.cfg
	b := d.lease.Bucket
	for {
		if r.pastDeadline(ctx) {
			return ErrDeadline
		}
		if d.target > 0 && d.lease.Head >= d.target {
			return nil // everything hinted is decided; later commits bring their own hints
		}
		if err := d.renewIfDue(ctx); err != nil {
			return err
		}
		head := d.lease.Head
		// Read from the cleaned mark: messages in (deletedThrough, head] are
		// leftovers of a crash between a head update and its delete.
		limit := cfg.batchSize + int(min(head-d.deletedThrough, int64(cfg.batchSize)))
		// A wake-up counted after this read must make the release fail, so
		// release with the wake count as of the last read (Update and
		// Renew return newer counts).
		d.wakeAtRead = d.getLease().Wake
		entries, end, err := r.store.Pending(ctx, b, d.deletedThrough, limit)
		if err != nil {
			return fmt.Errorf("outbox: read bucket %d after %d: %w", b, d.deletedThrough, err)
		}
		if len(entries) == 0 {
			end = true
		}
		// Every sequence number up to seenThrough was covered by this read.
		seenThrough := int64(1<<63 - 1)
		if !end {
			seenThrough = entries[len(entries)-1].Sequence
		}

		var (
			leftovers []int64
			run       []Entry
			msgs      []Message
			expect    = head + 1
			gapAt     int64
			gapNext   int64
			badEntry  *Entry
		)
		for i := range entries {
			e := &entries[i]
			if e.Sequence <= head {
				switch {
				case e.Err != nil:
					cfg.logger.ErrorContext(ctx, "outbox: undecodable item at or below head left in place", "bucket", b, "sequence", e.Sequence, "err", e.Err)
				case !e.Fence:
					leftovers = append(leftovers, e.Sequence)
				}
				continue
			}
			if e.Sequence != expect {
				if len(run) == 0 {
					gapAt, gapNext = expect, e.Sequence
				}
				break
			}
			if len(msgs) == cfg.batchSize || d.isolate && len(msgs) == 1 {
				break
			}
			if e.Err != nil || (!e.Fence && RecordSize(e.Message, cfg.idHeader) > cfg.maxMessageBytes) {
				badEntry = e
				break
			}
			run = append(run, *e)
			if !e.Fence {
				msgs = append(msgs, e.Message)
			}
			expect++
		}

		if len(run) == 0 {
			switch {
			case len(leftovers) > 0:
				if err := d.delete(ctx, leftovers); err != nil {
					return err
				}
				d.st.Leftovers += len(leftovers)
				d.deletedThrough = max(d.deletedThrough, min(head, seenThrough))
				continue
			case badEntry != nil:
				// Never publish, skip or delete what cannot be published:
				// park it (default) or stop the bucket.
				reason := fmt.Errorf("record of %d bytes exceeds MaxMessageBytes=%d", RecordSize(badEntry.Message, cfg.idHeader), cfg.maxMessageBytes)
				if badEntry.Err != nil {
					if Classify(badEntry.Err) == Fatal {
						cfg.logger.ErrorContext(ctx, "outbox: item cannot be read by this relay; the bucket stops", "bucket", b, "sequence", badEntry.Sequence, "err", badEntry.Err)
						return &PublishError{Bucket: b, Sequence: badEntry.Sequence, Err: badEntry.Err}
					}
					reason = fmt.Errorf("item cannot be decoded: %w", badEntry.Err)
				}
				now := cfg.clock.Now()
				if err := d.recordError(ctx, *badEntry, WithClass(reason, RecordPermanent), now, now, 0); err != nil {
					return err
				}
				continue
			case gapAt != 0:
				if err := d.gap(ctx, gapAt, gapNext); err != nil {
					return err
				}
				continue
			case end:
				return nil
			default:
				// Everything read was at or below head and already handled;
				// read on from the last sequence seen.
				d.deletedThrough = max(d.deletedThrough, min(head, seenThrough))
				continue
			}
		}

		start := cfg.clock.Now()
		acked, perr := 0, error(nil)
		if len(msgs) > 0 {
			acked, perr = d.publish(ctx, msgs)
		}
		var crashed *CrashError
		if errors.Is(perr, ErrLeaseLost) || errors.As(perr, &crashed) {
			// Another owner may take over at any moment: write nothing.
			return perr
		}
		if acked > 0 {
			if err := d.inject(ctx, AfterProduce); err != nil {
				return err
			}
		}
		// The decided prefix: every entry up to the first unacknowledged
		// message, fences included.
		newHead, fenced, n := head, 0, 0
		for _, e := range run {
			if !e.Fence {
				if n == acked {
					break
				}
				n++
			} else {
				fenced++
			}
			newHead = e.Sequence
		}
		stats := BatchStats{Bucket: b, Messages: len(msgs), Acked: acked, Fenced: fenced, PublishDuration: cfg.clock.Now().Sub(start), Err: perr}
		if perr != nil {
			stats.Class = Classify(perr)
		}
		if newHead > head {
			u := LeaseUpdate{Head: newHead, Cleaned: d.deletedThrough}
			if l := d.getLease(); l.Gap != 0 && l.Gap > newHead {
				u.Gap, u.GapSince = l.Gap, l.GapSince
			}
			l, err := r.store.Update(ctx, d.getLease(), u, cfg.clock.Now())
			if err != nil {
				stats.Err = err
				cfg.metrics.Batch(stats)
				return fmt.Errorf("outbox: advance head of bucket %d to %d: %w", b, newHead, err)
			}
			d.lease = l
			if err := d.inject(ctx, AfterHeadUpdate); err != nil {
				return err
			}
		}
		toDelete := leftovers
		for _, m := range msgs[:acked] {
			toDelete = append(toDelete, m.Sequence)
		}
		if len(toDelete) > 0 {
			if err := d.delete(ctx, toDelete); err != nil {
				stats.Err = err
				cfg.metrics.Batch(stats)
				return err
			}
		}
		d.deletedThrough = max(d.deletedThrough, min(newHead, seenThrough))
		stats.Deleted = len(toDelete)
		cfg.metrics.Batch(stats)
		d.st.Batches++
		d.st.Published += acked
		d.st.Leftovers += len(leftovers)
		if perr == nil {
			d.failures, d.isolate = 0, false
			if end && len(run) > 0 && run[len(run)-1].Sequence == entries[len(entries)-1].Sequence {
				// The read reached the end of the bucket and this batch took
				// all of it: nothing is left to read. A later commit wakes the
				// holder (Release fails) or finds the lease free.
				return nil
			}
			continue
		}
		failed := msgs[acked]
		var pe *PublishError
		if !errors.As(perr, &pe) {
			perr = &PublishError{Bucket: b, Sequence: failed.Sequence, MessageID: failed.ID, Err: perr}
		}
		d.failures++
		if d.failures == 1 || d.failedSeq != failed.Sequence {
			d.failedSeq, d.firstFailure = failed.Sequence, start
		}
		switch Classify(perr) {
		case RecordPermanent:
			if !d.isolate && len(msgs)-acked > 1 {
				// Kafka rejects whole batches: the record named may have
				// failed with a neighbour. Publish it alone before judging.
				d.isolate = true
				continue
			}
			d.isolate = false
			if err := d.recordError(ctx, Entry{Sequence: failed.Sequence, Message: failed}, perr, d.firstFailure, cfg.clock.Now(), d.failures); err != nil {
				return err
			}
			d.failures = 0
		case Fatal:
			cfg.logger.ErrorContext(ctx, "outbox: publish failed with a permanent topic- or cluster-wide error; the bucket stops until the cause is fixed",
				"bucket", b, "sequence", failed.Sequence, "err", perr)
			return perr
		default:
			// Retriable: back off with full jitter, keep the rows, try again
			// (from the new head) unless the deadline comes first.
			wait := backoff(cfg.retryBase, cfg.retryMax, d.failures)
			if dl, ok := ctx.Deadline(); ok && time.Until(dl)-cfg.deadlineMargin < wait {
				return perr
			}
			cfg.logger.WarnContext(ctx, "outbox: retriable publish error; backing off", "bucket", b, "sequence", failed.Sequence,
				"attempt", d.failures, "wait", wait, "err", perr)
			d.st.Retries++
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return perr
			case <-t.C:
			}
		}
	}
}

// backoff returns a full-jitter exponential backoff for the given attempt.
func backoff(base, max time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

// recordError applies the record-error policy to e, the entry at head+1.
func (d *drain) recordError(ctx context.Context, e Entry, cause error, first, last time.Time, attempts int) error {
	cfg := &d.r.cfg
	b := d.lease.Bucket
	if cfg.recordPolicy == Block {
		cfg.logger.ErrorContext(ctx, "outbox: record cannot be published; the bucket is blocked until it is fixed or parked",
			"bucket", b, "sequence", e.Sequence, "message_id", e.Message.ID, "err", cause)
		var pe *PublishError
		if errors.As(cause, &pe) {
			return cause
		}
		return &PublishError{Bucket: b, Sequence: e.Sequence, MessageID: e.Message.ID, Err: cause}
	}
	msg := e.Message
	msg.Bucket, msg.Sequence = b, e.Sequence
	p := Parked{Bucket: b, Sequence: e.Sequence, Message: msg, Reason: cause.Error(), Class: RecordPermanent,
		Attempts: max(attempts, 1), FirstFailure: first, LastFailure: last}
	l, err := d.r.store.Park(ctx, d.getLease(), p, cfg.clock.Now())
	if err != nil {
		return fmt.Errorf("outbox: park bucket %d sequence %d: %w", b, e.Sequence, err)
	}
	d.mu.Lock()
	d.lease = l
	d.mu.Unlock()
	if d.deletedThrough == e.Sequence-1 {
		d.deletedThrough = e.Sequence
	}
	d.st.Parked++
	cfg.metrics.Batch(BatchStats{Bucket: b, Parked: 1, Err: cause, Class: RecordPermanent})
	cfg.logger.ErrorContext(ctx, "outbox: record parked in the dead letters; the bucket continues",
		"bucket", b, "sequence", e.Sequence, "message_id", e.Message.ID, "attempts", p.Attempts, "err", cause)
	return nil
}

func (d *drain) delete(ctx context.Context, seqs []int64) error {
	b := d.lease.Bucket
	first := seqs
	if d.r.cfg.faults != nil && len(seqs) > 1 {
		first = seqs[:len(seqs)/2] // so that a crash can fall in the middle
	}
	if err := d.r.store.Delete(ctx, b, first); err != nil {
		return fmt.Errorf("outbox: delete %d messages of bucket %d: %w", len(first), b, err)
	}
	if len(first) < len(seqs) {
		if err := d.inject(ctx, MidDelete); err != nil {
			return err
		}
		if err := d.r.store.Delete(ctx, b, seqs[len(first):]); err != nil {
			return fmt.Errorf("outbox: delete %d messages of bucket %d: %w", len(seqs)-len(first), b, err)
		}
	}
	d.st.Deleted += len(seqs)
	return nil
}

// renewIfDue renews the lease when its renewal interval has passed, and
// fails with ErrLeaseLost when it has (nearly) expired: a holder that stalled
// past its lease must not act on the bucket again.
func (d *drain) renewIfDue(ctx context.Context) error {
	cfg := &d.r.cfg
	now := cfg.clock.Now()
	l := d.getLease()
	if now.Before(l.Expires.Add(-(cfg.leaseDuration - cfg.renewInterval))) {
		return nil
	}
	nl, err := d.r.store.Renew(ctx, l, now, cfg.leaseDuration)
	if err != nil {
		if errors.Is(err, ErrLeaseLost) || !now.Before(l.Expires.Add(-cfg.leaseMargin)) {
			return fmt.Errorf("outbox: renew lease of bucket %d: %w", l.Bucket, errors.Join(ErrLeaseLost, err))
		}
		return fmt.Errorf("outbox: renew lease of bucket %d: %w", l.Bucket, err)
	}
	d.mu.Lock()
	d.lease = nl
	d.mu.Unlock()
	return d.inject(ctx, DuringRenewal)
}

// publish runs the publisher while a watchdog renews the lease every
// LeaseRenewInterval. If the lease is lost, or cannot be renewed until
// LeaseMargin before it expires, the publish's context is cancelled so the
// publisher aborts what it has not sent before anyone can take the bucket
// over, and ErrLeaseLost is returned.
func (d *drain) publish(ctx context.Context, msgs []Message) (int, error) {
	cfg := &d.r.cfg
	// A hard deadline as well as the watchdog: even if this process stalls
	// (and the watchdog with it), the publisher's context expires, by the
	// machine's monotonic clock, before the lease can be taken over.
	l0 := d.getLease()
	if !cfg.clock.Now().Before(l0.Expires.Add(-cfg.leaseMargin)) {
		// Stalled since the last renewal (e.g. in a slow read): the lease
		// may be taken over any moment. Publish nothing.
		return 0, fmt.Errorf("outbox: lease of bucket %d expires before a publish could finish: %w", l0.Bucket, ErrLeaseLost)
	}
	pctx, cancel := context.WithTimeout(ctx, l0.Expires.Add(-cfg.leaseMargin).Sub(cfg.clock.Now()))
	defer cancel()
	var (
		lost error
		wg   sync.WaitGroup
		done = make(chan struct{})
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			l := d.getLease()
			renewAt := l.Expires.Add(-(cfg.leaseDuration - cfg.renewInterval))
			giveUpAt := l.Expires.Add(-cfg.leaseMargin)
			now := cfg.clock.Now()
			if !now.Before(giveUpAt) {
				lost = fmt.Errorf("outbox: lease of bucket %d about to expire during publish: %w", l.Bucket, ErrLeaseLost)
				cancel()
				return
			}
			wait := renewAt.Sub(now)
			if wait < 0 {
				wait = min(cfg.renewInterval/10, giveUpAt.Sub(now))
			}
			t := time.NewTimer(wait)
			select {
			case <-done:
				t.Stop()
				return
			case <-t.C:
			}
			nl, err := d.r.store.Renew(ctx, l, cfg.clock.Now(), cfg.leaseDuration)
			if err == nil {
				d.mu.Lock()
				d.lease = nl
				d.mu.Unlock()
				if cerr := d.inject(ctx, DuringRenewal); cerr != nil {
					lost = cerr
					cancel()
					return
				}
				continue
			}
			if errors.Is(err, ErrLeaseLost) {
				lost = fmt.Errorf("outbox: renew lease of bucket %d during publish: %w", l.Bucket, err)
				cancel()
				return
			}
			cfg.logger.WarnContext(ctx, "outbox: lease renewal failed during publish; retrying", "bucket", l.Bucket, "err", err)
		}
	}()
	acked, err := d.r.pub.Publish(pctx, msgs)
	close(done)
	wg.Wait()
	if acked < 0 || acked > len(msgs) {
		return 0, fmt.Errorf("outbox: publisher returned acked=%d for %d messages", acked, len(msgs))
	}
	if lost == nil && pctx.Err() != nil && ctx.Err() == nil {
		lost = fmt.Errorf("outbox: publish of bucket %d reached its lease's deadline: %w", l0.Bucket, ErrLeaseLost)
	}
	if lost != nil {
		return acked, lost
	}
	if err == nil && acked < len(msgs) {
		err = fmt.Errorf("outbox: publisher acknowledged %d of %d messages without an error", acked, len(msgs))
	}
	return acked, err
}

// gap handles a missing sequence number at seq (head+1) while next, a later
// one, is present: wait until GapTimeout has passed since any relay first saw
// it, then fence [seq, next) so the bucket can move on. If a writer's commit
// lands first, its message is published in order; if the fence lands first,
// the writer's transaction is cancelled and resubmitted with a fresh sequence.
func (d *drain) gap(ctx context.Context, seq, next int64) error {
	r := d.r
	cfg := &r.cfg
	now := cfg.clock.Now()
	l := d.getLease()
	if l.Gap != seq {
		nl, err := r.store.Update(ctx, l, LeaseUpdate{Head: l.Head, Cleaned: d.deletedThrough, Gap: seq, GapSince: now}, now)
		if err != nil {
			return fmt.Errorf("outbox: record gap at %d in bucket %d: %w", seq, l.Bucket, err)
		}
		d.mu.Lock()
		d.lease = nl
		d.mu.Unlock()
		l = nl
	}
	waited := now.Sub(l.GapSince)
	if waited >= cfg.gapTimeout {
		const maxFences = 100
		for s := seq; s < next && s < seq+maxFences; s++ {
			err := r.store.Fence(ctx, l.Bucket, s, now)
			switch {
			case err == nil:
				d.st.Fenced++
				if cerr := d.inject(ctx, DuringFence); cerr != nil {
					return cerr
				}
				cfg.logger.WarnContext(ctx, "outbox: fenced a sequence number nobody committed within GapTimeout", "bucket", l.Bucket, "sequence", s, "waited", waited)
			case errors.Is(err, ErrAlreadyWritten):
				// The writer won the race; its message is read next.
			default:
				return fmt.Errorf("outbox: fence bucket %d sequence %d: %w", l.Bucket, s, err)
			}
		}
		return nil
	}
	wait := min(cfg.gapPoll, cfg.gapTimeout-waited)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl)-cfg.deadlineMargin < wait {
		return fmt.Errorf("outbox: bucket %d waits on sequence %d for %v more: %w", l.Bucket, seq, cfg.gapTimeout-waited, ErrGapPending)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// releaseAfterError gives the lease up after a failed drain so another relay
// need not wait for it to expire. Wake-ups are consumed: the caller reports
// the failure, and whoever retries drains everything pending.
func (d *drain) releaseAfterError() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l := d.getLease()
	for range 3 {
		nl, err := d.r.store.Release(ctx, l, d.deletedThrough)
		if !errors.Is(err, ErrWoken) {
			return
		}
		l = nl
	}
}

// LiveShare returns how many buckets a relay should hold at most when the
// given relays are alive, and this relay's rank among them (-1 if absent).
func LiveShare(bucketCount int, live []string, id string) (share, rank int) {
	ids := append([]string(nil), live...)
	sort.Strings(ids)
	rank = sort.SearchStrings(ids, id)
	if rank >= len(ids) || ids[rank] != id {
		ids = append(ids, id)
		sort.Strings(ids)
		rank = sort.SearchStrings(ids, id)
	}
	n := len(ids)
	return (bucketCount + n - 1) / n, rank
}
