package outboxtest_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/cloudevent"
	"github.com/dynakafka/outbox/outboxtest"
	"github.com/dynakafka/outbox/store/dynamo"
)

// orders is a service as a user writes it: it depends on dynamo.Enqueuer,
// not on *dynamo.Writer.
type orders struct {
	w     dynamo.Enqueuer
	table string // "" when the test needs no business item
}

type placed struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

func (s orders) place(ctx context.Context, id string, cents int64) (outbox.Message, error) {
	var items []types.TransactWriteItem
	if s.table != "" {
		put, err := dynamo.Put(s.table, map[string]any{"id": id, "cents": cents, "version": 1})
		if err != nil {
			return outbox.Message{}, err
		}
		items = append(items, put)
	}
	m, err := cloudevent.New("orders", id, cloudevent.Event{Source: "/orders", Type: "order.placed", Data: placed{id, cents}})
	if err != nil {
		return outbox.Message{}, err
	}
	res, err := s.w.Write(ctx, items, m)
	if err != nil {
		return outbox.Message{}, fmt.Errorf("place %s: %w", id, err)
	}
	return res.Messages[0], nil
}

func TestMemoryOutboxPublishes(t *testing.T) {
	o := outboxtest.New(t, outboxtest.Memory(), outboxtest.Topics("orders"))
	svc := orders{w: o.Writer}
	ctx := context.Background()
	var sent []outbox.Message
	for i := range 3 {
		m, err := svc.place(ctx, "o-1", int64(100*(i+1)))
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, m)
	}
	recs := o.WaitForRecords(t, "orders", 3)
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	// One key: one partition, in sequence order, with the message ids.
	for i, r := range recs {
		id, _ := outboxtest.Header(r, outbox.DefaultMessageIDHeader)
		seq, _ := outboxtest.Header(r, outbox.DefaultSequenceHeader)
		if id != sent[i].ID || seq != strconv.FormatInt(sent[i].Sequence, 10) || string(r.Key) != "o-1" {
			t.Errorf("record %d: id %s seq %s key %s, want %s/%d", i, id, seq, r.Key, sent[i].ID, sent[i].Sequence)
		}
	}
	if sent[0].Sequence != 1 || sent[2].Sequence != 3 {
		t.Errorf("sequences %d..%d, want 1..3", sent[0].Sequence, sent[2].Sequence)
	}
}

func TestDynamoOutboxPublishes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts DynamoDB Local")
	}
	o := outboxtest.New(t, outboxtest.Topics("orders", "audit"))
	ctx := context.Background()
	table := outboxtest.Name(t, "orders")
	createTable(t, o.DynamoDB, table)
	svc := orders{w: o.Writer, table: table}
	m, err := svc.place(ctx, "o-7", 990)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := o.Writer.(*dynamo.Writer); !ok {
		t.Fatalf("Writer is a %T, want the real *dynamo.Writer", o.Writer)
	}
	r := o.WaitForRecords(t, "orders", 1)[0]
	if id, _ := outboxtest.Header(r, outbox.DefaultMessageIDHeader); id != m.ID {
		t.Fatalf("record id %s, want %s", id, m.ID)
	}
	if typ, _ := outboxtest.Header(r, "ce_type"); typ != "order.placed" {
		t.Fatalf("ce_type %q", typ)
	}
	got, err := o.DynamoDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table,
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "o-7"}}})
	if err != nil || got.Item == nil {
		t.Fatalf("the order was not written with its event: %v", err)
	}
	// A second New in the same binary reuses DynamoDB Local, with its own
	// tables.
	o2 := outboxtest.New(t)
	if o2.Tables == o.Tables {
		t.Fatal("two outboxes share tables")
	}
}

func strp(s string) *string { return &s }

func TestFakeWriter(t *testing.T) {
	ctx := context.Background()
	w := outboxtest.NewFakeWriter(4)
	svc := orders{w: w, table: "orders"}
	a, err := svc.place(ctx, "o-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := svc.place(ctx, "o-1", 2)
	if err != nil {
		t.Fatal(err)
	}
	if a.Bucket != outbox.BucketForKey([]byte("o-1"), 4) || a.Sequence != 1 || b.Sequence != 2 || a.ID == "" || a.CreatedAt.IsZero() {
		t.Fatalf("completed messages %+v %+v", a, b)
	}
	writes := w.Writes()
	if len(writes) != 2 || len(writes[0].Items) != 1 || writes[0].Items[0].Put == nil || writes[1].Messages[0].ID != b.ID {
		t.Fatalf("writes %+v", writes)
	}

	// Two messages of one bucket in one write: consecutive numbers.
	m1, _ := outbox.JSON("orders", "o-2", 1)
	m2, _ := outbox.JSON("orders", "o-2", 2)
	res, err := w.Write(ctx, nil, m1, m2)
	if err != nil || res.Messages[1].Sequence != res.Messages[0].Sequence+1 {
		t.Fatalf("one write, one bucket: %+v, %v", res.Messages, err)
	}

	// Told to fail: the service sees the error, nothing is recorded.
	w.FailNext(&dynamo.TransactionError{Err: outbox.ErrConditionFailed})
	if _, err := svc.place(ctx, "o-1", 3); !errors.Is(err, outbox.ErrConditionFailed) {
		t.Fatalf("err %v, want ErrConditionFailed", err)
	}
	if len(w.Writes()) != 3 {
		t.Fatal("a failed write was recorded")
	}
	if _, err := svc.place(ctx, "o-1", 3); err != nil {
		t.Fatalf("the failure was not used up: %v", err)
	}

	// Checked as dynamo.Writer checks.
	for _, c := range []struct {
		name  string
		items []types.TransactWriteItem
		msgs  []outbox.Message
		field string
	}{
		{"nothing", nil, nil, "Transaction"},
		{"bucket set", nil, []outbox.Message{{Topic: "orders", Bucket: 2}}, "Bucket"},
		{"sequence set", nil, []outbox.Message{{Topic: "orders", Sequence: 2}}, "Sequence"},
		{"bad topic", nil, []outbox.Message{{Topic: "no spaces"}}, "Topic"},
		{"bad id", nil, []outbox.Message{{ID: "x", Topic: "orders"}}, "ID"},
		{"empty item", []types.TransactWriteItem{{}}, nil, "items[0]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := w.Write(ctx, c.items, c.msgs...)
			var ve *outbox.ValidationError
			if !errors.As(err, &ve) || ve.Field != c.field {
				t.Fatalf("err %v, want a *ValidationError on %s", err, c.field)
			}
		})
	}
	if n := len(w.Messages()); n != 5 {
		t.Fatalf("%d messages recorded, want 5", n)
	}
}

// A unit test of a service that enqueues: no DynamoDB, no Kafka.
func ExampleNewFakeWriter() {
	w := outboxtest.NewFakeWriter(0)
	m, _ := outbox.JSON("orders", "o-1", placed{"o-1", 990})
	res, err := w.Write(context.Background(), nil, m)
	fmt.Println(err, res.Messages[0].Sequence, len(w.Writes()))
	// Output: <nil> 1 1
}
