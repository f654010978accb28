package esm

import (
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// Failure conditions, as Lambda writes them in requestContext.condition.
const (
	ConditionRetriesExhausted = "RetryAttemptsExhausted"
	ConditionRecordAge        = "RecordAgeExceeded"
)

// FailureRecord describes records the mapping gave up on. It marshals to the
// JSON Lambda sends to an on-failure destination for a DynamoDB stream; like
// Lambda's, that JSON carries no record contents, only their position. Records
// and Err are extras for Go callers.
type FailureRecord struct {
	RequestContext  FailureRequestContext  `json:"requestContext"`
	ResponseContext FailureResponseContext `json:"responseContext"`
	Version         string                 `json:"version"`   // "1.0"
	Timestamp       string                 `json:"timestamp"` // RFC 3339, milliseconds, UTC
	BatchInfo       DDBStreamBatchInfo     `json:"DDBStreamBatchInfo"`

	// Records are the dropped records, in stream order.
	Records []events.DynamoDBEventRecord `json:"-"`
	// Err is the last invocation's error, nil if the function returned
	// batchItemFailures or was never invoked.
	Err error `json:"-"`
}

// FailureRequestContext is the requestContext of a FailureRecord.
type FailureRequestContext struct {
	RequestID              string `json:"requestId"` // the last invocation's, empty if never invoked
	FunctionARN            string `json:"functionArn"`
	Condition              string `json:"condition"` // ConditionRetriesExhausted or ConditionRecordAge
	ApproximateInvokeCount int    `json:"approximateInvokeCount"`
}

// FailureResponseContext is the responseContext of a FailureRecord.
type FailureResponseContext struct {
	StatusCode      int    `json:"statusCode"`
	ExecutedVersion string `json:"executedVersion"`
	FunctionError   string `json:"functionError,omitempty"` // "Unhandled" after a function error
}

// DDBStreamBatchInfo locates the dropped records in the stream.
type DDBStreamBatchInfo struct {
	ShardID                         string `json:"shardId"`
	StartSequenceNumber             string `json:"startSequenceNumber"`
	EndSequenceNumber               string `json:"endSequenceNumber"`
	ApproximateArrivalOfFirstRecord string `json:"approximateArrivalOfFirstRecord"` // RFC 3339, seconds
	ApproximateArrivalOfLastRecord  string `json:"approximateArrivalOfLastRecord"`
	BatchSize                       int    `json:"batchSize"`
	StreamARN                       string `json:"streamArn"`
}

func newFailureRecord(now time.Time, streamARN, shardID, functionARN, condition, requestID string,
	invokes int, recs []events.DynamoDBEventRecord, err error, unhandled bool) FailureRecord {
	first, last := recs[0].Change, recs[len(recs)-1].Change
	fr := FailureRecord{
		RequestContext: FailureRequestContext{
			RequestID:              requestID,
			FunctionARN:            functionARN,
			Condition:              condition,
			ApproximateInvokeCount: invokes,
		},
		Version:   "1.0",
		Timestamp: now.UTC().Format("2006-01-02T15:04:05.000Z"),
		BatchInfo: DDBStreamBatchInfo{
			ShardID:                         shardID,
			StartSequenceNumber:             first.SequenceNumber,
			EndSequenceNumber:               last.SequenceNumber,
			ApproximateArrivalOfFirstRecord: first.ApproximateCreationDateTime.UTC().Format(time.RFC3339),
			ApproximateArrivalOfLastRecord:  last.ApproximateCreationDateTime.UTC().Format(time.RFC3339),
			BatchSize:                       len(recs),
			StreamARN:                       streamARN,
		},
		Records: recs,
		Err:     err,
	}
	if invokes > 0 {
		fr.ResponseContext = FailureResponseContext{StatusCode: 200, ExecutedVersion: "$LATEST"}
		if unhandled {
			fr.ResponseContext.FunctionError = "Unhandled"
		}
	}
	return fr
}
