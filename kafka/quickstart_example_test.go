package kafka_test

import (
	"context"
	"log"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
)

// A relay in a container or any long-running process: Relay.Run sweeps
// every PollInterval until SIGTERM (the README's "3. The relay", word for
// word; TestReadmeQuickstartRelay checks it).
func Example_runRelay() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamo.NewStore(ctx, dynamodb.NewFromConfig(cfg), dynamo.Tables{Messages: "orders-outbox", Control: "orders-outbox-control"})
	if err != nil {
		log.Fatal(err)
	}
	logger := slog.Default() // without one the relay and the publisher log nothing, a stuck relay included
	pub, err := kafka.NewPublisher(ctx, []string{"localhost:9092"}, kafka.Topics("order-events"), kafka.WithLogger(logger))
	if err != nil {
		log.Fatal(err) // e.g. a *kafka.TopicError: the topic does not exist
	}
	defer pub.Close()
	rl, err := relay.New(ctx, store, pub, relay.PollInterval(200*time.Millisecond), relay.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	log.Println("relay stopped:", rl.Run(ctx)) // context.Canceled after SIGTERM; a *outbox.BucketRangeError is a misconfiguration
}
