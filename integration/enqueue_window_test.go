package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda/messages"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/store/dynamo"
)

// forgetfulWriter sends every transaction under a fresh client request
// token, as DynamoDB treats a token after its 10-minute window: a replay is
// then a new transaction, and only the idempotency record's condition can
// stop it.
type forgetfulWriter struct{ w *dynamo.Writer }

func (f forgetfulWriter) WriteWithToken(ctx context.Context, _ string, items []types.TransactWriteItem, msgs ...outbox.Message) (dynamo.Result, error) {
	return f.w.WriteWithToken(ctx, uuid.NewString(), items, msgs...)
}

func (f forgetfulWriter) BucketCount() int { return f.w.BucketCount() }

// After the token window, a replay commits nothing (the record's condition
// fails, the function answers the duplicate), a reused key with another
// body is refused, and concurrent invocations of one request commit once.
func TestEnqueueAfterTheTokenWindow(t *testing.T) {
	t.Parallel() // overlaps the package's long tests
	e := newEnv(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := handler.NewEnqueue(forgetfulWriter{e.writer}, e.dynamo.Client, e.tables, 0, quiet)
	if err != nil {
		t.Fatal(err)
	}
	req := func(key, order string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"idempotencyKey": %q, "transactItems": [{"Update": {"TableName": %q,
			"Key": {"id": {"S": %q}}, "UpdateExpression": "ADD n :one", "ExpressionAttributeValues": {":one": {"N": "1"}}}}],
			"messages": [{"topic": %q, "key": %q, "value": {"order": %q}}]}`, key, e.business, order, e.topic, order, order))
	}
	invoke := func(raw json.RawMessage) (*handler.EnqueueResponse, error) {
		out, err := h.Handle(ctx, raw)
		if err != nil {
			return nil, err
		}
		return out.(*handler.EnqueueResponse), nil
	}
	first, err := invoke(req("k-1", "o-1"))
	if err != nil || first.Duplicate {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := invoke(req("k-1", "o-1"))
	if err != nil || !again.Duplicate || again.Messages[0].ID != first.Messages[0].ID {
		t.Fatalf("replay: %+v, %v; want the first commit's ids as a duplicate", again, err)
	}
	_, err = invoke(req("k-1", "o-2"))
	var ie messages.InvokeResponse_Error
	if !errors.As(err, &ie) || ie.Type != handler.ErrorValidation {
		t.Fatalf("reused key: %v; want %s", err, handler.ErrorValidation)
	}

	// Eight invocations of one request at once.
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		fresh  int
		others []error
	)
	for range 8 {
		wg.Go(func() {
			resp, err := invoke(req("k-2", "o-3"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				others = append(others, err) // a conflict outlasting the retries: retried by the caller
			case !resp.Duplicate:
				fresh++
			}
		})
	}
	wg.Wait()
	for _, err := range others {
		if !errors.As(err, &ie) || (ie.Type != handler.ErrorRetryable && ie.Type != handler.ErrorThrottled) {
			t.Errorf("concurrent invocation: %v", err)
		}
	}
	if fresh > 1 {
		t.Fatalf("%d of 8 concurrent invocations of one request committed", fresh)
	}
	if fresh == 0 {
		if _, err := invoke(req("k-2", "o-3")); err != nil {
			t.Fatalf("retry after the conflicts: %v", err)
		}
	}
	for order, want := range map[string]int{"o-1": 1, "o-2": 0, "o-3": 1} {
		if n := countKey(ctx, t, e, order); n != want {
			t.Errorf("%s: %d messages stored, want %d", order, n, want)
		}
	}
	t.Logf("concurrent invocations: %d committed, %d retryable errors, the rest duplicates", fresh, len(others))
}

// countKey counts the stored messages (not fences) of key.
func countKey(ctx context.Context, t *testing.T, e *env, key string) int {
	t.Helper()
	b, err := outbox.BucketFor(outbox.Message{Key: []byte(key)}, e.writer.BucketCount())
	if err != nil {
		t.Fatal(err)
	}
	entries, _, err := e.store.Pending(ctx, b, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, en := range entries {
		if !en.Fence && string(en.Message.Key) == key {
			n++
		}
	}
	return n
}
