package dynamo_test

import (
	"context"
	"errors"
	"log"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
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

// Update an aggregate under an optimistic version check and publish an
// event about it, atomically.
func ExampleWriter_Write() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	client := dynamodb.NewFromConfig(cfg)
	w, err := dynamo.NewWriter(ctx, client, dynamo.Tables{Messages: "orders-outbox", Control: "orders-outbox-control"})
	if err != nil {
		log.Fatal(err) // for example a BucketCount that contradicts the table's
	}

	// Read the aggregate first; Write reserves sequence numbers after this
	// read, right before the commit.
	orderID, version := "order-42", 7
	update := types.TransactWriteItem{Update: &types.Update{
		TableName:                aws.String("orders"),
		Key:                      map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: orderID}},
		UpdateExpression:         aws.String("SET #st = :paid, #ver = :next"),
		ConditionExpression:      aws.String("#ver = :ver"),
		ExpressionAttributeNames: map[string]string{"#st": "status", "#ver": "version"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":paid": &types.AttributeValueMemberS{Value: "paid"},
			":ver":  &types.AttributeValueMemberN{Value: strconv.Itoa(version)},
			":next": &types.AttributeValueMemberN{Value: strconv.Itoa(version + 1)},
		},
	}}
	res, err := w.Write(ctx, []types.TransactWriteItem{update}, outbox.Message{
		Topic: "order-events",
		Key:   []byte(orderID), // one key, one order
		Value: []byte(`{"type":"OrderPaid","order":"order-42"}`),
	})
	switch {
	case errors.Is(err, outbox.ErrConditionFailed):
		// Someone else changed the order: re-read it and decide again.
	case errors.Is(err, outbox.ErrOutcomeUnknown):
		// Read the order to learn whether the payment was recorded.
	case err != nil:
		log.Fatal(err)
	default:
		log.Printf("event %s at bucket %d sequence %d", res.Messages[0].ID, res.Messages[0].Bucket, res.Messages[0].Sequence)
	}
}
