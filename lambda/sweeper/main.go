// Command sweeper is the scheduled sweeper Lambda (provided.al2023, handler
// "bootstrap", EventBridge schedule rate(1 minute)): lease-guarded polling
// recovery of whatever the stream path missed, backlog sampling, and loud
// detection of misconfiguration. It shares the relay's configuration.
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
		logger.Error("outbox sweeper: invalid configuration; fix the variable and redeploy", "err", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	parts, err := wiring.Build(ctx, cfg, logger, wiring.ContainerID("sweeper"))
	cancel()
	if err != nil {
		logger.Error("outbox sweeper: init failed", "err", err)
		os.Exit(2)
	}
	h := handler.NewSweeper(parts.Relay, logger)
	lambda.Start(h.Handle)
}
