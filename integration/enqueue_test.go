package integration_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"gopkg.in/yaml.v3"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/checker"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/local/esm"
	"github.com/dynakafka/outbox/store/dynamo"
)

// faultProxy stands between the enqueue bootstrap and DynamoDB. In its
// normal mode it forwards everything; "throttle" answers every
// TransactWriteItems with a ThrottlingException (nothing reaches DynamoDB);
// "lose" forwards every TransactWriteItems and answers an
// InternalServerError instead of DynamoDB's response (the transaction may
// well have committed).
type faultProxy struct {
	URL  string
	mode atomic.Value // string
	hits atomic.Int64 // TransactWriteItems calls faulted
}

func newFaultProxy(t *testing.T, endpoint string) *faultProxy {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{}
	p.mode.Store("")
	fwd := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mode := p.mode.Load().(string)
		if mode == "" || r.Header.Get("X-Amz-Target") != "DynamoDB_20120810.TransactWriteItems" {
			fwd.ServeHTTP(w, r)
			return
		}
		p.hits.Add(1)
		code, status := "ThrottlingException", http.StatusBadRequest
		if mode == "lose" {
			fwd.ServeHTTP(httptest.NewRecorder(), r) // DynamoDB runs it; its answer is dropped
			code, status = "InternalServerError", http.StatusInternalServerError
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":"injected by the test"}`, code)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// enqueueAnswer is what the function answered: a response, a batch
// response, or a Lambda error document.
type enqueueAnswer struct {
	ErrorType    string `json:"errorType"`
	ErrorMessage string `json:"errorMessage"`
	// Response.
	IdempotencyKey string `json:"idempotencyKey"`
	Duplicate      bool   `json:"duplicate"`
	Messages       []struct {
		ID       string `json:"id"`
		Topic    string `json:"topic"`
		Bucket   int    `json:"bucket"`
		Sequence int64  `json:"sequence"`
	} `json:"messages"`
	// Batch response.
	BatchItemFailures []struct {
		ItemIdentifier string `json:"itemIdentifier"`
	} `json:"batchItemFailures"`
	raw string
}

// errorDoc is the errorMessage of an Outbox.* error.
type errorDoc struct {
	ErrorType string `json:"errorType"`
	Message   string `json:"message"`
	Field     string `json:"field"`
	Reasons   []struct {
		Index int            `json:"index"`
		Code  string         `json:"code"`
		Item  map[string]any `json:"item"`
	} `json:"reasons"`
}

func (a enqueueAnswer) doc(t *testing.T) errorDoc {
	t.Helper()
	var d errorDoc
	if err := json.Unmarshal([]byte(a.ErrorMessage), &d); err != nil {
		t.Fatalf("errorMessage is not the error document: %v\n%s", err, a.raw)
	}
	if d.ErrorType != a.ErrorType || d.Message == "" {
		t.Fatalf("error document %+v does not match errorType %s", d, a.ErrorType)
	}
	return d
}

// invoke sends payload to the function and returns its answer, recorded for
// the schema check.
func (r *enqueueRun) invoke(ctx context.Context, t *testing.T, payload any) enqueueAnswer {
	t.Helper()
	body, err := invokeRaw(ctx, r.proc, payload)
	if err != nil {
		t.Fatal(err)
	}
	r.answers = append(r.answers, json.RawMessage(body))
	a := enqueueAnswer{raw: string(body)}
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	return a
}

// enqueueRun is the state of TestEnqueueBootstrapUnderRIE: the outbox, the
// function, and what must reach Kafka.
type enqueueRun struct {
	e        *env
	proc     *esm.RIEProcess
	proxy    *faultProxy
	chk      *checker.Checker
	orders   map[string]int64 // key -> messages committed so far (the business order)
	planned  map[string]int64 // key -> messages put in requests so far
	ids      map[string]int64 // every committed message id -> its key's business order
	invokers map[string]bool  // invoker shapes that committed
	// For the schema check: requests sent that the request schema must
	// accept, bad requests it must refuse, and every answer.
	valid, invalid []any
	answers        []json.RawMessage
}

// request is an enqueue request that puts order id (if new) and enqueues
// n messages keyed by it; the messages carry their business order.
func (r *enqueueRun) request(key, order string, n int) map[string]any {
	var msgs []any
	for range n {
		r.planned[order]++
		msgs = append(msgs, map[string]any{"topic": r.e.topic, "key": order,
			"value": map[string]any{"order": order, "n": r.planned[order]}})
	}
	req := map[string]any{
		"transactItems": []any{map[string]any{"Update": map[string]any{
			"TableName":                 r.e.business,
			"Key":                       map[string]any{"id": map[string]any{"S": order}},
			"UpdateExpression":          "ADD #n :n",
			"ExpressionAttributeNames":  map[string]any{"#n": "n"},
			"ExpressionAttributeValues": map[string]any{":n": map[string]any{"N": fmt.Sprint(n)}},
		}}},
		"messages": msgs,
	}
	if key != "" {
		req["idempotencyKey"] = key
	}
	r.valid = append(r.valid, req)
	return req
}

// commit records message id of key as committed, next in its key's order.
func (r *enqueueRun) commit(t *testing.T, id, key string) {
	t.Helper()
	if _, dup := r.ids[id]; dup || id == "" {
		t.Fatalf("message id %q committed twice", id)
	}
	r.orders[key]++
	r.ids[id] = r.orders[key]
	r.chk.Committed(id, key, r.orders[key])
}

// committed records a successful answer's messages (not a duplicate's: they
// were recorded when they committed).
func (r *enqueueRun) committed(t *testing.T, invoker string, a enqueueAnswer, orders ...string) {
	t.Helper()
	if a.ErrorType != "" || a.Duplicate {
		t.Fatalf("%s: want a new commit, got %s", invoker, a.raw)
	}
	if len(a.Messages) != len(orders) {
		t.Fatalf("%s: %d messages answered, want %d: %s", invoker, len(a.Messages), len(orders), a.raw)
	}
	for i, m := range a.Messages {
		if m.Sequence == 0 {
			t.Fatalf("%s: message %d answered %+v", invoker, i, m)
		}
		r.commit(t, m.ID, orders[i])
	}
	r.invokers[invoker] = true
}

// unchanged fails unless the messages table and the business table hold
// what they held before f.
func (r *enqueueRun) unchanged(ctx context.Context, t *testing.T, what string, f func()) {
	t.Helper()
	msgs, biz := r.e.pendingMessages(ctx, t), r.businessSum(ctx, t)
	f()
	if m, b := r.e.pendingMessages(ctx, t), r.businessSum(ctx, t); m != msgs || b != biz {
		t.Fatalf("%s wrote something: messages %d -> %d, business counters %d -> %d", what, msgs, m, biz, b)
	}
}

// businessSum is the sum of the business table's counters, and its item
// count, as one number that any write changes.
func (r *enqueueRun) businessSum(ctx context.Context, t *testing.T) int64 {
	t.Helper()
	out, err := r.e.dynamo.Client.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(r.e.business), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, it := range out.Items {
		sum += 1000
		if n, ok := it["n"].(*types.AttributeValueMemberN); ok {
			var v int64
			fmt.Sscan(n.Value, &v)
			sum += v
		}
	}
	return sum
}

// The real enqueue bootstrap under the Lambda RIE, on DynamoDB Local (through
// a proxy that injects faults) and kfake: every invoker's event shape
// commits, a replay commits nothing, every typed error comes back as its
// errorType with nothing written, and what committed reaches Kafka once, in
// order.
func TestEnqueueBootstrapUnderRIE(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the bootstrap and the emulator")
	}
	t.Parallel()
	e := newEnv(t, 4)
	if e.dynamo.Endpoint == "" {
		t.Skip("needs a DynamoDB endpoint the bootstrap can reach")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The outbox lists its topics (the config item's tp) before the
	// function starts: a message for another topic is refused (typedErrors).
	if _, err := dynamo.Configure(ctx, e.dynamo.Client, e.tables, outbox.Config{BucketCount: 4, Topics: []string{e.topic, "other-" + e.topic}}); err != nil {
		t.Fatal(err)
	}
	proxy := newFaultProxy(t, e.dynamo.Endpoint)
	logs := &lockedBuffer{}
	proc := bootstrapUnderRIE(ctx, t, e, "enqueue", map[string]string{"OUTBOX_DYNAMODB_ENDPOINT": proxy.URL}, logs)
	defer func() {
		if t.Failed() {
			t.Logf("function output:\n%s", logs.String())
		}
	}()
	r := &enqueueRun{e: e, proc: proc, proxy: proxy, chk: checker.New(), orders: map[string]int64{}, planned: map[string]int64{}, ids: map[string]int64{}, invokers: map[string]bool{}}
	replays := 0

	// Direct invocation, then the same request again.
	direct := r.request("direct-1", "o-direct", 2)
	a := r.invoke(ctx, t, direct)
	r.committed(t, "direct", a, "o-direct", "o-direct")
	r.unchanged(ctx, t, "a replay", func() {
		again := r.invoke(ctx, t, direct)
		if !again.Duplicate || again.ErrorType != "" || len(again.Messages) != 2 || again.Messages[0].ID != a.Messages[0].ID || again.Messages[1].ID != a.Messages[1].ID {
			t.Fatalf("replay answered %s; want a duplicate with the first ids %s", again.raw, a.raw)
		}
		replays++
	})

	// Step Functions: the request docs/deploy.md's state machine sends.
	t.Run("step functions", func(t *testing.T) { r.stepFunctions(ctx, t) })

	// SQS batch: each body its own transaction, the bad one reported.
	sqs := map[string]any{"Records": []any{
		sqsRecord("m-1", r.request("", "o-sqs", 1), nil),
		sqsRecord("m-2", map[string]any{"messages": []any{map[string]any{"key": "x"}}}, nil), // no topic
		sqsRecord("m-3", r.request("", "o-sqs2", 1), nil),
	}}
	a = r.invoke(ctx, t, sqs)
	if len(a.BatchItemFailures) != 1 || a.BatchItemFailures[0].ItemIdentifier != "m-2" {
		t.Fatalf("SQS batch answered %s; want m-2 reported", a.raw)
	}
	r.recordBatch(t, "sqs", []string{"o-sqs", "o-sqs2"})
	r.unchanged(ctx, t, "a redelivered SQS batch", func() {
		if a := r.invoke(ctx, t, sqs); len(a.BatchItemFailures) != 1 {
			t.Fatalf("redelivery answered %s", a.raw)
		}
		replays += 2
	})

	// An SQS FIFO batch whose first record is unusable: it is reported
	// alone and the record after it commits, once; a redelivery of the
	// unusable one writes nothing. (A retryable failure holds the rest
	// back, reported untried: lambda/handler's
	// TestEnqueueRetryableFailureHoldsBackTheRest.)
	fifo := map[string]any{"Records": []any{
		sqsRecord("f-1", map[string]any{"messages": []any{map[string]any{"key": "x"}}}, map[string]string{"MessageGroupId": "g"}),
		sqsRecord("f-2", r.request("", "o-fifo", 1), map[string]string{"MessageGroupId": "g"}),
	}}
	if a := r.invoke(ctx, t, fifo); len(a.BatchItemFailures) != 1 || a.BatchItemFailures[0].ItemIdentifier != "f-1" {
		t.Fatalf("FIFO batch answered %s; want f-1 alone reported", a.raw)
	}
	r.recordBatch(t, "sqs", []string{"o-fifo"})
	r.unchanged(ctx, t, "a redelivered unusable FIFO record", func() {
		if a := r.invoke(ctx, t, map[string]any{"Records": fifo["Records"].([]any)[:1]}); len(a.BatchItemFailures) != 1 {
			t.Fatalf("redelivery answered %s", a.raw)
		}
	})

	// EventBridge: the event itself (detail is the request, the event id
	// its key), and a rule's input transformer output (a request).
	event := map[string]any{"version": "0", "id": "ev-1", "detail-type": "OrderPaid", "source": "shop",
		"account": "123456789012", "time": "2026-12-01T00:00:00Z", "region": "us-east-1", "resources": []any{},
		"detail": r.request("", "o-events", 1)}
	a = r.invoke(ctx, t, event)
	r.committed(t, "eventbridge", a, "o-events")
	if a.IdempotencyKey != "events:ev-1" {
		t.Fatalf("EventBridge event's key %q; want the event id", a.IdempotencyKey)
	}
	r.unchanged(ctx, t, "a retried EventBridge event", func() {
		if a := r.invoke(ctx, t, event); !a.Duplicate {
			t.Fatalf("retried event answered %s", a.raw)
		}
		replays++
	})
	transformed := r.request("ev-2", "o-events", 1) // {"idempotencyKey": "<id>", ...}
	r.committed(t, "eventbridge", r.invoke(ctx, t, transformed), "o-events")
	// The recipe's rule target: its input transformer, applied to an event.
	shipped := renderTransformer(t, recipeScalar(t, "OrderShippedRule", "Properties", "Targets", "0", "InputTransformer", "InputTemplate"),
		map[string]any{"id": "ev-3", "orderId": "o-shipped"}, r.e.topic)
	r.valid = append(r.valid, shipped)
	r.committed(t, "eventbridge", r.invoke(ctx, t, shipped), "o-shipped")

	// EventBridge Pipes: a batch (an array) of SQS records, of Kinesis
	// records as Pipes sends them (flat), and of requests made by an input
	// template.
	p1 := sqsRecord("p-1", r.request("", "o-pipes", 1), nil)
	kin, _ := json.Marshal(r.request("", "o-pipes", 1))
	pipes := []any{
		p1,
		map[string]any{"eventSource": "aws:kinesis", "eventID": "shardId-000:49", "sequenceNumber": "49", "partitionKey": "o-pipes",
			"data": base64.StdEncoding.EncodeToString(kin)},
		r.request("p-3", "o-pipes", 1),
	}
	a = r.invoke(ctx, t, pipes)
	if len(a.BatchItemFailures) != 0 || a.BatchItemFailures == nil {
		t.Fatalf("Pipes batch answered %s", a.raw)
	}
	r.recordBatch(t, "pipes", []string{"o-pipes", "o-pipes", "o-pipes"})
	// The recipe's Pipe: its input template applied to each SQS record.
	tmpl := recipeScalar(t, "OrderEventsPipe", "Properties", "TargetParameters", "InputTemplate")
	var piped []any
	for i := range 3 {
		body := map[string]any{"orderId": "o-piped", "n": i + 1}
		req := renderTransformer(t, tmpl, map[string]any{"$.messageId": fmt.Sprintf("pipe-%d", i), "$.body.orderId": "o-piped", "$.body": body}, r.e.topic)
		r.valid = append(r.valid, req)
		piped = append(piped, req)
	}
	if a := r.invoke(ctx, t, piped); len(a.BatchItemFailures) != 0 {
		t.Fatalf("the recipe's Pipe batch answered %s", a.raw)
	}
	r.recordBatch(t, "pipes", []string{"o-piped", "o-piped", "o-piped"})

	// A Kinesis batch through Lambda's own event source mapping.
	kin2, _ := json.Marshal(r.request("", "o-kinesis", 1))
	kinesis := map[string]any{"Records": []any{map[string]any{"eventSource": "aws:kinesis", "eventID": "shardId-000:50",
		"kinesis": map[string]any{"data": base64.StdEncoding.EncodeToString(kin2), "sequenceNumber": "50", "partitionKey": "o-kinesis"}}}}
	if a := r.invoke(ctx, t, kinesis); len(a.BatchItemFailures) != 0 {
		t.Fatalf("Kinesis batch answered %s", a.raw)
	}
	r.recordBatch(t, "kinesis", []string{"o-kinesis"})

	t.Run("typed errors", func(t *testing.T) { r.typedErrors(ctx, t) })

	// The Python reference writer (clients/python) writes beside the
	// function into the same outbox: its messages join the checker's
	// expectations (one key shared with the function, so that key's order
	// mixes both), and their buckets, as answered and as stored, must be
	// the Go bucket function's.
	pyMessages, placementMismatches := 0, 0
	var pyTxs []testenv.PythonTx
	pyKeysOf := []string{"o-direct", "o-py-1", "o-py-2", "o-py-1", "o-py-pinned"}
	for i, k := range pyKeysOf {
		m := map[string]any{"topic": e.topic, "key": k, "value": fmt.Sprintf("py-%d", i)}
		if k == "o-py-pinned" {
			m["partition"] = 2
		}
		pyTxs = append(pyTxs, testenv.PythonTx{Messages: []any{m}})
	}
	pyRes, code := testenv.RunPythonWriter(ctx, t, e.dynamo, e.tables.Messages, e.tables.Control, pyTxs)
	if code != 0 || len(pyRes) != len(pyTxs) {
		t.Fatalf("python writer beside the function: exit %d, %+v", code, pyRes)
	}
	bucketCount := 4
	for i, res := range pyRes {
		if !res.OK || len(res.Messages) != 1 {
			t.Fatalf("python writer, transaction %d: %+v", i, res)
		}
		pm := res.Messages[0]
		r.commit(t, pm.ID, pyKeysOf[i])
		pyMessages++
		gm := outbox.Message{ID: pm.ID, Key: []byte(pyKeysOf[i])}
		if pyKeysOf[i] == "o-py-pinned" {
			gm.Partition = outbox.PartitionOf(2)
		}
		want, err := outbox.BucketFor(gm, bucketCount)
		if err != nil {
			t.Fatal(err)
		}
		storedBucket := -1 // where the messages table holds it: every bucket searched
		for b := range bucketCount {
			entries, _, err := e.store.Pending(ctx, b, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, en := range entries {
				if en.Message.ID == pm.ID {
					storedBucket = en.Message.Bucket
				}
			}
		}
		if pm.Bucket != want || storedBucket != want {
			placementMismatches++
			t.Errorf("python message %s (key %s): answered bucket %d, stored in %d; the Go bucket function gives %d", pm.ID, pyKeysOf[i], pm.Bucket, storedBucket, want)
		}
	}

	// Everything committed reaches Kafka once, in order.
	stored := e.pendingMessages(ctx, t)
	cctx, stop := context.WithCancel(ctx)
	consumed := e.consume(cctx, t, func(id string, key, _ []byte) {
		r.chk.Delivered(id, id, string(key), r.ids[id]) // (read after the writes: no race)
	})
	relay := e.relay(t)
	buckets := make([]int, relay.BucketCount())
	for b := range buckets {
		buckets[b] = b
	}
	if errs := relay.DrainBuckets(ctx, buckets); len(errs) != 0 {
		t.Fatalf("drain: %v", errs)
	}
	waitDelivered(t, r.chk, 2*time.Minute)
	time.Sleep(300 * time.Millisecond)
	stop()
	<-consumed
	res := r.chk.Result()
	// The five invokers of the issue; Kinesis (tried above) is a sixth shape.
	invokers := 0
	for _, inv := range []string{"direct", "stepfunctions", "sqs", "eventbridge", "pipes"} {
		if r.invokers[inv] {
			invokers++
		}
	}
	summary := fmt.Sprintf("enqueue: invokers=%d committed=%d duplicates_committed=%d lost=%d order_violations=%d python_writer=%d placement_mismatches=%d",
		invokers, res.Committed, stored-res.Committed, res.Lost, res.OrderViolations, pyMessages, placementMismatches)
	t.Logf("%s (replays answered as duplicates: %d)", summary, replays)
	fmt.Println(summary)
	r.checkSchemas(t)
	if !res.OK() || res.Duplicates != 0 || stored != res.Committed || invokers != 5 || !r.invokers["kinesis"] || pyMessages != len(pyTxs) || placementMismatches != 0 {
		t.Fatalf("result %+v; %d messages stored for %d committed; invokers %v", res, stored, res.Committed, r.invokers)
	}
}

func sqsRecord(id string, body any, attrs map[string]string) map[string]any {
	b, _ := json.Marshal(body)
	if attrs == nil {
		attrs = map[string]string{}
	}
	attrs["ApproximateReceiveCount"] = "1"
	return map[string]any{"messageId": id, "receiptHandle": "rh-" + id, "body": string(b), "attributes": attrs,
		"messageAttributes": map[string]any{}, "md5OfBody": "", "eventSource": "aws:sqs",
		"eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders", "awsRegion": "us-east-1"}
}

// recordBatch records the messages a batch committed, read back from the
// messages table in the order of their values (a batch answer carries no
// message ids).
func (r *enqueueRun) recordBatch(t *testing.T, invoker string, orders []string) {
	t.Helper()
	ctx := context.Background()
	found := 0
	for _, order := range uniq(orders) {
		want := int64(0)
		for _, o := range orders {
			if o == order {
				want++
			}
		}
		for _, m := range r.storedMessages(ctx, t, order) {
			if _, seen := r.ids[m.Message.ID]; seen {
				continue
			}
			var v struct{ N int64 }
			if err := json.Unmarshal(m.Message.Value, &v); err != nil {
				t.Fatal(err)
			}
			r.commit(t, m.Message.ID, order)
			if v.N != r.orders[order] {
				t.Fatalf("%s: message of %s with n=%d stored as its #%d", invoker, order, v.N, r.orders[order])
			}
			want--
			found++
		}
		if want != 0 {
			t.Fatalf("%s: %d messages of %s missing or extra", invoker, want, order)
		}
	}
	if found > 0 {
		r.invokers[invoker] = true
	}
}

func uniq(s []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// storedMessages returns the stored messages keyed by key, in sequence
// order per bucket (one key is one bucket).
func (r *enqueueRun) storedMessages(ctx context.Context, t *testing.T, key string) []outbox.Entry {
	t.Helper()
	b, err := outbox.BucketFor(outbox.Message{Key: []byte(key)}, r.e.writer.BucketCount())
	if err != nil {
		t.Fatal(err)
	}
	var out []outbox.Entry
	entries, _, err := r.e.store.Pending(ctx, b, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if !en.Fence && string(en.Message.Key) == key {
			out = append(out, en)
		}
	}
	return out
}

// stepFunctions renders the Payload of the docs' PayOrder state for an
// execution, invokes the function with it as the lambda:invoke integration
// does, and retries it as the state's Retry would.
func (r *enqueueRun) stepFunctions(ctx context.Context, t *testing.T) {
	asl := loadPayOrderState(t, r.e.business, r.e.topic)
	input := map[string]any{"orderId": "o-sfn", "amount": 42}
	if _, err := r.e.dynamo.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(r.e.business), Item: map[string]types.AttributeValue{
		"id": &types.AttributeValueMemberS{Value: "o-sfn"}, "status": &types.AttributeValueMemberS{Value: "NEW"}}}); err != nil {
		t.Fatal(err)
	}
	sfnCtx := map[string]any{"Execution": map[string]any{"Id": "arn:aws:states:us-east-1:123456789012:execution:orders:exec-1"},
		"State": map[string]any{"Name": "PayOrder"}}
	payload := renderPayload(t, asl.Parameters["Payload"], input, sfnCtx)
	r.valid = append(r.valid, payload)
	b, _ := json.Marshal(payload)
	t.Logf("Step Functions payload: %s", b)
	a := r.invoke(ctx, t, payload)
	if a.ErrorType != "" || len(a.Messages) != 1 {
		t.Fatalf("PayOrder answered %s", a.raw)
	}
	r.commit(t, a.Messages[0].ID, "o-sfn")
	r.invokers["stepfunctions"] = true
	// The Retry of a lost answer: the same payload again, a duplicate.
	r.unchanged(ctx, t, "a Step Functions retry", func() {
		if a := r.invoke(ctx, t, payload); !a.Duplicate {
			t.Fatalf("retry answered %s", a.raw)
		}
	})
	// Another execution for the paid order: the state's Catch on
	// Outbox.ConditionFailed.
	sfnCtx["Execution"] = map[string]any{"Id": "arn:aws:states:us-east-1:123456789012:execution:orders:exec-2"}
	r.unchanged(ctx, t, "paying a paid order", func() {
		a := r.invoke(ctx, t, renderPayload(t, asl.Parameters["Payload"], input, sfnCtx))
		if !asl.catches(a.ErrorType) || a.ErrorType != "Outbox.ConditionFailed" {
			t.Fatalf("paying twice answered %s; the state catches %v", a.raw, asl.Catch)
		}
		if d := a.doc(t); len(d.Reasons) != 1 || d.Reasons[0].Index != 0 || d.Reasons[0].Code != "ConditionalCheckFailed" {
			t.Fatalf("reasons %+v", d.Reasons)
		}
	})
	for _, typ := range []string{"Outbox.Throttled", "Outbox.OutcomeUnknown", "Outbox.Retryable"} {
		if !asl.retries(typ) {
			t.Errorf("the PayOrder state does not retry %s: %v", typ, asl.Retry)
		}
	}
}

// payOrderState is the Task state of docs/deploy.md's Step Functions recipe.
type payOrderState struct {
	Resource   string         `json:"Resource"`
	Parameters map[string]any `json:"Parameters"`
	Retry      []struct {
		ErrorEquals []string `json:"ErrorEquals"`
	} `json:"Retry"`
	Catch []struct {
		ErrorEquals []string `json:"ErrorEquals"`
	} `json:"Catch"`
}

func (s payOrderState) retries(typ string) bool {
	for _, r := range s.Retry {
		for _, e := range r.ErrorEquals {
			if e == typ {
				return true
			}
		}
	}
	return false
}

func (s payOrderState) catches(typ string) bool {
	for _, c := range s.Catch {
		for _, e := range c.ErrorEquals {
			if e == typ || e == "States.ALL" {
				return true
			}
		}
	}
	return false
}

// loadPayOrderState reads the state machine definition that deploy's
// recipes embed (docs/enqueue-recipes.yaml, linted by cfn-lint; a deploy
// test keeps both equal) and docs/deploy.md shows.
func loadPayOrderState(t *testing.T, business, topic string) payOrderState {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "enqueue-statemachine.asl.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The DefinitionSubstitutions of the deployed state machine.
	b = []byte(strings.NewReplacer("${EnqueueFunctionArn}", "arn:aws:lambda:us-east-1:123456789012:function:enqueue",
		"${OrdersTable}", business, "${OrdersTopic}", topic).Replace(string(b)))
	if bytes.Contains(b, []byte("${")) {
		t.Fatalf("the state machine has a substitution this test does not make:\n%s", b)
	}
	var def struct {
		States map[string]json.RawMessage `json:"States"`
	}
	if err := json.Unmarshal(b, &def); err != nil {
		t.Fatal(err)
	}
	var s payOrderState
	if err := json.Unmarshal(def.States["PayOrder"], &s); err != nil {
		t.Fatal(err)
	}
	if s.Resource != "arn:aws:states:::lambda:invoke" || s.Parameters["Payload"] == nil {
		t.Fatalf("PayOrder state %+v: want a lambda:invoke task with a Payload", s)
	}
	return s
}

// renderPayload evaluates a Parameters template the way Step Functions does,
// for the forms the recipe uses: "name.$" keys whose value is a path into the
// input ($.x) or the context object ($$.x), or States.Format('...', paths).
// Anything else fails the test, so the recipe cannot use a form this check
// does not understand.
func renderPayload(t *testing.T, tmpl any, input, sfnCtx map[string]any) any {
	t.Helper()
	switch v := tmpl.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			if name, ok := strings.CutSuffix(k, ".$"); ok {
				s, ok := x.(string)
				if !ok {
					t.Fatalf("%s: a .$ field takes a string", k)
				}
				out[name] = evalPath(t, s, input, sfnCtx)
				continue
			}
			out[k] = renderPayload(t, x, input, sfnCtx)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = renderPayload(t, x, input, sfnCtx)
		}
		return out
	}
	return tmpl
}

func evalPath(t *testing.T, expr string, input, sfnCtx map[string]any) any {
	t.Helper()
	if args, ok := strings.CutPrefix(expr, "States.Format("); ok {
		args = strings.TrimSuffix(args, ")")
		parts := strings.Split(args, ",")
		format := strings.Trim(strings.TrimSpace(parts[0]), "'")
		for _, p := range parts[1:] {
			format = strings.Replace(format, "{}", fmt.Sprint(evalPath(t, strings.TrimSpace(p), input, sfnCtx)), 1)
		}
		return format
	}
	var cur any
	switch {
	case strings.HasPrefix(expr, "$$."):
		cur, expr = sfnCtx, strings.TrimPrefix(expr, "$$.")
	case strings.HasPrefix(expr, "$."):
		cur, expr = input, strings.TrimPrefix(expr, "$.")
	default:
		t.Fatalf("path %q: this check understands $.a.b, $$.a.b and States.Format", expr)
	}
	for _, name := range strings.Split(expr, ".") {
		m, ok := cur.(map[string]any)
		if !ok || m[name] == nil {
			t.Fatalf("path %q: no %s", expr, name)
		}
		cur = m[name]
	}
	if f, ok := cur.(float64); ok {
		return json.Number(fmt.Sprint(f))
	}
	return cur
}

// typedErrors: each error type, and each kind of bad input, answered with
// its errorType and a document that says what to fix; nothing written.
func (r *enqueueRun) typedErrors(ctx context.Context, t *testing.T) {
	big := strings.Repeat("x", 420<<10)
	var hundred []any
	for i := range 101 {
		hundred = append(hundred, map[string]any{"topic": r.e.topic, "key": fmt.Sprint(i)})
	}
	cases := []struct {
		name  string
		req   any
		typ   string
		field string
		says  string
		// schema: the request schema refuses it too (the others are
		// refused for what a schema cannot see).
		schema bool
	}{
		{name: "missing topic", req: map[string]any{"idempotencyKey": "bad-1", "messages": []any{map[string]any{"key": "k"}}},
			typ: "Outbox.Validation", field: "messages[0].topic", says: "required", schema: true},
		{name: "malformed DynamoDB JSON", req: map[string]any{"idempotencyKey": "bad-2", "transactItems": []any{map[string]any{"Put": map[string]any{
			"TableName": r.e.business, "Item": map[string]any{"id": map[string]any{"S": "x"}, "n": map[string]any{"N": 5}}}}}},
			typ: "Outbox.Validation", field: `transactItems[0].Put.Item["n"].N`, says: "want a JSON string", schema: true},
		{name: "101 items", req: map[string]any{"idempotencyKey": "bad-3", "messages": hundred},
			typ: "Outbox.Validation", field: "messages", says: "at most 99", schema: true},
		{name: "oversized value", req: map[string]any{"idempotencyKey": "bad-4", "messages": []any{map[string]any{"topic": r.e.topic, "key": "k", "value": big}}},
			typ: "Outbox.Validation", field: "messages[0].value", says: "409600-byte item limit"},
		{name: "a topic outside the outbox's list", req: map[string]any{"idempotencyKey": "bad-9", "messages": []any{
			map[string]any{"topic": r.e.topic, "key": "k"}, map[string]any{"topic": "not-" + r.e.topic, "key": "k"}}},
			typ: "Outbox.Validation", field: "messages[1].topic", says: fmt.Sprintf("topic %q is not one the outbox serves", "not-"+r.e.topic)},
		{name: "no idempotency key", req: map[string]any{"messages": []any{map[string]any{"topic": r.e.topic}}},
			typ: "Outbox.Validation", field: "idempotencyKey", says: "required"},
		{name: "replayed key, other body", req: r.request("direct-1", "o-other", 1),
			typ: "Outbox.Validation", field: "idempotencyKey", says: "another body"},
		{name: "expression DynamoDB refuses", req: map[string]any{"idempotencyKey": "bad-5", "transactItems": []any{map[string]any{"Update": map[string]any{
			"TableName": r.e.business, "Key": map[string]any{"id": map[string]any{"S": "x"}}, "UpdateExpression": "SET n = = 1"}}}},
			typ: "Outbox.Validation", field: "transactItems", says: "nothing was written"},
		{name: "the outbox's own table", req: map[string]any{"idempotencyKey": "bad-8", "transactItems": []any{map[string]any{"Put": map[string]any{
			"TableName": r.e.tables.Control, "Item": map[string]any{"pk": map[string]any{"S": "config"}, "sk": map[string]any{"S": "config"}}}}}},
			typ: "Outbox.Validation", field: "transactItems[0].Put.TableName", says: "only the outbox writes"},
		{name: "condition failed", req: map[string]any{"idempotencyKey": "bad-6", "transactItems": []any{map[string]any{"Put": map[string]any{
			"TableName": r.e.business, "Item": map[string]any{"id": map[string]any{"S": "o-direct"}},
			"ConditionExpression": "attribute_not_exists(id)", "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}},
			"messages": []any{map[string]any{"topic": r.e.topic, "key": "o-direct"}}},
			typ: "Outbox.ConditionFailed", says: "ConditionalCheckFailed"},
		{name: "missing business table", req: map[string]any{"idempotencyKey": "bad-7", "transactItems": []any{map[string]any{"Put": map[string]any{
			"TableName": "no-such-table", "Item": map[string]any{"id": map[string]any{"S": "x"}}}}},
			"messages": []any{map[string]any{"topic": r.e.topic, "key": "o-direct"}}},
			typ: "Outbox.Rejected", says: "ResourceNotFound"},
	}
	for _, tt := range cases {
		if tt.schema {
			r.invalid = append(r.invalid, tt.req)
		}
		r.unchanged(ctx, t, tt.name, func() {
			a := r.invoke(ctx, t, tt.req)
			if a.ErrorType != tt.typ {
				t.Fatalf("%s: answered %.600s; want %s", tt.name, a.raw, tt.typ)
			}
			d := a.doc(t)
			if d.Field != tt.field || !strings.Contains(d.Message, tt.says) {
				t.Fatalf("%s: field %q, message %q; want field %q and a message with %q", tt.name, d.Field, d.Message, tt.field, tt.says)
			}
			if tt.typ == "Outbox.ConditionFailed" {
				if len(d.Reasons) != 1 || d.Reasons[0].Code != "ConditionalCheckFailed" || d.Reasons[0].Item["id"] == nil {
					t.Fatalf("%s: reasons %+v; want item 0's with its old image", tt.name, d.Reasons)
				}
			}
		})
	}

	// Throttled on every attempt: nothing reaches DynamoDB.
	r.proxy.mode.Store("throttle")
	r.unchanged(ctx, t, "a throttled request", func() {
		a := r.invoke(ctx, t, r.request("throttled-1", "o-throttled", 1))
		if a.ErrorType != "Outbox.Throttled" || r.proxy.hits.Load() < 2 {
			t.Fatalf("answered %.600s after %d throttled calls; want Outbox.Throttled after the writer's retries", a.raw, r.proxy.hits.Load())
		}
		a.doc(t)
	})
	// Every answer lost: the transaction committed, the function cannot
	// know. A retry with the same key, answers restored, is a duplicate.
	r.proxy.mode.Store("lose")
	lost := r.request("lost-1", "o-lost", 1)
	a := r.invoke(ctx, t, lost)
	if a.ErrorType != "Outbox.OutcomeUnknown" {
		t.Fatalf("answered %.600s; want Outbox.OutcomeUnknown", a.raw)
	}
	a.doc(t)
	r.proxy.mode.Store("")
	a = r.invoke(ctx, t, lost)
	if !a.Duplicate || len(a.Messages) != 1 {
		t.Fatalf("the retry after an unknown outcome answered %s; want a duplicate", a.raw)
	}
	stored := r.storedMessages(ctx, t, "o-lost")
	if len(stored) != 1 || stored[0].Message.ID != a.Messages[0].ID {
		t.Fatalf("stored %+v for the lost answer; want the one message answered", stored)
	}
	r.commit(t, a.Messages[0].ID, "o-lost")
}

// checkSchemas runs schema/enqueue_check.py on what the test sent and
// received: the requests built as valid pass the request schema, the bad
// ones it can judge fail it, and every answer (responses, batch responses,
// Lambda errors and their error documents) passes the response schema.
func (r *enqueueRun) checkSchemas(t *testing.T) {
	t.Helper()
	root := repoRoot(t)
	b, err := json.Marshal(map[string]any{"valid": r.valid, "invalid": r.invalid, "answers": r.answers})
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(t.TempDir(), "enqueue-run.json")
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(schemaPython(t, root), filepath.Join(root, "schema", "enqueue_check.py"), in)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", bytes.TrimSpace(out))
	if err != nil {
		t.Fatalf("the enqueue schemas refused what the function was sent or answered: %v", err)
	}
}

// schemaPython is the interpreter with jsonschema: the project's venv
// (scripts/install-python-deps.sh) when the repository has it, else python3.
func schemaPython(t *testing.T, root string) string {
	t.Helper()
	script := filepath.Join(root, "scripts", "install-python-deps.sh")
	if _, err := os.Stat(script); err == nil {
		out, err := exec.Command("bash", script).Output()
		if err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		return strings.TrimSpace(string(out))
	}
	return "python3"
}

// recipeScalar returns a scalar of docs/enqueue-recipes.yaml: the path
// leads from Resources through mapping keys and sequence indexes.
func recipeScalar(t *testing.T, path ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "enqueue-recipes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	n := doc.Content[0]
	for _, step := range append([]string{"Resources"}, path...) {
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == step {
					next = n.Content[i+1]
				}
			}
		case yaml.SequenceNode:
			var i int
			if _, err := fmt.Sscan(step, &i); err == nil && i < len(n.Content) {
				next = n.Content[i]
			}
		}
		if next == nil {
			t.Fatalf("docs/enqueue-recipes.yaml has no %v", path)
		}
		n = next
	}
	if n.Kind != yaml.ScalarNode {
		t.Fatalf("%v is not a scalar", path)
	}
	return n.Value
}

// renderTransformer fills an EventBridge input template (or a Pipes one,
// whose variables are paths) as EventBridge does: "<v>" inside quotes gets
// the value's text, <v> outside quotes its JSON; ${OrdersTopic} is the
// template's !Sub. The result must be JSON.
func renderTransformer(t *testing.T, tmpl string, vars map[string]any, topic string) map[string]any {
	t.Helper()
	out := strings.ReplaceAll(tmpl, "${OrdersTopic}", topic)
	for name, v := range vars {
		text, ok := v.(string)
		if !ok {
			b, _ := json.Marshal(v)
			text = string(b)
		}
		quoted, _ := json.Marshal(text)
		out = strings.ReplaceAll(out, `"<`+name+`>"`, string(quoted))
		js, _ := json.Marshal(v)
		out = strings.ReplaceAll(out, "<"+name+">", string(js))
	}
	var req map[string]any
	if err := json.Unmarshal([]byte(out), &req); err != nil {
		t.Fatalf("the input template renders to %s, not JSON: %v", out, err)
	}
	return req
}
