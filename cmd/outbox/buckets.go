package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
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
change is aborted: the count stays, writers resume, and the command exits 4.
Ctrl-C (or --timeout) aborts the change the same way before the command
exits. A change left unfinished by a crashed tool is finished first; past
its deadline, whoever meets it first (this command, a relay, the sweeper, a
Go or Python writer) aborts it. Relays must be running. --dry-run prints
what would pause and for how long, and writes nothing.`,
	example: `outbox buckets set 16 --dry-run
outbox buckets set 16 --change-timeout 30s`,
	timeout: 5 * time.Minute,
	bind: func(fs *flag.FlagSet) func(*app, *connection, []string) (action, error) {
		wait := fs.Duration("change-timeout", dynamo.DefaultChangeTimeout, "how long writers may pause while the old buckets drain; the change is aborted after it")
		gap := fs.Duration("gap-timeout", outbox.DefaultGapTimeout, "how long a reserved number may stay missing before the change fences it (the relays' GapTimeout)")
		dry := fs.Bool("dry-run", false, "print what would pause and for how long; write nothing")
		return func(_ *app, _ *connection, args []string) (action, error) {
			if len(args) != 2 || args[0] != "set" {
				return nil, usagef("buckets: want `buckets set N`")
			}
			n, err := strconv.Atoi(args[1])
			if err != nil || !outbox.ValidBucketCount(n) {
				return nil, usagef("buckets set %s: N must be 1..%d", args[1], outbox.MaxBucketCount)
			}
			if *wait <= 0 || *gap <= 0 {
				return nil, usagef("--change-timeout and --gap-timeout must be positive")
			}
			return func(ctx context.Context, a *app, s *session) error {
				if _, err := s.store(ctx); err != nil {
					return err
				}
				opts := []dynamo.ChangeOption{dynamo.ChangeTimeout(*wait), dynamo.ChangeGapTimeout(*gap)}
				if *dry {
					p, err := dynamo.PlanBucketCountChange(ctx, s.db, s.tables, n, opts...)
					if err != nil {
						return err
					}
					return printPlan(a.stdout, p, a.now())
				}
				res, err := dynamo.ChangeBucketCount(ctx, s.db, s.tables, n, opts...)
				if ae := (*dynamo.ChangeAbortedError)(nil); errors.As(err, &ae) {
					return &notDrainedError{err}
				}
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

// printPlan says what buckets set would pause and for how long (--dry-run).
func printPlan(w io.Writer, p dynamo.ChangePlan, now time.Time) error {
	if p.From == p.To && p.Finish == 0 {
		_, err := fmt.Fprintf(w, "dry run: BucketCount is %d already (epoch %d): nothing would change, no writer would pause\n", p.From, p.Epoch)
		return err
	}
	fmt.Fprintf(w, "dry run: nothing was written\n")
	if p.Finish != 0 {
		fmt.Fprintf(w, "first    the change %d → %d in progress is finished (or aborted, past its deadline)\n", p.From, p.Finish)
	}
	fmt.Fprintf(w, "change   BucketCount %d → %d, epoch %d → %d\n", p.From, p.To, p.Epoch, p.Epoch+1)
	fmt.Fprintf(w, "pause    the sequence counters of buckets 0..%d freeze: every writer (Go and Python) pauses at its next reservation\n", p.Frozen-1)
	buckets := slices.Sorted(maps.Keys(p.Pending))
	if len(buckets) == 0 {
		fmt.Fprintf(w, "for      about one relay poll: no message is pending, so the buckets are drained as soon as they are frozen; at most %s\n", p.Timeout)
	} else {
		total, capped := 0, false
		var list []string
		for _, b := range buckets {
			total += p.Pending[b]
			capped = capped || p.Pending[b] >= dynamo.PlanProbeLimit
			list = append(list, fmt.Sprintf("%d (%d)", b, p.Pending[b]))
		}
		more := ""
		if capped {
			more = " or more"
		}
		oldest := "of unknown age"
		if !p.Oldest.IsZero() {
			oldest = age(now.Sub(p.Oldest)) + " old"
		}
		fmt.Fprintf(w, "for      until the relays decide the %d%s pending messages of buckets %s (the oldest is %s), at most %s\n",
			total, more, strings.Join(list, ", "), oldest, p.Timeout)
	}
	_, err := fmt.Fprintf(w, "then     BucketCount %d at epoch %d, writers resume; if the buckets have not drained by then, the change is aborted (BucketCount stays %d), writers resume, and buckets set exits 4\n",
		p.To, p.Epoch+1, p.From)
	return err
}
