package outbox

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is; stores and publishers translate
// their own error types into these at their package boundary.
var (
	// ErrLeaseHeld: another live owner holds the bucket's lease. The store has
	// left a wake-up on the lease, so the holder drains again before it
	// releases; the caller need not retry.
	ErrLeaseHeld = errors.New("outbox: bucket lease is held by another owner")
	// ErrLeaseLost: the lease expired or was taken over; stop working on the
	// bucket and do not delete anything.
	ErrLeaseLost = errors.New("outbox: bucket lease lost")
	// ErrWoken: Release found that a wake-up arrived while the bucket was held;
	// the holder must drain again. Release returns it with the lease still held.
	ErrWoken = errors.New("outbox: bucket woken while held; drain again")
	// ErrAlreadyWritten: a fence could not be put because the sequence number
	// is already taken (the writer won the race).
	ErrAlreadyWritten = errors.New("outbox: sequence number already written")

	// ErrConditionFailed: the caller's own condition in the transaction failed
	// (for example an optimistic version check). Nothing was written; the
	// reserved sequence numbers were released.
	ErrConditionFailed = errors.New("outbox: business condition failed; nothing was written")
	// ErrConflict: the transaction conflicted with another one on the same
	// items and was cancelled. Nothing was written; retrying is safe.
	ErrConflict = errors.New("outbox: transaction conflict; nothing was written")
	// ErrThrottled: the store throttled the transaction past the retry budget.
	// Nothing was written; retrying later is safe.
	ErrThrottled = errors.New("outbox: throttled; nothing was written")
	// ErrSequenceFenced: the reserved sequence numbers were fenced by a relay
	// on every attempt of the retry budget. Nothing was written.
	ErrSequenceFenced = errors.New("outbox: sequence numbers fenced on every attempt; nothing was written")
	// ErrOutcomeUnknown: the transaction may or may not have committed (for
	// example the response was lost and retries with the same client request
	// token ran out). Read your business items to find out; do not assume
	// either outcome.
	ErrOutcomeUnknown = errors.New("outbox: transaction outcome unknown")

	// ErrDeadline: the drain stopped because the context deadline, minus the
	// safety margin, was reached with work left.
	ErrDeadline = errors.New("outbox: deadline reached with work left")
	// ErrGapPending: the drain stopped while waiting on a sequence gap that
	// has not reached GapTimeout yet.
	ErrGapPending = errors.New("outbox: waiting on a sequence gap")
	// ErrGatePending: the drain stopped while the bucket's next message,
	// of a new BucketCount epoch, waits for the old buckets that could
	// share its key to drain (EpochGate, docs/design.md §13).
	ErrGatePending = errors.New("outbox: waiting for the old BucketCount epoch to drain")
	// ErrFenceRequired: a HolderFencer publisher has no producer for the
	// bucket that FenceHolders initialised (none yet, or it dropped it
	// after a failure) and publishes nothing until FenceHolders is called
	// again. The relay then fences — under the lease: a resumed drain
	// acquires first — and publishes again (docs/design.md §4.3).
	ErrFenceRequired = errors.New("outbox: the publisher publishes the bucket only after it fenced the bucket's earlier holders")
)

// ValidationError reports bad input: which field, of which message (Index is
// -1 when the error is not about one message), and what to fix. Nothing was
// written when it is returned.
type ValidationError struct {
	Index  int
	Field  string
	Reason string
}

func (e *ValidationError) Error() string {
	if e.Index >= 0 {
		return fmt.Sprintf("outbox: invalid message %d: %s: %s", e.Index, e.Field, e.Reason)
	}
	return fmt.Sprintf("outbox: invalid %s: %s", e.Field, e.Reason)
}

// OutboxErrorClass implements Classifier: a message that fails validation
// is a record-level problem.
func (e *ValidationError) OutboxErrorClass() ErrorClass { return RecordPermanent }

// MisconfigurationError reports a setting that contradicts the outbox's
// stored configuration or another setting. It names both values. A relay or
// writer that gets it must not run.
type MisconfigurationError struct {
	Setting    string // e.g. "BucketCount"
	Configured string // what this process was configured with
	Stored     string // what the outbox's config item says
	Fix        string
}

// OutboxErrorClass implements Classifier: Fatal.
func (e *MisconfigurationError) OutboxErrorClass() ErrorClass { return Fatal }

func (e *MisconfigurationError) Error() string {
	return fmt.Sprintf("outbox: misconfigured %s: configured %s but the outbox table says %s; %s",
		e.Setting, e.Configured, e.Stored, e.Fix)
}

// OptionError reports an invalid option value.
type OptionError struct {
	Option string
	Value  any
	Reason string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("outbox: invalid option %s=%v: %s", e.Option, e.Value, e.Reason)
}

// BucketRangeError reports messages stored in a bucket outside 0..BucketCount-1:
// a writer configured with another BucketCount wrote them, and no relay
// configured from the outbox's config item will ever claim them.
type BucketRangeError struct {
	Bucket      int
	BucketCount int
}

func (e *BucketRangeError) Error() string {
	return fmt.Sprintf("outbox: bucket %d is outside the configured range 0..%d: a writer uses another BucketCount; its messages will not be relayed until it is fixed",
		e.Bucket, e.BucketCount-1)
}

// PublishError wraps a publisher's first error for one bucket with the
// sequence of the message that failed.
type PublishError struct {
	Bucket    int
	Sequence  int64
	MessageID string
	Err       error
}

func (e *PublishError) Error() string {
	return fmt.Sprintf("outbox: publish bucket %d sequence %d (message %s): %v", e.Bucket, e.Sequence, e.MessageID, e.Err)
}

func (e *PublishError) Unwrap() error { return e.Err }
