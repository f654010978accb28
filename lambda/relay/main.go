// Command relay is the stream-triggered relay Lambda (provided.al2023,
// handler "bootstrap"). It reads the messages table's KEYS_ONLY stream,
// treats each INSERT as a hint naming a bucket, and drains the named buckets
// under their leases. Configuration: environment variables (docs/deploy.md),
// validated at init; clients are built once per container.
package main

import (
	"context"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/lambda/wiring"
)

func main() {
	logger := wiring.Logger()
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		logger.Error("outbox relay: invalid configuration; fix the variable and redeploy", "err", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second) // Lambda's init phase allows 10 s
	parts, err := wiring.Build(ctx, cfg, logger, wiring.StreamOwnerID())
	cancel()
	if err != nil {
		logger.Error("outbox relay: init failed", "err", err)
		os.Exit(2)
	}
	h := handler.NewRelay(parts.Relay, cfg.Concurrency, logger)
	logger.Info("outbox relay: ready", "relay_id", parts.Relay.ID(), "bucket_count", parts.Relay.BucketCount(),
		"messages_table", cfg.MessagesTable, "brokers", cfg.Brokers, "auth", cfg.Auth)
	lambda.Start(h.Handle)
}
