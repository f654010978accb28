package orders_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/inboxtest"
	"github.com/dynakafka/outbox/outboxtest"

	"example.com/orders"
)

// createTable creates a table keyed by the string "id".
func createTable(t *testing.T, db *dynamodb.Client, name string) {
	t.Helper()
	id := "id"
	if _, err := db.CreateTable(t.Context(), &dynamodb.CreateTableInput{
		TableName:            &name,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: &id, AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: &id, KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}); err != nil {
		t.Fatal(err)
	}
}

// Place and pay an order through the outbox (DynamoDB Local, kfake, a
// running relay) and watch the consumer's read model follow.
func TestPlaceAndPay(t *testing.T) {
	o := outboxtest.New(t, outboxtest.Topics("order-events"))
	ctx := t.Context()
	ordersTable, viewTable, inboxTable := outboxtest.Name(t, "orders"), outboxtest.Name(t, "view"), outboxtest.Name(t, "inbox")
	createTable(t, o.DynamoDB, ordersTable)
	createTable(t, o.DynamoDB, viewTable)
	if err := inbox.CreateTable(ctx, o.DynamoDB, inboxTable); err != nil {
		t.Fatal(err)
	}

	// The consumer, keeping the read model.
	ib, err := inbox.New(ctx, o.DynamoDB, inboxTable, inbox.InOrder())
	if err != nil {
		t.Fatal(err)
	}
	c, err := inbox.NewConsumer(ib, orders.Project(viewTable),
		inbox.ClientOptions(kgo.SeedBrokers(o.Brokers...), kgo.ConsumerGroup("orders-view"), kgo.ConsumeTopics("order-events")))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
		c.Close()
	})

	svc := orders.NewService(o.Writer, ordersTable, "order-events")
	order := orders.Order{ID: "order-42", Customer: "ada", AmountCents: 1250}
	if err := svc.Place(ctx, order); err != nil {
		t.Fatal(err)
	}
	waitForView(t, o.DynamoDB, viewTable, order.ID, "placed")

	// A payment against a stale version writes nothing and publishes nothing.
	if err := svc.Pay(ctx, order, 7); !errors.Is(err, orders.ErrChanged) {
		t.Fatalf("Pay at a stale version: %v, want ErrChanged", err)
	}
	if err := svc.Pay(ctx, order, 1); err != nil {
		t.Fatal(err)
	}
	got := waitForView(t, o.DynamoDB, viewTable, order.ID, "paid")
	if got["customer"] != "ada" || got["amount_cents"] != "1250" {
		t.Errorf("read model %v, want customer ada, amount_cents 1250", got)
	}
	if recs := o.WaitForRecords(t, "order-events", 2); len(recs) != 2 {
		t.Errorf("%d records on order-events, want 2 (placed, paid)", len(recs))
	}
}

// waitForView reads the read model's item of id until its status is
// status, and returns its attributes (strings and numbers as text). It
// fails the test after 30 s: a bound for failing, not a measure of speed.
func waitForView(t *testing.T, db *dynamodb.Client, table, id, status string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := db.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: &table, ConsistentRead: ptr(true),
			Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}})
		if err != nil {
			t.Fatal(err)
		}
		item := map[string]string{}
		for k, v := range out.Item {
			switch v := v.(type) {
			case *types.AttributeValueMemberS:
				item[k] = v.Value
			case *types.AttributeValueMemberN:
				item[k] = v.Value
			}
		}
		if item["status"] == status {
			return item
		}
		if time.Now().After(deadline) {
			t.Fatalf("read model of %s is %v after 30 s, want status %s", id, item, status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }

// The service's writes, unit-tested with the fake writer: one transaction
// of the order and its event.
func TestPlaceWritesOrderAndEvent(t *testing.T) {
	w := outboxtest.NewFakeWriter(8)
	svc := orders.NewService(w, "orders", "order-events")
	if err := svc.Place(context.Background(), orders.Order{ID: "order-1", Customer: "bob", AmountCents: 5}); err != nil {
		t.Fatal(err)
	}
	writes := w.Writes()
	if len(writes) != 1 || len(writes[0].Items) != 1 || len(writes[0].Messages) != 1 {
		t.Fatalf("writes %+v, want one of one item and one message", writes)
	}
	if m := writes[0].Messages[0]; m.Topic != "order-events" || string(m.Key) != "order-1" {
		t.Errorf("message %s/%s, want order-events/order-1", m.Topic, m.Key)
	}
}

// The consumer callback, unit-tested with inboxtest.NewTx: an OrderPaid
// record becomes one update of the read model.
func TestProjectPaid(t *testing.T) {
	w := outboxtest.NewFakeWriter(8)
	svc := orders.NewService(w, "orders", "order-events")
	order := orders.Order{ID: "order-2", Customer: "cy", AmountCents: 9}
	if err := svc.Pay(context.Background(), order, 1); err != nil {
		t.Fatal(err)
	}
	tx, err := inboxtest.NewTx(outboxtest.Record(w.Messages()[0]))
	if err != nil {
		t.Fatal(err)
	}
	if err := orders.Project("view")(tx); err != nil {
		t.Fatal(err)
	}
	items := tx.Items()
	if len(items) != 1 || items[0].Update == nil || *items[0].Update.TableName != "view" {
		t.Fatalf("items %+v, want one update of view", items)
	}
	if v := items[0].Update.ExpressionAttributeValues; len(v) != 3 {
		t.Errorf("update values %v, want customer, amount and status", v)
	}
}
