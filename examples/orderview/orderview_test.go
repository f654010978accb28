package orderview

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The read model holds each committed order once; Check sees a missing
// order and an order applied twice (bypassing the inbox).
func TestApplyAndCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := testenv.DynamoDB(t)
	orders, view, inboxTable := testenv.Name(t, "orders"), testenv.Name(t, "view"), testenv.Name(t, "inbox")
	if _, err := d.Client.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String(orders), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}}}); err != nil {
		t.Fatal(err)
	}
	if err := CreateTable(ctx, d.Client, view); err != nil {
		t.Fatal(err)
	}
	if err := inbox.CreateTable(ctx, d.Client, inboxTable); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(ctx, d.Client, inboxTable, inbox.InOrder())
	if err != nil {
		t.Fatal(err)
	}
	events := []OrderPlaced{
		{Type: "OrderPlaced", OrderID: "o1", Customer: "c1", AmountCents: 100},
		{Type: "OrderPlaced", OrderID: "o2", Customer: "c1", AmountCents: 250},
		{Type: "OrderPlaced", OrderID: "o3", Customer: "c2", AmountCents: 999},
	}
	records := make([]*kgo.Record, len(events))
	for i, ev := range events {
		if _, err := d.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(orders), Item: map[string]types.AttributeValue{
			"id": &types.AttributeValueMemberS{Value: ev.OrderID}, "customer": &types.AttributeValueMemberS{Value: ev.Customer},
			"amount": &types.AttributeValueMemberN{Value: strconv.FormatInt(ev.AmountCents, 10)}}}); err != nil {
			t.Fatal(err)
		}
		v, _ := json.Marshal(ev)
		records[i] = &kgo.Record{Topic: "orders", Offset: int64(i), Key: []byte(ev.Customer), Value: v, Headers: []kgo.RecordHeader{
			{Key: outbox.DefaultMessageIDHeader, Value: []byte(outbox.NewID())},
			{Key: outbox.DefaultBucketHeader, Value: []byte("0")},
			{Key: outbox.DefaultSequenceHeader, Value: []byte(strconv.Itoa(i + 1))}}}
	}
	check := func(want Report) {
		t.Helper()
		got, err := Check(ctx, d.Client, orders, view)
		if err != nil || got != want {
			t.Fatalf("Check = %+v, %v; want %+v", got, err, want)
		}
	}
	for _, r := range records[:2] {
		if res, err := ib.Process(ctx, r, Apply(view)); err != nil || res.Status != inbox.Applied {
			t.Fatalf("Process: %v %v", res.Status, err)
		}
	}
	// o3 is missing, and so c2's totals differ.
	check(Report{Orders: 3, Applied: 2, Missing: 1, Mismatches: 1})
	// All three: o1 and o2 are skipped.
	for _, r := range records {
		if _, err := ib.Process(ctx, r, Apply(view)); err != nil {
			t.Fatal(err)
		}
	}
	check(Report{Orders: 3, Applied: 3})
	// o3 again, a year later in id-only mode: past the retention window it
	// is applied again, and c2's totals count it twice.
	ib2, err := inbox.New(ctx, d.Client, inboxTable, inbox.Retention(time.Hour), inbox.WithClock(later{}))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := ib2.Process(ctx, records[2], Apply(view)); err != nil || res.Status != inbox.Applied {
		t.Fatalf("re-applying after the window (id-only mode): %v %v", res.Status, err)
	}
	check(Report{Orders: 3, Applied: 3, Mismatches: 1})
}

// later is a clock a year ahead: every processed id is past its window.
type later struct{}

func (later) Now() time.Time { return time.Now().Add(365 * 24 * time.Hour) }
