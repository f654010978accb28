// Command sweeper is the scheduled sweeper Lambda (provided.al2023, handler
// "bootstrap", EventBridge schedule rate(1 minute)): lease-guarded polling
// recovery of whatever the stream path missed, backlog sampling, and loud
// detection of misconfiguration and of buckets that cannot be drained. Each
// invocation writes one CloudWatch Embedded Metric Format line to stdout. It
// shares the relay's configuration.
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
	emitter, err := wiring.Emitter(cfg.MessagesTable)
	if err != nil {
		logger.Error("outbox sweeper: invalid configuration: OUTBOX_MESSAGES_TABLE cannot name a metric dimension", "err", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	parts, err := wiring.Build(ctx, cfg, logger, wiring.ContainerID("sweeper"))
	cancel()
	if err != nil {
		logger.Error("outbox sweeper: init failed", "err", err)
		os.Exit(2)
	}
	// Stuck buckets are told across invocations: the progress lives in the
	// control table, since this environment may be new at any invocation.
	h, err := handler.NewSweeper(parts.Relay, logger, handler.SweeperEMF(emitter),
		handler.SweepProgress(wiring.NewProgressStore(parts.Dynamo, cfg.ControlTable)))
	if err != nil {
		logger.Error("outbox sweeper: init failed", "err", err)
		os.Exit(2)
	}
	lambda.Start(h.Handle)
}
