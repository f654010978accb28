package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/lambda/emf"
	"github.com/dynakafka/outbox/relay"
)

// SweepRunner is the part of *relay.Relay the sweeper handler uses.
type SweepRunner interface {
	Sweep(ctx context.Context) (relay.SweepReport, error)
}

// Sweeper handles the schedule's events. Build it with NewSweeper.
type Sweeper struct {
	relay      SweepRunner
	log        *slog.Logger
	now        func() time.Time
	emitter    *emf.Emitter
	progress   ProgressStore
	stuckAfter int
}

// SweeperOption configures a Sweeper.
type SweeperOption func(*Sweeper)

// SweeperEMF writes one EMF line per invocation to e (SweeperMetricSet).
// Default: no metrics.
func SweeperEMF(e *emf.Emitter) SweeperOption { return func(h *Sweeper) { h.emitter = e } }

// SweepProgress keeps what the sweeper needs to tell stuck buckets in s.
// Default: a MemoryProgress (per process).
func SweepProgress(s ProgressStore) SweeperOption { return func(h *Sweeper) { h.progress = s } }

// StuckAfter is how many consecutive sweeps must see a bucket with pending
// messages at the same head before it counts as stuck. Default
// DefaultStuckAfter (3); 2..1000.
func StuckAfter(n int) SweeperOption { return func(h *Sweeper) { h.stuckAfter = n } }

// NewSweeper returns the sweeper handler over r. An invalid option is an
// *outbox.OptionError.
func NewSweeper(r SweepRunner, log *slog.Logger, opts ...SweeperOption) (*Sweeper, error) {
	h := &Sweeper{relay: r, log: log, now: time.Now, progress: &MemoryProgress{}, stuckAfter: DefaultStuckAfter}
	for _, o := range opts {
		o(h)
	}
	switch {
	case h.progress == nil:
		return nil, &outbox.OptionError{Option: "SweepProgress", Value: nil, Reason: "must not be nil (leave it out for one in memory)"}
	case h.stuckAfter < 2 || h.stuckAfter > 1000:
		return nil, &outbox.OptionError{Option: "StuckAfter", Value: h.stuckAfter, Reason: "must be 2..1000 sweeps: one sweep cannot tell that a head did not move"}
	}
	return h, nil
}

// Summary is the sweeper's invocation result: the backlog it saw and what it
// did. It is also logged as one JSON line.
type Summary struct {
	Pending          int     `json:"pending"`
	PendingTruncated bool    `json:"pending_truncated"`
	OldestAgeSeconds float64 `json:"oldest_age_s"`
	Live             int     `json:"live_relays"`
	Share            int     `json:"share"`
	Ready            []int   `json:"ready"`
	Drained          []int   `json:"drained"`
	Held             []int   `json:"held"`
	Skipped          []int   `json:"skipped"`
	Failed           []int   `json:"failed"`
	OutOfRange       []int   `json:"out_of_range"`
	// Stuck lists the buckets pending at the same head for StuckAfter
	// sweeps.
	Stuck []int `json:"stuck"`
	// ChangeCompleted: the sweep found the old epoch of an online
	// BucketCount change drained and ended it; ChangeOverdueSeconds is how
	// far past the change's deadline its old epoch still drains (0: none).
	ChangeCompleted      bool    `json:"change_completed,omitempty"`
	ChangeOverdueSeconds float64 `json:"change_overdue_s,omitempty"`
}

// StoppedError fails a sweeper invocation that found buckets which cannot
// be drained until someone fixes a cause: a fatal error (Kafka
// authorization, a deleted topic, SASL, an item of a newer format, a
// DynamoDB permission) or a record-permanent one (a record the Block policy
// keeps at the head). The failed invocation is what makes the function's
// Errors alarm fire; retriable errors (throttling, timeouts, lost leases)
// are left to the next sweep. Errors maps each bucket to its error.
type StoppedError struct {
	Errors map[int]error
}

func (e *StoppedError) Error() string {
	buckets := slices.Sorted(maps.Keys(e.Errors))
	var b strings.Builder
	fmt.Fprintf(&b, "outbox sweeper: %d bucket(s) cannot be drained until the cause is fixed:", len(buckets))
	for i, bk := range buckets {
		if i > 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, " bucket %d (%s): %v", bk, outbox.Classify(e.Errors[bk]), e.Errors[bk])
	}
	return b.String()
}

// Unwrap returns the buckets' errors, in bucket order.
func (e *StoppedError) Unwrap() []error {
	var out []error
	for _, b := range slices.Sorted(maps.Keys(e.Errors)) {
		out = append(out, e.Errors[b])
	}
	return out
}

// ProgressReserve is how long before the end of the sweeper's work (the
// invocation's deadline minus ResponseMargin) the sweep itself ends, so that
// its progress is saved however long a drain in the sweep retried: a sweep
// whose drain of a bucket failing retriably ran to the deadline otherwise
// had no time left to record that the bucket's head did not move, and such
// a bucket was never counted stuck. The progress is read before the sweep.
const ProgressReserve = 2 * time.Second

// Handle runs one sweep, which ends ResponseMargin + ProgressReserve before
// the invocation's deadline, and writes its EMF line. The invocation fails, so that the
// function's Errors alarm fires, on a misconfiguration (messages in buckets
// outside the range: a *outbox.BucketRangeError), on a bucket that cannot be
// drained until its cause is fixed (a *StoppedError), or when the sweep could
// not run; a bucket that failed with a retriable error is logged and retried
// on the next schedule.
func (h *Sweeper) Handle(ctx context.Context, ev events.CloudWatchEvent) (Summary, error) {
	wctx, cancel := workContext(ctx)
	defer cancel()
	start := h.now()
	// The progress is read on the sweep's context (a store that hangs
	// cannot eat the reserve) and saved on the work context: neither may
	// make the response late.
	sctx, scancel := reserve(wctx, ProgressReserve)
	prog, perr := h.progress.LoadProgress(sctx)
	rep, err := h.relay.Sweep(sctx)
	scancel()
	var re *outbox.BucketRangeError
	looked := err == nil || errors.As(err, &re) // the sweep looked at every bucket
	s := Summary{Pending: rep.Pending, PendingTruncated: rep.Truncated, Live: rep.Live, Share: rep.Share,
		Ready: rep.Ready, Drained: rep.Drained, Held: rep.Held, Skipped: rep.Skipped}
	if !rep.Oldest.IsZero() {
		s.OldestAgeSeconds = max(0, start.Sub(rep.Oldest).Seconds())
	}
	stopped := map[int]error{}
	for b, berr := range rep.Errors {
		s.Failed = append(s.Failed, b)
		if outbox.Classify(berr) != outbox.Retriable {
			stopped[b] = berr
			h.log.ErrorContext(ctx, "outbox sweeper: bucket cannot be drained until the cause is fixed", "bucket", b,
				"class", outbox.Classify(berr).String(), "err", berr)
		} else {
			h.log.WarnContext(ctx, "outbox sweeper: bucket not drained; the next sweep retries", "bucket", b, "err", berr)
		}
	}
	slices.Sort(s.Failed)
	for b := range rep.OutOfRange {
		s.OutOfRange = append(s.OutOfRange, b)
	}
	slices.Sort(s.OutOfRange)
	if c := rep.Change; c != nil {
		s.ChangeCompleted, s.ChangeOverdueSeconds = c.Completed, c.Overdue.Seconds()
		switch {
		case c.Err != nil:
			h.log.ErrorContext(ctx, "outbox sweeper: could not look at the old epoch of a BucketCount change", "from", c.From, "to", c.To, "err", c.Err)
		case c.Overdue > 0:
			h.log.ErrorContext(ctx, "outbox sweeper: the old epoch of a BucketCount change has not drained by its deadline; the new messages of its keys wait",
				"from", c.From, "to", c.To, "deadline", c.Deadline, "waiting_for", c.Waiting)
		}
	}
	stuckKnown := false
	if looked {
		s.Stuck, stuckKnown = h.track(wctx, prog, perr, rep.Buckets, rep.Drained)
	}
	if h.emitter != nil {
		if eerr := h.emitter.Emit(sweeperLine(rep, looked, start, s.Stuck, stuckKnown)); eerr != nil {
			h.log.ErrorContext(ctx, "outbox sweeper: metrics line not written", "err", eerr)
		}
	}
	h.log.InfoContext(ctx, "outbox sweeper: backlog", "summary", s, "scheduled_at", ev.Time)
	switch {
	case re != nil:
		h.log.ErrorContext(ctx, "outbox sweeper: MISCONFIGURATION: messages in buckets outside the configured range will never be relayed; every writer must use the outbox's BucketCount",
			"out_of_range", s.OutOfRange, "err", err)
	case err != nil:
		h.log.ErrorContext(ctx, "outbox sweeper: sweep failed", "err", err)
		return s, err
	}
	if len(stopped) > 0 {
		return s, errors.Join(err, &StoppedError{Errors: stopped})
	}
	return s, err
}

// track applies this sweep's look at the buckets to p, the progress loaded
// before the sweep (err: it could not be), and saves it. It returns the
// stuck buckets, and false when they cannot be told (the progress could not
// be loaded).
func (h *Sweeper) track(ctx context.Context, p Progress, err error, buckets []relay.BucketReport, drained []int) ([]int, bool) {
	if err != nil {
		h.log.WarnContext(ctx, "outbox sweeper: sweep progress not loaded; stuck buckets are not reported this time", "err", err)
		return nil, false
	}
	next, stuck := observe(p.Buckets, buckets, drained, h.stuckAfter)
	if err := h.progress.SaveProgress(ctx, Progress{Buckets: next, Version: p.Version}); err != nil {
		// The next sweep counts from what was saved: at worst one sweep
		// later to call a bucket stuck.
		h.log.WarnContext(ctx, "outbox sweeper: sweep progress not saved", "err", err)
	}
	for _, b := range stuck {
		h.log.ErrorContext(ctx, "outbox sweeper: bucket stuck: messages wait while its head has not moved", "bucket", b,
			"head", next[b].Head, "sweeps", next[b].Sweeps)
	}
	return stuck, true
}

// sweeperLine is the sweeper's EMF line for one invocation. A metric over
// all buckets is present only when every bucket could be sampled for it:
// a sum or an oldest age over some buckets would look exact and not be.
func sweeperLine(rep relay.SweepReport, looked bool, start time.Time, stuck []int, stuckKnown bool) *emf.Line {
	var l emf.Line
	// Sweep lists the live relays, itself included, before it looks at
	// the buckets: a count of 0 means it did not get that far.
	live := func() {
		if rep.Live > 0 {
			l.Value(LiveRelays, float64(rep.Live))
		}
	}
	// Only while a change is in progress (absent otherwise); the config
	// item is read before the buckets, so an overdue change is reported
	// even when the sweep failed later.
	if c := rep.Change; c != nil {
		completed := 0.0
		if c.Completed {
			completed = 1
		}
		l.Value(BucketCountChangeOverdue, c.Overdue.Seconds())
		l.Value(BucketCountChangesCompleted, completed)
	}
	if !looked {
		live()
		return &l
	}
	var (
		sampled, counted, parkedKnown, oldestKnown = true, true, true, true
		reserved, parked                           int64
		oldest                                     time.Time
	)
	for _, b := range rep.Buckets {
		if b.Err != nil {
			sampled = false
			continue
		}
		if r := b.Reserved(); r >= 0 {
			reserved += r
		} else {
			counted = false
		}
		if b.Parked >= 0 {
			parked += int64(b.Parked)
		} else {
			parkedKnown = false
		}
		if b.Messages > 0 {
			switch {
			case b.Oldest.IsZero():
				oldestKnown = false // an undecodable creation time
			case oldest.IsZero() || b.Oldest.Before(oldest):
				oldest = b.Oldest
			}
		}
	}
	if sampled && counted {
		l.Value(PendingMessages, float64(reserved))
	}
	if sampled && oldestKnown {
		age := 0.0
		if !oldest.IsZero() {
			age = max(0, start.Sub(oldest).Seconds())
		}
		l.Value(OldestPendingAge, age)
	}
	if sampled && stuckKnown {
		l.Value(StuckBuckets, float64(len(stuck)))
	}
	if sampled && parkedKnown {
		l.Value(ParkedMessages, float64(parked))
	}
	live()
	l.Value(BucketsFailed, float64(len(rep.Errors)))
	return &l
}
