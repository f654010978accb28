// Package dynamoerr sorts the errors of DynamoDB write calls for the two
// places that retry transactions (store/dynamo's writer and the inbox):
// whether the call may have been executed, was throttled, conflicted, or
// was refused (Classify), and what a transaction's cancellation says
// (ClassifyTx).
package dynamoerr

import (
	"errors"

	"github.com/aws/smithy-go"
)

// Kind of a failed call.
type Kind int

// Kinds.
const (
	// Ambiguous: the call may have been executed (lost response, timeout,
	// server error, a transaction with the same token still in progress).
	Ambiguous Kind = iota
	// Throttled: the whole request was throttled before it ran.
	Throttled
	// Conflict: a conflicting transaction; nothing was written.
	Conflict
	// Rejected: DynamoDB refused the request (validation, missing table,
	// access); retrying the same request cannot help.
	Rejected
)

// Classify sorts err (not a *types.TransactionCanceledException: ClassifyTx
// reads those) and says why in detail.
func Classify(err error) (kind Kind, detail string) {
	switch code := Code(err); code {
	case "TransactionInProgressException":
		return Ambiguous, "a transaction with this client request token is still in progress"
	case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
		"LimitExceededException", "TooManyRequestsException", "Throttling":
		return Throttled, code
	case "TransactionConflictException":
		return Conflict, code
	case "":
		// Not an API error: the request failed on the way or the response
		// was lost (timeouts, connection resets, a cancelled context).
		return Ambiguous, "no response from DynamoDB"
	default:
		var ae smithy.APIError
		if errors.As(err, &ae) && ae.ErrorFault() == smithy.FaultServer || code == "InternalServerError" ||
			code == "ServiceUnavailable" || code == "InternalFailure" {
			return Ambiguous, code
		}
		return Rejected, code
	}
}

// Code is the error code of a DynamoDB API error, "" for other errors.
func Code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}
