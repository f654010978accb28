package esm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go"
	"github.com/google/uuid"
)

// StreamsAPI is the part of the DynamoDB Streams client a Mapping calls;
// *dynamodbstreams.Client implements it.
type StreamsAPI interface {
	DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// ErrRunning is returned by Run when the mapping is already running.
var ErrRunning = errors.New("esm: mapping is already running")

// Mapping is a local event-source mapping from one DynamoDB stream to one
// function. Create it with New and start it with Run.
type Mapping struct {
	streams StreamsAPI
	arn     string
	target  Invoker
	cfg     cfg

	running atomic.Bool

	seen, filtered, invocations, retries, bisections, dropped, exhausted atomic.Int64
}

// Stats are a Mapping's counters since New.
type Stats struct {
	RecordsSeen     int64 // records read from the stream, each counted once
	RecordsFiltered int64 // records the filter discarded
	Invocations     int64 // calls to the Invoker, retries and bisected halves included
	Retries         int64 // re-deliveries after a failed invocation or reported item failures
	Bisections      int64 // batches split in two after a function error
	RecordsDropped  int64 // records given up on (retries exhausted, too old, unconvertible)
	ShardsExhausted int64 // shards read to their end (closed, or gone) and fully delivered
}

// New returns a mapping that delivers records of the stream streamARN to
// target. streams is usually a *dynamodbstreams.Client. Invalid options are
// reported together as *outbox.OptionError values joined with errors.Join.
func New(streams StreamsAPI, streamARN string, target Invoker, opts ...Opt) (*Mapping, error) {
	c := defaults()
	for _, o := range opts {
		o(&c)
	}
	if streams == nil {
		c.invalid("New(streams)", "nil", "pass a *dynamodbstreams.Client")
	}
	if streamARN == "" {
		c.invalid("New(streamARN)", `""`, "pass the table's LatestStreamArn")
	}
	if target == nil {
		c.invalid("New(target)", "nil", "pass esm.InProcess(handler) or an RIE invoker")
	} else if v, ok := target.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			c.errs = append(c.errs, err)
		}
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	if c.functionARN == "" {
		c.functionARN = fmt.Sprintf("arn:aws:lambda:%s:000000000000:function:local", regionOf(streamARN))
	}
	return &Mapping{streams: streams, arn: streamARN, target: target, cfg: c}, nil
}

// Stats returns the mapping's counters.
func (m *Mapping) Stats() Stats {
	return Stats{
		RecordsSeen:     m.seen.Load(),
		RecordsFiltered: m.filtered.Load(),
		Invocations:     m.invocations.Load(),
		Retries:         m.retries.Load(),
		Bisections:      m.bisections.Load(),
		RecordsDropped:  m.dropped.Load(),
		ShardsExhausted: m.exhausted.Load(),
	}
}

type shard struct {
	id, parent string
	from       types.ShardIteratorType
	started    bool
	done       bool
}

// Run polls the stream and invokes the function until ctx is done, then stops
// every shard reader (an invocation in flight sees its ctx cancelled and its
// outcome is discarded) and returns nil. It returns an error only if the
// stream does not exist. Positions are not saved: a new Run starts again at
// StartPosition.
//
// Like the Lambda service it reads every shard on its own goroutine, a child
// shard only after its parent is exhausted (or no longer listed), one batch at
// a time per shard.
func (m *Mapping) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer m.running.Store(false)

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()

	shards := map[string]*shard{}
	ended := make(chan *shard)
	start := func() {
		for _, sh := range shards {
			if sh.started {
				continue
			}
			if p := shards[sh.parent]; p != nil && !p.done {
				continue
			}
			sh.started = true
			m.cfg.logger.Debug("esm: reading shard", "shard", sh.id, "parent", sh.parent, "from", sh.from)
			wg.Go(func() {
				m.readShard(ctx, sh)
				select {
				case ended <- sh:
				case <-ctx.Done():
				}
			})
		}
	}

	first := true
	discover := time.NewTimer(0)
	defer discover.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case sh := <-ended:
			sh.done = true
			m.cfg.logger.Debug("esm: shard exhausted", "shard", sh.id)
			start()
			discover.Reset(0) // its children may have appeared
		case <-discover.C:
			list, err := m.describe(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case hasCode(err, "ResourceNotFoundException"):
				return fmt.Errorf("esm: describe stream %s: %w", m.arn, err)
			case err != nil:
				m.cfg.logger.Warn("esm: describe stream failed; retrying", "stream", m.arn, "err", err)
			default:
				m.admit(shards, list, first)
				first = false
				start()
			}
			discover.Reset(m.cfg.discovery)
		}
	}
}

// describe lists every shard of the stream, following pagination.
func (m *Mapping) describe(ctx context.Context) ([]types.Shard, error) {
	var (
		list  []types.Shard
		after *string
	)
	for {
		out, err := m.streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &m.arn, ExclusiveStartShardId: after})
		if err != nil {
			return nil, err
		}
		if out.StreamDescription == nil {
			return list, nil
		}
		list = append(list, out.StreamDescription.Shards...)
		after = out.StreamDescription.LastEvaluatedShardId
		if after == nil {
			return list, nil
		}
	}
}

// admit records newly listed shards. With Latest, the shards listed at start
// are read from their tip, and those already closed are skipped; every shard
// found later is new and read from its start.
func (m *Mapping) admit(shards map[string]*shard, list []types.Shard, first bool) {
	for _, s := range list {
		id := deref(s.ShardId)
		if id == "" || shards[id] != nil {
			continue
		}
		sh := &shard{id: id, parent: deref(s.ParentShardId), from: types.ShardIteratorTypeTrimHorizon}
		if first && m.cfg.start == Latest {
			closed := s.SequenceNumberRange != nil && s.SequenceNumberRange.EndingSequenceNumber != nil
			if closed {
				sh.started, sh.done = true, true
			}
			sh.from = types.ShardIteratorTypeLatest
		}
		shards[id] = sh
	}
}

// readShard reads one shard until it is exhausted (closed and fully read, or
// gone) or ctx is done, delivering its records in order.
func (m *Mapping) readShard(ctx context.Context, sh *shard) {
	var (
		buf      []events.DynamoDBEventRecord
		since    time.Time // when the oldest buffered record was read
		lastRead string    // sequence number of the last record read, for a new iterator
		failures int
	)
	region := regionOf(m.arn)
	iter, ok := m.iterator(ctx, sh, lastRead)
	if !ok {
		return
	}
	for {
		more := false // the last poll filled its limit: more records may be waiting
		if iter != nil && len(buf) < m.cfg.batchSize {
			limit := min(1000, m.cfg.batchSize-len(buf))
			out, err := m.streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{
				ShardIterator: iter,
				Limit:         ptr(int32(limit)),
			})
			switch {
			case ctx.Err() != nil:
				return
			case hasCode(err, "ExpiredIteratorException", "TrimmedDataAccessException"):
				m.cfg.logger.Debug("esm: shard iterator unusable; getting a new one", "shard", sh.id, "err", err)
				if hasCode(err, "TrimmedDataAccessException") {
					// What follows lastRead is gone: resume at the oldest record left.
					lastRead, sh.from = "", types.ShardIteratorTypeTrimHorizon
				}
				// A fresh iterator that fails again is not retried in a hot loop.
				if failures++; failures > 1 && !sleep(ctx, m.backoff(failures-1)) {
					return
				}
				if iter, ok = m.iterator(ctx, sh, lastRead); !ok {
					return
				}
				continue
			case hasCode(err, "ResourceNotFoundException"):
				m.cfg.logger.Warn("esm: shard gone", "shard", sh.id, "err", err)
				iter = nil
			case err != nil:
				failures++
				m.cfg.logger.Warn("esm: GetRecords failed; retrying", "shard", sh.id, "err", err)
				if !sleep(ctx, m.backoff(failures)) {
					return
				}
				continue
			default:
				failures = 0
				iter = out.NextShardIterator
				more = len(out.Records) == limit
				for _, r := range out.Records {
					m.seen.Add(1)
					if r.Dynamodb != nil && r.Dynamodb.SequenceNumber != nil {
						lastRead = *r.Dynamodb.SequenceNumber
					}
					rec, err := buildRecord(m.arn, region, r)
					if err != nil {
						m.dropped.Add(1)
						m.cfg.logger.Error("esm: cannot convert stream record; dropped", "shard", sh.id, "sequence", lastRead, "err", err)
						continue
					}
					if !m.cfg.filter(rec) {
						m.filtered.Add(1)
						continue
					}
					buf = append(buf, rec)
				}
				if len(buf) > 0 && since.IsZero() {
					since = time.Now()
				}
			}
		}
		// Invoke with a full batch, at the end of the shard, when the window
		// is over, or (without a window) once the records waiting are read.
		ready := len(buf) >= m.cfg.batchSize || iter == nil
		if m.cfg.window > 0 {
			ready = ready || time.Since(since) >= m.cfg.window
		} else {
			ready = ready || !more
		}
		if len(buf) > 0 && ready {
			m.deliver(ctx, sh, buf, delivery{})
			if ctx.Err() != nil {
				return
			}
			buf, since = nil, time.Time{}
			continue
		}
		if iter == nil && len(buf) == 0 {
			m.exhausted.Add(1)
			return
		}
		if more {
			continue
		}
		wait := m.cfg.pollInterval
		if len(buf) > 0 {
			wait = min(wait, m.cfg.window-time.Since(since))
		}
		if !sleep(ctx, wait) {
			return
		}
	}
}

// iterator gets a shard iterator just after lastRead, or at the shard's
// starting position if nothing was read yet. It retries transient errors; ok
// is false when ctx is done. A nil iterator with ok means the shard has
// nothing more to read (it is gone).
func (m *Mapping) iterator(ctx context.Context, sh *shard, lastRead string) (iter *string, ok bool) {
	for failures := 1; ; failures++ {
		in := &dynamodbstreams.GetShardIteratorInput{StreamArn: &m.arn, ShardId: &sh.id, ShardIteratorType: sh.from}
		if lastRead != "" {
			in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, &lastRead
		}
		out, err := m.streams.GetShardIterator(ctx, in)
		switch {
		case ctx.Err() != nil:
			return nil, false
		case err == nil:
			return out.ShardIterator, true
		case hasCode(err, "ResourceNotFoundException"):
			m.cfg.logger.Warn("esm: shard gone", "shard", sh.id, "err", err)
			return nil, true
		case hasCode(err, "TrimmedDataAccessException") && lastRead != "":
			// The records after lastRead were trimmed: resume at the oldest left.
			m.cfg.logger.Warn("esm: records trimmed before they were read", "shard", sh.id, "after", lastRead)
			lastRead = ""
			sh.from = types.ShardIteratorTypeTrimHorizon
			continue
		}
		m.cfg.logger.Warn("esm: GetShardIterator failed; retrying", "shard", sh.id, "err", err)
		if !sleep(ctx, m.backoff(failures)) {
			return nil, false
		}
	}
}

// delivery is the history of one range of records being delivered.
type delivery struct {
	retries   int
	invokes   int
	requestID string
	err       error // the last failure, nil after reported item failures
	unhandled bool  // the last failure was a function error
}

// deliver invokes the function with recs until they succeed or are dropped,
// applying Lambda's retry, bisection and partial-batch rules.
func (m *Mapping) deliver(ctx context.Context, sh *shard, recs []events.DynamoDBEventRecord, d delivery) {
	for {
		recs = m.dropAged(ctx, sh, recs, d)
		if len(recs) == 0 {
			return
		}
		resp, err := m.invoke(ctx, recs, &d)
		if ctx.Err() != nil {
			return
		}
		from := 0
		var bad *ResponseError
		switch {
		case errors.As(err, &bad):
			if !m.cfg.reportFailures {
				return // Lambda ignores the response
			}
			d.err, d.unhandled = err, false
		case err != nil:
			d.err, d.unhandled = err, true
			if m.cfg.bisect && len(recs) > 1 {
				m.bisections.Add(1)
				half := len(recs) / 2
				m.cfg.logger.Info("esm: function error; bisecting batch", "shard", sh.id, "size", len(recs), "err", err)
				m.deliver(ctx, sh, recs[:half], d)
				if ctx.Err() == nil {
					m.deliver(ctx, sh, recs[half:], d)
				}
				return
			}
		case !m.cfg.reportFailures || len(resp.BatchItemFailures) == 0:
			return
		default:
			i, ok := lowestFailure(recs, resp.BatchItemFailures)
			if ok {
				from, d.err, d.unhandled = i, nil, false
			} else {
				d.err = fmt.Errorf("esm: batchItemFailures %v names a record not in the batch; the whole batch failed", resp.BatchItemFailures)
				d.unhandled = false
			}
		}
		if m.cfg.maxRetries >= 0 && d.retries >= m.cfg.maxRetries {
			m.drop(ctx, sh, recs[from:], ConditionRetriesExhausted, d)
			return
		}
		d.retries++
		m.retries.Add(1)
		m.cfg.logger.Debug("esm: retrying", "shard", sh.id, "from", recs[from].Change.SequenceNumber,
			"size", len(recs)-from, "retry", d.retries, "err", d.err)
		recs = recs[from:]
	}
}

func (m *Mapping) invoke(ctx context.Context, recs []events.DynamoDBEventRecord, d *delivery) (events.DynamoDBEventResponse, error) {
	d.invokes++
	d.requestID = uuid.NewString()
	m.invocations.Add(1)
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: d.requestID, InvokedFunctionArn: m.cfg.functionARN})
	return m.target.Invoke(ctx, events.DynamoDBEvent{Records: slices.Clip(recs)})
}

// lowestFailure returns the index of the earliest record named by failures,
// and false if any identifier is empty or names no record of the batch (which
// Lambda treats as a complete failure).
func lowestFailure(recs []events.DynamoDBEventRecord, failures []events.DynamoDBBatchItemFailure) (int, bool) {
	index := make(map[string]int, len(recs))
	for i, r := range recs {
		index[r.Change.SequenceNumber] = i
	}
	low := len(recs)
	for _, f := range failures {
		i, ok := index[f.ItemIdentifier]
		if !ok || f.ItemIdentifier == "" {
			return 0, false
		}
		low = min(low, i)
	}
	return low, true
}

// dropAged drops the records older than MaximumRecordAge (a prefix: a shard is
// in time order) and returns the rest.
func (m *Mapping) dropAged(ctx context.Context, sh *shard, recs []events.DynamoDBEventRecord, d delivery) []events.DynamoDBEventRecord {
	if m.cfg.maxAge == 0 {
		return recs
	}
	now := time.Now()
	n := 0
	for n < len(recs) {
		created := recs[n].Change.ApproximateCreationDateTime.Time
		if created.IsZero() || now.Sub(created) <= m.cfg.maxAge {
			break
		}
		n++
	}
	if n > 0 {
		m.drop(ctx, sh, recs[:n], ConditionRecordAge, d)
	}
	return recs[n:]
}

func (m *Mapping) drop(ctx context.Context, sh *shard, recs []events.DynamoDBEventRecord, condition string, d delivery) {
	m.dropped.Add(int64(len(recs)))
	fr := newFailureRecord(time.Now(), m.arn, sh.id, m.cfg.functionARN, condition, d.requestID, d.invokes, recs, d.err, d.unhandled)
	m.cfg.logger.Warn("esm: records dropped", "shard", sh.id, "condition", condition, "count", len(recs),
		"first", fr.BatchInfo.StartSequenceNumber, "last", fr.BatchInfo.EndSequenceNumber, "invokes", d.invokes, "err", d.err)
	if m.cfg.onFailure != nil {
		m.cfg.onFailure(ctx, fr)
	}
}

func (m *Mapping) backoff(failures int) time.Duration {
	d := m.cfg.pollInterval << min(failures-1, 5)
	return min(d, 5*time.Second)
}

// hasCode reports whether err is an AWS API error with one of the codes.
func hasCode(err error, codes ...string) bool {
	var api smithy.APIError
	return errors.As(err, &api) && slices.Contains(codes, api.ErrorCode())
}

// sleep waits d or until ctx is done; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func ptr[T any](v T) *T { return &v }
