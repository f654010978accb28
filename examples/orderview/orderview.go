// Package orderview is an example service on the consuming side of the
// outbox: it keeps a read model of orders in DynamoDB from the OrderPlaced
// events the demo's order service enqueues, through the inbox, so that every
// order is applied once, in the order its writer committed it, whatever
// Kafka and the relay deliver twice.
//
// The read model (one table, key pk (S)):
//
//	pk "order#<order id>"      customer, amount_cents
//	pk "customer#<customer>"   orders (count), total_cents
//
// The customer totals are what duplicates would corrupt: an order applied
// twice counts twice. Check compares the read model with the orders table
// the writers committed.
package orderview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

// OrderPlaced is the event's value.
type OrderPlaced struct {
	Type        string `json:"type"`
	OrderID     string `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

// Apply returns the inbox callback that applies an OrderPlaced event to the
// read model in table: the order's item and its customer's totals, in the
// record's transaction. Other event types are marked processed without a
// change; a value that does not decode, or an OrderPlaced without its ids,
// is a permanent error (inbox.Permanent): it goes to the consumer's poison
// policy without being retried.
func Apply(table string) func(tx *inbox.Tx) error {
	return func(tx *inbox.Tx) error {
		var ev OrderPlaced
		if err := json.Unmarshal(tx.Record().Value, &ev); err != nil {
			return inbox.Permanent(fmt.Errorf("orderview: decode event: %w", err))
		}
		if ev.Type != "OrderPlaced" {
			return nil
		}
		if ev.OrderID == "" || ev.Customer == "" {
			return inbox.Permanent(fmt.Errorf("orderview: OrderPlaced without order_id or customer: %s", tx.Record().Value))
		}
		// The same helpers as the writer's items (store/dynamo).
		order, err := dynamo.Put(table, map[string]any{"pk": "order#" + ev.OrderID, "customer": ev.Customer, "amount_cents": ev.AmountCents})
		if err != nil {
			return err
		}
		totals, err := dynamo.Update(table, map[string]any{"pk": "customer#" + ev.Customer},
			expression.Add(expression.Name("orders"), expression.Value(1)).Add(expression.Name("total_cents"), expression.Value(ev.AmountCents)))
		if err != nil {
			return err
		}
		tx.Add(order, totals)
		return nil
	}
}

// AdminAPI is what CreateTable needs.
type AdminAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// CreateTable creates the read model's table (key pk (S), on demand) if it
// does not exist, and waits until it is active.
func CreateTable(ctx context.Context, client AdminAPI, table string) error {
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("orderview: create table %s: %w", table, err)
	}
	return dynamodb.NewTableExistsWaiter(client).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 5*time.Minute)
}

// ScanAPI is what Check needs.
type ScanAPI interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// Report compares the read model with the committed orders.
type Report struct {
	Orders     int // committed orders (in the orders table)
	Applied    int // of them, in the read model with the right customer and amount
	Missing    int // committed, not (yet) in the read model
	Phantom    int // in the read model, not committed
	Mismatches int // customers whose totals differ from their committed orders', plus wrong order items
}

// Check reads the orders table (items id, customer, amount, as the demo's
// order service writes them) and the read model, consistently, and compares
// them: every committed order once in the read model, every customer's
// count and total equal to its committed orders'.
func Check(ctx context.Context, client ScanAPI, ordersTable, viewTable string) (Report, error) {
	type totals struct{ n, cents int64 }
	var r Report
	want := map[string]totals{}
	orders := map[string]OrderPlaced{}
	err := scan(ctx, client, ordersTable, func(item map[string]types.AttributeValue) {
		o := OrderPlaced{OrderID: str(item["id"]), Customer: str(item["customer"]), AmountCents: num(item["amount"])}
		orders[o.OrderID] = o
		t := want[o.Customer]
		want[o.Customer] = totals{t.n + 1, t.cents + o.AmountCents}
	})
	if err != nil {
		return r, err
	}
	r.Orders = len(orders)
	got := map[string]totals{}
	seen := map[string]bool{}
	err = scan(ctx, client, viewTable, func(item map[string]types.AttributeValue) {
		pk := str(item["pk"])
		switch {
		case len(pk) > 6 && pk[:6] == "order#":
			id := pk[6:]
			seen[id] = true
			o, ok := orders[id]
			switch {
			case !ok:
				r.Phantom++
			case o.Customer != str(item["customer"]) || o.AmountCents != num(item["amount_cents"]):
				r.Mismatches++
			default:
				r.Applied++
			}
		case len(pk) > 9 && pk[:9] == "customer#":
			got[pk[9:]] = totals{num(item["orders"]), num(item["total_cents"])}
		}
	})
	if err != nil {
		return r, err
	}
	r.Missing = len(orders) - len(seen) + r.Phantom
	for c, w := range want {
		if got[c] != w {
			r.Mismatches++
		}
	}
	for c := range got {
		if _, ok := want[c]; !ok {
			r.Mismatches++
		}
	}
	return r, nil
}

func scan(ctx context.Context, client ScanAPI, table string, each func(map[string]types.AttributeValue)) error {
	in := &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)}
	for {
		out, err := client.Scan(ctx, in)
		if err != nil {
			return fmt.Errorf("orderview: scan %s: %w", table, err)
		}
		for _, item := range out.Items {
			each(item)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

func str(av types.AttributeValue) string {
	if s, ok := av.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func num(av types.AttributeValue) int64 {
	if n, ok := av.(*types.AttributeValueMemberN); ok {
		v, _ := strconv.ParseInt(n.Value, 10, 64)
		return v
	}
	return 0
}
