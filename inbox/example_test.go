package inbox_test

import (
	"context"
	"encoding/json"
	"log"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox/inbox"
)

// A read model kept by the inbox: every OrderPlaced event adds the order to
// its customer's totals, once, in the order the writer committed them.
func Example() {
	ctx := context.Background()
	var client *dynamodb.Client // dynamodb.NewFromConfig(cfg)

	if err := inbox.CreateTable(ctx, client, "orders-view-inbox"); err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(ctx, client, "orders-view-inbox", inbox.InOrder())
	if err != nil {
		log.Fatal(err)
	}
	c, err := inbox.NewConsumer(ib, func(tx *inbox.Tx) error {
		var ev struct {
			Customer string `json:"customer"`
			Amount   int64  `json:"amount_cents"`
		}
		if err := json.Unmarshal(tx.Record().Value, &ev); err != nil {
			return err // stops the consumer at this record
		}
		tx.Add(types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String("orders-view"),
			Key:                       map[string]types.AttributeValue{"customer": &types.AttributeValueMemberS{Value: ev.Customer}},
			UpdateExpression:          aws.String("ADD orders :one, total_cents :amount"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}, ":amount": &types.AttributeValueMemberN{Value: strconv.FormatInt(ev.Amount, 10)}},
		}})
		return nil
	}, inbox.ClientOptions(kgo.SeedBrokers("localhost:9092"), kgo.ConsumerGroup("orders-view"), kgo.ConsumeTopics("orders")))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
