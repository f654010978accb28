package dynamo

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/dynamoerr"
)

// TransactionError is what Writer.Write returns when its transaction did not
// commit, or may not have. It is the inbox's TransactionError too (one type,
// so errors.As with either package's name matches both). errors.Is matches
// it against Err (an outbox sentinel: outbox.ErrConditionFailed,
// ErrConflict, ErrThrottled, ErrSequenceFenced or ErrOutcomeUnknown; nil for
// other failures that wrote nothing) and errors.As reaches the SDK's error
// through Cause (for example *types.TransactionCanceledException).
//
// Writer.Write's Op is "dynamo: outbox write"; its Reasons hold the
// caller's CallerItems items first (CallerFrom 0), then the outbox's puts,
// so CallerReasons()[i] is the reason for the i-th item passed to Write.
// ReleaseErr is set when the reserved sequence numbers could not all be
// released (fenced) after a failure: relays then fence them after their gap
// timeout; nothing is lost, the bucket is only delayed. Fix says what to do.
type TransactionError = dynamoerr.TransactionError

// opWrite is Writer.Write's TransactionError.Op.
const opWrite = "dynamo: outbox write"

// outcome is the classification of one failed TransactWriteItems call.
type outcome int

const (
	// outCommitted: cancelled, but the cancellation shows our own message
	// already stored at our sequence: an earlier attempt committed.
	outCommitted outcome = iota
	// outConditionFailed: a condition on a caller's item failed.
	outConditionFailed
	// outFenced: only outbox puts failed their condition, on fences.
	outFenced
	// outConflict: cancelled by a conflicting transaction.
	outConflict
	// outThrottled: cancelled because an item's partition was throttled, or
	// the whole request was throttled before it ran.
	outThrottled
	// outAmbiguous: the call may have committed (lost response, timeout,
	// server error, a transaction with this token still in progress).
	outAmbiguous
	// outRejected: DynamoDB refused the request (validation, missing table,
	// access); retrying the same request cannot help.
	outRejected
)

func (o outcome) String() string {
	return [...]string{"committed", "condition failed", "fenced", "conflict", "throttled", "ambiguous", "rejected"}[o]
}

// classification is one failed call, understood.
type classification struct {
	outcome outcome
	// cancelled is true when DynamoDB evaluated and cancelled this call,
	// which proves that no call with its token committed.
	cancelled bool
	reasons   []types.CancellationReason
	// detail names the item and reason that decided the outcome.
	detail string
}

// kindOutcome is the outcome of each dynamoerr.Kind.
var kindOutcome = [...]outcome{
	dynamoerr.Ambiguous: outAmbiguous, dynamoerr.Throttled: outThrottled,
	dynamoerr.Conflict: outConflict, dynamoerr.Rejected: outRejected,
}

// classify sorts a TransactWriteItems error. callerItems is how many of the
// submitted items are the caller's; ids are the ids of the outbox messages
// that follow them, in order.
func classify(err error, callerItems int, ids []string) classification {
	t := dynamoerr.ClassifyTx(err, dynamoerr.TxLayout{Own: "outbox put", CallerItems: callerItems})
	c := classification{outcome: kindOutcome[t.Kind], cancelled: t.Cancelled, reasons: t.Reasons, detail: t.Detail}
	callerFailed, foreign, fenced := -1, -1, -1
	for _, i := range t.Conditions {
		r, j := t.Reasons[i], i-callerItems
		switch {
		case i < callerItems:
			if callerFailed < 0 {
				callerFailed = i
			}
		case len(r.Item) == 0:
			// No old image (an engine that does not return one): the
			// only thing that can be at a reserved sequence is a fence.
			fenced = i
		case j < len(ids) && stringOf(r.Item[attrID]) == ids[j]:
			c.outcome, c.detail = outCommitted, fmt.Sprintf("outbox put %d already holds this message", j)
			return c
		case r.Item[attrFence] != nil:
			fenced = i
		default:
			foreign = i
		}
	}
	// A refused item decides after the caller's own condition, before the
	// outbox puts' conditions.
	refused := t.Kind == dynamoerr.Rejected
	switch {
	case callerFailed >= 0:
		c.outcome, c.detail = outConditionFailed, t.Describe(callerFailed)
	case !refused && foreign >= 0:
		c.outcome, c.detail = outRejected, t.Describe(foreign)+": the reserved sequence number holds another outbox's message; "+
			"the sequence counter was reset or two outboxes share the messages table"
	case !refused && fenced >= 0:
		c.outcome, c.detail = outFenced, t.Describe(fenced)
	}
	return c
}

func stringOf(av types.AttributeValue) string {
	if s, ok := av.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// sentinel and fix for a final outcome.
func finalError(o outcome) (fix string, sentinel error) {
	switch o {
	case outConditionFailed:
		return "nothing was written; re-read the aggregate and retry the whole operation", outbox.ErrConditionFailed
	case outFenced:
		return "relays fenced the reserved sequence numbers on every attempt: the time from reserving to committing exceeds the relays' GapTimeout; look for stalls between them", outbox.ErrSequenceFenced
	case outConflict:
		return "another transaction was writing the same items; nothing was written, retrying is safe", outbox.ErrConflict
	case outThrottled:
		return "nothing was written; retry later, or raise the tables' capacity", outbox.ErrThrottled
	case outAmbiguous:
		return "the transaction may have committed; read your items to find out before retrying", outbox.ErrOutcomeUnknown
	default:
		return "DynamoDB refused the transaction; nothing was written. Check your items (tables, keys, expressions, sizes) and the outbox tables", nil
	}
}
