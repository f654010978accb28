package inbox_test

import (
	"context"
	"encoding/json"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

// Keep customers' order totals from the order events: each event applied
// once, in the order its writer committed it. This is the README's inbox
// example, word for word (TestReadmeExample checks it).
func Example() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	client := dynamodb.NewFromConfig(cfg)
	if err := inbox.CreateTable(ctx, client, "orders-view-inbox"); err != nil { // the processed-ids table
		log.Fatal(err)
	}
	ib, err := inbox.New(ctx, client, "orders-view-inbox", inbox.InOrder())
	if err != nil {
		log.Fatal(err)
	}
	c, err := inbox.NewConsumer(ib, func(tx *inbox.Tx) error {
		var ev struct {
			Customer    string `json:"customer"`
			AmountCents int64  `json:"amount_cents"`
		}
		if err := json.Unmarshal(tx.Record().Value, &ev); err != nil {
			return inbox.Permanent(err) // to the poison policy: inbox.OnPoison (default Stop)
		}
		// Built with the writer's helpers; committed with the message id.
		totals, err := dynamo.Update("orders-view", map[string]any{"customer": ev.Customer},
			expression.Add(expression.Name("orders"), expression.Value(1)).
				Add(expression.Name("total_cents"), expression.Value(ev.AmountCents)))
		if err != nil {
			return err
		}
		tx.Add(totals)
		return nil
	}, inbox.ClientOptions(kgo.SeedBrokers("broker-1:9092"), kgo.ConsumerGroup("orders-view"), kgo.ConsumeTopics("order-events")))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // commits the offsets of what was processed
	if err := c.Run(ctx); err != nil {
		log.Fatal(err) // a record that could not be processed; a new Consumer resumes there
	}
}
