package wiring

import (
	"context"
	"io"
	"time"

	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/relay"
)

// SetupRelay is the relay function's init (lambda/relay): configuration from getenv, logs and metrics
// to out. It logs why it failed and returns false.
func SetupRelay(getenv func(string) string, out io.Writer) (*handler.Relay, bool) {
	logger := NewLogger(out, getenv("AWS_LAMBDA_LOG_LEVEL"))
	cfg, err := config.Load(getenv)
	if err != nil {
		logger.Log(context.Background(), LevelFatal, "outbox relay: invalid configuration; fix the variable and redeploy", "err", err)
		return nil, false
	}
	emitter, err := NewEmitter(out, cfg.MessagesTable, getenv("AWS_LAMBDA_LOG_LEVEL"))
	if err != nil {
		logger.Log(context.Background(), LevelFatal, "outbox relay: invalid configuration: OUTBOX_MESSAGES_TABLE cannot name a metric dimension", "err", err)
		return nil, false
	}
	// The engine's metrics, gathered per invocation into one EMF line on
	// stdout (CloudWatch Logs extracts them; docs/deploy.md, Metrics).
	metrics := handler.NewRelayMetrics()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second) // Lambda's init phase allows 10 s
	parts, err := Build(ctx, cfg, logger, StreamOwnerID(), relay.WithMetrics(metrics))
	cancel()
	if err != nil {
		logger.Log(context.Background(), LevelFatal, "outbox relay: init failed", "err", err)
		return nil, false
	}
	h := handler.NewRelay(parts.Relay, cfg.Concurrency, logger, handler.RelayEMF(emitter, metrics))
	logger.Info("outbox relay: ready", append([]any{"relay_id", parts.Relay.ID(), "bucket_count", parts.Relay.BucketCount(),
		"messages_table", cfg.MessagesTable, "brokers", cfg.Brokers, "auth", cfg.Auth}, parts.Init.LogAttrs()...)...)
	return h, true
}

// SetupSweeper is the sweeper function's init (lambda/sweeper): configuration from getenv, logs and metrics
// to out. It logs why it failed and returns false. A failed init writes no
// metric: the backlog alarms (OldestPendingAgeAlarm, StuckBucketsAlarm)
// treat missing data as breaching, so a sweeper that cannot start, or
// cannot sample the backlog, is an alarm (docs/failures.md).
func SetupSweeper(getenv func(string) string, out io.Writer) (*handler.Sweeper, bool) {
	logger := NewLogger(out, getenv("AWS_LAMBDA_LOG_LEVEL"))
	cfg, err := config.Load(getenv)
	if err != nil {
		logger.Log(context.Background(), LevelFatal, "outbox sweeper: invalid configuration; fix the variable and redeploy", "err", err)
		return nil, false
	}
	emitter, err := NewEmitter(out, cfg.MessagesTable, getenv("AWS_LAMBDA_LOG_LEVEL"))
	if err != nil {
		logger.Log(context.Background(), LevelFatal, "outbox sweeper: invalid configuration: OUTBOX_MESSAGES_TABLE cannot name a metric dimension", "err", err)
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	parts, err := Build(ctx, cfg, logger, ContainerID("sweeper"))
	cancel()
	if err != nil {
		logger.Log(context.Background(), LevelFatal, "outbox sweeper: init failed", "err", err)
		return nil, false
	}
	// Stuck buckets are told across invocations: the progress lives in the
	// control table, since this environment may be new at any invocation.
	h, err := handler.NewSweeper(parts.Relay, logger, handler.SweeperEMF(emitter),
		handler.SweepProgress(NewProgressStore(parts.Dynamo, cfg.ControlTable)))
	if err != nil {
		logger.Log(context.Background(), LevelFatal, "outbox sweeper: init failed", "err", err)
		return nil, false
	}
	return h, true
}
