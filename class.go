package outbox

import (
	"context"
	"errors"
)

// ErrorClass says what the relay does about an error.
type ErrorClass int

const (
	// Retriable errors are transient (throttling, timeouts, 5xx, leadership
	// changes, UNKNOWN_TOPIC_OR_PARTITION while metadata settles): the relay
	// backs off with jitter and tries again; nothing is parked or deleted.
	Retriable ErrorClass = iota
	// Fatal errors are topic- or cluster-wide and permanent until someone
	// fixes the cause (authorization, a deleted topic): the affected buckets
	// stop, the error is reported loudly, nothing is parked, and the buckets
	// resume by themselves once the cause is fixed.
	Fatal
	// RecordPermanent errors belong to one record (MESSAGE_TOO_LARGE,
	// INVALID_RECORD, an item that cannot be decoded): the outbox's
	// RecordErrorPolicy decides — park the record (default) or block the
	// bucket.
	RecordPermanent
)

func (c ErrorClass) String() string {
	switch c {
	case Retriable:
		return "retriable"
	case Fatal:
		return "fatal"
	case RecordPermanent:
		return "record-permanent"
	}
	return "unknown"
}

// Classifier is implemented by errors that know their class. Stores and
// publishers return such errors (the kafka package classifies kerr codes,
// store/dynamo classifies throttling and item errors).
type Classifier interface {
	OutboxErrorClass() ErrorClass
}

// Classify returns the class of err: that of the first error in its chain
// implementing Classifier; lease and context errors are Retriable (the
// bucket is simply retried later); anything unknown is Retriable, because
// retrying an unknown error can only duplicate, never lose.
func Classify(err error) ErrorClass {
	if err == nil {
		return Retriable
	}
	var c Classifier
	if errors.As(err, &c) {
		return c.OutboxErrorClass()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Retriable
	}
	return Retriable
}

// classified attaches a class to an error.
type classified struct {
	err   error
	class ErrorClass
}

func (c *classified) Error() string                { return c.err.Error() }
func (c *classified) Unwrap() error                { return c.err }
func (c *classified) OutboxErrorClass() ErrorClass { return c.class }

// WithClass returns err marked with class (nil stays nil).
func WithClass(err error, class ErrorClass) error {
	if err == nil {
		return nil
	}
	return &classified{err: err, class: class}
}

// RecordErrorPolicy is what the relay does with a record-level permanent
// error at the head of a bucket.
type RecordErrorPolicy int

const (
	// Park moves the head record into a dead-letter record, in the same
	// store transaction that removes it from the pending set and advances
	// head, and the bucket continues. Nothing is deleted: a parked message
	// can be replayed or dropped later.
	Park RecordErrorPolicy = iota
	// Block stops the bucket at the record and reports it; the bucket stays
	// stopped until the record is fixed or parked by an operator.
	Block
)

func (p RecordErrorPolicy) String() string {
	if p == Block {
		return "block"
	}
	return "park"
}
