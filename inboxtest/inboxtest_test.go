package inboxtest_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/inboxtest"
)

// A service's callback, as a user writes it: it decodes the event and adds
// one update of its read model; a value it cannot decode is permanent.
func applyOrder(tx *inbox.Tx) error {
	var ev struct {
		OrderID string `json:"order_id"`
		Cents   int64  `json:"amount_cents"`
	}
	if err := json.Unmarshal(tx.Record().Value, &ev); err != nil {
		return inbox.Permanent(fmt.Errorf("decode: %w", err))
	}
	tx.Add(types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String("orders-view"),
		Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "order#" + ev.OrderID}},
		UpdateExpression:          aws.String("SET amount_cents = :c, seq = :s"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": &types.AttributeValueMemberN{Value: fmt.Sprint(ev.Cents)}, ":s": &types.AttributeValueMemberN{Value: fmt.Sprint(tx.Message().Sequence)}},
	}})
	return nil
}

func orderRecord(value string) *kgo.Record {
	return &kgo.Record{Topic: "orders", Partition: 2, Offset: 41, Key: []byte("o-1"), Value: []byte(value), Headers: []kgo.RecordHeader{
		{Key: outbox.DefaultMessageIDHeader, Value: []byte(outbox.NewID())},
		{Key: outbox.DefaultBucketHeader, Value: []byte("5")},
		{Key: outbox.DefaultSequenceHeader, Value: []byte("12")},
	}}
}

// A callback is unit-testable without DynamoDB: NewTx gives it the Tx
// it would get, Items shows what it added.
func TestNewTx(t *testing.T) {
	tx, err := inboxtest.NewTx(orderRecord(`{"order_id":"o-1","amount_cents":250}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := applyOrder(tx); err != nil {
		t.Fatal(err)
	}
	items := tx.Items()
	if len(items) != 1 || items[0].Update == nil || *items[0].Update.TableName != "orders-view" ||
		items[0].Update.ExpressionAttributeValues[":s"].(*types.AttributeValueMemberN).Value != "12" {
		t.Fatalf("items %+v", items)
	}
	if m := tx.Message(); m.Bucket != 5 || m.Sequence != 12 || m.Partition != 2 || m.Offset != 41 || tx.Context() == nil {
		t.Fatalf("message %+v", m)
	}

	tx, err = inboxtest.NewTx(orderRecord("not json"))
	if err != nil {
		t.Fatal(err)
	}
	var pe *inbox.PermanentError
	if err := applyOrder(tx); !errors.As(err, &pe) || len(tx.Items()) != 0 {
		t.Fatalf("an undecodable value: %v, items %v; want a permanent error and nothing added", err, tx.Items())
	}

	var re *inbox.RecordError
	if _, err := inboxtest.NewTx(&kgo.Record{Topic: "orders"}); !errors.As(err, &re) {
		t.Fatalf("a record without the outbox's headers: %v, want a *RecordError", err)
	}
}
