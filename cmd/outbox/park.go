package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
)

var parkCommand = &command{
	name:    "park",
	summary: "move a bucket's first pending message to the dead letters, so the rest flows",
	description: `Moves one pending message out of its bucket into the dead letters, so that
the messages behind it can be published. Use it when outbox status shows a
bucket stopped with a REASON that only a fix outside the outbox cures (a
topic that does not exist, a topic the relay may not write), and the rest of
the bucket should not wait for that fix.

Only the bucket's first pending message can be parked (--head, or --seq
naming it): the relay publishes a bucket in order and stops at that message.
park takes the bucket's lease as a relay does (another relay holding it is
woken and park exits with 4: run it again), waits out a relay that may still
be resuming the bucket (up to 10s), parks the message in one transaction
conditional on the lease, and hands the lease back (so the relay's next drain
starts at once). It publishes nothing: the
bucket's next drain (the sweeper's, within a minute, or outbox drain B)
publishes the rest.

The parked message keeps its id, key, headers and value. Once the cause is
fixed (the topic created), outbox replay --bucket B --seq S puts it back at
its bucket's tail: consumers then see it after the messages published since.`,
	example: `outbox park --bucket 3 --head --messages orders-outbox --control orders-outbox-control
outbox park --bucket 3 --seq 1207 --reason "topic order-evnts: a typo, fixed in release 4.2"`,
	timeout: 2 * time.Minute,
	bind: func(fs *flag.FlagSet) func(*app, *connection, []string) (action, error) {
		bucket := fs.Int("bucket", -1, "the `BUCKET` (required; outbox status shows the stopped ones)")
		seq := fs.Int64("seq", 0, "the `SEQUENCE` to park: the bucket's first pending message (or --head)")
		head := fs.Bool("head", false, "park the bucket's first pending message, whatever its sequence")
		reason := fs.String("reason", "", "`TEXT` kept with the dead letter (default: parked by an operator)")
		return func(_ *app, _ *connection, args []string) (action, error) {
			if err := noArgs(args); err != nil {
				return nil, err
			}
			switch {
			case *bucket == -1:
				return nil, usagef("--bucket is required: the stopped bucket (outbox status shows its REASON)")
			case *bucket < 0 || *bucket >= outbox.MaxBucketCount:
				return nil, usagef("--bucket %d: must be 0..%d", *bucket, outbox.MaxBucketCount-1)
			case *head && *seq != 0:
				return nil, usagef("--head and --seq %d: give one (--head parks whatever the first pending message is)", *seq)
			case !*head && *seq == 0:
				return nil, usagef("--seq or --head is required: the message to park, the bucket's first pending one")
			case *seq < 0:
				return nil, usagef("--seq %d: must be positive", *seq)
			}
			return func(ctx context.Context, a *app, s *session) error {
				return park(ctx, a, s, *bucket, *seq, *reason)
			}, nil
		}
	},
}

// appClock is the app's clock as the relay's.
type appClock func() time.Time

func (c appClock) Now() time.Time { return c() }

// noPublisher is the publisher of park's relay, which never publishes.
type noPublisher struct{}

func (noPublisher) Publish(context.Context, []outbox.Message) (int, error) {
	return 0, errors.New("outbox park publishes nothing")
}

func park(ctx context.Context, a *app, s *session, bucket int, seq int64, reason string) error {
	st, _, _, err := s.buckets(ctx, bucket)
	if err != nil {
		return err
	}
	opts := []relay.Option{relay.RelayID(a.relayID()), relay.HolderWait(0), relay.ResumeReleased(false), relay.WithClock(appClock(a.now))}
	if region := strings.TrimSpace(a.getenv("OUTBOX_REGION")); region != "" {
		// Region mode: park acts as a relay of that region, on its buckets.
		opts = append(opts, relay.Region(region))
	}
	r, err := relay.New(ctx, st, noPublisher{}, opts...)
	if err != nil {
		return err
	}
	p, err := r.Park(ctx, bucket, seq, reason)
	// This process never resumes the bucket: hand the lease back, so that
	// the relay's next drain need not wait ResumeWindow for it (an empty
	// token: it never acquired it, and there is nothing of ours to hand back).
	if tk := r.HoldToken(bucket); tk != "" {
		if derr := st.Disown(context.WithoutCancel(ctx), bucket, a.relayID(), tk); derr != nil {
			fmt.Fprintf(a.stderr, "outbox park: the lease of bucket %d was not handed back; the relay's next drain waits ResumeWindow: %v\n", bucket, derr)
		}
	}
	var pe *relay.ParkError
	switch {
	case errors.Is(err, outbox.ErrLeaseHeld):
		return &notDrainedError{fmt.Errorf("another relay holds bucket %d; it was woken, and nothing was parked: run park again in a moment: %w", bucket, err)}
	case errors.As(err, &pe):
		return &restated{msg: fmt.Sprintf("nothing parked: %s", pe.Error()), err: err}
	case err != nil:
		return err
	}
	id, topic := p.Message.ID, p.Message.Topic
	if id == "" {
		id, topic = "undecodable", "?"
	}
	_, err = fmt.Fprintf(a.stdout, "parked bucket %d sequence %d (id %s, topic %s); the rest of the bucket is published at its next drain "+
		"(the sweeper's, or outbox drain %d); once the cause is fixed: outbox replay --bucket %d --seq %d\n",
		bucket, p.Sequence, id, topic, bucket, bucket, p.Sequence)
	return err
}
