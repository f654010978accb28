package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/dynamoerr"
)

// Handler processes one record at a time as a Consumer does: Inbox.Process,
// the record retries of transient errors, and the poison policy. Consumer
// uses one; so does a consumer that gets its records another way (the
// Lambda adapter in github.com/dynakafka/outbox/inbox/lambdakafka). It is
// safe for concurrent use across partitions.
type Handler struct {
	ib  *Inbox
	fn  func(*Tx) error
	cfg consumerConfig
}

// NewHandler builds a Handler: fn is called for every record, as in
// Inbox.Process, and the options are a Consumer's poison and retry options
// (HandlerOption: OnPoison, RecordRetries, WithLogger). A DeadLetterTopic
// without a client is an *outbox.OptionError.
func NewHandler(ib *Inbox, fn func(tx *Tx) error, opts ...HandlerOption) (*Handler, error) {
	c := defaultConsumerConfig()
	if err := applyConsumer(&c, opts); err != nil {
		return nil, err
	}
	if ts, ok := c.policy.sink.(*topicSink); ok && ts.cl == nil {
		return nil, &outbox.OptionError{Option: "DeadLetterTopic", Value: ts.topic,
			Reason: "a Handler has no Kafka client: pass one (kgo.NewClient with the dead-letter cluster's seed brokers)"}
	}
	return newHandler(ib, fn, c)
}

func newHandler(ib *Inbox, fn func(*Tx) error, c consumerConfig) (*Handler, error) {
	bad := func(opt string, v any, why string) error {
		return &outbox.OptionError{Option: opt, Value: v, Reason: why}
	}
	switch {
	case ib == nil:
		return nil, bad("ib", nil, "an *Inbox is required (inbox.New)")
	case fn == nil:
		return nil, bad("fn", nil, "a function that adds the record's business operations is required")
	case c.policySet > 1:
		return nil, bad("OnPoison", c.policySet, "given more than once; choose one policy")
	case c.retries < 0 || c.retries > maxRecordRetries:
		return nil, bad("RecordRetries", c.retries, fmt.Sprintf("must be 0..%d", maxRecordRetries))
	case c.retryBase < time.Millisecond || c.retryBase > time.Minute:
		return nil, bad("RecordRetries", c.retryBase, "the backoff must be 1ms..1m")
	}
	if err := c.policy.check(); err != nil {
		return nil, err
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return &Handler{ib: ib, fn: fn, cfg: c}, nil
}

// Handle processes r. A nil error means r is done and its offset may be
// committed: it was applied, was a duplicate or stale copy, or the poison
// policy skipped or dead-lettered it (the Status says which). An error
// means r was not processed and must not be committed, nor any later record
// of its partition: ctx ended (ctx's error), the policy is Stop, or writing
// the dead letter failed.
//
// Errors that processing again cannot fix — a *RecordError (a record not
// from the outbox: missing or invalid stamped headers), an
// *outbox.ValidationError (more than 100 items), or a callback error wrapped
// with Permanent — go to the policy at once. Any other error (fn's, a
// *TransactionError once Process spent its own retries) is transient: r is
// processed again after a full-jitter exponential backoff, RecordRetries
// times, and then goes to the policy.
func (h *Handler) Handle(ctx context.Context, r *kgo.Record) (Status, error) {
	var err error
	attempts := 0
	for {
		attempts++
		var res Result
		res, err = h.ib.Process(ctx, r, h.fn)
		if err == nil {
			return res.Status, nil
		}
		if ctx.Err() != nil {
			return Failed, errors.Join(err, ctx.Err())
		}
		if permanent(err) || attempts > h.cfg.retries {
			break
		}
		if serr := dynamoerr.Sleep(ctx, h.backoff(attempts-1)); serr != nil {
			return Failed, errors.Join(err, serr)
		}
	}
	return h.poison(ctx, r, err, attempts)
}

func (h *Handler) backoff(attempt int) time.Duration {
	return 1 + dynamoerr.Backoff(attempt, h.cfg.retryBase, maxRecordBackoff)
}

// poison applies the policy to r, which failed with err after attempts.
func (h *Handler) poison(ctx context.Context, r *kgo.Record, err error, attempts int) (Status, error) {
	msg, _ := Parse(r, h.ib.cfg.headers)
	report := func(st Status) {
		h.ib.cfg.metrics.Processed(Result{Message: msg, Status: st, Attempts: attempts}, err)
	}
	where := []any{"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "attempts", attempts, "err", err}
	switch h.cfg.policy.kind {
	case policySkip:
		h.cfg.logger.WarnContext(ctx, "inbox: record skipped (poison policy Skip)", where...)
		report(Skipped)
		return Skipped, nil
	case policyDeadLetter:
		d := DeadLetter{Record: r, Err: err, Attempts: attempts, At: h.ib.cfg.clock.Now()}
		if derr := h.cfg.policy.sink.DeadLetter(ctx, d); derr != nil {
			return Failed, fmt.Errorf("inbox: %s/%d@%d: dead letter not written (%w); the record failed with: %w", r.Topic, r.Partition, r.Offset, derr, err)
		}
		h.cfg.logger.WarnContext(ctx, "inbox: record dead-lettered", where...)
		report(DeadLettered)
		return DeadLettered, nil
	}
	return Failed, err
}

// permanent: processing the record again cannot succeed.
func permanent(err error) bool {
	var re *RecordError
	var ve *outbox.ValidationError
	var pe *PermanentError
	return errors.As(err, &re) || errors.As(err, &ve) || errors.As(err, &pe)
}

// PermanentError is a callback error that processing the record again
// cannot fix (a value it cannot decode, an event type it does not know):
// the Consumer hands the record to its poison policy without retrying it.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns Err.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks a callback error as permanent (see PermanentError); nil
// stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// Reject hands r to the poison policy without processing it, as a record
// that cannot be processed because of err (an adapter that could not
// decode what it was given, for example). Its results are Handle's.
func (h *Handler) Reject(ctx context.Context, r *kgo.Record, err error) (Status, error) {
	return h.poison(ctx, r, err, 0)
}
