package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

var initCommand = &command{
	name:    "init",
	summary: "create or verify both tables and the config item",
	description: `Creates the outbox's two tables if they are missing, or checks the layout of
existing ones (those a SAM or CDK stack created), enables TTL, and writes the
config item with the BucketCount every writer and relay reads at start. It
is idempotent: run again with the same --buckets it changes nothing.

--buckets has no default: it must be the BucketCount of the stack (its
BucketCount parameter) and of every writer. If the outbox already holds
another one, init changes nothing and exits with 3, naming both values;
change BucketCount with outbox buckets set N (online, while writers and
relays run).

--mode watermark creates an outbox whose relays never delete published
messages: every message carries a TTL of --retention, after which DynamoDB
deletes it, and until then outbox replay --from --to can publish it again.
A message still pending when its TTL passes can be deleted unpublished, so
the retention must be far above any backlog, and the OldestPendingAge alarm
far below it. An existing outbox in another mode or with another retention
is refused like another BucketCount (exit 3).

--topics lists the Kafka topics the outbox serves: writers (made after it)
refuse a message for any other topic, so a misspelt topic fails the write
instead of stopping a bucket at the relay. Without --topics the stored list
is kept; a list that adds topics to it is written; a list that leaves out a
stored topic is refused (exit 3, naming the topics it drops: writers that
still write them would refuse their messages) unless --replace-topics is
given too; --topics "" empties it, which means any topic.

--max-message-bytes and the header flags set the outbox's shared settings
in its config item: writers, relays and publishers that state another
value are refused at start, and those that state none take the stored
one. Without them a new outbox says none (each component's own option, or
the defaults: 1048576 bytes, x-outbox-message-id, x-outbox-bucket,
x-outbox-sequence) and an existing one keeps what it says; another value
than the stored one is refused (exit 3).

--regions puts a new outbox in region mode, for tables that are DynamoDB
global tables replicated to these regions: the bucket range is cut into one
slice per region, in this order (so --buckets must be a multiple of their
number), each region's writers write and its relays drain only their own
slice, and every writer and relay needs its region (OUTBOX_REGION). Give the
same list in every region. Without it a new outbox is single-region and
refuses global tables; an existing one keeps its list (another list is
refused, exit 3). See outbox regions for a takeover after an outage.

A stack whose template writes the config item needs no init; run it for
tables made any other way, or to check a stack's tables.`,
	example: `outbox init --buckets 8 --messages orders-outbox --control orders-outbox-control
outbox init --buckets 8 --mode watermark --retention 72h`,
	timeout: 10 * time.Minute,
	bind: func(fs *flag.FlagSet) func(*app, *connection, []string) (action, error) {
		buckets := fs.Int("buckets", 0, "the outbox's `BucketCount`, 1..4096 (required; no default)")
		modeName := fs.String("mode", "delete", "`MODE`: delete (published messages are deleted) or watermark (kept until --retention, replayable)")
		retention := fs.Duration("retention", 0, "watermark mode: how long every message is kept, at least 1h (default 24h)")
		topics := fs.String("topics", "", "the `TOPICS` the outbox serves, comma-separated: writers refuse any other (default: keep the stored list; none means any topic)")
		maxBytes := fs.Int("max-message-bytes", 0, "the outbox's `MaxMessageBytes`, 1024..104857596, shared by writers, relays and publishers (default: the stored value; none on a new outbox)")
		idHeader := fs.String("message-id-header", "", "the `NAME` of the message-id header (default: the stored name; x-outbox-message-id)")
		bucketHeader := fs.String("bucket-header", "", "the `NAME` of the bucket header (default: the stored name; x-outbox-bucket)")
		seqHeader := fs.String("sequence-header", "", "the `NAME` of the sequence header (default: the stored name; x-outbox-sequence)")
		replaceTopics := fs.Bool("replace-topics", false, "with --topics: replace the stored list even if that drops topics (default: refuse a list that drops one)")
		regions := fs.String("regions", "", "region mode: the `REGIONS` of the global table, comma-separated, in the same order everywhere (default: none, single-region)")
		return func(_ *app, _ *connection, args []string) (action, error) {
			if err := noArgs(args); err != nil {
				return nil, err
			}
			switch {
			case *buckets == 0:
				return nil, usagef("--buckets is required: the BucketCount of the stack and of every writer (no default, so a forgotten flag cannot create a wrong outbox)")
			case !outbox.ValidBucketCount(*buckets):
				return nil, usagef("--buckets %d: must be 1..%d", *buckets, outbox.MaxBucketCount)
			}
			mode, err := outbox.ParseMode(*modeName)
			if err != nil {
				return nil, usagef("--mode %q: must be delete or watermark", *modeName)
			}
			opts := []dynamo.TablesOption{dynamo.BucketCount(*buckets), dynamo.WithMode(mode)}
			switch {
			case *retention != 0 && mode != outbox.WatermarkMode:
				return nil, usagef("--retention applies to --mode watermark only (a delete-mode outbox deletes messages once published)")
			case *retention != 0 && (*retention < dynamo.MinRetention || *retention%time.Second != 0):
				return nil, usagef("--retention %v: must be whole seconds and at least %v (a message pending past its TTL can be deleted unpublished)", *retention, dynamo.MinRetention)
			case *retention != 0:
				opts = append(opts, dynamo.Retention(*retention))
			}
			topicsSet := false
			fs.Visit(func(f *flag.Flag) { topicsSet = topicsSet || f.Name == "topics" })
			if topicsSet {
				var list []string
				for t := range strings.SplitSeq(*topics, ",") {
					if t = strings.TrimSpace(t); t == "" {
						continue
					}
					if err := outbox.ValidateTopic(t); err != nil {
						return nil, usagef("--topics: %v", err)
					}
					list = append(list, t)
				}
				opts = append(opts, dynamo.Topics(list...))
			}
			switch {
			case *replaceTopics && !topicsSet:
				return nil, usagef("--replace-topics needs --topics: the list that replaces the stored one")
			case *replaceTopics:
				opts = append(opts, dynamo.ReplaceTopics())
			}
			switch {
			case *maxBytes != 0 && (*maxBytes < 1024 || *maxBytes > 100<<20-4):
				return nil, usagef("--max-message-bytes %d: must be 1024..104857596", *maxBytes)
			case *maxBytes != 0:
				opts = append(opts, dynamo.MaxMessageBytes(*maxBytes))
			}
			for _, h := range []struct {
				name string
				opt  func(string) dynamo.TablesOption
			}{{*idHeader, dynamo.MessageIDHeader}, {*bucketHeader, dynamo.BucketHeader}, {*seqHeader, dynamo.SequenceHeader}} {
				if h.name != "" {
					opts = append(opts, h.opt(h.name))
				}
			}
			if *regions != "" {
				list, err := regionList(*regions)
				if err != nil {
					return nil, err
				}
				if *buckets%len(list) != 0 {
					return nil, usagef("--buckets %d: must be a multiple of the %d regions, so that each region gets as many buckets", *buckets, len(list))
				}
				opts = append(opts, dynamo.Regions(list...))
			}
			return func(ctx context.Context, a *app, s *session) error {
				if err := dynamo.CreateTables(ctx, s.db, s.tables, opts...); err != nil {
					return err
				}
				cfg, err := dynamo.NewStore(ctx, s.db, s.tables)
				if err != nil {
					return err
				}
				c, err := cfg.Config(ctx)
				if err != nil {
					return err
				}
				how := "delete mode"
				if c.Mode == outbox.WatermarkMode {
					how = fmt.Sprintf("watermark mode, retention %v", c.Retention)
				}
				if c.RegionMode() {
					how += ", regions " + strings.Join(c.Regions, ",")
				}
				if _, err = fmt.Fprintf(a.stdout, "outbox ready: messages %s, control %s, BucketCount %d, %s, topics %s\n",
					s.tables.Messages, s.tables.Control, c.BucketCount, how, dynamo.TopicList(c.Topics)); err != nil {
					return err
				}
				if len(c.Topics) == 0 {
					_, err = fmt.Fprintln(a.stdout, anyTopicWarning)
				}
				return err
			}, nil
		}
	},
}
