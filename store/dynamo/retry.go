package dynamo

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/dynakafka/outbox/internal/dynamoerr"
)

// The Writer is the one layer that retries its calls (TransactWriteItems,
// the counter UpdateItem, fence PutItems): each is sent with the client's
// retryer switched off, and the Writer's loop sends it again, at most
// MaxAttempts times in all, after a full-jitter exponential backoff. Two
// layers would multiply: the requests on the wire were MaxAttempts times the
// client's own attempts. The backoff ceilings are dynamoerr's (RetryBase,
// ThrottleBase, ...), shared with the inbox.

// pause waits before the attempt that follows failed attempt n (1-based).
func (w *Writer) pause(ctx context.Context, n int, throttled bool) error {
	return sleep(ctx, w.cfg.jitter(dynamoerr.TxCeiling(n-1, throttled)))
}

// logRetry reports failed attempt n of call, about to be retried (see
// WithLogger for the levels).
func (w *Writer) logRetry(ctx context.Context, call string, n int, o outcome, err error) {
	level := slog.LevelWarn
	if o == outConflict {
		level = slog.LevelDebug
	}
	w.cfg.logger.LogAttrs(ctx, level, "outbox writer: retrying "+call, slog.String("call", call),
		slog.Int("attempt", n), slog.Int("max_attempts", w.cfg.maxAttempts), slog.String("cause", o.String()), slog.Any("error", err))
}

// retry calls send until it succeeds, fails in a way another attempt cannot
// help (a failed condition, a refused request), MaxAttempts calls were made,
// or ctx is done. It retries throttling, server errors, lost responses and
// conflicts. send must call the client with withoutClientRetries.
func (w *Writer) retry(ctx context.Context, call string, send func() error) error {
	for n := 1; ; n++ {
		err := send()
		if err == nil {
			return nil
		}
		o := classify(err, 0, nil).outcome
		retry := (o == outThrottled || o == outAmbiguous || o == outConflict) && n < w.cfg.maxAttempts && ctx.Err() == nil
		if retry {
			w.logRetry(ctx, call, n, o, err)
		}
		if !retry || w.pause(ctx, n, o == outThrottled) != nil {
			if n > 1 {
				return fmt.Errorf("%w (after %d attempts)", err, n)
			}
			return err
		}
	}
}

// writerCalls is the client the Writer's helpers use: the sequence counter
// (UpdateItem) and fence puts (PutItem), each call retried by Writer.retry
// alone.
//
// A counter update whose response was lost is sent again; UpdateItem ADD is
// not idempotent, so if the first one applied, the numbers it took are
// skipped: a gap that relays fence after their GapTimeout. A fence put that
// applied is answered ErrAlreadyWritten on its retry, which release accepts.
type writerCalls struct{ w *Writer }

func (c writerCalls) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return retried(ctx, c.w, "UpdateItem", c.w.client.UpdateItem, in, opts)
}

// Options are the writer's client's (zero when it does not expose them):
// the counter checks their region (sequence.NewCounter).
func (c writerCalls) Options() dynamodb.Options {
	if o, ok := c.w.client.(interface{ Options() dynamodb.Options }); ok {
		return o.Options()
	}
	return dynamodb.Options{}
}

func (c writerCalls) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return retried(ctx, c.w, "PutItem", c.w.client.PutItem, in, opts)
}

// retried sends one call through w.retry, with the client's retryer off.
func retried[In, Out any](ctx context.Context, w *Writer, call string, send func(context.Context, In, ...func(*dynamodb.Options)) (Out, error),
	in In, opts []func(*dynamodb.Options)) (Out, error) {
	opts = append(opts[:len(opts):len(opts)], withoutClientRetries)
	var out Out
	err := w.retry(ctx, call, func() (err error) {
		out, err = send(ctx, in, opts...)
		return err
	})
	return out, err
}
