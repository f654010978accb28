package dynamo

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/dynamoerr"
)

func reason(code string) types.CancellationReason {
	return types.CancellationReason{Code: aws.String(code)}
}

func reasonItem(code string, item map[string]types.AttributeValue) types.CancellationReason {
	return types.CancellationReason{Code: aws.String(code), Item: item}
}

func cancelled(rs ...types.CancellationReason) error {
	return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "TransactWriteItems",
		Err: &types.TransactionCanceledException{Message: aws.String("Transaction cancelled"), CancellationReasons: rs}}
}

// timeoutError is a network timeout, as net/http reports one.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func lostResponse() error {
	return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "TransactWriteItems",
		Err: &smithyhttp.RequestSendError{Err: timeoutError{}}}
}

func TestClassify(t *testing.T) {
	const ours = "0190b2a4-7c1e-7d3a-9f00-0123456789ab"
	fence := fenceItem(1, 5, t0, t0)
	mine := map[string]types.AttributeValue{attrBucket: numAttr(1), attrSeq: numAttr(5), attrID: strAttr(ours)}
	other := map[string]types.AttributeValue{attrBucket: numAttr(1), attrSeq: numAttr(5), attrID: strAttr("someone-else")}
	none := reason(dynamoerr.CodeNone)
	cases := []struct {
		name      string
		err       error
		want      outcome
		cancelled bool
	}{
		{"caller condition", cancelled(reason(dynamoerr.CodeCondition), none), outConditionFailed, true},
		{"caller condition beats fence", cancelled(reason(dynamoerr.CodeCondition), reasonItem(dynamoerr.CodeCondition, fence)), outConditionFailed, true},
		{"fenced", cancelled(none, reasonItem(dynamoerr.CodeCondition, fence)), outFenced, true},
		{"fenced, no old image", cancelled(none, reason(dynamoerr.CodeCondition)), outFenced, true},
		{"own message already there", cancelled(reason(dynamoerr.CodeCondition), reasonItem(dynamoerr.CodeCondition, mine)), outCommitted, true},
		{"another message at our sequence", cancelled(none, reasonItem(dynamoerr.CodeCondition, other)), outRejected, true},
		{"conflict", cancelled(reason(dynamoerr.CodeConflict), none), outConflict, true},
		{"throttled item", cancelled(none, reason(dynamoerr.CodeThrottling)), outThrottled, true},
		{"provisioned item", cancelled(reason(dynamoerr.CodeProvisioned), none), outThrottled, true},
		{"fence beats conflict", cancelled(reason(dynamoerr.CodeConflict), reasonItem(dynamoerr.CodeCondition, fence)), outFenced, true},
		{"validation reason", cancelled(reason("ValidationError"), none), outRejected, true},
		{"no known reason", cancelled(none, none), outConflict, true},
		{"in progress", &types.TransactionInProgressException{}, outAmbiguous, false},
		{"request throttled", &smithy.OperationError{Err: &types.ProvisionedThroughputExceededException{}}, outThrottled, false},
		{"request limit", &types.RequestLimitExceeded{}, outThrottled, false},
		{"server error", &types.InternalServerError{}, outAmbiguous, false},
		{"generic 5xx", &smithy.GenericAPIError{Code: "ServiceUnavailable", Fault: smithy.FaultServer}, outAmbiguous, false},
		{"lost response", lostResponse(), outAmbiguous, false},
		{"deadline", fmt.Errorf("op: %w", context.DeadlineExceeded), outAmbiguous, false},
		{"missing table", &types.ResourceNotFoundException{}, outRejected, false},
		{"validation", &smithy.GenericAPIError{Code: "ValidationException", Fault: smithy.FaultClient}, outRejected, false},
		{"token reused with other items", &types.IdempotentParameterMismatchException{}, outRejected, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := classify(c.err, 1, []string{ours})
			if got.outcome != c.want || got.cancelled != c.cancelled {
				t.Fatalf("classify = %v (cancelled %v, %s), want %v (cancelled %v)", got.outcome, got.cancelled, got.detail, c.want, c.cancelled)
			}
		})
	}
}

func TestTransactionErrorMatches(t *testing.T) {
	cause := cancelled(reason(dynamoerr.CodeCondition), reason(dynamoerr.CodeNone))
	err := error(&TransactionError{Err: outbox.ErrConditionFailed, Cause: cause, Attempts: 1,
		Reasons: []types.CancellationReason{reason(dynamoerr.CodeCondition), reason(dynamoerr.CodeNone)}, CallerItems: 1, Fix: "re-read"})
	if !errors.Is(err, outbox.ErrConditionFailed) {
		t.Error("errors.Is(ErrConditionFailed) = false")
	}
	if errors.Is(err, outbox.ErrConflict) {
		t.Error("errors.Is(ErrConflict) = true")
	}
	var tc *types.TransactionCanceledException
	if !errors.As(err, &tc) || len(tc.CancellationReasons) != 2 {
		t.Errorf("errors.As(TransactionCanceledException) = %v", tc)
	}
	var te *TransactionError
	if !errors.As(err, &te) || len(te.CallerReasons()) != 1 || aws.ToString(te.CallerReasons()[0].Code) != dynamoerr.CodeCondition {
		t.Errorf("CallerReasons = %v", te.CallerReasons())
	}
}
