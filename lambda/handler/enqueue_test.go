package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda/messages"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

// Bad input is refused before any write, naming the field.
func TestDecodeRequestRefusals(t *testing.T) {
	cases := []struct {
		name, req, field, says string
	}{
		{"not JSON", `{"messages": [`, "request", "unexpected EOF"},
		{"unknown field", `{"idempotencyKey": "k", "mesages": []}`, "request", `unknown field "mesages"`},
		{"no key", `{"messages": [{"topic": "t"}]}`, "idempotencyKey", "required"},
		{"key too long", `{"idempotencyKey": "` + strings.Repeat("k", 1025) + `", "messages": [{"topic": "t"}]}`, "idempotencyKey", "at most 1024"},
		{"nothing", `{"idempotencyKey": "k"}`, "messages", "nothing to write"},
		{"100 items", `{"idempotencyKey": "k", "messages": [` + strings.TrimSuffix(strings.Repeat(`{"topic": "t"},`, 100), ",") + `]}`, "messages", "at most 99"},
		{"missing topic", `{"idempotencyKey": "k", "messages": [{"key": "x"}]}`, "messages[0].topic", "required"},
		{"key twice", `{"idempotencyKey": "k", "messages": [{"topic": "t", "key": "a", "keyBase64": "YQ=="}]}`, "messages[0].key", "not both"},
		{"bad base64", `{"idempotencyKey": "k", "messages": [{"topic": "t", "valueBase64": "!!"}]}`, "messages[0].valueBase64", "base64"},
		{"value twice", `{"idempotencyKey": "k", "messages": [{"topic": "t", "value": 1, "valueBase64": "YQ=="}]}`, "messages[0].value", "not both"},
		{"wrong type", `{"idempotencyKey": "k", "messages": [{"topic": 5}]}`, "request.messages.topic", "want string"},
		{"two operations", `{"idempotencyKey": "k", "transactItems": [{"Put": {}, "Delete": {}}]}`, "transactItems[0]", "exactly one"},
		{"unknown operation", `{"idempotencyKey": "k", "transactItems": [{"Get": {}}]}`, "transactItems[0]", `unknown operation "Get"`},
		{"no table", `{"idempotencyKey": "k", "transactItems": [{"Put": {"Item": {"id": {"S": "1"}}}}]}`, "transactItems[0].Put.TableName", "required"},
		{"put with key", `{"idempotencyKey": "k", "transactItems": [{"Put": {"TableName": "t", "Key": {"id": {"S": "1"}}}}]}`, "transactItems[0].Put.Key", "Item, not Key"},
		{"update without expression", `{"idempotencyKey": "k", "transactItems": [{"Update": {"TableName": "t", "Key": {"id": {"S": "1"}}}}]}`, "transactItems[0].Update.UpdateExpression", "required"},
		{"check without condition", `{"idempotencyKey": "k", "transactItems": [{"ConditionCheck": {"TableName": "t", "Key": {"id": {"S": "1"}}}}]}`, "transactItems[0].ConditionCheck.ConditionExpression", "required"},
		{"unknown op field", `{"idempotencyKey": "k", "transactItems": [{"Delete": {"TableName": "t", "Key": {"id": {"S": "1"}}, "ReturnValues": "ALL_OLD"}}]}`, "transactItems[0].Delete", `unknown field "ReturnValues"`},
		{"number as JSON number", `{"idempotencyKey": "k", "transactItems": [{"Put": {"TableName": "t", "Item": {"n": {"N": 5}}}}]}`, `transactItems[0].Put.Item["n"].N`, "want a JSON string"},
		{"not a number", `{"idempotencyKey": "k", "transactItems": [{"Put": {"TableName": "t", "Item": {"n": {"N": "five"}}}}]}`, `transactItems[0].Put.Item["n"].N`, "not a number"},
		{"two types", `{"idempotencyKey": "k", "transactItems": [{"Put": {"TableName": "t", "Item": {"n": {"N": "5", "S": "5"}}}}]}`, `transactItems[0].Put.Item["n"]`, "exactly one of"},
		{"unknown type", `{"idempotencyKey": "k", "transactItems": [{"Put": {"TableName": "t", "Item": {"n": {"X": "5"}}}}]}`, `transactItems[0].Put.Item["n"]`, `unknown attribute type "X"`},
		{"empty set", `{"idempotencyKey": "k", "transactItems": [{"Put": {"TableName": "t", "Item": {"n": {"SS": []}}}}]}`, `transactItems[0].Put.Item["n"].SS`, "empty set"},
		{"nested", `{"idempotencyKey": "k", "transactItems": [{"Put": {"TableName": "t", "Item": {"m": {"M": {"l": {"L": [{"NULL": false}]}}}}}}]}`, `transactItems[0].Put.Item["m"].M["l"].L[0].NULL`, "want true"},
		{"bad return values", `{"idempotencyKey": "k", "transactItems": [{"Delete": {"TableName": "t", "Key": {"id": {"S": "1"}}, "ReturnValuesOnConditionCheckFailure": "ALL_NEW"}}]}`, "transactItems[0].Delete.ReturnValuesOnConditionCheckFailure", "NONE or ALL_OLD"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeRequest([]byte(tc.req), "")
			var re *RequestError
			if !errors.As(err, &re) || re.Field != tc.field || !strings.Contains(re.Reason, tc.says) {
				t.Fatalf("got %v; want field %s saying %q", err, tc.field, tc.says)
			}
		})
	}
}

// Every attribute type decodes to the SDK's, and back to the same JSON.
func TestDecodeAttributeValues(t *testing.T) {
	raw := `{"s": {"S": "x"}, "n": {"N": "-1.5e3"}, "b": {"B": "AAE="}, "ss": {"SS": ["a", "b"]}, "ns": {"NS": ["1", "2"]},
		"bs": {"BS": ["AA=="]}, "m": {"M": {"x": {"BOOL": true}}}, "l": {"L": [{"NULL": true}, {"S": ""}]}}`
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	item, err := decodeItem("Item", m)
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := item["b"].(*types.AttributeValueMemberB); !ok || string(b.Value) != "\x00\x01" {
		t.Fatalf("B decoded to %#v", item["b"])
	}
	back, err := json.Marshal(EncodeItem(item))
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	json.Unmarshal([]byte(raw), &want)
	json.Unmarshal(back, &got)
	if fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("round trip:\n got %s\nwant %s", back, raw)
	}
}

// The body hash ignores the key and the JSON's member order, and nothing
// else.
func TestBodyHash(t *testing.T) {
	a, _ := bodyHash([]byte(`{"idempotencyKey": "a", "messages": [{"topic": "t", "key": "k"}]}`))
	b, _ := bodyHash([]byte(`{"messages": [{"key": "k", "topic": "t"}], "idempotencyKey": "b"}`))
	c, _ := bodyHash([]byte(`{"messages": [{"key": "k2", "topic": "t"}], "idempotencyKey": "a"}`))
	if a != b || a == c {
		t.Fatalf("hashes %s %s %s: want the first two equal and the third different", a, b, c)
	}
}

// fakeWriter commits what it is given, numbering per bucket, or fails the
// requests whose first message key is in fail. Like DynamoDB it cancels a
// transaction whose idempotency record (the last item) exists.
type fakeWriter struct {
	seq     map[int]int64
	calls   []string // first message key of each call
	commits []string // first message key of each call that committed
	ids     []string // the message ids committed, in order
	fail    map[string]error
	records map[string]map[string]types.AttributeValue // by pk
}

func (f *fakeWriter) WriteWithToken(_ context.Context, token string, items []types.TransactWriteItem, msgs ...outbox.Message) (dynamo.Result, error) {
	key := ""
	if len(msgs) > 0 {
		key = string(msgs[0].Key)
	}
	f.calls = append(f.calls, key)
	if err := f.fail[key]; err != nil {
		return dynamo.Result{}, err
	}
	record := items[len(items)-1].Put.Item
	pk := record["pk"].(*types.AttributeValueMemberS).Value
	if old, ok := f.records[pk]; ok {
		reasons := make([]types.CancellationReason, len(items))
		for i := range reasons {
			reasons[i].Code = aws.String("None")
		}
		reasons[len(items)-1] = types.CancellationReason{Code: aws.String("ConditionalCheckFailed"), Item: old}
		return dynamo.Result{}, &dynamo.TransactionError{Err: outbox.ErrConditionFailed, Reasons: reasons, CallerItems: len(items)}
	}
	if f.records == nil {
		f.records = map[string]map[string]types.AttributeValue{}
	}
	f.records[pk] = record
	f.commits = append(f.commits, key)
	for _, m := range msgs {
		f.ids = append(f.ids, m.ID)
	}
	out := make([]outbox.Message, len(msgs))
	for i, m := range msgs {
		m.Bucket, _ = outbox.BucketFor(m, 4)
		f.seq[m.Bucket]++
		m.Sequence = f.seq[m.Bucket]
		out[i] = m
	}
	return dynamo.Result{Messages: out}, nil
}

func (f *fakeWriter) BucketCount() int { return 4 }

type noRecords struct{}

func (noRecords) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return &dynamodb.GetItemOutput{}, nil
}

func newFakeEnqueue(t *testing.T, fail map[string]error) (*Enqueue, *fakeWriter) {
	t.Helper()
	w := &fakeWriter{seq: map[int]int64{}, fail: fail}
	h, err := NewEnqueue(w, noRecords{}, dynamo.Tables{Messages: "messages", Control: "control"}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return h, w
}

func fixture(t *testing.T, name string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "enqueue", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Each invoker's event, as AWS sends it (testdata/enqueue), reaches the
// writer record by record, with the record's id as the default key.
func TestEnqueueEventShapes(t *testing.T) {
	cases := []struct {
		fixture string
		keys    []string // the idempotency keys the records committed under
	}{
		{"sqs.json", []string{"sqs:059f36b4-87a3-44ab-83d2-661975830a7d", "order-2-paid"}},
		{"kinesis.json", []string{"kinesis:shardId-000000000006:49590338271490256608559692538361571095921575989136588898"}},
		{"pipes.json", []string{"sqs:059f36b4-87a3-44ab-83d2-661975830a7d", "kinesis:shardId-000000000006:49590338271490256608559692538361571095921575989136588899",
			"2e1424d4-f796-459a-8184-9c92662be6da"}},
	}
	for _, tc := range cases {
		t.Run(tc.fixture, func(t *testing.T) {
			h, w := newFakeEnqueue(t, nil)
			out, err := h.Handle(context.Background(), fixture(t, tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			resp, ok := out.(events.SQSEventResponse)
			if !ok || len(resp.BatchItemFailures) != 0 || len(w.calls) != len(tc.keys) {
				t.Fatalf("answered %#v after %d writes; want no failures after %d", out, len(w.calls), len(tc.keys))
			}
			for i, raw := range batchRecords(t, fixture(t, tc.fixture)) {
				rec := parseRecord(raw)
				req, err := decodeRequest(rec.body, rec.key)
				if err != nil || req.key != tc.keys[i] {
					t.Errorf("record %d: key %q, %v; want %q", i, req.key, err, tc.keys[i])
				}
			}
		})
	}
	t.Run("eventbridge.json", func(t *testing.T) {
		h, _ := newFakeEnqueue(t, nil)
		out, err := h.Handle(context.Background(), fixture(t, "eventbridge.json"))
		if err != nil {
			t.Fatal(err)
		}
		if r := out.(*EnqueueResponse); r.IdempotencyKey != "events:6a7e8feb-b491-4cf7-a9f1-bf3703467718" || len(r.Messages) != 1 || r.Messages[0].Sequence != 1 {
			t.Fatalf("answered %+v", r)
		}
	})
}

func batchRecords(t *testing.T, raw json.RawMessage) []json.RawMessage {
	t.Helper()
	var env struct{ Records []json.RawMessage }
	if err := json.Unmarshal(raw, &env); err == nil && env.Records != nil {
		return env.Records
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	return list
}

func sqsBatch(fifo bool, keys ...string) json.RawMessage {
	var recs []string
	for i, k := range keys {
		attrs := `{}`
		if fifo {
			attrs = `{"MessageGroupId": "g"}`
		}
		body, _ := json.Marshal(fmt.Sprintf(`{"messages": [{"topic": "t", "key": %q}]}`, k))
		recs = append(recs, fmt.Sprintf(`{"messageId": "m%d", "body": %s, "attributes": %s, "eventSource": "aws:sqs"}`, i, body, attrs))
	}
	return json.RawMessage(`{"Records": [` + strings.Join(recs, ",") + `]}`)
}

// A caller's item may not write the outbox's own tables, by name or ARN.
func TestEnqueueRefusesTheOutboxTables(t *testing.T) {
	h, w := newFakeEnqueue(t, nil)
	for _, table := range []string{"messages", "control", "arn:aws:dynamodb:us-east-1:123456789012:table/control"} {
		req := fmt.Sprintf(`{"idempotencyKey": "k", "transactItems": [{"Put": {"TableName": %q, "Item": {"pk": {"S": "config"}, "sk": {"S": "config"}}}}]}`, table)
		_, err := h.Handle(context.Background(), json.RawMessage(req))
		var ie messages.InvokeResponse_Error
		if !errors.As(err, &ie) || ie.Type != ErrorValidation || !strings.Contains(ie.Message, `"field":"transactItems[0].Put.TableName"`) {
			t.Errorf("%s: %v; want Outbox.Validation naming the table", table, err)
		}
	}
	if len(w.calls) != 0 {
		t.Fatalf("%d writes", len(w.calls))
	}
}

// A standard queue's batch reports only its failed records; a FIFO queue's
// (and a Kinesis shard's) stops at the first failure and reports the rest
// untried, so the source redelivers them in order.
func TestEnqueueBatchFailures(t *testing.T) {
	fail := map[string]error{"b": &dynamo.TransactionError{Err: outbox.ErrThrottled}}
	for _, fifo := range []bool{false, true} {
		h, w := newFakeEnqueue(t, fail)
		out, err := h.Handle(context.Background(), sqsBatch(fifo, "a", "b", "c"))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, f := range out.(events.SQSEventResponse).BatchItemFailures {
			ids = append(ids, f.ItemIdentifier)
		}
		want, calls := "[m1]", "[a b c]"
		if fifo {
			want, calls = "[m1 m2]", "[a b]"
		}
		if fmt.Sprint(ids) != want || fmt.Sprint(w.calls) != calls {
			t.Errorf("fifo=%v: failures %v after writes %v; want %s after %s", fifo, ids, w.calls, want, calls)
		}
	}
}

// Each Writer failure is the Lambda error type a state machine matches.
func TestEnqueueErrorTypes(t *testing.T) {
	cond := &dynamo.TransactionError{Err: outbox.ErrConditionFailed, CallerItems: 2, Reasons: []types.CancellationReason{
		{Code: aws.String("ConditionalCheckFailed"), Message: aws.String("The conditional request failed"),
			Item: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "o-1"}}},
		{Code: aws.String("None")}}}
	cases := []struct {
		err  error
		typ  string
		want string // in the error document
	}{
		{cond, ErrorConditionFailed, `"reasons":[{"index":0,"code":"ConditionalCheckFailed","message":"The conditional request failed","item":{"id":{"S":"o-1"}}}]`},
		{&dynamo.TransactionError{Err: outbox.ErrThrottled}, ErrorThrottled, `"errorType":"Outbox.Throttled"`},
		{&dynamo.TransactionError{Err: outbox.ErrOutcomeUnknown}, ErrorOutcomeUnknown, `"errorType":"Outbox.OutcomeUnknown"`},
		{&dynamo.TransactionError{Err: outbox.ErrConflict}, ErrorRetryable, `"errorType":"Outbox.Retryable"`},
		{&dynamo.TransactionError{Err: outbox.ErrSequenceFenced}, ErrorRetryable, `"errorType":"Outbox.Retryable"`},
		{&dynamo.TransactionError{Cause: &types.ResourceNotFoundException{Message: aws.String("no table")}}, ErrorRejected, `"errorType":"Outbox.Rejected"`},
		{&outbox.ValidationError{Index: 0, Field: "Value", Reason: "too big"}, ErrorValidation, `"field":"messages[0].value"`},
	}
	for _, tc := range cases {
		t.Run(tc.typ, func(t *testing.T) {
			h, _ := newFakeEnqueue(t, map[string]error{"k": tc.err})
			req := `{"idempotencyKey": "x", "transactItems": [{"ConditionCheck": {"TableName": "orders", "Key": {"id": {"S": "o-1"}}, "ConditionExpression": "attribute_exists(id)"}}],
				"messages": [{"topic": "t", "key": "k"}]}`
			_, err := h.Handle(context.Background(), json.RawMessage(req))
			var ie messages.InvokeResponse_Error
			if !errors.As(err, &ie) || ie.Type != tc.typ || !strings.Contains(ie.Message, tc.want) {
				t.Fatalf("got %#v; want type %s with %s", err, tc.typ, tc.want)
			}
		})
	}
}

// FuzzDecodeRequest: no input panics the decoder, and what it accepts it
// can turn back into the DynamoDB JSON it came from.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"idempotencyKey": "k", "transactItems": [{"Put": {"TableName": "t", "Item": {"id": {"S": "1"}, "m": {"M": {"l": {"L": [{"N": "1"}]}}}}}}], "messages": [{"topic": "t", "key": "k", "value": {"a": 1}}]}`))
	f.Add([]byte(`{"idempotencyKey": "k", "messages": [{"topic": "t", "keyBase64": "AA==", "valueBase64": "AA==", "headers": [{"key": "h", "value": "v"}], "partition": 3}]}`))
	f.Add([]byte(`[{"messageId": "m", "body": "{}"}]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := decodeRequest(raw, "default")
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) || re.Field == "" {
				t.Fatalf("error %v is not a RequestError naming a field", err)
			}
			return
		}
		for _, it := range req.items {
			for _, item := range []map[string]types.AttributeValue{itemOf(it)} {
				if _, err := json.Marshal(EncodeItem(item)); err != nil {
					t.Fatal(err)
				}
			}
		}
		parseRecord(raw)
	})
}

func itemOf(it types.TransactWriteItem) map[string]types.AttributeValue {
	switch {
	case it.Put != nil:
		return it.Put.Item
	case it.Update != nil:
		return it.Update.Key
	case it.Delete != nil:
		return it.Delete.Key
	case it.ConditionCheck != nil:
		return it.ConditionCheck.Key
	}
	return nil
}
