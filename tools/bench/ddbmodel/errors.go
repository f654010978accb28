package ddbmodel

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// The errors the model answers with are the SDK's own types, so that code
// calling the model in process sees what it sees from DynamoDB (and the
// SDK's retryer classifies them as it classifies DynamoDB's); the HTTP
// server writes them in DynamoDB's JSON error shape.

func validation(format string, args ...any) error {
	return &smithy.GenericAPIError{Code: "ValidationException", Message: fmt.Sprintf(format, args...), Fault: smithy.FaultClient}
}

func notFound(table string) error {
	return &types.ResourceNotFoundException{Message: aws.String("Requested resource not found: Table: " + table + " not found")}
}

func conditionFailed(old Item, returnOld bool) error {
	e := &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed")}
	if returnOld && old != nil {
		e.Item = old
	}
	return e
}

// throttled is the answer to a call over a partition key's capacity: for
// on-demand tables too, DynamoDB answers ProvisionedThroughputExceeded
// with the reason KeyRangeThroughputExceeded ("Troubleshooting throttling",
// key range throughput exceeded), which the SDK retries.
func throttled(t *table, write bool) error {
	reason := "TableReadKeyRangeThroughputExceeded"
	if write {
		reason = "TableWriteKeyRangeThroughputExceeded"
	}
	return &types.ProvisionedThroughputExceededException{
		Message:           aws.String("Throughput exceeds the current throughput limit for your account or table. Reduce the request rate."),
		ThrottlingReasons: []types.ThrottlingReason{{Reason: aws.String(reason), Resource: aws.String(t.arn)}},
	}
}

// Cancellation reason codes of TransactionCanceledException.
const (
	reasonNone       = "None"
	reasonCondition  = "ConditionalCheckFailed"
	reasonThrottling = "ThrottlingError"
)

func cancelled(reasons []types.CancellationReason) error {
	codes := ""
	for i, r := range reasons {
		if i > 0 {
			codes += ", "
		}
		codes += aws.ToString(r.Code)
	}
	return &types.TransactionCanceledException{
		Message:             aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons [" + codes + "]"),
		CancellationReasons: reasons,
	}
}
