package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda/messages"

	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/lambda/wiring"
)

var enqueueCommand = &command{
	name:    "enqueue",
	args:    "REQUEST.json",
	summary: "commit a request through the enqueue function's handler, here (try the enqueue function locally)",
	description: `Sends a request to the enqueue function's handler, the same code the enqueue
Lambda runs (lambda/handler, built by lambda/wiring), in this process and
against these tables: the caller's items in DynamoDB JSON and the messages,
committed in one TransactWriteItems, once per idempotency key. The file holds
what the function is invoked with: a request, or an event that carries
requests (an SQS or Kinesis batch, an EventBridge event, an EventBridge Pipes
batch). "-" reads it from standard input. The format is in docs/deploy.md
(Enqueue from any AWS service) and schema/enqueue-request.schema.json.

It prints the function's answer, JSON, on standard output. A request the
function refuses prints its error as the Lambda would answer it
({"errorType": "Outbox.Validation", "errorMessage": ...}) and exits 1; so
does a batch with failed records (batchItemFailures).

OUTBOX_REGION is read as the function reads it; MaxMessageBytes and the
header names are the outbox's config item's.`,
	example: `outbox enqueue pay-order.json
echo '{"idempotencyKey":"k-1","messages":[{"topic":"order-events","key":"o-1","value":{"type":"OrderPaid"}}]}' | outbox enqueue -`,
	timeout: time.Minute,
	bind: func(fs *flag.FlagSet) func(*app, *connection, []string) (action, error) {
		verbose := fs.Bool("verbose", false, "log the handler's progress on standard error (default: errors only)")
		return func(a *app, c *connection, args []string) (action, error) {
			var path string
			switch len(args) {
			case 0:
				return nil, usagef("REQUEST.json is required: the file to send (\"-\" for standard input)")
			case 1:
				path = args[0]
			default:
				return nil, usagef("unexpected argument %q after REQUEST.json", args[1])
			}
			cfg, err := config.LoadEnqueue(overlay(a.getenv, c, nil))
			if err != nil {
				return nil, configError(err)
			}
			var raw []byte
			if path == "-" {
				raw, err = io.ReadAll(a.stdin)
			} else {
				raw, err = os.ReadFile(path)
			}
			if err != nil {
				return nil, usagef("REQUEST.json: %v", err)
			}
			if !json.Valid(raw) {
				return nil, usagef("REQUEST.json: %s is not JSON", path)
			}
			return func(ctx context.Context, a *app, s *session) error {
				level := slog.LevelError // a refusal is the answer, not a warning
				if *verbose {
					level = slog.LevelInfo
				}
				logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
				h, _, err := wiring.Enqueue(ctx, cfg, s.db, logger)
				if err != nil {
					return err
				}
				return enqueue(ctx, a, raw, h.Handle)
			}, nil
		}
	},
}

// enqueue sends raw through handle and prints the answer.
func enqueue(ctx context.Context, a *app, raw []byte, handle func(context.Context, json.RawMessage) (any, error)) error {
	resp, err := handle(ctx, raw)
	var fnErr messages.InvokeResponse_Error
	if errors.As(err, &fnErr) {
		out, _ := json.Marshal(fnErr)
		fmt.Fprintf(a.stdout, "%s\n", out)
		why := &handler.EnqueueError{Type: fnErr.Type, Message: fnErr.Message}
		_ = json.Unmarshal([]byte(fnErr.Message), why) // the function's errorMessage is the *EnqueueError as JSON
		return fmt.Errorf("the function refused the request: %v", why)
	}
	if err != nil {
		return err
	}
	out, err := json.MarshalIndent(resp, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "%s\n", out)
	if b, ok := resp.(events.SQSEventResponse); ok && len(b.BatchItemFailures) > 0 {
		return fmt.Errorf("%d record(s) of the batch failed (batchItemFailures); --verbose logs why", len(b.BatchItemFailures))
	}
	return nil
}
