// Command relay is the stream-triggered relay Lambda (provided.al2023,
// handler "bootstrap"). It reads the messages table's KEYS_ONLY stream,
// treats each INSERT as a hint naming a bucket, and drains the named buckets
// under their leases. Configuration: environment variables (docs/deploy.md),
// validated at init; clients are built once per container. Each invocation
// writes one CloudWatch Embedded Metric Format line to stdout.
package main

import (
	"context"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/dynakafka/outbox"
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
	emitter, err := wiring.Emitter(cfg.MessagesTable)
	if err != nil {
		logger.Error("outbox relay: invalid configuration: OUTBOX_MESSAGES_TABLE cannot name a metric dimension", "err", err)
		os.Exit(2)
	}
	// The engine's metrics, gathered per invocation into one EMF line on
	// stdout (CloudWatch Logs extracts them; docs/deploy.md, Metrics).
	metrics := handler.NewRelayMetrics()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second) // Lambda's init phase allows 10 s
	parts, err := wiring.Build(ctx, cfg, logger, wiring.StreamOwnerID(), outbox.WithMetrics(metrics))
	cancel()
	if err != nil {
		logger.Error("outbox relay: init failed", "err", err)
		os.Exit(2)
	}
	h := handler.NewRelay(parts.Relay, cfg.Concurrency, logger, handler.RelayEMF(emitter, metrics))
	logger.Info("outbox relay: ready", "relay_id", parts.Relay.ID(), "bucket_count", parts.Relay.BucketCount(),
		"messages_table", cfg.MessagesTable, "brokers", cfg.Brokers, "auth", cfg.Auth)
	lambda.Start(h.Handle)
}
