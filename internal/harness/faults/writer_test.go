package faults_test

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/faults"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/store/dynamo"
)

// TestWriterAfterInjectedFaults runs store/dynamo's Writer over a client
// with faults injected into TransactWriteItems. The caller's own item is a
// conditional put (attribute_not_exists), so a retry that DynamoDB did not
// recognise as the same transaction (same client request token) would fail
// its condition. Each case checks what Write reports and what is stored:
// the caller's item and the message exactly once when committed, nothing
// (but a released sequence number) when not.
func TestWriterAfterInjectedFaults(t *testing.T) {
	d := testenv.DynamoDB(t)
	tables := dynamo.Tables{Messages: testenv.Name(t, "msgs"), Control: testenv.Name(t, "ctl")}
	if err := dynamo.CreateTables(ctxT(t), d.Client, tables, dynamo.BucketCount(2)); err != nil {
		t.Fatal(err)
	}
	business := newTable(t, "orders")

	cases := []struct {
		name       string
		policy     faults.Policy
		sdkRetries bool
		kind       faults.Kind
		count      int64 // faults injected
		err        error // nil: Write succeeds
		committed  bool
		fenced     bool // the reserved sequence number was released
	}{
		// The Writer switches the client's retryer off for its calls, so it
		// retries in both cases.
		{"response lost once, client with a retryer", faults.Policy{ResponseLost: 1, Limit: 1}, true, faults.ResponseLost, 1, nil, true, false},
		{"response lost once, client without", faults.Policy{ResponseLost: 1, Limit: 1}, false, faults.ResponseLost, 1, nil, true, false},
		{"response lost every time", faults.Policy{ResponseLost: 1}, false, faults.ResponseLost, 2, outbox.ErrOutcomeUnknown, true, false},
		{"throttled every time", faults.Policy{Throttle: 1}, false, faults.Throttle, 2, outbox.ErrThrottled, false, true},
		{"throttling every time", faults.Policy{Throttling: 1}, false, faults.Throttling, 2, outbox.ErrThrottled, false, true},
		{"server error every time", faults.Policy{ServerError: 1}, false, faults.ServerError, 2, outbox.ErrOutcomeUnknown, false, false},
		{"timeout every time", faults.Policy{Timeout: 1}, false, faults.Timeout, 2, outbox.ErrOutcomeUnknown, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inj := newInjector(t, faults.For("TransactWriteItems", c.policy))
			var cl *dynamodb.Client
			if c.sdkRetries {
				cl = client(t, inj)
			} else {
				cl = client(t, inj, faults.NoRetries)
			}
			w, err := dynamo.NewWriter(ctxT(t), cl, tables, dynamo.MaxAttempts(2))
			if err != nil {
				t.Fatal(err)
			}
			id := outbox.NewID()
			order := types.TransactWriteItem{Put: &types.Put{
				TableName:           aws.String(business),
				Item:                key(id),
				ConditionExpression: aws.String("attribute_not_exists(pk)"),
			}}
			res, err := w.Write(ctxT(t), []types.TransactWriteItem{order}, outbox.Message{ID: id, Topic: "orders", Key: []byte(id), Value: []byte("v")})
			switch {
			case c.err == nil && (err != nil || len(res.Messages) != 1 || res.Messages[0].ID != id):
				t.Fatalf("Write = %+v, %v; want success with message %s", res, err, id)
			case c.err != nil && !errors.Is(err, c.err):
				t.Fatalf("Write = %v; want %v", err, c.err)
			}
			if n := inj.Count(c.kind, "TransactWriteItems"); n != c.count || inj.Total() != c.count {
				t.Errorf("injected %s %d times (total %d), want %d", c.kind, n, inj.Total(), c.count)
			}
			if got := stored(t, business, id); got != c.committed {
				t.Errorf("the caller's item stored = %v, want %v", got, c.committed)
			}
			msgs, fences := messagesOf(t, tables.Messages, id)
			if want := map[bool]int{true: 1}[c.committed]; msgs != want {
				t.Errorf("%d items hold message %s, want %d", msgs, id, want)
			}
			if c.fenced != (fences > 0) {
				t.Errorf("%d new fences; want the reserved number released: %v", fences, c.fenced)
			}
		})
	}
}

var seenFences = map[string]bool{}

// messagesOf counts the messages-table items holding message id, and the
// fences not counted before (each case reserves one new sequence number).
func messagesOf(t *testing.T, table, id string) (msgs, newFences int) {
	t.Helper()
	out, err := testenv.DynamoDB(t).Client.Scan(ctxT(t), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range out.Items {
		if s, ok := it["id"].(*types.AttributeValueMemberS); ok && s.Value == id {
			msgs++
		}
		if _, ok := it["f"]; ok {
			pos := table + "/" + it["b"].(*types.AttributeValueMemberN).Value + "/" + it["s"].(*types.AttributeValueMemberN).Value
			if !seenFences[pos] {
				seenFences[pos] = true
				newFences++
			}
		}
	}
	return msgs, newFences
}

// TestLostReservationLeavesAGap: the sequence counter's UpdateItem (ADD) is
// not idempotent. When its response is lost, the Writer's retry reserves again
// and the first number is never written: a gap that relays wait out
// (GapTimeout) and fence. Nothing is lost; the bucket stalls for a while.
func TestLostReservationLeavesAGap(t *testing.T) {
	d := testenv.DynamoDB(t)
	tables := dynamo.Tables{Messages: testenv.Name(t, "msgs"), Control: testenv.Name(t, "ctl")}
	if err := dynamo.CreateTables(ctxT(t), d.Client, tables, dynamo.BucketCount(1)); err != nil {
		t.Fatal(err)
	}
	inj := newInjector(t, faults.Disabled(), faults.For("UpdateItem", faults.Policy{ResponseLost: 1, Limit: 1}))
	w, err := dynamo.NewWriter(ctxT(t), client(t, inj), tables)
	if err != nil {
		t.Fatal(err)
	}
	write := func() int64 {
		res, err := w.Write(ctxT(t), nil, outbox.Message{Topic: "orders", Key: []byte("k"), Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		return res.Messages[0].Sequence
	}
	first := write()
	inj.Enable()
	second := write()
	if second != first+2 || inj.Count(faults.ResponseLost, "UpdateItem") != 1 {
		t.Fatalf("sequences %d then %d with %d lost reservation responses; want %d: the lost reservation skipped",
			first, second, inj.Count(faults.ResponseLost, "UpdateItem"), first+2)
	}
}
