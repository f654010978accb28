// Command orderviewfn is the serverless form of examples/orderview: a
// Lambda function (provided.al2023, built as bootstrap) triggered by an
// Amazon MSK or self-managed Kafka event-source mapping on the orders
// topic, keeping the orderview read model through the inbox in in-order
// mode. Records it cannot process go to a dead-letter table when
// DEAD_LETTER_TABLE is set (else it stops at them, and the mapping retries
// them). docs/deploy.md has its SAM resource.
//
// Environment (checked at init: a missing one fails the init, visibly):
//
//	VIEW_TABLE          the read model's table (orderview.CreateTable)
//	INBOX_TABLE         the processed-ids table (inbox.CreateTable)
//	DEAD_LETTER_TABLE   optional: a table made with inbox.CreateTable
//	PARTIAL_BATCH       "true" when the mapping's FunctionResponseTypes
//	                    include ReportBatchItemFailures
//
// The AWS SDK's own variables apply (AWS_REGION, and
// AWS_ENDPOINT_URL_DYNAMODB for DynamoDB Local in tests).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox/examples/orderview"
	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/inbox/lambdakafka"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	fn, err := setup(context.Background(), os.Getenv, log)
	if err != nil {
		log.Error("init failed", "err", err)
		os.Exit(1)
	}
	lambda.Start(fn.Handle)
}

// setup validates the environment and wires the inbox, the handler and the
// Lambda adapter.
func setup(ctx context.Context, getenv func(string) string, log *slog.Logger) (*lambdakafka.Function, error) {
	view, inboxTable, dlq := getenv("VIEW_TABLE"), getenv("INBOX_TABLE"), getenv("DEAD_LETTER_TABLE")
	var errs []error
	if view == "" {
		errs = append(errs, errors.New("VIEW_TABLE is not set: name the read model's table"))
	}
	if inboxTable == "" {
		errs = append(errs, errors.New("INBOX_TABLE is not set: name the processed-ids table"))
	}
	partial := getenv("PARTIAL_BATCH")
	if partial != "" && partial != "true" && partial != "false" {
		errs = append(errs, fmt.Errorf("PARTIAL_BATCH=%q: want true or false", partial))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}
	db := dynamodb.NewFromConfig(cfg)
	ib, err := inbox.New(ctx, db, inboxTable, inbox.InOrder())
	if err != nil {
		return nil, err
	}
	policy := inbox.Stop()
	if dlq != "" {
		policy = inbox.DeadLetterTo(inbox.DeadLetterTable(db, dlq))
	}
	h, err := inbox.NewHandler(ib, orderview.Apply(view), inbox.OnPoison(policy), inbox.WithLogger(log))
	if err != nil {
		return nil, err
	}
	var opts []lambdakafka.Option
	if partial == "true" {
		opts = append(opts, lambdakafka.ReportBatchItemFailures())
	}
	return lambdakafka.New(h, opts...)
}
