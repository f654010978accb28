package dynamoerr

import (
	"errors"
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
