package handler

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-lambda-go/lambda/messages"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

// The enqueue function's error types: the errorType of its Lambda error
// (Step Functions' Error, what a Retry or Catch matches). Every one of them
// but ErrorOutcomeUnknown means nothing was written.
const (
	// ErrorValidation: the request is wrong (Field says where); fix it, do
	// not retry it as is.
	ErrorValidation = "Outbox.Validation"
	// ErrorConditionFailed: a condition on one of the caller's items
	// failed (Reasons says which); re-read and decide.
	ErrorConditionFailed = "Outbox.ConditionFailed"
	// ErrorThrottled: DynamoDB throttled the tables and the writer's
	// retries ran out; retry later with the same idempotency key.
	ErrorThrottled = "Outbox.Throttled"
	// ErrorOutcomeUnknown: the transaction may have committed. Retry with
	// the same idempotency key: it commits once.
	ErrorOutcomeUnknown = "Outbox.OutcomeUnknown"
	// ErrorRetryable: a conflicting transaction on the same items, or
	// relays fencing the reserved numbers, outlasted the writer's retries;
	// retrying with the same key is safe.
	ErrorRetryable = "Outbox.Retryable"
	// ErrorRejected: DynamoDB refused the transaction for another reason
	// than its content (a missing table, access denied); fix the
	// deployment.
	ErrorRejected = "Outbox.Rejected"
)

// EnqueueError is a failed request. As a Lambda error, Type is its
// errorType and errorMessage is the JSON of the whole value (the error
// document of schema/enqueue-response.schema.json).
type EnqueueError struct {
	Type    string `json:"errorType"`
	Message string `json:"message"`
	// Field is the JSON path of the wrong field (Outbox.Validation).
	Field string `json:"field,omitempty"`
	// Reasons are the cancellation reasons of the caller's items, aligned
	// with transactItems (Outbox.ConditionFailed).
	Reasons []Reason `json:"reasons,omitempty"`
}

// Reason is the cancellation reason of one of the caller's items.
type Reason struct {
	Index   int    `json:"index"`
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
	// Item is the old image (DynamoDB JSON) when the item asked for it
	// (ReturnValuesOnConditionCheckFailure ALL_OLD).
	Item map[string]any `json:"item,omitempty"`
}

func (e *EnqueueError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Type, e.Field, e.Message)
	}
	return e.Type + ": " + e.Message
}

// Lambda is e as the runtime's error response: aws-lambda-go sends a
// messages.InvokeResponse_Error as it is (other errors get the name of their
// Go type as errorType).
func (e *EnqueueError) Lambda() messages.InvokeResponse_Error {
	doc, _ := json.Marshal(e)
	return messages.InvokeResponse_Error{Type: e.Type, Message: string(doc)}
}

// toEnqueueError translates a decoding or Writer error; callerItems is how
// many transactItems the request had (the idempotency record follows them).
func toEnqueueError(err error, callerItems int) *EnqueueError {
	var (
		ee *EnqueueError
		re *RequestError
		ve *outbox.ValidationError
		te *dynamo.TransactionError
	)
	switch {
	case errors.As(err, &ee):
		return ee
	case errors.As(err, &re):
		return &EnqueueError{Type: ErrorValidation, Field: re.Field, Message: re.Reason + "; nothing was written"}
	case errors.As(err, &ve):
		return &EnqueueError{Type: ErrorValidation, Field: validationField(ve, callerItems), Message: ve.Error() + "; nothing was written"}
	case errors.As(err, &te):
		return transactionError(te, callerItems)
	}
	return &EnqueueError{Type: ErrorOutcomeUnknown, Message: err.Error()}
}

// validationField maps a Writer validation error to the request's field.
func validationField(ve *outbox.ValidationError, callerItems int) string {
	field := map[string]string{"ID": "id", "Topic": "topic", "Key": "key", "Value": "value", "Headers": "headers",
		"Partition": "partition", "CreatedAt": "createdAt"}[ve.Field]
	switch {
	case ve.Index >= 0 && field != "":
		return fmt.Sprintf("messages[%d].%s", ve.Index, field)
	case ve.Index >= 0:
		return fmt.Sprintf("messages[%d]", ve.Index)
	case ve.Field == "Transaction":
		return "request"
	}
	return ve.Field
}

func transactionError(te *dynamo.TransactionError, callerItems int) *EnqueueError {
	e := &EnqueueError{Message: te.Error()}
	switch {
	case errors.Is(te, outbox.ErrConditionFailed):
		e.Type = ErrorConditionFailed
		for i, r := range te.CallerReasons() {
			if i >= callerItems {
				break // the idempotency record
			}
			code := aws.ToString(r.Code)
			if code == "" || code == "None" {
				continue
			}
			e.Reasons = append(e.Reasons, Reason{Index: i, Code: code, Message: aws.ToString(r.Message), Item: EncodeItem(r.Item)})
		}
	case errors.Is(te, outbox.ErrThrottled):
		e.Type = ErrorThrottled
	case errors.Is(te, outbox.ErrOutcomeUnknown):
		e.Type = ErrorOutcomeUnknown
	case errors.Is(te, outbox.ErrConflict), errors.Is(te, outbox.ErrSequenceFenced):
		e.Type = ErrorRetryable
	default:
		// Refused, or failed before sending. DynamoDB's own validation of
		// the caller's items (an expression that does not parse, a key that
		// does not match the table) is the caller's to fix.
		var api smithy.APIError
		switch {
		case errors.As(te, &api) && api.ErrorCode() == "ValidationException":
			e.Type, e.Field = ErrorValidation, "transactItems"
		case errors.As(te, &api):
			e.Type = ErrorRejected
		default:
			e.Type = ErrorRetryable
		}
	}
	return e
}
