// Command setup is the stack's custom resource (Custom::OutboxConfig,
// provided.al2023, handler "bootstrap"): when CloudFormation creates or
// updates the stack it writes the outbox's config item with the stack's
// BucketCount, OutboxMode and (watermark mode) OutboxRetentionHours, so the
// relay and the sweeper find a ready outbox when `sam deploy` completes. An
// update that changes BucketCount or the mode is refused (the stack rolls
// back) unless the outbox is empty; deleting the stack never fails here and
// leaves the tables and the item alone (the tables are retained). See
// handler.go and docs/deploy.md.
//
// Everything it needs comes with the event (the table names, the count,
// the mode and the retention), so it has no configuration that could fail its init: a function
// that cannot start leaves CloudFormation waiting an hour for an answer.
package main

import (
	"context"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox/lambda/wiring"
)

func main() {
	logger := wiring.Logger()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(os.Getenv("AWS_REGION")))
	cancel()
	var h *Handler
	if err == nil {
		client := dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
			if ep := os.Getenv("OUTBOX_DYNAMODB_ENDPOINT"); ep != "" {
				o.BaseEndpoint = aws.String(ep)
			}
		})
		h = NewHandler(client, logger)
	} else {
		// Still answer every event, with the reason.
		logger.Error("outbox setup: load AWS configuration", "err", err)
		h = NewHandler(nil, logger)
		h.initErr = err
	}
	// The response goes to a pre-signed S3 URL; the SDK's clients do not
	// apply to it, so bound it here.
	http.DefaultClient.Timeout = 30 * time.Second
	lambda.Start(cfn.LambdaWrap(h.Handle))
}
