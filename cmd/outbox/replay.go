package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/lambda/wiring"
	"github.com/dynakafka/outbox/replay"
	"github.com/dynakafka/outbox/store/dynamo"
)

var replayCommand = &command{
	name:    "replay",
	summary: "re-enqueue a parked message, or publish a retained range again (watermark mode)",
	description: `Two forms.

--seq: puts a parked message back at the tail of its bucket: a new sequence
number, its original message id (consumers that deduplicate on it still
can), and removes the dead letter, in one transaction. Consumers see it after
everything enqueued since it was parked. After a BucketCount change (outbox
buckets set) it goes to its key's bucket under the new count, which keeps
the key's order; --bucket is the bucket it was parked in, even one a shrink
removed. With --value FILE the record's value is replaced by the file's
bytes (a repaired payload); id, topic, key, partition and headers stay. A dead letter that cannot be decoded needs a
whole replacement message: use dynamo.Store.ReplayParked from Go, or drop it.
In region mode the new number is reserved in the bucket's counter, which
only the bucket's own region writes: run it with OUTBOX_REGION set to that
region, against that region's tables (--region and the table names); without
OUTBOX_REGION, for a bucket of another region's slice (a dead letter
replicated here, or parked by a region that took the slice over), or with
--region another than OUTBOX_REGION, it is refused (exit 3) and nothing is
written.

--from and --to (an outbox in watermark mode): publishes again, in sequence
order, the messages of the bucket numbered --from to --to that the table
still retains (published, at or below the head, TTL not passed; outbox
status shows the RETAINED range), with their original message ids and
headers, so consumers that deduplicate on the id drop them. Fences and
numbers whose message expired or was parked are skipped and counted. It
writes nothing to the outbox and takes no lease: the relay goes on
publishing newer messages meanwhile. Kafka is configured as for drain, from
the relay's variables (KAFKA_BOOTSTRAP_SERVERS, KAFKA_AUTH, ...) with the
flags on top. An outbox in delete mode keeps nothing to replay (exit 3); a
range above the head is refused (exit 2); if the broker fails midway, the
error says where to resume.`,
	example: `outbox replay --bucket 3 --seq 1207
outbox replay --bucket 3 --seq 1207 --value fixed-event.json
outbox replay --bucket 3 --from 1200 --to 1500 --brokers b-1.msk:9098 --auth msk-iam`,
	timeout: 5 * time.Minute,
	bind: func(fs *flag.FlagSet) func(*app, *connection, []string) (action, error) {
		bucket := fs.Int("bucket", -1, "the `BUCKET` of the parked message or of the range (required)")
		seq := fs.Int64("seq", 0, "the parked message's `SEQUENCE` (outbox parked lists them)")
		valueFile := fs.String("value", "", "with --seq: replace the record's value with this `FILE`'s bytes (- for standard input)")
		from := fs.Int64("from", 0, "the first `SEQUENCE` of the range to publish again (watermark mode)")
		to := fs.Int64("to", 0, "the last `SEQUENCE` of the range, at most the bucket's head")
		env := kafkaFlags(fs, "(env KAFKA_AUTH; required with --from)")
		return func(a *app, c *connection, args []string) (action, error) {
			if err := noArgs(args); err != nil {
				return nil, err
			}
			switch {
			case *bucket == -1:
				return nil, usagef("--bucket is required: the parked message's bucket (outbox parked lists them), or the bucket of the range")
			case *bucket < 0 || *bucket >= outbox.MaxBucketCount:
				return nil, usagef("--bucket %d: must be 0..%d", *bucket, outbox.MaxBucketCount-1)
			case *seq != 0 && (*from != 0 || *to != 0):
				return nil, usagef("--seq replays one parked message, --from and --to a retained range: give one or the other")
			case *from != 0 || *to != 0:
				return rangeReplay(a, c, env, *bucket, *from, *to, *valueFile)
			}
			d := deadLetterFlags{bucket: *bucket, seq: *seq}
			if err := d.check(nil); err != nil {
				if *seq == 0 {
					return nil, usagef("--seq (a parked message) or --from and --to (a retained range) is required")
				}
				return nil, err
			}
			var value []byte
			if *valueFile != "" {
				var err error
				if value, err = readValue(a, *valueFile); err != nil {
					return nil, err
				}
			}
			return func(ctx context.Context, a *app, s *session) error {
				return replayParked(ctx, a, s, d, value)
			}, nil
		}
	},
}

// rangeReplay checks the range form's flags and loads the relay's Kafka
// configuration, before any I/O.
func rangeReplay(a *app, c *connection, env map[string]*string, bucket int, from, to int64, valueFile string) (action, error) {
	switch {
	case valueFile != "":
		return nil, usagef("--value replaces a parked message's value (--seq); a range is published as it was written")
	case from == 0:
		return nil, usagef("--from is required with --to: the first sequence of the range")
	case to == 0:
		return nil, usagef("--to is required with --from: the last sequence of the range (outbox status shows the bucket's RETAINED range)")
	case from < 0 || to < 0:
		return nil, usagef("--from %d --to %d: sequence numbers are positive", from, to)
	case to < from:
		return nil, usagef("--from %d --to %d: the range ends before it starts", from, to)
	}
	cfg, err := config.Load(overlay(a.getenv, c, env))
	if err != nil {
		return nil, configError(err)
	}
	return func(ctx context.Context, a *app, s *session) error {
		// The bucket and the mode are checked before Kafka is contacted.
		st, oc, _, err := s.buckets(ctx, bucket)
		if err != nil {
			return err
		}
		if oc.Mode != outbox.WatermarkMode {
			return &outbox.MisconfigurationError{Setting: "Mode", Configured: outbox.WatermarkMode.String(), Stored: oc.Mode.String(),
				Fix: "replay --from --to needs an outbox in watermark mode: a delete-mode outbox keeps no published message to publish again"}
		}
		logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		pub, err := wiring.NewPublisher(ctx, cfg, s.aws, logger)
		if err != nil {
			return err
		}
		defer pub.Close()
		rs, err := replay.Range(ctx, st, pub, bucket, from, to)
		var re *replay.RangeError
		if errors.As(err, &re) {
			return usagef("bucket %d, sequences %d..%d: %s", re.Bucket, re.From, re.To, re.Reason)
		}
		if rs.Head == 0 && err != nil {
			return err // refused or failed before the bucket's head was read: nothing to report
		}
		fmt.Fprintf(a.stdout, "bucket %d, sequences %d..%d (head %d): published %d again, skipped %d fences and %d missing (expired, parked or never written)",
			bucket, from, to, rs.Head, rs.Published, rs.Fences, rs.Missing)
		if rs.Published > 0 {
			fmt.Fprintf(a.stdout, "; first %d, last %d", rs.First, rs.Last)
		}
		fmt.Fprintln(a.stdout)
		return err
	}, nil
}

func replayParked(ctx context.Context, a *app, s *session, d deadLetterFlags, value []byte) error {
	var opts []dynamo.StoreOption
	region := strings.TrimSpace(a.getenv("OUTBOX_REGION"))
	if region != "" {
		// Region mode: the replay reserves a number in the bucket's
		// counter, which only the bucket's region may (ReplayParked).
		opts = append(opts, dynamo.Region(region))
	}
	// Not s.buckets: a dead letter may be in a bucket a shrink (outbox
	// buckets set) removed; ReplayParked puts it in its key's bucket.
	st, err := s.store(ctx, opts...)
	if err != nil {
		return err
	}
	cfg, err := st.Config(ctx)
	if err != nil {
		return err
	}
	var replacement *outbox.Message
	if value != nil {
		p, err := st.GetParked(ctx, d.bucket, d.seq)
		if err != nil {
			return notParked(err, d.bucket, d.seq)
		}
		if p.Err != nil {
			return fmt.Errorf("bucket %d sequence %d cannot be decoded (%v): --value replaces only the value of a message; replay it with dynamo.Store.ReplayParked and a whole message, or drop it", d.bucket, d.seq, p.Err)
		}
		m := p.Message
		m.Value = value
		replacement = &m
	}
	m, err := st.ReplayParked(ctx, d.bucket, d.seq, replacement)
	if owner := cfg.RegionOf(d.bucket); err != nil && region == "" && owner != "" && errors.As(err, new(*outbox.MisconfigurationError)) {
		return &restated{msg: fmt.Sprintf("nothing replayed: the outbox is in region mode, and bucket %d's numbers are reserved only by region %s: "+
			"run OUTBOX_REGION=%s outbox replay --region %s against %s's tables (%v)", d.bucket, owner, owner, owner, owner, err), err: err}
	}
	if err != nil {
		return notParked(err, d.bucket, d.seq)
	}
	how := ""
	if replacement != nil {
		how = fmt.Sprintf(" with a new value of %d bytes", len(value))
	}
	if m.Bucket != d.bucket {
		how += fmt.Sprintf(" into bucket %d, its key's under the BucketCount changed since it was parked", m.Bucket)
	}
	_, err = fmt.Fprintf(a.stdout, "replayed bucket %d sequence %d as sequence %d (id %s, topic %s)%s\n", d.bucket, d.seq, m.Sequence, m.ID, m.Topic, how)
	return err
}
