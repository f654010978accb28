// Command enqueue is the enqueue Lambda (provided.al2023, handler
// "bootstrap"): any AWS service invokes it with a request (the caller's
// DynamoDB items and outbox messages), or a batch of them, and it commits
// each in one TransactWriteItems through dynamo.Writer, once per idempotency
// key (docs/deploy.md, Enqueue from any AWS service). Configuration:
// OUTBOX_MESSAGES_TABLE, OUTBOX_CONTROL_TABLE and OUTBOX_REGION, validated
// at init, and the outbox's config item (MaxMessageBytes, the header
// names, the topics).
package main

import (
	"context"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/lambda/wiring"
)

func main() {
	logger := wiring.Logger()
	cfg, err := config.LoadEnqueue(os.Getenv)
	if err != nil {
		logger.Error("outbox enqueue: invalid configuration; fix the variable and redeploy", "err", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second) // Lambda's init phase allows 10 s
	defer cancel()
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(cfg.Region))
	if err != nil {
		logger.Error("outbox enqueue: init failed: load AWS configuration", "err", err)
		os.Exit(2)
	}
	h, writer, err := wiring.Enqueue(ctx, cfg, wiring.DynamoClient(awsCfg, cfg.DynamoEndpoint), logger)
	if err != nil {
		logger.Error("outbox enqueue: init failed", "err", err)
		os.Exit(2)
	}
	cancel()
	logger.Info("outbox enqueue: ready", "bucket_count", writer.BucketCount(), "messages_table", cfg.MessagesTable)
	lambda.Start(h.Handle)
}
