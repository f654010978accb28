package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/inboxtx"
)

// API is the part of the DynamoDB client an Inbox uses: GetItem (the table
// check in New, and reading its own items after an ambiguous cancellation)
// and TransactWriteItems. *dynamodb.Client has them.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Inbox processes Kafka records effectively once: each record's business
// operations commit in one DynamoDB transaction with the record's processed
// mark. It is safe for concurrent use (records of different partitions may
// be processed at once; records of one partition should be processed in
// offset order, as Consumer does).
type Inbox struct {
	client API
	table  string
	cfg    config

	mu sync.Mutex
	// highest sequence known applied per (topic, partition, bucket), for
	// Result.Gap; a lower bound of the table's positions.
	seen map[position]int64
}

type position struct {
	topic     string
	partition int32
	bucket    int
}

// New returns an Inbox over table, the processed-ids table (see
// CreateTable). It validates the options (an *outbox.OptionError names a bad
// one) and checks that the table exists with a GetItem of a key that is
// never stored.
func New(ctx context.Context, client API, table string, opts ...Option) (*Inbox, error) {
	c := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, errNilOption
		}
		o.applyInbox(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, &outbox.OptionError{Option: "client", Value: nil, Reason: "a DynamoDB client is required"}
	}
	if err := checkTableName(table); err != nil {
		return nil, err
	}
	_, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: key(probeKey)})
	var notFound *types.ResourceNotFoundException
	switch {
	case errors.As(err, &notFound):
		return nil, fmt.Errorf("inbox: table %s does not exist; create it with inbox.CreateTable: %w", table, err)
	case err != nil:
		return nil, fmt.Errorf("inbox: check table %s: %w", table, err)
	}
	return &Inbox{client: client, table: table, cfg: c, seen: map[position]int64{}}, nil
}

// Message is what the inbox reads from a record: where it is, and the
// outbox's stamped headers.
type Message struct {
	Topic     string
	Partition int32
	Offset    int64
	// ID is the message id (the message-id header).
	ID string
	// Bucket and Sequence are the message's place in its outbox bucket (the
	// bucket and sequence headers); Sequenced is false when the record has
	// neither header (it was not published by an outbox relay).
	Bucket    int
	Sequence  int64
	Sequenced bool
}

// Parse reads the stamped headers of r, named as the outbox's config item
// says (Config.SharedHeaders; the zero value means the default names). A record without a message id, or with a malformed or
// half-present bucket and sequence, is a *RecordError.
func Parse(r *kgo.Record, names outbox.HeaderNames) (Message, error) {
	names = names.WithDefaults()
	m := Message{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	var id, bucket, seq []byte
	var hasID, hasBucket, hasSeq bool
	// The relay stamps its headers after the message's own: the last wins.
	for _, h := range r.Headers {
		switch h.Key {
		case names.MessageID:
			id, hasID = h.Value, true
		case names.Bucket:
			bucket, hasBucket = h.Value, true
		case names.Sequence:
			seq, hasSeq = h.Value, true
		}
	}
	fail := func(header, reason string) (Message, error) {
		return m, &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Header: header, Reason: reason}
	}
	switch {
	case !hasID || len(id) == 0:
		return fail(names.MessageID, "missing or empty; the inbox deduplicates on the message id the outbox relay stamps")
	case len(id) > maxIDBytes || !utf8.Valid(id):
		return fail(names.MessageID, fmt.Sprintf("must be valid UTF-8 of at most %d bytes", maxIDBytes))
	}
	m.ID = string(id)
	if !hasBucket && !hasSeq {
		return m, nil
	}
	if hasBucket != hasSeq {
		missing := names.Sequence
		if !hasBucket {
			missing = names.Bucket
		}
		return fail(missing, "missing while the other of the bucket and sequence headers is present")
	}
	b, err := strconv.ParseInt(string(bucket), 10, 32)
	if err != nil || b < 0 || b >= outbox.MaxBucketCount {
		return fail(names.Bucket, fmt.Sprintf("%q is not a bucket (a decimal 0..%d)", bucket, outbox.MaxBucketCount-1))
	}
	s, err := strconv.ParseInt(string(seq), 10, 64)
	if err != nil || s < 1 {
		return fail(names.Sequence, fmt.Sprintf("%q is not a sequence number (a positive decimal)", seq))
	}
	m.Bucket, m.Sequence, m.Sequenced = int(b), s, true
	return m, nil
}

// maxIDBytes bounds a message id (it is part of a DynamoDB key).
const maxIDBytes = 1024

// Tx is one record's transaction under construction: the callback of
// Process adds the business operations to it.
type Tx struct {
	ctx   context.Context
	rec   *kgo.Record
	msg   Message
	items []types.TransactWriteItem
}

// Context is Process's context, carrying the consumer span when tracing.
func (tx *Tx) Context() context.Context { return tx.ctx }

// Record is the record being processed.
func (tx *Tx) Record() *kgo.Record { return tx.rec }

// Message is the record's outbox metadata.
func (tx *Tx) Message() Message { return tx.msg }

// Add adds business operations (puts, updates, deletes, condition checks,
// built by hand or with the same helpers as the writer's items) to the
// record's transaction. With the inbox's own one or two items, a
// transaction holds at most 100.
func (tx *Tx) Add(items ...types.TransactWriteItem) { tx.items = append(tx.items, items...) }

// Items returns the business operations added so far, in order.
func (tx *Tx) Items() []types.TransactWriteItem { return slices.Clone(tx.items) }

// newTestTx is inboxtest.NewTx: the Tx a callback gets for r, read with
// the default header names, without an Inbox or DynamoDB.
func newTestTx(r *kgo.Record) (*Tx, error) {
	if r == nil {
		return nil, &outbox.OptionError{Option: "r", Value: nil, Reason: "a record is required"}
	}
	msg, err := Parse(r, outbox.HeaderNames{})
	if err != nil {
		return nil, err
	}
	return &Tx{ctx: context.Background(), rec: r, msg: msg}, nil
}

func init() { inboxtx.New = newTestTx }

// Status is what Process did with a record.
type Status int

// Statuses.
const (
	// Failed: nothing was committed (or, with outbox.ErrOutcomeUnknown,
	// perhaps it was); the error says why. Process the record again.
	Failed Status = iota
	// Applied: the business operations and the processed mark committed.
	Applied
	// Duplicate: the message id was already processed (within Retention);
	// nothing was written.
	Duplicate
	// Stale (in-order mode): a record of the same (topic, partition,
	// bucket) with a sequence at or above this one's was already applied,
	// and this message id was not processed (within Retention): a late
	// first delivery or an old duplicate. Nothing was written.
	Stale
	// Skipped (never returned by Process): a Consumer or Handler gave up
	// on the record under the Skip policy and committed it. Reported to
	// Metrics once, with the record's last error, after the failed
	// Process calls (each reported as Failed).
	Skipped
	// DeadLettered (never returned by Process): a Consumer or Handler
	// wrote the record to its dead-letter sink and committed it. Reported
	// as Skipped is.
	DeadLettered
)

func (s Status) String() string {
	switch s {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case Stale:
		return "stale"
	case Skipped:
		return "skipped"
	case DeadLettered:
		return "dead_lettered"
	}
	return "failed"
}

// Result is what Process did.
type Result struct {
	Message Message
	Status  Status
	// Gap is how many sequence numbers of the record's (topic, partition,
	// bucket) were skipped between the last record applied by this Inbox
	// and this one (0 for none, or when this Inbox applied none of that
	// bucket yet). Gaps are legal: fenced numbers, parked messages, the
	// bucket's messages on other topics or partitions.
	Gap int64
	// Attempts is how many TransactWriteItems calls were made.
	Attempts int
	// Duration of the whole Process, the callback included.
	Duration time.Duration
}

// Process processes r effectively once. It reads r's stamped headers, calls
// fn to collect the business operations, and commits them in one
// TransactWriteItems with a conditional put of the message id on the
// processed-ids table (the put refreshes an id older than Retention) and, in
// in-order mode, a conditional update of the (topic, partition, bucket)'s
// highest applied sequence. When the id was already processed the
// transaction is cancelled: nothing is written twice, and the Status says
// Duplicate (or Stale). fn runs once per Process and must only build
// operations (and read): its effects outside tx are not transactional.
//
// Commit only r's offset after Process returns a nil error (Consumer does):
// then a crash at any point leads to r being processed again, which
// Process recognizes.
//
// Retries (MaxAttempts calls): a lost or failed response is retried with the
// same client request token and items, so a transaction that committed is
// reported Applied, once; a conflicting or throttled transaction is retried
// after a backoff. Errors: an *outbox.OptionError for a nil r or fn
// (nothing is written, nothing reported); a *RecordError for a record without the stamped
// headers; fn's error, wrapped; an *outbox.ValidationError for more than 100
// items; otherwise a *TransactionError matching outbox.ErrConditionFailed
// (a condition on one of fn's items failed), ErrConflict, ErrThrottled or
// ErrOutcomeUnknown (it may have committed: process the record again
// later, which finds out).
func (ib *Inbox) Process(ctx context.Context, r *kgo.Record, fn func(tx *Tx) error) (res Result, err error) {
	if fn == nil {
		return res, &outbox.OptionError{Option: "fn", Value: nil, Reason: "a function that adds the record's business operations is required"}
	}
	if r == nil {
		return res, &outbox.OptionError{Option: "r", Value: nil, Reason: "a record is required"}
	}
	start := ib.cfg.clock.Now()
	defer func() {
		res.Duration = ib.cfg.clock.Now().Sub(start)
		ib.cfg.metrics.Processed(res, err)
	}()
	msg, err := Parse(r, ib.cfg.headers)
	res.Message = msg
	if err != nil {
		return res, err
	}
	if t := ib.cfg.tracer; t != nil {
		var end func(error)
		ctx, end = t.Start(t.Extract(ctx, headersOf(r)), "process "+r.Topic, processSpan(msg))
		defer func() { end(err) }()
	}
	tx := &Tx{ctx: ctx, rec: r, msg: msg}
	if err := fn(tx); err != nil {
		return res, fmt.Errorf("inbox: %s/%d@%d (message %s): %w", msg.Topic, msg.Partition, msg.Offset, msg.ID, err)
	}
	in, ours, err := ib.input(tx)
	if err != nil {
		return res, err
	}
	var old int64
	res.Status, res.Attempts, old, err = ib.commit(ctx, in, ours, msg)
	res.Gap = ib.track(msg, res.Status, old)
	return res, err
}

func headersOf(r *kgo.Record) []outbox.Header {
	hs := make([]outbox.Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = outbox.Header{Key: h.Key, Value: h.Value}
	}
	return hs
}

func processSpan(m Message) outbox.SpanStart {
	attrs := []slog.Attr{
		slog.String("messaging.system", "kafka"),
		slog.String("messaging.operation.type", "process"),
		slog.String("messaging.destination.name", m.Topic),
		slog.String("messaging.destination.partition.id", strconv.Itoa(int(m.Partition))),
		slog.Int64("messaging.kafka.offset", m.Offset),
		slog.String("messaging.message.id", m.ID),
	}
	if m.Sequenced {
		attrs = append(attrs, slog.Int("outbox.bucket", m.Bucket), slog.Int64("outbox.sequence", m.Sequence))
	}
	return outbox.SpanStart{Kind: outbox.SpanConsumer, Attributes: attrs}
}

// track keeps the highest sequence known applied per (topic, partition,
// bucket) and returns the gap before an applied record. old is the stored
// position a Stale cancellation returned (0: unknown).
func (ib *Inbox) track(m Message, st Status, old int64) (gap int64) {
	if !m.Sequenced {
		return 0
	}
	k := position{m.Topic, m.Partition, m.Bucket}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	prev, ok := ib.seen[k]
	switch st {
	case Applied:
		if ok && m.Sequence > prev+1 {
			gap = m.Sequence - prev - 1
		}
		if !ok || m.Sequence > prev {
			ib.seen[k] = m.Sequence
		}
	case Stale:
		if old > prev {
			ib.seen[k] = old
		}
	}
	return gap
}

// RecordError is a record the inbox cannot process: its stamped headers are
// missing or malformed. Processing it again cannot succeed.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Header    string
	Reason    string
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("inbox: record %s/%d@%d: header %s: %s", e.Topic, e.Partition, e.Offset, e.Header, e.Reason)
}
