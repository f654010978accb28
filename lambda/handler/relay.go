// Package handler holds the Lambda functions' handlers: Relay for the
// messages table's stream, Sweeper for the schedule, Enqueue for the callers
// that enqueue through a function (Step Functions, EventBridge, SQS, Pipes).
// They are importable so the local pipeline (make demo) and the tests run
// exactly the code Lambda runs; the commands in lambda/relay, lambda/sweeper
// and lambda/enqueue only wire them.
package handler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/lambda/emf"
	"github.com/dynakafka/outbox/relay"
)

// ResponseMargin is how long before the invocation's deadline the handlers
// work ends. Lambda discards a response that comes after the deadline ("Task
// timed out"): the stream event source then retries the whole batch and the
// batch item failures are lost. So the relay engine runs on a context whose
// deadline is the invocation's minus this margin. The engine stops claiming
// buckets DeadlineMargin (5 s) before that deadline, ends its work
// min(DeadlineMargin/2, 1 s) before it, gives its leases up in what is left
// (on a context bounded by that deadline, so a store that hangs cannot hold
// it longer), and returns; this margin is left for the handler to summarise,
// log and hand its response to the runtime. A publisher must return soon after
// its context ends (the kafka package's Publish does within
// kafka.AbandonGrace).
const ResponseMargin = time.Second

// workContext returns ctx with its deadline moved ResponseMargin earlier.
func workContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return reserve(ctx, ResponseMargin)
}

// reserve returns ctx with its deadline moved d earlier (a deadline already
// within d makes it done at once); without a deadline it is ctx.
func reserve(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, dl.Add(-d))
	}
	return context.WithCancel(ctx)
}

// Drainer is the part of *relay.Relay the relay handler uses.
type Drainer interface {
	// DrainBucketTo drains bucket at least up to sequence seq.
	DrainBucketTo(ctx context.Context, bucket int, seq int64) (relay.DrainStats, error)
	BucketCount() int
	// RefreshConfig reads the config item again (an online BucketCount
	// change) and returns the count.
	RefreshConfig(ctx context.Context) (int, error)
}

// regionDrainer is the optional part of a Drainer in region mode
// (*relay.Relay has it): whether its region drains a bucket.
type regionDrainer interface {
	Drains(bucket int) bool
	RefreshRegions(ctx context.Context) error
}

// RegionRefreshInterval is how often, at most, the handler re-reads a
// region-mode outbox's takeovers before an invocation (one consistent read
// of the config item): a takeover or a hand-back reaches the stream path
// within it, and the sweeper's path at its next sweep. As often, a relay
// that reports ChangesCompleted (*relay.Relay) reads the config item
// (RefreshConfig): it learns that the old epoch of an online BucketCount
// change ended, and stops asking the store's epoch gate.
const RegionRefreshInterval = 15 * time.Second

// changeWatcher is the optional part of a Drainer (*relay.Relay has it)
// that follows online BucketCount changes when it reads the config item.
type changeWatcher interface {
	ChangesCompleted() int64
}

// Counters are the handler's running totals since init, logged with every
// invocation's summary.
type Counters struct {
	Records    atomic.Int64 // stream records received
	Ignored    atomic.Int64 // not INSERT (MODIFY, REMOVE): not hints
	Malformed  atomic.Int64 // INSERT records whose keys do not name a bucket
	OutOfRange atomic.Int64 // hints for a bucket outside 0..BucketCount-1
	Foreign    atomic.Int64 // hints for another region's bucket (replicated items, region mode)
	Drained    atomic.Int64 // buckets drained
	Held       atomic.Int64 // buckets held by another owner (woken)
	Failed     atomic.Int64 // buckets that could not be drained
	Published  atomic.Int64 // messages published
	// ChangesCompleted: online BucketCount changes whose drained old
	// epoch the relay ended.
	ChangesCompleted atomic.Int64
}

// Relay handles DynamoDB stream events. Build it with NewRelay.
type Relay struct {
	relay       Drainer
	concurrency int
	log         *slog.Logger
	counters    *Counters
	emitter     *emf.Emitter
	metrics     *RelayMetrics
	// refreshed: when the region-mode takeovers were last re-read.
	refreshMu sync.Mutex
	refreshed time.Time
}

// RelayOption configures a Relay.
type RelayOption func(*Relay)

// RelayEMF writes one EMF line per invocation to e (RelayMetricSet), with
// what m, the relay engine's metrics sink (relay.WithMetrics(m)), gathered
// during the invocation. Both must be set for a line; default: no metrics.
func RelayEMF(e *emf.Emitter, m *RelayMetrics) RelayOption {
	return func(h *Relay) { h.emitter, h.metrics = e, m }
}

// NewRelay returns the relay handler over r, draining at most concurrency
// buckets at once (0: every bucket of a batch at once; the relay's
// MaxInFlight bounds what they hold). A Drainer with DrainBucketsTo (a
// *relay.Relay) drains a batch with it, and its own Concurrency option
// bounds the drains instead: lambda/wiring gives both the same value.
func NewRelay(r Drainer, concurrency int, log *slog.Logger, opts ...RelayOption) *Relay {
	h := &Relay{relay: r, concurrency: max(0, concurrency), log: log, counters: &Counters{}}
	for _, o := range opts {
		o(h)
	}
	return h
}

// refreshRegions re-reads the takeovers of a region-mode outbox at most
// every RegionRefreshInterval. A failed read keeps the last view (logged):
// a stale view publishes duplicates at worst, never loses (docs/design.md
// §14.4).
func (h *Relay) refreshRegions(ctx context.Context) {
	rd, ok := h.relay.(regionDrainer)
	cw, watches := h.relay.(changeWatcher)
	if !ok && !watches {
		return
	}
	h.refreshMu.Lock()
	due := time.Since(h.refreshed) >= RegionRefreshInterval
	if due {
		h.refreshed = time.Now()
	}
	h.refreshMu.Unlock()
	if !due {
		return
	}
	if watches {
		if _, err := h.relay.RefreshConfig(ctx); err != nil {
			h.log.ErrorContext(ctx, "outbox relay: re-read the config item", "err", err)
		}
		h.counters.ChangesCompleted.Store(cw.ChangesCompleted())
	}
	if !ok {
		return
	}
	if err := rd.RefreshRegions(ctx); err != nil {
		h.log.ErrorContext(ctx, "outbox relay: re-read the region-mode takeovers", "err", err)
	}
}

// spanner is the optional part of a Drainer (*relay.Relay has it) that
// drains more buckets than BucketCount: after an online shrink, the old
// buckets above the new count while the old epoch drains.
type spanner interface{ BucketSpan() int }

// span is how many buckets the relay drains: a hint for a bucket below it
// is in range.
func (h *Relay) span() int {
	if s, ok := h.relay.(spanner); ok {
		return s.BucketSpan()
	}
	return h.relay.BucketCount()
}

// Counters returns the handler's running totals.
func (h *Relay) Counters() *Counters { return h.counters }

// HintError says why a stream record is not a usable hint.
type HintError struct {
	EventID string
	Reason  string
}

func (e *HintError) Error() string {
	return fmt.Sprintf("stream record %s is not an outbox hint: %s", e.EventID, e.Reason)
}

// decodeHint reads the bucket and sequence number from an INSERT record's
// keys (KEYS_ONLY stream: b and s, both numbers).
func decodeHint(rec events.DynamoDBEventRecord) (bucket int, seq int64, err error) {
	num := func(name string) (int64, error) {
		av, ok := rec.Change.Keys[name]
		if !ok {
			return 0, &HintError{EventID: rec.EventID, Reason: fmt.Sprintf("key %q is missing", name)}
		}
		if av.DataType() != events.DataTypeNumber {
			return 0, &HintError{EventID: rec.EventID, Reason: fmt.Sprintf("key %q is not a number", name)}
		}
		n, err := strconv.ParseInt(av.Number(), 10, 64)
		if err != nil || n < 0 {
			return 0, &HintError{EventID: rec.EventID, Reason: fmt.Sprintf("key %q = %q is not a non-negative integer", name, av.Number())}
		}
		return n, nil
	}
	b, err := num("b")
	if err != nil {
		return 0, 0, err
	}
	s, err := num("s")
	if err != nil {
		return 0, 0, err
	}
	if b >= outbox.MaxBucketCount {
		return 0, 0, &HintError{EventID: rec.EventID, Reason: fmt.Sprintf("bucket %d is above the largest possible bucket %d", b, outbox.MaxBucketCount-1)}
	}
	return int(b), s, nil
}

// seqLess orders stream sequence numbers: decimal strings of up to 40 digits.
func seqLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// Handle drains every bucket named by the batch's INSERT records and reports
// as a batch item failure only the lowest-sequence record of the buckets that
// could not be drained: Lambda redelivers from that record on. The drains
// end ResponseMargin before the invocation's deadline. It never returns an
// error for a bucket: a function error would make Lambda retry the whole
// batch, every other bucket's hints included, and hold the shard behind it.
// A bucket that cannot be drained shows in the invocation's EMF line instead
// (BucketsFailed, PublishFailuresFatal), and the sweeper, which meets the
// same bucket within a minute, fails its invocation for it.
func (h *Relay) Handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	start := time.Now()
	wctx, cancel := workContext(ctx)
	defer cancel()
	h.refreshRegions(wctx)
	hs := h.readHints(ctx, ev.Records)
	results, companions := h.drainHinted(wctx, hs)
	resp, t := h.tally(ctx, hs, results)
	for _, c := range companions {
		t.published += c.st.Published
	}
	h.counters.Drained.Add(int64(t.drained))
	h.counters.Held.Add(int64(t.held))
	h.counters.Failed.Add(int64(t.failed))
	h.counters.Published.Add(int64(t.published))
	if h.emitter != nil && h.metrics != nil {
		if err := h.emitter.Emit(relayLine(h.metrics.Take(), t.failed, time.Since(start))); err != nil {
			h.log.ErrorContext(ctx, "outbox relay: metrics line not written", "err", err)
		}
	}
	h.log.InfoContext(ctx, "outbox relay: batch",
		"records", len(ev.Records), "buckets", len(hs.lowest), "drained", t.drained, "held", t.held, "failed", t.failed,
		"published", t.published, "companions", len(companions), "ignored", hs.ignored, "malformed", hs.malformed, "out_of_range", hs.outOfRange,
		"failure_item", t.failedAt, "ms", time.Since(start).Milliseconds(),
		"total_records", h.counters.Records.Load(), "total_published", h.counters.Published.Load())
	return resp, nil
}

// batchHints are a batch's hints, read: the buckets to drain, each with its
// lowest stream sequence number (the item to report if it fails) and the
// highest outbox sequence hinted, and the records that name no bucket to
// drain here.
type batchHints struct {
	lowest                                  map[int]string // bucket -> its lowest stream sequence number in this batch
	upTo                                    map[int]int64  // bucket -> the highest outbox sequence hinted in this batch
	ignored, malformed, outOfRange, foreign int
}

// readHints reads the batch's records (the read phase): an INSERT of a
// message in a bucket this relay drains is a hint; every other record is
// counted and left.
func (h *Relay) readHints(ctx context.Context, records []events.DynamoDBEventRecord) batchHints {
	hs := batchHints{lowest: map[int]string{}, upTo: map[int]int64{}}
	refreshed := false
	for _, rec := range records {
		h.counters.Records.Add(1)
		if rec.EventName != string(events.DynamoDBOperationTypeInsert) {
			hs.ignored++
			continue
		}
		b, seq, err := decodeHint(rec)
		if err != nil {
			hs.malformed++
			h.log.ErrorContext(ctx, "outbox relay: malformed stream record ignored; the sweeper recovers its bucket", "err", err)
			continue
		}
		if b >= h.span() && !refreshed {
			// An online BucketCount change may have added it: one read
			// of the config item per batch at most.
			refreshed = true
			h.relay.RefreshConfig(ctx)
		}
		if b >= h.span() {
			hs.outOfRange++
			h.log.ErrorContext(ctx, "outbox relay: hint for a bucket outside the configured range; a writer uses another BucketCount",
				"bucket", b, "bucket_count", h.relay.BucketCount(), "event_id", rec.EventID)
			continue
		}
		if rd, ok := h.relay.(regionDrainer); ok && !rd.Drains(b) {
			// A global table's stream carries the items replicated from
			// the other regions too; their own relays publish them.
			hs.foreign++
			continue
		}
		sn := rec.Change.SequenceNumber
		if cur, ok := hs.lowest[b]; !ok || seqLess(sn, cur) {
			hs.lowest[b] = sn
		}
		hs.upTo[b] = max(hs.upTo[b], seq)
	}
	h.counters.Ignored.Add(int64(hs.ignored))
	h.counters.Malformed.Add(int64(hs.malformed))
	h.counters.OutOfRange.Add(int64(hs.outOfRange))
	h.counters.Foreign.Add(int64(hs.foreign))
	return hs
}

// bucketResult is one hinted bucket's drain.
type bucketResult struct {
	bucket int
	st     relay.DrainStats
	err    error
}

// companionDrainer is the optional part of a Drainer (*relay.Relay has it)
// that drains a batch's buckets in one call, and beside a hand-over the
// buckets the other process released (relay.DrainBucketsTo).
type companionDrainer interface {
	DrainBucketsTo(ctx context.Context, targets map[int]int64) (hinted, companions []relay.BucketResult)
}

// drainHinted drains every hinted bucket at once (the publish phase), at
// most h.concurrency at a time. Companion drains (a *relay.Relay's) are
// counted as published but reported for no record: their messages' hints
// come in later batches.
func (h *Relay) drainHinted(wctx context.Context, hs batchHints) ([]bucketResult, []bucketResult) {
	if cd, ok := h.relay.(companionDrainer); ok {
		targets := make(map[int]int64, len(hs.lowest))
		for b := range hs.lowest {
			// Up to the highest hinted sequence: later commits are
			// announced to the next invocation, so a busy bucket does not
			// keep this one (and every other bucket's new hints) waiting.
			targets[b] = max(hs.upTo[b], 1)
		}
		hinted, companions := cd.DrainBucketsTo(wctx, targets)
		return asResults(hinted), asResults(companions)
	}
	var (
		mu      sync.Mutex
		results []bucketResult
		wg      sync.WaitGroup
		sem     = make(chan struct{}, cmp.Or(h.concurrency, max(len(hs.lowest), 1)))
	)
	for b := range hs.lowest {
		wg.Add(1)
		sem <- struct{}{}
		go func(b int) {
			defer func() { <-sem; wg.Done() }()
			st, err := h.relay.DrainBucketTo(wctx, b, max(hs.upTo[b], 1))
			mu.Lock()
			results = append(results, bucketResult{b, st, err})
			mu.Unlock()
		}(b)
	}
	wg.Wait()
	return results, nil
}

func asResults(rs []relay.BucketResult) []bucketResult {
	out := make([]bucketResult, len(rs))
	for i, r := range rs {
		out[i] = bucketResult{r.Bucket, r.Stats, r.Err}
	}
	return out
}

// batchTally counts a batch's drains.
type batchTally struct {
	failedAt                         string
	drained, held, failed, published int
}

// tally classifies the drains' results and builds the response: a bucket
// not drained reports its lowest record, and the lowest of those is the
// batch's failure item, so that the stream redelivers from there.
func (h *Relay) tally(ctx context.Context, hs batchHints, results []bucketResult) (events.DynamoDBEventResponse, batchTally) {
	var (
		resp      events.DynamoDBEventResponse
		t         batchTally
		anyFailed bool // t.failedAt may be "" (an empty string item identifier fails the whole batch)
	)
	for _, r := range results {
		t.published += r.st.Published
		var re *outbox.BucketRangeError
		switch {
		case r.err == nil:
			t.drained++
		case errors.Is(r.err, outbox.ErrLeaseHeld):
			t.held++ // the holder was woken and drains it
		case errors.As(r.err, &re):
			// Cannot happen for hints checked above; never hold the shard.
			h.log.ErrorContext(ctx, "outbox relay: bucket out of range", "bucket", r.bucket, "err", r.err)
		default:
			t.failed++
			if outbox.Classify(r.err) == outbox.Fatal {
				// A stopped bucket: the engine names it once a minute per
				// bucket (ERROR, with a count) and records it on the lease
				// item; a line per invocation here would undo that limit.
				h.log.DebugContext(ctx, "outbox relay: stopped bucket not drained; reporting it for redelivery", "bucket", r.bucket, "err", r.err)
			} else {
				h.log.WarnContext(ctx, "outbox relay: bucket not drained; reporting it for redelivery", "bucket", r.bucket, "err", r.err)
			}
			if sn := hs.lowest[r.bucket]; !anyFailed || seqLess(sn, t.failedAt) {
				t.failedAt, anyFailed = sn, true
			}
		}
	}
	if anyFailed {
		resp.BatchItemFailures = []events.DynamoDBBatchItemFailure{{ItemIdentifier: t.failedAt}}
	}
	return resp, t
}
