package dynamoerr

import (
	"errors"
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

// TxLayout says whose the items of a transaction are: the caller's are the
// CallerItems items from CallerFrom on; the others are the package's own,
// named Own ("outbox put", "inbox item") and numbered among themselves.
type TxLayout struct {
	Own                     string
	CallerFrom, CallerItems int
}

// Caller reports whether item i is one of the caller's.
func (l TxLayout) Caller(i int) bool { return i >= l.CallerFrom && i < l.CallerFrom+l.CallerItems }

// Who names item i for an error's detail: "your item 2", "outbox put 0".
func (l TxLayout) Who(i int) string {
	switch {
	case l.Caller(i):
		return fmt.Sprintf("your item %d", i-l.CallerFrom)
	case i < l.CallerFrom:
		return fmt.Sprintf("%s %d", l.Own, i)
	default:
		return fmt.Sprintf("%s %d", l.Own, i-l.CallerItems)
	}
}

// Tx is a failed TransactWriteItems call, sorted: the one reading of a
// transaction's failure for the packages that send them (store/dynamo's
// Writer and the inbox). A failed condition means something else for each
// of their items (a duplicate, a fence, the caller's own condition), so
// Tx lists those items (Conditions) and leaves them to the package; every
// other reason means the same for any item, and decides Kind.
type Tx struct {
	// Kind of the failure apart from the failed conditions. For a
	// cancellation: Rejected when DynamoDB refused an item (validation,
	// size, ...), else Throttled when an item was throttled, else
	// Conflict (a conflicting transaction, or no reason known: nothing was
	// written, so retrying is safe). For any other error, Classify's.
	Kind Kind
	// Detail names the item and reason that decided Kind ("outbox put 2:
	// ThrottlingError (...)"), or says why (Classify's detail).
	Detail string
	// Cancelled is true when DynamoDB evaluated and cancelled the call (a
	// *types.TransactionCanceledException), which proves that no call with
	// its token committed.
	Cancelled bool
	// Reasons are the cancellation's reasons, one per item.
	Reasons []types.CancellationReason
	// Conditions are the items whose condition failed, in order.
	Conditions []int

	layout TxLayout
}

// ClassifyTx sorts the error of a TransactWriteItems call whose items are
// laid out as l.
func ClassifyTx(err error, l TxLayout) Tx {
	var tc *types.TransactionCanceledException
	if !errors.As(err, &tc) {
		kind, detail := Classify(err)
		return Tx{Kind: kind, Detail: detail, layout: l}
	}
	t := Tx{Cancelled: true, Reasons: tc.CancellationReasons, layout: l}
	rejected, throttled, conflict := -1, -1, -1
	for i, r := range t.Reasons {
		switch aws.ToString(r.Code) {
		case "", CodeNone:
		case CodeCondition:
			t.Conditions = append(t.Conditions, i)
		case CodeConflict:
			conflict = i
		case CodeThrottling, CodeProvisioned:
			throttled = i
		default:
			rejected = i
		}
	}
	switch {
	case rejected >= 0:
		t.Kind, t.Detail = Rejected, t.Describe(rejected)
	case throttled >= 0:
		t.Kind, t.Detail = Throttled, t.Describe(throttled)
	case conflict >= 0:
		t.Kind, t.Detail = Conflict, t.Describe(conflict)
	default:
		t.Kind, t.Detail = Conflict, "cancelled without a known reason"
	}
	return t
}

// Describe is item i's cancellation reason for an error's detail: "who:
// Code (Message)", who as the layout names it.
func (t Tx) Describe(i int) string {
	r, who := t.Reasons[i], t.layout.Who(i)
	if m := aws.ToString(r.Message); m != "" {
		return fmt.Sprintf("%s: %s (%s)", who, aws.ToString(r.Code), m)
	}
	return fmt.Sprintf("%s: %s", who, aws.ToString(r.Code))
}
