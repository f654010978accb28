package outboxtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/cloudevent"
	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/outboxtest"
	"github.com/dynakafka/outbox/store/dynamo"
)

func createTable(t *testing.T, db *dynamodb.Client, name string) {
	t.Helper()
	if _, err := db.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName:            &name,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: strp("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: strp("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}); err != nil {
		t.Fatal(err)
	}
}

// The whole path a service builds, with the kit: place an order and pay it
// with a version check (each with its CloudEvent), and a consumer on the
// inbox keeping a read model, asserted at the end.
func TestPlaceAndPayOrderReadModel(t *testing.T) {
	if testing.Short() {
		t.Skip("uses DynamoDB Local")
	}
	o := outboxtest.New(t, outboxtest.Topics("order-events"))
	ctx := t.Context()
	orders, view, inboxTable := outboxtest.Name(t, "orders"), outboxtest.Name(t, "view"), outboxtest.Name(t, "inbox")
	createTable(t, o.DynamoDB, orders)
	createTable(t, o.DynamoDB, view)
	if err := inbox.CreateTable(ctx, o.DynamoDB, inboxTable); err != nil {
		t.Fatal(err)
	}

	event := func(typ string) outbox.Message {
		m, err := cloudevent.New("order-events", "o-1", cloudevent.Event{Source: "/orders", Type: typ, Subject: "o-1"})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	place, err := dynamo.Put(orders, map[string]any{"id": "o-1", "status": "placed", "version": 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Writer.Write(ctx, []types.TransactWriteItem{place}, event("order.placed")); err != nil {
		t.Fatal(err)
	}
	pay, err := dynamo.UpdateIfVersion(orders, map[string]any{"id": "o-1"}, "version", 1,
		expression.Set(expression.Name("status"), expression.Value("paid")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Writer.Write(ctx, []types.TransactWriteItem{pay}, event("order.paid")); err != nil {
		t.Fatal(err)
	}

	ib, err := inbox.New(ctx, o.DynamoDB, inboxTable, inbox.InOrder())
	if err != nil {
		t.Fatal(err)
	}
	c, err := inbox.NewConsumer(ib, func(tx *inbox.Tx) error {
		e, err := tx.CloudEvent()
		if err != nil {
			return inbox.Permanent(err)
		}
		status := map[string]string{"order.placed": "placed", "order.paid": "paid"}[e.Type]
		up, err := dynamo.Update(view, map[string]any{"id": e.Subject},
			expression.Set(expression.Name("status"), expression.Value(status)).
				Add(expression.Name("events"), expression.Value(1)))
		if err != nil {
			return err
		}
		tx.Add(up)
		return nil
	}, inbox.ClientOptions(kgo.SeedBrokers(o.Brokers...), kgo.ConsumerGroup("view"), kgo.ConsumeTopics("order-events")))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	defer func() { stop(); <-done; c.Close() }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := o.DynamoDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: &view, ConsistentRead: boolp(true),
			Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "o-1"}}})
		if err != nil {
			t.Fatal(err)
		}
		status, _ := got.Item["status"].(*types.AttributeValueMemberS)
		events, _ := got.Item["events"].(*types.AttributeValueMemberN)
		if status != nil && status.Value == "paid" {
			if events == nil || events.Value != "2" {
				t.Fatalf("read model %v: each event must apply once", got.Item)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the read model is %v after 60 s, want status paid", got.Item)
		}
		select {
		case err := <-done:
			done <- err // for the deferred wait
			t.Fatalf("the consumer stopped: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func boolp(b bool) *bool { return &b }
