package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

var parkedCommand = &command{
	name:    "parked",
	summary: "list parked messages (dead letters), across all buckets by default",
	description: `Lists the dead letters: messages Kafka refused for good (too large, invalid)
that the relay moved aside so their bucket could go on. Each keeps its
message id, key, headers and value; replay puts one back at its bucket's
tail, drop deletes one. The table shows the value's size, not the value
(--json has every field but the value).`,
	example: `outbox parked --messages orders-outbox --control orders-outbox-control
outbox parked --bucket 3 --json`,
	timeout: 2 * time.Minute,
	bind: func(fs *flag.FlagSet) func(*app, *connection, []string) (action, error) {
		asJSON := fs.Bool("json", false, "print JSON instead of a table")
		bucket := fs.Int("bucket", -1, "list only this `BUCKET`'s (also one a BucketCount shrink removed)")
		return func(_ *app, _ *connection, args []string) (action, error) {
			if err := noArgs(args); err != nil {
				return nil, err
			}
			if *bucket < -1 || *bucket >= outbox.MaxBucketCount {
				return nil, usagef("--bucket %d: must be 0..%d", *bucket, outbox.MaxBucketCount-1)
			}
			return func(ctx context.Context, a *app, s *session) error {
				items, err := listParked(ctx, s, *bucket)
				if err != nil {
					return err
				}
				rep := parkedReport{Parked: make([]parkedStatus, len(items))}
				for i, p := range items {
					rep.Parked[i] = parkedJSON(p)
				}
				if *asJSON {
					return writeJSON(a.stdout, rep)
				}
				return rep.render(a.stdout, a.now())
			}, nil
		}
	},
}

func listParked(ctx context.Context, s *session, bucket int) ([]dynamo.ParkedItem, error) {
	if bucket >= 0 {
		st, err := s.store(ctx)
		if err != nil {
			return nil, err
		}
		return st.ListParked(ctx, bucket, 0)
	}
	st, _, buckets, err := s.buckets(ctx, bucket)
	if err != nil {
		return nil, err
	}
	per := make([][]dynamo.ParkedItem, len(buckets))
	err = eachBucket(ctx, buckets, func(ctx context.Context, i, b int) error {
		var err error
		per[i], err = st.ListParked(ctx, b, 0)
		return err
	})
	return slices.Concat(per...), err
}

// parkedReport is `outbox parked --json`.
type parkedReport struct {
	Parked []parkedStatus `json:"parked"`
}

type parkedStatus struct {
	Bucket   int    `json:"bucket"`
	Sequence int64  `json:"sequence"`
	ID       string `json:"id"`
	Topic    string `json:"topic"`
	// Key is base64; null for a keyless message.
	Key       []byte `json:"key"`
	Partition *int32 `json:"partition"`
	// ValueBytes is the value's size; -1 for a tombstone (no value).
	ValueBytes   int        `json:"value_bytes"`
	Headers      int        `json:"headers"`
	CreatedAt    *time.Time `json:"created_at"`
	Reason       string     `json:"reason"`
	Attempts     int        `json:"attempts"`
	FirstFailure *time.Time `json:"first_failure"`
	LastFailure  *time.Time `json:"last_failure"`
	ParkedAt     *time.Time `json:"parked_at"`
	// DecodeError is set when the stored item cannot be read as a message;
	// it can then be dropped, not replayed from this tool.
	DecodeError string `json:"decode_error,omitempty"`
}

func parkedJSON(p dynamo.ParkedItem) parkedStatus {
	m := p.Message
	ps := parkedStatus{
		Bucket: p.Bucket, Sequence: p.Sequence, ID: m.ID, Topic: m.Topic, Key: m.Key, Partition: m.Partition,
		ValueBytes: len(m.Value), Headers: len(m.Headers), CreatedAt: timePtr(m.CreatedAt),
		Reason: p.Reason, Attempts: p.Attempts,
		FirstFailure: timePtr(p.FirstFailure), LastFailure: timePtr(p.LastFailure), ParkedAt: timePtr(p.ParkedAt),
	}
	if m.Value == nil {
		ps.ValueBytes = -1
	}
	if p.Err != nil {
		ps.DecodeError = p.Err.Error()
	}
	return ps
}

func (r parkedReport) render(w io.Writer, now time.Time) error {
	if len(r.Parked) == 0 {
		_, err := fmt.Fprintln(w, "no parked messages")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BUCKET\tSEQ\tID\tTOPIC\tKEY\tVALUE\tATTEMPTS\tPARKED\tREASON")
	for _, p := range r.Parked {
		key, value, parked, reason := "-", "tombstone", "?", p.Reason
		if p.Key != nil {
			key = clip(strconv.Quote(string(p.Key)), 24, false)
		}
		if p.ValueBytes >= 0 {
			value = fmt.Sprintf("%d B", p.ValueBytes)
		}
		if p.ParkedAt != nil {
			parked = age(now.Sub(*p.ParkedAt)) + " ago"
		}
		if p.DecodeError != "" {
			key, value, reason = "?", "?", "cannot decode: "+p.DecodeError+"; parked for: "+reason
		}
		id := p.ID
		if id == "" {
			id = "?"
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", p.Bucket, p.Sequence, id, p.Topic, key, value, p.Attempts, parked, clip(reason, 80, false))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d parked\n", len(r.Parked))
	return err
}

// notParked restates dynamo.ErrNotParked for the operator.
func notParked(err error, bucket int, seq int64) error {
	if errors.Is(err, dynamo.ErrNotParked) {
		return &restated{fmt.Sprintf("bucket %d has no parked message at sequence %d (outbox parked --bucket %d lists them)", bucket, seq, bucket), err}
	}
	return err
}

// deadLetterFlags are the --bucket and --seq that replay and drop need.
type deadLetterFlags struct {
	bucket int
	seq    int64
}

func (d *deadLetterFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&d.bucket, "bucket", -1, "the parked message's `BUCKET` (required)")
	fs.Int64Var(&d.seq, "seq", 0, "the parked message's `SEQUENCE` (required; outbox parked lists them)")
}

func (d *deadLetterFlags) check(args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	switch {
	case d.bucket == -1:
		return usagef("--bucket is required: the parked message's bucket (outbox parked lists them)")
	case d.bucket < 0 || d.bucket >= outbox.MaxBucketCount:
		return usagef("--bucket %d: must be 0..%d", d.bucket, outbox.MaxBucketCount-1)
	case d.seq == 0:
		return usagef("--seq is required: the parked message's sequence (outbox parked lists them)")
	case d.seq < 0:
		return usagef("--seq %d: must be positive", d.seq)
	}
	return nil
}

// readValue reads a replacement value before anything is sent, so a wrong
// path is a usage error. An empty file is an empty value, not a tombstone.
func readValue(a *app, path string) ([]byte, error) {
	var (
		b   []byte
		err error
	)
	if path == "-" {
		b, err = io.ReadAll(a.stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, usagef("--value %s: %v", path, err)
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

var dropCommand = &command{
	name:    "drop",
	summary: "delete a parked message for good",
	description: `Deletes one dead letter for good: it is never published. The relay never
drops anything by itself; this is the operator's decision. It prints the
message id and topic of what it deleted.`,
	example: `outbox drop --bucket 3 --seq 1207`,
	timeout: 2 * time.Minute,
	bind: func(fs *flag.FlagSet) func(*app, *connection, []string) (action, error) {
		var d deadLetterFlags
		d.register(fs)
		return func(_ *app, _ *connection, args []string) (action, error) {
			if err := d.check(args); err != nil {
				return nil, err
			}
			return func(ctx context.Context, a *app, s *session) error {
				st, err := s.store(ctx) // any bucket: see replayParked
				if err != nil {
					return err
				}
				p, err := st.GetParked(ctx, d.bucket, d.seq)
				if err != nil {
					return notParked(err, d.bucket, d.seq)
				}
				if err := st.DropParked(ctx, d.bucket, d.seq); err != nil {
					return notParked(err, d.bucket, d.seq)
				}
				id := p.Message.ID
				if p.Err != nil {
					id = "undecodable"
				}
				_, err = fmt.Fprintf(a.stdout, "dropped bucket %d sequence %d (id %s, topic %s) for good\n", d.bucket, d.seq, id, p.Message.Topic)
				return err
			}, nil
		}
	},
}
