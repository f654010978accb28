package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

// Update an order if nobody changed it since it was read, and publish an
// event about it, atomically. This is the README's enqueue example, word for
// word (TestReadmeExample checks it).
func ExampleWriter_Write() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	tables := dynamo.Tables{Messages: "orders-outbox", Control: "orders-outbox-control"}
	w, err := dynamo.NewWriter(ctx, dynamodb.NewFromConfig(cfg), tables) // reads the config item, checks both tables
	if err != nil {
		log.Fatal(err) // e.g. a *dynamo.TableError naming a missing table
	}

	// Read the order first: Write reserves sequence numbers after this read,
	// right before the commit (docs/design.md §7.9).
	orderID, version := "order-42", int64(7) // as read
	pay, err := dynamo.UpdateIfVersion("orders", map[string]any{"id": orderID}, "version", version,
		expression.Set(expression.Name("status"), expression.Value("paid")))
	if err != nil {
		log.Fatal(err) // a *dynamo.OperationError: the item cannot be built
	}
	res, err := w.Write(ctx, []types.TransactWriteItem{pay}, outbox.Message{
		Topic: "order-events",
		Key:   []byte(orderID), // one key, one order; serialized once, here
		Value: []byte(`{"type":"OrderPaid","order":"order-42"}`),
	})
	switch {
	case errors.Is(err, outbox.ErrConditionFailed):
		// Someone changed the order since it was read; nothing was written.
		fmt.Println("the order changed: read it again and decide again")
	case errors.Is(err, outbox.ErrOutcomeUnknown):
		// The transaction may have committed.
		fmt.Println("read the order to learn whether the payment was recorded")
	case err != nil:
		log.Fatal(err) // nothing was written; the *dynamo.TransactionError says why
	default:
		m := res.Messages[0]
		fmt.Printf("enqueued %s at bucket %d, sequence %d\n", m.ID, m.Bucket, m.Sequence)
	}
}
