package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
)

// Create the outbox's tables once, at deployment (or let the SAM template
// do it and only write the config item).
func ExampleCreateTables() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	tables := dynamo.Tables{Messages: "orders-outbox", Control: "orders-outbox-control"}
	if err := dynamo.CreateTables(ctx, dynamodb.NewFromConfig(cfg), tables, dynamo.BucketCount(16)); err != nil {
		log.Fatal(err)
	}
}

// A relay's store: NewStore reads the outbox's config item, whose shared
// settings (BucketCount, the mode, MaxMessageBytes, the header names) the
// store, the publisher (kafka.OutboxConfig) and the relay run on.
// lambda/relay and lambda/sweeper wire it the same way.
func ExampleNewStore() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	tables := dynamo.Tables{Messages: "orders-outbox", Control: "orders-outbox-control"}
	store, err := dynamo.NewStore(ctx, dynamodb.NewFromConfig(cfg), tables)
	if err != nil {
		log.Fatal(err) // e.g. dynamo.ErrNoConfig: create the outbox first
	}
	pub, err := kafka.NewPublisher(ctx, []string{"b-1.example.kafka.eu-west-1.amazonaws.com:9098"},
		kafka.Topics("order-events"), kafka.OutboxConfig(store.Opened()))
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	rl, err := relay.New(ctx, store, pub)
	if err != nil {
		log.Fatal(err)
	}
	rep, err := rl.Sweep(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d pending, %d buckets drained, %d failed\n", rep.Pending, len(rep.Drained), len(rep.Errors))
}

// UpdateIfVersion builds the optimistic version check and the version bump;
// Write runs the item with the messages in one transaction (see the Writer.Write
// example).
func ExampleUpdateIfVersion() {
	pay, err := dynamo.UpdateIfVersion("orders", map[string]any{"id": "order-42"}, "version", 7,
		expression.Set(expression.Name("status"), expression.Value("paid")))
	if err != nil {
		log.Fatal(err)
	}
	u := pay.Update
	fmt.Println(*u.ConditionExpression)
	fmt.Println(strings.TrimSpace(*u.UpdateExpression))
	fmt.Println(u.ExpressionAttributeNames)
	// Output:
	// #0 = :0
	// SET #v = :v, #1 = :1
	// map[#0:version #1:status #v:version]
}

// Create the order only if it is new, only for an active customer; with
// the OrderPlaced message, in one Write.
func ExamplePut() {
	type order struct {
		ID       string `dynamodbav:"id"`
		Customer string `dynamodbav:"customer"`
		Cents    int    `dynamodbav:"amount_cents"`
	}
	place, err := dynamo.Put("orders", order{ID: "order-43", Customer: "c-7", Cents: 1999},
		expression.AttributeNotExists(expression.Name("id")))
	if err != nil {
		log.Fatal(err)
	}
	active, err := dynamo.Check("customers", map[string]any{"id": "c-7"},
		expression.Name("state").Equal(expression.Value("active")))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(*place.Put.ConditionExpression, place.Put.ExpressionAttributeNames)
	fmt.Println(*active.ConditionCheck.ConditionExpression, active.ConditionCheck.ExpressionAttributeNames)
	// Then: w.Write(ctx, []types.TransactWriteItem{place, active}, orderPlaced)

	// Output:
	// attribute_not_exists (#0) map[#0:id]
	// #0 = :0 map[#0:state]
}

// Records the relay parked (dead letters: a record Kafka will never take),
// oldest first, with why they were parked.
func ExampleStore_ListParked() {
	ctx := context.Background()
	store := openStore(ctx)
	for bucket := range 16 {
		parked, err := store.ListParked(ctx, bucket, 100)
		if err != nil {
			log.Fatal(err)
		}
		for _, p := range parked {
			if p.Err != nil {
				// The stored item itself cannot be decoded: replay it with
				// a replacement, or drop it.
				fmt.Printf("bucket %d sequence %d: undecodable: %v\n", p.Bucket, p.Sequence, p.Err)
				continue
			}
			fmt.Printf("bucket %d sequence %d: message %s to %s, parked after %d attempts: %s\n",
				p.Bucket, p.Sequence, p.Message.ID, p.Message.Topic, p.Attempts, p.Reason)
		}
	}
}

// Replay a parked message once its cause is fixed (the topic now admits its
// size, say): it is enqueued again, with its original message id, at its
// bucket's tail, behind what was enqueued since.
func ExampleStore_ReplayParked() {
	ctx := context.Background()
	store := openStore(ctx)
	m, err := store.ReplayParked(ctx, 3, 1207, nil)
	if errors.Is(err, dynamo.ErrNotParked) {
		fmt.Println("nothing parked there (replayed or dropped already?)")
		return
	}
	if err != nil {
		log.Fatal(err) // nothing changed; the record is still parked
	}
	fmt.Printf("message %s re-enqueued at bucket %d, sequence %d\n", m.ID, m.Bucket, m.Sequence)

	// A repaired payload replaces the stored one; it keeps the id, the
	// topic and the key.
	parked, err := store.ListParked(ctx, 3, 1)
	if err != nil {
		log.Fatal(err)
	}
	if len(parked) == 1 && parked[0].Err == nil {
		fixed := parked[0].Message
		fixed.Value = []byte(`{"type":"OrderPaid","order":"order-42"}`)
		if _, err := store.ReplayParked(ctx, 3, parked[0].Sequence, &fixed); err != nil {
			log.Fatal(err)
		}
	}
}

// Drop a parked message for good: an operator's decision, after which it is
// never published.
func ExampleStore_DropParked() {
	ctx := context.Background()
	store := openStore(ctx)
	err := store.DropParked(ctx, 3, 1207)
	switch {
	case errors.Is(err, dynamo.ErrNotParked):
		fmt.Println("nothing parked there")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("dropped")
	}
}

// openStore opens the outbox's store for the examples.
func openStore(ctx context.Context) *dynamo.Store {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	tables := dynamo.Tables{Messages: "orders-outbox", Control: "orders-outbox-control"}
	store, err := dynamo.NewStore(ctx, dynamodb.NewFromConfig(cfg), tables)
	if err != nil {
		log.Fatal(err)
	}
	return store
}
