package dynamoerr

import (
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TransactionError is a TransactWriteItems that did not commit, or may not
// have, after the retries of the package that sent it: store/dynamo's Writer
// and the inbox return it as dynamo.TransactionError and
// inbox.TransactionError, which are this one type, so errors.As with either
// matches both. It is defined here, not in store/dynamo, so that the inbox
// does not import store/dynamo (and its modules) to name it.
//
// errors.Is matches it against Err (an outbox sentinel) and errors.As reaches
// the SDK's error through Cause (for example
// *types.TransactionCanceledException).
type TransactionError struct {
	// Op names the call that failed, the start of Error's message:
	// "dynamo: outbox write" (Writer.Write) or "inbox: transaction"
	// (inbox Process); "transaction" when empty.
	Op string
	// Err is the outbox sentinel: outbox.ErrConditionFailed, ErrConflict,
	// ErrThrottled, ErrOutcomeUnknown, or (Writer.Write only)
	// ErrSequenceFenced; nil for other failures that wrote nothing (DynamoDB
	// refused the request, a sequence counter could not be updated, the
	// context ended before sending); Cause and Fix say why.
	Err error
	// Cause is the last error from DynamoDB.
	Cause error
	// Attempts is how many TransactWriteItems calls were made.
	Attempts int
	// Reasons are the cancellation reasons of the last attempt, when it was
	// cancelled: one per submitted item. The caller's own CallerItems items
	// are Reasons[CallerFrom:CallerFrom+CallerItems]; the others are the
	// package's: Writer.Write submits the caller's items first (CallerFrom
	// 0) and its message puts after them; the inbox submits its own items
	// first (CallerFrom is how many) and the caller's after them.
	Reasons     []types.CancellationReason
	CallerFrom  int
	CallerItems int
	// ReleaseErr (Writer.Write only) is set when the reserved sequence
	// numbers could not all be released (fenced) after a failure. Relays
	// then fence them after their gap timeout; nothing is lost, the bucket
	// is only delayed.
	ReleaseErr error
	// Fix says what to do about it.
	Fix string
}

func (e *TransactionError) Error() string {
	var b strings.Builder
	op := e.Op
	if op == "" {
		op = "transaction"
	}
	fmt.Fprintf(&b, "%s failed after %d attempt(s)", op, e.Attempts)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Cause != nil {
		fmt.Fprintf(&b, ": %v", e.Cause)
	}
	if e.Fix != "" {
		fmt.Fprintf(&b, "; %s", e.Fix)
	}
	if e.ReleaseErr != nil {
		fmt.Fprintf(&b, " (releasing the reserved sequence numbers failed: %v)", e.ReleaseErr)
	}
	return b.String()
}

// Unwrap returns Err and Cause.
func (e *TransactionError) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.Err, e.Cause} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// CallerReasons returns the cancellation reasons of the caller's own items,
// index-aligned with the items the caller passed (nil when the last attempt
// was not cancelled).
func (e *TransactionError) CallerReasons() []types.CancellationReason {
	if e.CallerFrom < 0 || e.CallerItems < 0 || len(e.Reasons) < e.CallerFrom+e.CallerItems {
		return nil
	}
	return e.Reasons[e.CallerFrom : e.CallerFrom+e.CallerItems]
}

// Cancellation reason codes (TransactionCanceledException), as the writer
// and the inbox read them.
const (
	CodeNone        = "None"
	CodeCondition   = "ConditionalCheckFailed"
	CodeConflict    = "TransactionConflict"
	CodeThrottling  = "ThrottlingError"
	CodeProvisioned = "ProvisionedThroughputExceeded"
)

// DescribeReason is a cancellation reason for an error's detail, with who
// it concerns ("your item 2", "outbox put 0"): "who: Code (Message)".
func DescribeReason(who string, r types.CancellationReason) string {
	if m := aws.ToString(r.Message); m != "" {
		return fmt.Sprintf("%s: %s (%s)", who, aws.ToString(r.Code), m)
	}
	return fmt.Sprintf("%s: %s", who, aws.ToString(r.Code))
}
