package dynamo_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

// The quickstart's first step: the outbox's tables, the consumer's inbox
// table and the topics (the README's "1. Tables and topics", word for
// word; TestReadmeQuickstartSetup checks it).
func Example_quickstartSetup() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	db := dynamodb.NewFromConfig(cfg)
	if err := dynamo.CreateTables(ctx, db, dynamo.Tables{Messages: "orders-outbox", Control: "orders-outbox-control"}); err != nil {
		log.Fatal(err)
	}
	if err := inbox.CreateTable(ctx, db, "orders-view-inbox"); err != nil { // the consumer's
		log.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers("localhost:9092"))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest() // or your Kafka tooling, or kadm
	topic := kmsg.NewCreateTopicsRequestTopic()
	topic.Topic, topic.NumPartitions, topic.ReplicationFactor = "order-events", 12, -1
	req.Topics = append(req.Topics, topic)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		log.Fatal(err)
	}
}
