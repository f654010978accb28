package dynamo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/sequence"
)

// WriterAPI is the part of the DynamoDB client a Writer uses: GetItem (the
// config item), UpdateItem (sequence counters), PutItem (fences),
// TransactWriteItems and DescribeTable (NewWriter refuses global tables).
// *dynamodb.Client has them.
type WriterAPI interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Writer writes outbox messages in the same DynamoDB transaction as the
// caller's own items. It is safe for concurrent use.
type Writer struct {
	client WriterAPI
	tables Tables
	cfg    settings
	// view: the BucketCount and epoch this writer puts messages under,
	// from the config item; a reservation refused for its epoch replaces
	// it (rebucket.go).
	viewMu sync.Mutex
	view   bucketView
	// regional, lo, per: in region mode, the slice of buckets this writer
	// puts messages in, from lo, per buckets (its region's). The count
	// of a region-mode outbox does not change online (ChangeBucketCount
	// refuses it), so they stay.
	regional bool
	lo, per  int
	// retention is the outbox's in WatermarkMode (every message item gets
	// a TTL), 0 in DeleteMode (none).
	retention time.Duration
	// topics: the config item's topic list, sorted; empty: any topic.
	topics  []string
	counter *sequence.Counter
}

// TopicError is Write refusing a message for a topic the outbox does not
// serve: its config item lists the topics (the stack's Topics parameter,
// outbox init --topics, dynamo.Topics), and the message's is not among
// them. Nothing was written. It matches *outbox.ValidationError too (Field
// "Topic").
type TopicError struct {
	Index  int    // the message's index in the Write
	Topic  string // the message's topic
	Topics []string
}

func (e *TopicError) Error() string {
	return fmt.Sprintf("dynamo: message %d is for topic %q, which this outbox does not serve (its topics: %s); "+
		"fix the topic name, or add the topic to the outbox's list (the stack's Topics parameter, or outbox init --topics) and restart the writers",
		e.Index, e.Topic, strings.Join(e.Topics, ","))
}

// Unwrap makes a TopicError match *outbox.ValidationError.
func (e *TopicError) Unwrap() error {
	return &outbox.ValidationError{Index: e.Index, Field: "Topic", Reason: fmt.Sprintf("topic %q is not one the outbox serves (%s)", e.Topic, strings.Join(e.Topics, ","))}
}

// Result is what a successful Write wrote.
type Result struct {
	// Messages are the written messages, in the order given, with ID,
	// Bucket, Sequence and CreatedAt (as stored: whole milliseconds) set.
	Messages []outbox.Message
}

// NewWriter returns a Writer for the outbox in tables. It reads the config
// item for the bucket count and checks that the messages table exists (a
// GetItem of a key no item has), so a wrong table name or region fails here,
// with a *TableError naming the table (both tables', when both are missing),
// and not on the first Write. It runs on the config item's shared settings
// (BucketCount, the mode and retention, the topics, MaxMessageBytes, the
// header names), which no option states. Options (WriterOption):
// MaxAttempts, FenceTTL, Region, WithClock, WithTracer, WithLogger,
// WithNotifier.
//
// In a WatermarkMode outbox every message item gets a TTL attribute (x,
// epoch seconds): its CreatedAt, or the wall clock when that is later, plus
// the outbox's Retention (see Retention). A Writer reads mode and retention
// once, here: restart writers after changing them (Configure).
//
// Both tables must be in one region: a table with replicas (a DynamoDB
// global table) is refused with a *outbox.MisconfigurationError, because
// two regions would hand out the same sequence numbers and one message
// would overwrite the other — unless the outbox is in region mode (its
// config item lists regions, see Regions): the writer then needs
// Region and a client of that region (its replica; a
// *sequence.RegionError otherwise), and puts every message in its region's
// slice of buckets (outbox.Config.RegionBuckets), whose counters no other
// region writes.
//
// The writer's IAM permissions: dynamodb:GetItem and dynamodb:DescribeTable
// on both tables (config item, these checks), dynamodb:UpdateItem on the control table (sequence
// counters), dynamodb:PutItem on the messages table (messages, and fences
// that release numbers a failed write reserved), and what its transactions
// need on your own tables (PutItem, UpdateItem, DeleteItem,
// ConditionCheckItem).
func NewWriter(ctx context.Context, client WriterAPI, tables Tables, opts ...WriterOption) (*Writer, error) {
	s := defaultSettings()
	applyOptions(&s, opts)
	stored, err := openOutbox(ctx, client, tables, &s)
	var (
		te *TableError
		me *outbox.MisconfigurationError
	)
	if errors.As(err, &te) || (errors.As(err, &me) && me.Setting == "Tables.Messages") {
		// Say everything that is missing at once.
		return nil, errors.Join(err, checkMessagesTable(ctx, client, tables.Messages))
	}
	if err != nil {
		return nil, err
	}
	if err := checkMessagesTable(ctx, client, tables.Messages); err != nil {
		return nil, err
	}
	if err := outbox.CheckRegion(stored, s.region); err != nil {
		return nil, err
	}
	if err := checkSingleRegion(ctx, client, tables, stored.RegionMode()); err != nil {
		return nil, err
	}
	w := &Writer{client: client, tables: tables, cfg: s, view: bucketView{count: stored.BucketCount, epoch: stored.BucketEpoch}}
	if stored.RegionMode() {
		hi := 0
		w.regional = true
		w.lo, hi, _ = stored.RegionBuckets(s.region)
		w.per = hi - w.lo
	}
	if stored.Mode == outbox.WatermarkMode {
		w.retention = stored.Retention
	}
	w.topics = stored.Topics
	// The counter's UpdateItem goes through the Writer's one retry layer.
	// In region mode it reserves only in this region's slice, and only
	// through a client of this region (design.md §14.1, R1).
	if w.counter, err = sequence.NewCounter(writerCalls{w}, tables.Control, stored, s.region); err != nil {
		return nil, err
	}
	return w, nil
}

// BucketCount returns the outbox's bucket count, as last read from its
// config item (an online change replaces it: see ChangeBucketCount).
func (w *Writer) BucketCount() int { return w.currentView().count }

// Bucket returns the bucket this writer puts m in: outbox.BucketFor over
// the outbox's buckets, or in region mode over its region's slice, offset
// to the slice.
func (w *Writer) Bucket(m outbox.Message) (int, error) { return w.bucketIn(m, w.currentView().count) }

// bucketIn is m's bucket with count buckets in all (the writer's view).
func (w *Writer) bucketIn(m outbox.Message, count int) (int, error) {
	if !w.regional {
		return outbox.BucketFor(m, count)
	}
	b, err := outbox.BucketFor(m, w.per)
	return w.lo + b, err
}

// item is the messages-table item of m reserved at BucketCount epoch epoch
// as this writer stores it: with the epoch stamp, and a TTL in
// WatermarkMode.
func (w *Writer) item(m outbox.Message, epoch int64) map[string]types.AttributeValue {
	return withRetention(messageItem(m, epoch), m.CreatedAt, w.retention)
}

// Write commits items (the caller's own, for example the aggregate update
// with its version condition) and msgs in one TransactWriteItems.
//
// Every message is validated first (outbox.Validate, a UUID id, a DynamoDB
// item of at most 400 KB, a topic the outbox serves when its config item
// lists topics — a *TopicError otherwise, read when the Writer was made) and
// so is the transaction (at most 100 items and 4 MB, no two messages with
// the same id); a *outbox.ValidationError means nothing was written and
// nothing was reserved. Messages get an id (outbox.NewID) when theirs is empty, CreatedAt
// (the clock's now) when zero, and their bucket (outbox.BucketFor) and
// sequence number, which Result.Messages carries: a message with Bucket or
// Sequence set is refused (outbox.HeaderNames.ValidateNew). The caller's
// items and messages are not modified.
//
// Call Write after reading the aggregate your items are built from: it
// reserves the messages' sequence numbers (one counter update per bucket)
// immediately before committing, which makes sequence order equal commit
// order for writers that serialize on the aggregate (see package sequence).
//
// Retries: Write is the one layer that retries its DynamoDB calls (the
// client's retryer is switched off for them), and MaxAttempts bounds the
// requests it sends for the transaction (see MaxAttempts for the counter
// and fence calls). A lost or failed response (timeout, network error,
// server error, a transaction with the same token in progress,
// whole-request throttling) is retried with the same client request token
// and identical items, so a transaction that did commit is reported
// committed, once (DynamoDB honours a token for 10 minutes, far longer than
// the retries take); a conflict or throttled cancellation is retried after
// a backoff (a longer one after throttling); if relays fenced the reserved
// sequence numbers (the writer took longer than their gap timeout), new
// numbers are reserved and the transaction resubmitted at once with a new
// token, which counts as an attempt.
//
// Errors are *TransactionError matching, with errors.Is:
//   - outbox.ErrConditionFailed: a condition on one of your items failed
//     (CallerReasons says which); not retried;
//   - outbox.ErrConflict, outbox.ErrThrottled, outbox.ErrSequenceFenced:
//     the retries ran out;
//   - outbox.ErrOutcomeUnknown: the transaction may have committed.
//
// On every failure that certainly wrote nothing, the reserved sequence
// numbers are released at once by fencing them (the same write as
// Store.Fence), so no relay waits on them. After ErrOutcomeUnknown they are
// not fenced (the messages may be stored); if they are not, relays fence
// them after their gap timeout.
func (w *Writer) Write(ctx context.Context, items []types.TransactWriteItem, msgs ...outbox.Message) (res Result, err error) {
	return w.write(ctx, "", items, msgs)
}

// MaxTokenLength is the longest client request token DynamoDB accepts.
const MaxTokenLength = 36

// WriteWithToken is Write with the client request token of the
// transaction's first reservation given by the caller (1 to MaxTokenLength
// characters; a *outbox.ValidationError otherwise), for a caller whose own
// retries carry an idempotency key, such as a Lambda function invoked again
// with the same event. Write's retries resend it; a resubmission after a
// fence takes a new token, as in Write.
//
// The token alone does not make a retried call commit once: every call
// reserves new sequence numbers, so a second call's transaction differs from
// the first's and DynamoDB answers it with IdempotentParameterMismatch
// within its 10-minute window (a *TransactionError whose Cause is
// *types.IdempotentParameterMismatchException; the reservations are
// released) and evaluates it as a new transaction after it. A caller that
// must commit once across calls puts an item of its own in the transaction
// whose condition fails when an earlier call committed (what lambda/enqueue
// does).
func (w *Writer) WriteWithToken(ctx context.Context, token string, items []types.TransactWriteItem, msgs ...outbox.Message) (Result, error) {
	if token == "" || len(token) > MaxTokenLength {
		return Result{}, &outbox.ValidationError{Index: -1, Field: "ClientRequestToken", Reason: fmt.Sprintf(
			"%d characters; DynamoDB accepts 1 to %d", len(token), MaxTokenLength)}
	}
	return w.write(ctx, token, items, msgs)
}

func (w *Writer) write(ctx context.Context, token string, items []types.TransactWriteItem, msgs []outbox.Message) (res Result, err error) {
	if w.cfg.tracer != nil {
		var end func(error)
		ctx, end = w.cfg.tracer.Start(ctx, "outbox enqueue", enqueueSpan(items, msgs))
		defer func() { end(err) }()
	}
	view := w.currentView()
	prepared, err := w.prepare(ctx, view, items, msgs)
	if err != nil {
		return Result{}, err
	}
	t := &txn{w: w, view: view, items: items, msgs: prepared, token: token}
	res, err = t.run(ctx)
	if err == nil && w.cfg.notifier != nil {
		buckets := make([]int, len(res.Messages))
		for i, m := range res.Messages {
			buckets[i] = m.Bucket
		}
		w.cfg.notifier.Notify(buckets...)
	}
	return res, err
}

func enqueueSpan(items []types.TransactWriteItem, msgs []outbox.Message) outbox.SpanStart {
	attrs := []slog.Attr{slog.Int("outbox.messages", len(msgs)), slog.Int("outbox.items", len(items))}
	if len(msgs) > 0 && !slices.ContainsFunc(msgs, func(m outbox.Message) bool { return m.Topic != msgs[0].Topic }) {
		attrs = append(attrs, slog.String("messaging.destination.name", msgs[0].Topic))
	}
	return outbox.SpanStart{Kind: outbox.SpanProducer, Attributes: attrs}
}

// prepare validates and completes the messages; it writes nothing. With a
// tracer, ctx's trace context goes into every message's headers (a copy).
func (w *Writer) prepare(ctx context.Context, view bucketView, items []types.TransactWriteItem, msgs []outbox.Message) ([]outbox.Message, error) {
	total := len(items) + len(msgs)
	switch {
	case total == 0:
		return nil, &outbox.ValidationError{Index: -1, Field: "Transaction", Reason: "nothing to write: no items and no messages"}
	case total > MaxTransactionItems:
		return nil, &outbox.ValidationError{Index: -1, Field: "Transaction", Reason: fmt.Sprintf(
			"%d items (%d yours + %d messages); DynamoDB allows at most %d in one transaction: split the write",
			total, len(items), len(msgs), MaxTransactionItems)}
	}
	for i, it := range items {
		if it.Put == nil && it.Update == nil && it.Delete == nil && it.ConditionCheck == nil {
			// Typically an item whose constructor's error was dropped.
			return nil, &outbox.ValidationError{Index: -1, Field: fmt.Sprintf("items[%d]", i), Reason: "no Put, Update, Delete or ConditionCheck is set; " +
				"build it with dynamo.Put, Update, UpdateIfVersion, Check or Delete and check their error"}
		}
	}
	now := w.cfg.clock.Now()
	out := make([]outbox.Message, len(msgs))
	size := 0
	seen := make(map[string]int, len(msgs))
	for i, m := range msgs {
		if m.ID == "" {
			m.ID = outbox.NewID()
		} else if !canonicalUUID(m.ID) {
			return nil, &outbox.ValidationError{Index: i, Field: "ID", Reason: fmt.Sprintf(
				"%q is not a UUID in canonical form (36 characters); leave ID empty to get a UUID v7", m.ID)}
		}
		if j, dup := seen[m.ID]; dup {
			// Consumers deduplicate by id: the second would be dropped.
			return nil, &outbox.ValidationError{Index: i, Field: "ID", Reason: fmt.Sprintf(
				"message %d has the same id %s as message %d; consumers would drop one as a duplicate (leave IDs empty to get fresh ones)", i, m.ID, j)}
		}
		seen[m.ID] = i
		if len(w.topics) > 0 {
			if _, ok := slices.BinarySearch(w.topics, m.Topic); !ok {
				return nil, &TopicError{Index: i, Topic: m.Topic, Topics: slices.Clone(w.topics)}
			}
		}
		if m.CreatedAt.IsZero() {
			m.CreatedAt = now
		}
		if w.cfg.tracer != nil {
			m.Headers = w.cfg.tracer.Inject(ctx, slices.Clone(m.Headers))
		}
		if m.CreatedAt.UnixMilli() < 0 {
			return nil, &outbox.ValidationError{Index: i, Field: "CreatedAt", Reason: fmt.Sprintf(
				"%v is before 1970; Kafka timestamps cannot be negative (leave it zero for now)", m.CreatedAt)}
		}
		m.CreatedAt = time.UnixMilli(m.CreatedAt.UnixMilli())
		if err := w.cfg.headers.ValidateNew(m, i, w.cfg.maxMessageBytes); err != nil {
			return nil, err
		}
		b, err := w.bucketIn(m, view.count)
		if err != nil {
			var ve *outbox.ValidationError
			if errors.As(err, &ve) {
				ve.Index = i
			}
			return nil, err
		}
		m.Bucket, m.Sequence = b, maxSeqForSize
		n := itemSize(w.item(m, view.epoch))
		if n > MaxItemBytes {
			return nil, itemTooLarge(i, m, n)
		}
		size += n
		m.Sequence = 0
		out[i] = m
	}
	for _, it := range items {
		size += transactItemSize(it)
	}
	if size > MaxTransactionBytes {
		return nil, &outbox.ValidationError{Index: -1, Field: "Transaction", Reason: fmt.Sprintf(
			"the items add up to at least %d bytes; DynamoDB allows %d bytes in one transaction: split the write or shrink the messages",
			size, MaxTransactionBytes)}
	}
	return out, nil
}

// canonicalUUID reports whether id is a UUID in its canonical 36-character
// form, the only message id form the outbox stores.
func canonicalUUID(id string) bool {
	_, err := uuid.Parse(id)
	return err == nil && len(id) == 36
}

func itemTooLarge(i int, m outbox.Message, n int) error {
	field, largest := "Value", len(m.Value)
	if len(m.Key) > largest {
		field, largest = "Key", len(m.Key)
	}
	h := 0
	for _, x := range m.Headers {
		h += len(x.Key) + len(x.Value)
	}
	if h > largest {
		field = "Headers"
	}
	return &outbox.ValidationError{Index: i, Field: field, Reason: fmt.Sprintf(
		"the DynamoDB item would be %d bytes, above DynamoDB's %d-byte item limit (key %d, value %d, headers %d bytes); shrink the %s",
		n, MaxItemBytes, len(m.Key), len(m.Value), h, field)}
}

// transactItemSize is the part of a caller's item whose size is known before
// the write: a Put's whole item, otherwise the key. DynamoDB checks the real
// sizes and refuses an oversized transaction (a *TransactionError).
func transactItemSize(it types.TransactWriteItem) int {
	switch {
	case it.Put != nil:
		return itemSize(it.Put.Item)
	case it.Update != nil:
		return itemSize(it.Update.Key)
	case it.Delete != nil:
		return itemSize(it.Delete.Key)
	case it.ConditionCheck != nil:
		return itemSize(it.ConditionCheck.Key)
	}
	return 0
}

// reservation is a range of sequence numbers reserved in one bucket.
type reservation struct {
	bucket int
	first  int64
	n      int
}

// txn is one Write in progress.
type txn struct {
	w        *Writer
	view     bucketView // the count and epoch msgs' buckets are for
	items    []types.TransactWriteItem
	msgs     []outbox.Message
	reserved []reservation
	// token is the caller's client request token for the first
	// reservation's transaction; empty for a new random one.
	token string
}

func (t *txn) run(ctx context.Context) (Result, error) {
	maxAttempts := t.w.cfg.maxAttempts
	if err := t.reserve(ctx); err != nil {
		return Result{}, err
	}
	in := t.input()
	var (
		// maybeCommitted: an attempt with the current token may have
		// committed and no later attempt with it proved otherwise.
		maybeCommitted bool
		last           classification
		lastErr        error
	)
	for attempt := 1; ; attempt++ {
		if attempt == 1 && ctx.Err() != nil {
			// Nothing was sent.
			return Result{}, &TransactionError{Op: opWrite, Cause: ctx.Err(), CallerItems: len(t.items), ReleaseErr: t.release(ctx),
				Fix: "the context ended before the transaction was sent; nothing was written"}
		}
		_, err := t.w.client.TransactWriteItems(ctx, in, withoutClientRetries)
		if err == nil {
			return Result{Messages: t.msgs}, nil
		}
		c := classify(err, len(t.items), t.ids())
		last, lastErr = c, err
		switch {
		case c.outcome == outCommitted:
			return Result{Messages: t.msgs}, nil
		case c.cancelled:
			// DynamoDB evaluated this call and cancelled it; had an
			// earlier call with the token committed, it would have
			// answered success instead.
			maybeCommitted = false
		case c.outcome == outAmbiguous:
			maybeCommitted = true
		}

		retry := false
		switch c.outcome {
		case outConditionFailed, outRejected:
		case outFenced:
			if attempt < maxAttempts && ctx.Err() == nil {
				// The whole transaction was cancelled: release what is
				// left of the old numbers, take new ones, new token.
				t.w.logRetry(ctx, "TransactWriteItems", attempt, c.outcome, err)
				t.release(ctx) // best effort: relays fence what is left after their gap timeout
				if err := t.reserve(ctx); err != nil {
					var te *TransactionError
					if errors.As(err, &te) {
						te.Attempts = attempt
					}
					return Result{}, err
				}
				in = t.input()
				continue
			}
		case outConflict, outThrottled, outAmbiguous:
			retry = attempt < maxAttempts
		}
		if retry && ctx.Err() == nil {
			t.w.logRetry(ctx, "TransactWriteItems", attempt, c.outcome, err)
			if t.w.pause(ctx, attempt, c.outcome == outThrottled) == nil {
				continue
			}
		}
		return Result{}, t.fail(ctx, attempt, last, lastErr, maybeCommitted)
	}
}

// fail builds the final error and, when nothing can have been written,
// releases the reserved sequence numbers.
func (t *txn) fail(ctx context.Context, attempts int, c classification, err error, maybeCommitted bool) error {
	o := c.outcome
	if maybeCommitted || o == outAmbiguous {
		o = outAmbiguous
	}
	fix, sentinel := finalError(o)
	if c.detail != "" && o != outAmbiguous {
		fix = c.detail + "; " + fix
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		err = errors.Join(err, ctxErr)
	}
	te := &TransactionError{Op: opWrite, Err: sentinel, Cause: err, Attempts: attempts, Reasons: c.reasons, CallerItems: len(t.items), Fix: fix}
	if o != outAmbiguous {
		te.ReleaseErr = t.release(ctx)
	}
	return te
}

// reserve takes sequence numbers for the messages: one Reserve per distinct
// bucket, in order of first appearance, assigned in message order. A
// reservation refused for its BucketCount epoch (an online change) cuts a
// counter nobody cut yet, or reads the config item and moves the messages
// to the new count's buckets, and reserves again: no wait (rebucket.go,
// meetEpoch).
func (t *txn) reserve(ctx context.Context) error {
	for range maxEpochMeetings {
		err := t.reserveOnce(ctx)
		var ee *sequence.EpochError
		if !errors.As(err, &ee) {
			return err
		}
		view, werr := t.w.meetEpoch(ctx, t.view, ee)
		if werr != nil {
			return &TransactionError{Op: opWrite, Cause: errors.Join(werr, err),
				Fix: "a BucketCount change happened and the writer could not follow it; nothing was written"}
		}
		if view != t.view {
			if err := t.rebucket(view); err != nil {
				return err
			}
		}
	}
	return &TransactionError{Op: opWrite, Err: outbox.ErrThrottled,
		Cause: fmt.Errorf("dynamo: the BucketCount epoch changed %d times while reserving", maxEpochMeetings),
		Fix:   "BucketCount changes follow each other faster than a write reserves; nothing was written, write again"}
}

// maxEpochMeetings bounds the reservations one write (or replay) makes
// while it follows online BucketCount changes: each meeting either cuts a
// counter (the next reservation succeeds) or moves to a later epoch, and
// two changes never overlap.
const maxEpochMeetings = 4

func (t *txn) reserveOnce(ctx context.Context) error {
	t.reserved = t.reserved[:0]
	counts := map[int]int{}
	var order []int
	for _, m := range t.msgs {
		if counts[m.Bucket] == 0 {
			order = append(order, m.Bucket)
		}
		counts[m.Bucket]++
	}
	next := map[int]int64{}
	for _, b := range order {
		first, err := t.w.counter.ReserveAt(ctx, b, counts[b], t.view.epoch)
		if err != nil {
			releaseErr := t.release(ctx)
			if errors.Is(err, sequence.ErrEpoch) {
				return errors.Join(err, releaseErr)
			}
			var sentinel error
			if c := classify(err, 0, nil); c.outcome == outThrottled {
				sentinel = outbox.ErrThrottled
			}
			return &TransactionError{Op: opWrite, Err: sentinel, Cause: err, ReleaseErr: releaseErr,
				Fix: "reserving sequence numbers failed before the transaction was sent; nothing was written"}
		}
		t.reserved = append(t.reserved, reservation{bucket: b, first: first, n: counts[b]})
		next[b] = first
	}
	for i := range t.msgs {
		m := &t.msgs[i]
		m.Sequence = next[m.Bucket]
		next[m.Bucket]++
	}
	return nil
}

// input builds the transaction: the caller's items first, then one put per
// message, conditional on its sequence number being free, and a new client
// request token.
func (t *txn) input() *dynamodb.TransactWriteItemsInput {
	all := make([]types.TransactWriteItem, 0, len(t.items)+len(t.msgs))
	all = append(all, t.items...)
	for _, m := range t.msgs {
		// A constant condition (expr.go), on every message: the reserved
		// position is free (a relay may have fenced it).
		all = append(all, types.TransactWriteItem{Put: &types.Put{
			TableName:                           str(t.w.tables.Messages),
			Item:                                t.w.item(m, t.view.epoch),
			ConditionExpression:                 str("attribute_not_exists(#s)"),
			ExpressionAttributeNames:            names(attrSeq),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}})
	}
	token := t.token
	if token == "" {
		token = uuid.NewString()
	}
	t.token = "" // a resubmission after a fence is a new transaction
	return &dynamodb.TransactWriteItemsInput{
		TransactItems:      all,
		ClientRequestToken: str(token),
	}
}

func (t *txn) ids() []string {
	ids := make([]string, len(t.msgs))
	for i, m := range t.msgs {
		ids[i] = m.ID
	}
	return ids
}

// releaseTimeout bounds releasing reserved numbers, which runs even when the
// caller's context is done.
const releaseTimeout = 10 * time.Second

// release fences every reserved sequence number that is still free. A number
// already taken (a relay fenced it) is fine.
func (t *txn) release(ctx context.Context) error {
	if len(t.reserved) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	now := t.w.cfg.clock.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 4)
	)
	for _, r := range t.reserved {
		for seq := r.first; seq < r.first+int64(r.n); seq++ {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				err := putFence(ctx, writerCalls{t.w}, t.w.tables.Messages, r.bucket, seq, now, t.w.cfg.fenceTTL)
				if err != nil && !errors.Is(err, outbox.ErrAlreadyWritten) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	t.reserved = t.reserved[:0]
	return errors.Join(errs...)
}
