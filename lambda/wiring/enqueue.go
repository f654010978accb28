package wiring

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/store/dynamo"
)

// Enqueue builds the enqueue function's handler from its configuration: a
// dynamo.Writer on the outbox's tables (it reads the config item and checks
// both tables) and the handler. The enqueue Lambda and `outbox enqueue`
// (which sends a request file through it) build it here, so both run the
// same code. The error says what to fix.
func Enqueue(ctx context.Context, cfg config.EnqueueConfig, client *dynamodb.Client, logger *slog.Logger) (*handler.Enqueue, *dynamo.Writer, error) {
	tables := dynamo.Tables{Messages: cfg.MessagesTable, Control: cfg.ControlTable}
	var wopts []dynamo.WriterOption
	if cfg.OutboxRegion != "" {
		wopts = append(wopts, dynamo.Region(cfg.OutboxRegion))
	}
	writer, err := dynamo.NewWriter(ctx, client, tables, wopts...)
	if err != nil {
		return nil, nil, fmt.Errorf("the outbox tables (OUTBOX_MESSAGES_TABLE, OUTBOX_CONTROL_TABLE): %w", err)
	}
	h, err := handler.NewEnqueue(writer, client, tables, 0, logger)
	if err != nil {
		return nil, nil, err
	}
	return h, writer, nil
}
