package main

import (
	"context"
	"flag"
	"fmt"
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
changing BucketCount needs a drained outbox and new tables.

A stack whose template writes the config item needs no init; run it for
tables made any other way, or to check a stack's tables.`,
	example: `outbox init --buckets 8 --messages orders-outbox --control orders-outbox-control`,
	timeout: 10 * time.Minute,
	bind: func(fs *flag.FlagSet) func(*app, *connection, []string) (action, error) {
		buckets := fs.Int("buckets", 0, "the outbox's `BucketCount`, 1..4096 (required; no default)")
		return func(_ *app, _ *connection, args []string) (action, error) {
			if err := noArgs(args); err != nil {
				return nil, err
			}
			switch {
			case *buckets == 0:
				return nil, usagef("--buckets is required: the BucketCount of the stack and of every writer (no default, so a forgotten flag cannot create a wrong outbox)")
			case *buckets < 1 || *buckets > outbox.MaxBucketCount:
				return nil, usagef("--buckets %d: must be 1..%d", *buckets, outbox.MaxBucketCount)
			}
			return func(ctx context.Context, a *app, s *session) error {
				if err := dynamo.CreateTables(ctx, s.db, s.tables, dynamo.BucketCount(*buckets)); err != nil {
					return err
				}
				_, err := fmt.Fprintf(a.stdout, "outbox ready: messages %s, control %s, BucketCount %d\n", s.tables.Messages, s.tables.Control, *buckets)
				return err
			}, nil
		}
	},
}
