package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

var bucketsCommand = &command{
	name:    "buckets",
	args:    "set N",
	summary: "change BucketCount online, while writers and relays run",
	description: `Changes the outbox's BucketCount while writers and relays run
(docs/design.md §13): it freezes every sequence counter, waits until the
relays decided every message written under the old count, then switches the
config item to N and thaws the counters. Writers pause meanwhile (their
next reservation fails and they wait for the change), then write under the
new count; relays learn of new buckets by themselves. Per-key order holds
across the change. If the buckets have not drained by --change-timeout the
change is aborted: the count stays, and writers resume. A change left
unfinished by a crashed tool is finished first. Relays must be running.`,
	example: `outbox buckets set 16 --change-timeout 30s`,
	timeout: 5 * time.Minute,
	bind: func(fs *flag.FlagSet) func(*app, *connection, []string) (action, error) {
		wait := fs.Duration("change-timeout", dynamo.DefaultChangeTimeout, "how long writers may pause while the old buckets drain; the change is aborted after it")
		gap := fs.Duration("gap-timeout", outbox.DefaultGapTimeout, "how long a reserved number may stay missing before the change fences it (the relays' GapTimeout)")
		return func(_ *app, _ *connection, args []string) (action, error) {
			if len(args) != 2 || args[0] != "set" {
				return nil, usagef("buckets: want `buckets set N`")
			}
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 || n > outbox.MaxBucketCount {
				return nil, usagef("buckets set %s: N must be 1..%d", args[1], outbox.MaxBucketCount)
			}
			if *wait <= 0 || *gap <= 0 {
				return nil, usagef("--change-timeout and --gap-timeout must be positive")
			}
			return func(ctx context.Context, a *app, s *session) error {
				if _, err := s.store(ctx); err != nil {
					return err
				}
				res, err := dynamo.ChangeBucketCount(ctx, s.db, s.tables, n, dynamo.ChangeTimeout(*wait), dynamo.ChangeGapTimeout(*gap))
				if err != nil {
					return err
				}
				if res.From == res.To {
					_, err = fmt.Fprintf(a.stdout, "BucketCount is %d already (epoch %d)\n", n, res.Epoch)
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "BucketCount changed from %d to %d (epoch %d); writers paused %s\n", res.From, res.To, res.Epoch, res.Frozen.Round(time.Millisecond))
				return err
			}, nil
		}
	},
}
