package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/store/dynamo"
	"github.com/dynakafka/outbox/store/memory"
)

// FakeWriter is an in-memory dynamo.Enqueuer for a service's unit tests:
// it checks each write as dynamo.Writer does (a *outbox.ValidationError,
// with nothing recorded, for an empty or oversized transaction, an item with
// no operation, or a message the writer would refuse), completes the
// messages as the writer does (id, CreatedAt, bucket, sequence) and records
// the write. Your items are recorded, not applied: there is no DynamoDB. It
// is safe for concurrent use. Outbox.Writer is a FakeWriter in memory mode,
// feeding the relay's store.
type FakeWriter struct {
	mu          sync.Mutex
	bucketCount int
	store       *memory.Store // nil: sequences from counters
	counters    map[int]int64
	writes      []Write
	fail        []error
}

// Write is one write a FakeWriter recorded: the caller's items and the
// completed messages, as the write's dynamo.Result has them.
type Write struct {
	Items    []types.TransactWriteItem
	Messages []outbox.Message
}

var _ dynamo.Enqueuer = (*FakeWriter)(nil)

// NewFakeWriter returns a FakeWriter for an outbox of bucketCount buckets (0:
// outbox.DefaultBucketCount).
func NewFakeWriter(bucketCount int) *FakeWriter {
	if bucketCount == 0 {
		bucketCount = outbox.DefaultBucketCount
	}
	return &FakeWriter{bucketCount: bucketCount, counters: map[int]int64{}}
}

// FailNext makes the next len(errs) writes return these errors, in order,
// recording nothing: for example
// &dynamo.TransactionError{Err: outbox.ErrConditionFailed} to test a
// service's handling of a failed version check, or one matching
// outbox.ErrOutcomeUnknown. A write that fails validation does not use one
// up.
func (f *FakeWriter) FailNext(errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = append(f.fail, errs...)
}

// Write checks, completes and records the write, or returns the next
// error queued by FailNext, or ctx's error when it is done.
func (f *FakeWriter) Write(ctx context.Context, items []types.TransactWriteItem, msgs ...outbox.Message) (dynamo.Result, error) {
	if err := ctx.Err(); err != nil {
		return dynamo.Result{}, &dynamo.TransactionError{Op: "dynamo: outbox write", Cause: err, CallerItems: len(items), Fix: "the context ended before the transaction was sent; nothing was written"}
	}
	out, err := f.check(items, msgs)
	if err != nil {
		return dynamo.Result{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.fail) > 0 {
		err := f.fail[0]
		f.fail = f.fail[1:]
		return dynamo.Result{}, err
	}
	counts := map[int]int{}
	for _, m := range out {
		counts[m.Bucket]++
	}
	next := map[int]int64{}
	for b, n := range counts {
		if f.store != nil {
			next[b] = f.store.Reserve(b, n)
		} else {
			next[b] = f.counters[b] + 1
			f.counters[b] += int64(n)
		}
	}
	for i := range out {
		out[i].Sequence = next[out[i].Bucket]
		next[out[i].Bucket]++
	}
	if f.store != nil && len(out) > 0 {
		if err := f.store.Put(out...); err != nil {
			return dynamo.Result{}, fmt.Errorf("outboxtest: store the messages: %w", err)
		}
	}
	f.writes = append(f.writes, Write{Items: slices.Clone(items), Messages: slices.Clone(out)})
	return dynamo.Result{Messages: out}, nil
}

// check is dynamo.Writer's validation, without DynamoDB's item sizes.
func (f *FakeWriter) check(items []types.TransactWriteItem, msgs []outbox.Message) ([]outbox.Message, error) {
	total := len(items) + len(msgs)
	switch {
	case total == 0:
		return nil, &outbox.ValidationError{Index: -1, Field: "Transaction", Reason: "nothing to write: no items and no messages"}
	case total > dynamo.MaxTransactionItems:
		return nil, &outbox.ValidationError{Index: -1, Field: "Transaction", Reason: fmt.Sprintf(
			"%d items (%d yours + %d messages); DynamoDB allows at most %d in one transaction: split the write",
			total, len(items), len(msgs), dynamo.MaxTransactionItems)}
	}
	for i, it := range items {
		if it.Put == nil && it.Update == nil && it.Delete == nil && it.ConditionCheck == nil {
			return nil, &outbox.ValidationError{Index: -1, Field: fmt.Sprintf("items[%d]", i), Reason: "no Put, Update, Delete or ConditionCheck is set"}
		}
	}
	now := time.Now()
	out := make([]outbox.Message, len(msgs))
	for i, m := range msgs {
		if m.ID == "" {
			m.ID = outbox.NewID()
		} else if _, err := uuid.Parse(m.ID); err != nil || len(m.ID) != 36 {
			return nil, &outbox.ValidationError{Index: i, Field: "ID", Reason: fmt.Sprintf("%q is not a UUID in canonical form (36 characters); leave ID empty to get a UUID v7", m.ID)}
		}
		if m.CreatedAt.IsZero() {
			m.CreatedAt = now
		}
		m.CreatedAt = time.UnixMilli(m.CreatedAt.UnixMilli())
		m.Headers = slices.Clone(m.Headers)
		if err := (outbox.HeaderNames{}).ValidateNew(m, i, outbox.DefaultMaxMessageBytes); err != nil {
			return nil, err
		}
		b, err := outbox.BucketFor(m, f.bucketCount)
		if err != nil {
			var ve *outbox.ValidationError
			if errors.As(err, &ve) {
				ve.Index = i
			}
			return nil, err
		}
		m.Bucket = b
		out[i] = m
	}
	return out, nil
}

// Writes returns the recorded writes, oldest first.
func (f *FakeWriter) Writes() []Write {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.writes)
}

// Messages returns every recorded message, in write order.
func (f *FakeWriter) Messages() []outbox.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []outbox.Message
	for _, w := range f.writes {
		out = append(out, w.Messages...)
	}
	return out
}
