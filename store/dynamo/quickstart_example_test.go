package dynamo_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

// The quickstart's first step: the outbox's tables, the consumer's inbox
// table and the outbox's topics in its config item (the README's "1. Tables and topics", word for
// word; TestReadmeQuickstartSetup checks it).
func Example_quickstartSetup() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	db := dynamodb.NewFromConfig(cfg)
	if err := dynamo.CreateTables(ctx, db, dynamo.Tables{Messages: "orders-outbox", Control: "orders-outbox-control"},
		dynamo.Topics("order-events")); err != nil { // Write refuses any other topic
		log.Fatal(err)
	}
	if err := inbox.CreateTable(ctx, db, "orders-view-inbox"); err != nil { // the consumer's
		log.Fatal(err)
	}
}
