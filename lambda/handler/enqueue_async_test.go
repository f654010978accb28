package handler

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda/messages"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

// poisonBody is a request that can never commit (a message without a
// topic); goodBody one that can.
const poisonBody = `{"messages": [{"key": "poison"}]}`

func goodBody(key string) string {
	return fmt.Sprintf(`{"messages": [{"topic": "t", "key": %q}]}`, key)
}

// kinesisRecord is a Kinesis event record whose data is body.
func kinesisRecord(seq, body string) string {
	return fmt.Sprintf(`{"eventSource": "aws:kinesis", "eventID": "shardId-000000000000:%s", "kinesis": {"sequenceNumber": %q, "data": %q}}`,
		seq, seq, base64.StdEncoding.EncodeToString([]byte(body)))
}

// fifoRecord is a FIFO queue's SQS record whose body is body.
func fifoRecord(id, body string) string {
	b, _ := json.Marshal(body)
	return fmt.Sprintf(`{"eventSource": "aws:sqs", "messageId": %q, "body": %s, "attributes": {"MessageGroupId": "g"}}`, id, b)
}

// redeliver is the records a source sends again after a batch answered
// failed: Kinesis (a checkpoint) every record from the lowest reported one
// on; SQS only the reported ones.
func redeliver(kinesis bool, recs, ids, failed []string) (nextRecs, nextIDs []string) {
	for i, id := range ids {
		first := slices.Index(ids, failed[0])
		if (kinesis && i >= first) || (!kinesis && slices.Contains(failed, id)) {
			nextRecs, nextIDs = append(nextRecs, recs[i]), append(nextIDs, id)
		}
	}
	return nextRecs, nextIDs
}

// An unusable record in an ordered batch (Kinesis, a FIFO queue) is
// reported alone: the good records after it commit on the first delivery,
// once, and every redelivery reports only the unusable one (before, it and
// every record after it were reported on every delivery, and 3 deliveries
// committed none of the good ones).
func TestEnqueuePoisonRecordReportedAlone(t *testing.T) {
	for _, kinesis := range []bool{true, false} {
		t.Run(map[bool]string{true: "kinesis", false: "fifo"}[kinesis], func(t *testing.T) {
			h, w := newFakeEnqueue(t, nil)
			bodies := []string{poisonBody, goodBody("a"), goodBody("b")}
			var recs, ids []string
			for i, b := range bodies {
				id := fmt.Sprintf("4959000000000000000000000000000000000000000000000%d", i)
				rec := kinesisRecord(id, b)
				if !kinesis {
					id = fmt.Sprintf("m%d", i)
					rec = fifoRecord(id, b)
				}
				recs, ids = append(recs, rec), append(ids, id)
			}
			for delivery := 1; delivery <= 3 && len(recs) > 0; delivery++ {
				out, err := h.Handle(context.Background(), json.RawMessage(`{"Records": [`+strings.Join(recs, ",")+`]}`))
				if err != nil {
					t.Fatalf("delivery %d: %v", delivery, err)
				}
				var failed []string
				for _, f := range out.(events.SQSEventResponse).BatchItemFailures {
					failed = append(failed, f.ItemIdentifier)
				}
				if !slices.Equal(failed, ids[:1]) {
					t.Fatalf("delivery %d reported %v; want only the unusable record %s", delivery, failed, ids[0])
				}
				recs, ids = redeliver(kinesis, recs, ids, failed)
			}
			if !slices.Equal(w.commits, []string{"a", "b"}) {
				t.Fatalf("committed %v over 3 deliveries; want a and b, once each", w.commits)
			}
		})
	}
}

// A retryable failure in an ordered batch still holds back the records
// after it (they are reported untried), so the source keeps their order.
func TestEnqueueRetryableFailureHoldsBackTheRest(t *testing.T) {
	h, w := newFakeEnqueue(t, map[string]error{"a": &dynamo.TransactionError{Err: outbox.ErrThrottled}})
	recs := []string{kinesisRecord("1", goodBody("a")), kinesisRecord("2", goodBody("b"))}
	out, err := h.Handle(context.Background(), json.RawMessage(`{"Records": [`+strings.Join(recs, ",")+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, f := range out.(events.SQSEventResponse).BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	if fmt.Sprint(failed) != "[1 2]" || fmt.Sprint(w.calls) != "[a]" {
		t.Fatalf("reported %v after writes %v; want [1 2] after [a]", failed, w.calls)
	}
}

// A direct invocation whose payload is an array (which the function takes
// for a Pipes batch) answers an error when an element that is a request
// fails, so a Step Functions Retry or Catch fires; before, it answered a
// batch response, a success. An empty array is refused. A Pipes batch of
// SQS records still answers its failures as batchItemFailures.
func TestEnqueueArrayFailureIsAnError(t *testing.T) {
	throttled := map[string]error{"b": &dynamo.TransactionError{Err: outbox.ErrThrottled}}
	cases := []struct {
		name, payload string
		typ, field    string
		commits       string
	}{
		{"empty", `[]`, ErrorValidation, "event", "[]"},
		{"no key", `[` + goodBody("a") + `]`, ErrorValidation, "[0].idempotencyKey", "[]"},
		{"bad request", `[{"idempotencyKey": "k1", "messages": [{"key": "a"}]}]`, ErrorValidation, "[0].messages[0].topic", "[]"},
		{"one throttled", `[{"idempotencyKey": "k1", "messages": [{"topic": "t", "key": "a"}]}, {"idempotencyKey": "k2", "messages": [{"topic": "t", "key": "b"}]}]`,
			ErrorThrottled, "[1]", "[a]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, w := newFakeEnqueue(t, throttled)
			out, err := h.Handle(context.Background(), json.RawMessage(tc.payload))
			var ie messages.InvokeResponse_Error
			if !errors.As(err, &ie) || ie.Type != tc.typ || !strings.Contains(ie.Message, fmt.Sprintf(`"field":%q`, tc.field)) {
				t.Fatalf("answered %#v, %v; want a %s error naming %s", out, err, tc.typ, tc.field)
			}
			if fmt.Sprint(w.commits) != tc.commits {
				t.Fatalf("committed %v; want %s", w.commits, tc.commits)
			}
		})
	}
	t.Run("pipes sqs records", func(t *testing.T) {
		h, _ := newFakeEnqueue(t, throttled)
		batch := batchRecords(t, sqsBatch(false, "a", "b"))
		raw, _ := json.Marshal(batch)
		out, err := h.Handle(context.Background(), raw)
		if err != nil {
			t.Fatal(err)
		}
		if f := out.(events.SQSEventResponse).BatchItemFailures; len(f) != 1 || f[0].ItemIdentifier != "m1" {
			t.Fatalf("failures %v; want m1", f)
		}
	})
}

// Message ids a request leaves empty are derived from its key, its body and
// the message's position: the same request committed twice where its
// idempotency record cannot see the first commit (here two handlers with
// their own records, as two regions before replication) carries the same
// ids, which the inbox deduplicates; before, each commit drew random ids.
func TestEnqueueMessageIDsDerived(t *testing.T) {
	req := `{"idempotencyKey": "order-1-paid", "messages": [{"topic": "t", "key": "a"}, {"topic": "t", "key": "b"},
		{"id": "0190c1a2-0000-7000-8000-000000000001", "topic": "t", "key": "c"}]}`
	commit := func(req string) []string {
		h, w := newFakeEnqueue(t, nil)
		if _, err := h.Handle(context.Background(), json.RawMessage(req)); err != nil {
			t.Fatal(err)
		}
		return w.ids
	}
	first, second := commit(req), commit(req)
	if !slices.Equal(first, second) {
		t.Fatalf("the same request committed under ids %v, then %v; want the same", first, second)
	}
	if first[0] == first[1] || first[2] != "0190c1a2-0000-7000-8000-000000000001" {
		t.Fatalf("ids %v: want two different derived ids and the caller's own", first)
	}
	other := commit(strings.Replace(req, `"key": "a"`, `"key": "a2"`, 1))
	if other[0] == first[0] {
		t.Fatalf("the same key with another body got id %s again: a key reused after its record expired would be taken for a duplicate", other[0])
	}
	for _, id := range first[:2] {
		if _, err := outbox.BucketFor(outbox.Message{ID: id, Topic: "t"}, 4); err != nil {
			t.Fatalf("derived id %s: %v", id, err)
		}
	}
}

// A Pipe whose input template makes each element a request retries the
// whole batch when an element fails: the elements after a retryable
// failure are not tried, so the retry commits them after it. Before, a
// later message of the same order (here b2, after b) committed on the first
// delivery, ahead of b, which committed only on the retry.
func TestEnqueueRequestElementsKeepOrder(t *testing.T) {
	h, w := newFakeEnqueue(t, map[string]error{"b": &dynamo.TransactionError{Err: outbox.ErrThrottled}})
	req := func(key, msgKey string) string {
		return fmt.Sprintf(`{"idempotencyKey": %q, "messages": [{"topic": "t", "key": %q}]}`, key, msgKey)
	}
	batch := json.RawMessage(`[` + req("k1", "a") + `,` + req("k2", "b") + `,` + req("k3", "b2") + `]`)
	_, err := h.Handle(context.Background(), batch)
	var ie messages.InvokeResponse_Error
	if !errors.As(err, &ie) || ie.Type != ErrorThrottled {
		t.Fatalf("first delivery answered %v; want the throttled element's error", err)
	}
	if fmt.Sprint(w.commits) != "[a]" {
		t.Fatalf("first delivery committed %v; want only [a]: the elements after the throttled one wait for the retry", w.commits)
	}
	delete(w.fail, "b")
	if _, err := h.Handle(context.Background(), batch); err != nil {
		t.Fatalf("the Pipe's retry: %v", err)
	}
	if fmt.Sprint(w.commits) != "[a b b2]" {
		t.Fatalf("committed %v over the delivery and its retry; want [a b b2], in order", w.commits)
	}
}
