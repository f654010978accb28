// Command orderview is the example consuming service: it consumes the order
// service's topic with the inbox and keeps a read model of orders and
// customer totals in DynamoDB (package examples/orderview), each event
// applied once, in commit order.
//
//	KAFKA_BOOTSTRAP_SERVERS=localhost:9092 orderview -topic orders -view orders-view
//
// DynamoDB: the default AWS configuration, or the endpoint in
// OUTBOX_DYNAMODB_ENDPOINT (DynamoDB Local). It creates the read model's
// table and the inbox's processed-ids table (<view>-inbox) if they do not
// exist, and runs until SIGINT or SIGTERM. `make demo` runs the same consumer
// in process and checks the read model against the committed orders.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox/examples/orderview"
	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/local/dynamolocal"
)

func main() {
	var (
		topic   = flag.String("topic", "orders", "the order service's topic")
		group   = flag.String("group", "orders-view", "consumer group")
		view    = flag.String("view", "orders-view", "read model table (the inbox table is <view>-inbox)")
		inOrder = flag.Bool("in-order", true, "in-order mode (per bucket sequence), else id-only")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(ctx, log, *topic, *group, *view, *inOrder); err != nil {
		fmt.Fprintln(os.Stderr, "orderview:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, topic, group, view string, inOrder bool) error {
	var brokers []string
	for _, b := range strings.Split(os.Getenv("KAFKA_BOOTSTRAP_SERVERS"), ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if len(brokers) == 0 {
		return fmt.Errorf("set KAFKA_BOOTSTRAP_SERVERS to the brokers (host:port, comma-separated)")
	}
	db, err := client(ctx)
	if err != nil {
		return err
	}
	if err := orderview.CreateTable(ctx, db, view); err != nil {
		return err
	}
	if err := inbox.CreateTable(ctx, db, view+"-inbox"); err != nil {
		return err
	}
	var opts []inbox.Option
	if inOrder {
		opts = append(opts, inbox.InOrder())
	}
	ib, err := inbox.New(ctx, db, view+"-inbox", opts...)
	if err != nil {
		return err
	}
	c, err := inbox.NewConsumer(ib, orderview.Apply(view), inbox.WithLogger(log),
		inbox.ClientOptions(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic)))
	if err != nil {
		return err
	}
	log.Info("orderview consuming", "topic", topic, "group", group, "view", view, "in_order", inOrder)
	runErr := c.Run(ctx)
	if err := c.Close(); err != nil {
		log.Warn("close", "err", err)
	}
	return runErr
}

func client(ctx context.Context) (*dynamodb.Client, error) {
	if endpoint := os.Getenv("OUTBOX_DYNAMODB_ENDPOINT"); endpoint != "" {
		cfg, err := dynamolocal.NewConfig(ctx, endpoint, os.Getenv("AWS_REGION"))
		if err != nil {
			return nil, err
		}
		return dynamolocal.NewClient(cfg, endpoint), nil
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	return dynamodb.NewFromConfig(cfg), nil
}
