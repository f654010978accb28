package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/dynakafka/outbox"
)

// DefaultBatchSize is the default of BatchSize.
const DefaultBatchSize = 500

// Option configures Range.
type Option func(*config)

type config struct{ batchSize int }

// BatchSize is how many retained entries Range reads at a time, and so the
// most messages it hands the publisher in one call. Default
// DefaultBatchSize (500); 1..10000.
func BatchSize(n int) Option { return func(c *config) { c.batchSize = n } }

// Stats is what Range did. Every sequence number of [From, To] is counted
// once: in Published, Fences or Missing — or in none of them when Range
// stopped early (see Next).
type Stats struct {
	Bucket   int
	From, To int64
	// Head is the bucket's head when Range read it: To was at most this.
	Head int64
	// Published messages were acknowledged by the broker again.
	Published int
	// Fences are numbers that hold a fence: never a message.
	Fences int
	// Missing are numbers with no item any more: expired (their TTL
	// passed), parked (outbox parked lists them) or never written.
	Missing int
	// First and Last are the first and last sequence numbers published (0
	// when none).
	First, Last int64
	// Next is where a replay that stopped early resumes (--from Next): the
	// first number of the range not yet published; To+1 when done.
	Next int64
}

// RangeError is a range Range refuses before publishing anything.
type RangeError struct {
	Bucket   int
	From, To int64
	Reason   string // what is wrong and what to do
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("replay: bucket %d, sequences %d..%d: %s", e.Bucket, e.From, e.To, e.Reason)
}

// Range publishes again, in sequence order, every message of bucket with a
// sequence number in [from, to] that the store still holds. to must be at
// most the bucket's head: messages above it are not published yet, and the
// relay publishes them in order. Fences and numbers without an item (their
// message expired, was parked or never committed) are skipped and counted.
//
// It fails before publishing anything with a *outbox.MisconfigurationError
// when the outbox is not in WatermarkMode (published messages are not kept
// then), and with a *RangeError for a range that is empty, starts below 1,
// lies beyond the outbox's buckets or ends above the head. A store or
// publish error, or an item that cannot be decoded, stops it: Stats says
// how far it got and Next where to resume; what was published before stays
// published.
func Range(ctx context.Context, store outbox.Store, pub outbox.Publisher, bucket int, from, to int64, opts ...Option) (Stats, error) {
	c := config{batchSize: DefaultBatchSize}
	for _, o := range opts {
		o(&c)
	}
	st := Stats{Bucket: bucket, From: from, To: to, Next: from}
	if c.batchSize < 1 || c.batchSize > 10_000 {
		return st, &outbox.OptionError{Option: "BatchSize", Value: c.batchSize, Reason: "must be 1..10000"}
	}
	if store == nil || pub == nil {
		return st, &outbox.OptionError{Option: "Range", Value: nil, Reason: "a store and a publisher are required"}
	}
	refuse := func(format string, args ...any) (Stats, error) {
		return st, &RangeError{Bucket: bucket, From: from, To: to, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case from < 1:
		return refuse("the range must start at 1 or above (sequence numbers start at 1)")
	case to < from:
		return refuse("the range ends before it starts")
	}
	cfg, err := store.Config(ctx)
	if err != nil {
		return st, fmt.Errorf("replay: read the outbox's config: %w", err)
	}
	if cfg.Mode != outbox.WatermarkMode {
		return st, &outbox.MisconfigurationError{Setting: "Mode", Configured: outbox.WatermarkMode.String(), Stored: cfg.Mode.String(),
			Fix: "replay needs an outbox in watermark mode: in delete mode each published message is replaced by a tombstone, so nothing is retained to replay"}
	}
	if bucket < 0 || bucket >= cfg.BucketCount {
		return refuse("the outbox has buckets 0..%d (BucketCount %d)", cfg.BucketCount-1, cfg.BucketCount)
	}
	l, err := store.ReadLease(ctx, bucket)
	if err != nil {
		return st, fmt.Errorf("replay: read bucket %d's head: %w", bucket, err)
	}
	st.Head = l.Head
	if to > l.Head {
		return refuse("%d is above the bucket's head %d: what lies above the head is not published yet, and the relay publishes it in order; replay up to %d at most", to, l.Head, l.Head)
	}
	return st, run(ctx, store, pub, &st, c.batchSize)
}

// run reads [st.Next, st.To] a batch at a time and publishes the messages.
func run(ctx context.Context, store outbox.Store, pub outbox.Publisher, st *Stats, batchSize int) error {
	for st.Next <= st.To {
		entries, end, err := store.Pending(ctx, st.Bucket, st.Next-1, int(min(int64(batchSize), st.To-st.Next+1)))
		if err != nil {
			return fmt.Errorf("replay: read bucket %d from %d: %w", st.Bucket, st.Next, err)
		}
		var (
			msgs []outbox.Message
			seen = st.Next - 1 // every number up to it is in entries or missing
			stop error         // an item that cannot be replayed
		)
		for _, e := range entries {
			if e.Sequence > st.To {
				break
			}
			if e.Err != nil {
				seen = e.Sequence - 1
				stop = fmt.Errorf("replay: bucket %d sequence %d cannot be read as a message (%w); replay the range after it with --from %d, "+
					"or see what the item holds", st.Bucket, e.Sequence, e.Err, e.Sequence+1)
				break
			}
			seen = e.Sequence
			if !e.Fence {
				msgs = append(msgs, e.Message)
			}
		}
		if stop == nil && (end || len(entries) == 0 || entries[len(entries)-1].Sequence >= st.To) {
			seen = st.To // nothing stored after the entries, up to To
		}
		if err := publish(ctx, pub, st, entries, msgs, seen); err != nil {
			return err
		}
		if stop != nil {
			return stop
		}
	}
	return nil
}

// publish publishes msgs (read from entries, which cover [st.Next, seen])
// and moves st past what was acknowledged: the fences and missing numbers
// before each acknowledged message count once it is, and those after the
// last message once all of them are.
func publish(ctx context.Context, pub outbox.Publisher, st *Stats, entries []outbox.Entry, msgs []outbox.Message, seen int64) error {
	acked, perr := 0, error(nil)
	if len(msgs) > 0 {
		acked, perr = pub.Publish(ctx, msgs)
	}
	for _, e := range entries {
		if e.Sequence > seen {
			break
		}
		if !e.Fence {
			if acked == 0 {
				break
			}
			acked--
			st.Published++
			if st.First == 0 {
				st.First = e.Sequence
			}
			st.Last = e.Sequence
		} else {
			st.Fences++
		}
		st.Missing += int(e.Sequence - st.Next)
		st.Next = e.Sequence + 1
	}
	if perr != nil {
		if errors.Is(perr, context.Canceled) || errors.Is(perr, context.DeadlineExceeded) {
			return fmt.Errorf("replay: bucket %d stopped at sequence %d (resume with --from %d): %w", st.Bucket, st.Next, st.Next, perr)
		}
		return fmt.Errorf("replay: publish bucket %d from sequence %d (resume with --from %d): %w", st.Bucket, st.Next, st.Next, perr)
	}
	if st.Next <= seen {
		st.Missing += int(seen - st.Next + 1)
		st.Next = seen + 1
	}
	return nil
}
