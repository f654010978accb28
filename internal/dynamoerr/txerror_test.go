package dynamoerr

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// CallerReasons picks the caller's items wherever the package put them:
// first (the Writer) or after the package's own (the inbox).
func TestTransactionErrorCallerReasons(t *testing.T) {
	r := func(codes ...string) []types.CancellationReason {
		var rs []types.CancellationReason
		for _, c := range codes {
			rs = append(rs, types.CancellationReason{Code: aws.String(c)})
		}
		return rs
	}
	cases := []struct {
		name string
		e    TransactionError
		want []string
	}{
		{"caller first", TransactionError{Reasons: r("a", "b", "own"), CallerItems: 2}, []string{"a", "b"}},
		{"caller after own", TransactionError{Reasons: r("own", "own", "a", "b"), CallerFrom: 2, CallerItems: 2}, []string{"a", "b"}},
		{"no caller items", TransactionError{Reasons: r("own"), CallerFrom: 1}, []string{}},
		{"not cancelled", TransactionError{CallerFrom: 2, CallerItems: 1}, nil},
		{"short reasons", TransactionError{Reasons: r("own", "a"), CallerFrom: 1, CallerItems: 2}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.e.CallerReasons()
			if (got == nil) != (c.want == nil) || len(got) != len(c.want) {
				t.Fatalf("CallerReasons = %v, want %v", got, c.want)
			}
			for i := range got {
				if aws.ToString(got[i].Code) != c.want[i] {
					t.Fatalf("CallerReasons[%d] = %s, want %s", i, aws.ToString(got[i].Code), c.want[i])
				}
			}
		})
	}
}

func TestTransactionErrorMessage(t *testing.T) {
	sentinel, cause := errors.New("sentinel"), errors.New("cause")
	e := error(&TransactionError{Op: "inbox: transaction", Err: sentinel, Cause: cause, Attempts: 3, Fix: "retry"})
	if got, want := e.Error(), "inbox: transaction failed after 3 attempt(s): sentinel: cause; retry"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, sentinel) || !errors.Is(e, cause) {
		t.Error("errors.Is does not reach Err and Cause")
	}
	if got, want := (&TransactionError{ReleaseErr: cause}).Error(), "transaction failed after 0 attempt(s) (releasing the reserved sequence numbers failed: cause)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// ClassifyTx is the one reading of a failed transaction for the Writer and
// the inbox: failed conditions are listed for the package, the other
// reasons decide Kind (refused over throttled over conflict), and details
// name the item the way the package lays its items out.
func TestClassifyTx(t *testing.T) {
	reason := func(code, msg string) types.CancellationReason {
		r := types.CancellationReason{Code: aws.String(code)}
		if msg != "" {
			r.Message = aws.String(msg)
		}
		return r
	}
	none, cond := reason(CodeNone, ""), reason(CodeCondition, "")
	cancelled := func(rs ...types.CancellationReason) error {
		return fmt.Errorf("op: %w", &types.TransactionCanceledException{CancellationReasons: rs})
	}
	writer := TxLayout{Own: "outbox put", CallerItems: 2}               // the caller's 2 items, then the puts
	inbox := TxLayout{Own: "inbox item", CallerFrom: 2, CallerItems: 2} // the inbox's 2 items, then the caller's
	cases := []struct {
		name       string
		err        error
		layout     TxLayout
		kind       Kind
		detail     string
		conditions []int
	}{
		{"refused beats throttled and conflict", cancelled(reason(CodeConflict, ""), reason("ValidationError", "too big"), reason(CodeThrottling, ""), cond),
			writer, Rejected, "your item 1: ValidationError (too big)", []int{3}},
		{"throttled beats conflict", cancelled(reason(CodeConflict, ""), none, reason(CodeProvisioned, "")),
			writer, Throttled, "outbox put 0: ProvisionedThroughputExceeded", nil},
		{"the last throttled item", cancelled(reason(CodeThrottling, "a"), reason(CodeThrottling, "b")),
			writer, Throttled, "your item 1: ThrottlingError (b)", nil},
		{"conflict", cancelled(none, reason(CodeConflict, "")), inbox, Conflict, "inbox item 1: TransactionConflict", nil},
		{"conflict on the caller's item", cancelled(none, none, reason(CodeConflict, "")), inbox, Conflict, "your item 0: TransactionConflict", nil},
		{"conditions only", cancelled(cond, none, cond, reason("", "")), inbox, Conflict, "cancelled without a known reason", []int{0, 2}},
		{"no reason", cancelled(none, none), writer, Conflict, "cancelled without a known reason", nil},
		{"not a cancellation", errors.New("connection reset"), writer, Ambiguous, "no response from DynamoDB", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx := ClassifyTx(c.err, c.layout)
			_, isCancel := errors.AsType[*types.TransactionCanceledException](c.err)
			if tx.Kind != c.kind || tx.Detail != c.detail || !slices.Equal(tx.Conditions, c.conditions) || tx.Cancelled != isCancel {
				t.Fatalf("ClassifyTx = kind %v %q conditions %v cancelled %v, want kind %v %q conditions %v cancelled %v",
					tx.Kind, tx.Detail, tx.Conditions, tx.Cancelled, c.kind, c.detail, c.conditions, isCancel)
			}
		})
	}
}

func TestTxLayoutWho(t *testing.T) {
	writer := TxLayout{Own: "outbox put", CallerItems: 2}
	inbox := TxLayout{Own: "inbox item", CallerFrom: 2, CallerItems: 3}
	for _, c := range []struct {
		l    TxLayout
		i    int
		want string
	}{
		{writer, 0, "your item 0"}, {writer, 1, "your item 1"}, {writer, 2, "outbox put 0"}, {writer, 4, "outbox put 2"},
		{inbox, 0, "inbox item 0"}, {inbox, 1, "inbox item 1"}, {inbox, 2, "your item 0"}, {inbox, 4, "your item 2"},
	} {
		if got := c.l.Who(c.i); got != c.want {
			t.Errorf("%+v.Who(%d) = %q, want %q", c.l, c.i, got, c.want)
		}
	}
}
