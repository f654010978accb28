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
(docs/design.md §13), by a cut-over: the config item says N at the next
epoch at once (the flip), so writers write under N without pausing; every
sequence counter is then cut (its last number of the old epoch recorded).
Relays drain the old buckets and hold back, per new bucket, the new epoch's
messages until the old buckets that could share their keys are drained:
per-key order holds. The command then watches the old epoch drain, up to
--change-timeout, and ends it. There is no abort after the flip: stopped
then (Ctrl-C, --timeout, --change-timeout) the change stands, the command
says which old buckets still drain, and the sweeper or a relay's sweep ends
the old epoch once they did (exit 0). Before the flip the command waits for
the previous change's old epoch, if it still drains; stopped or timed out
there it writes nothing and exits 4. Relays must be running. --dry-run
prints what would happen, and writes nothing.`,
	example: `outbox buckets set 16 --dry-run
outbox buckets set 16 --change-timeout 30s`,
	timeout: 5 * time.Minute,
	bind: func(fs *flag.FlagSet) func(*app, *connection, []string) (action, error) {
		wait := fs.Duration("change-timeout", dynamo.DefaultChangeTimeout, "how long the old epoch may take to drain (watched that long; overdue after it); the wait for a previous change's old epoch")
		gap := fs.Duration("gap-timeout", outbox.DefaultGapTimeout, "how long a reserved number may stay missing before the change fences it (the relays' GapTimeout)")
		dry := fs.Bool("dry-run", false, "print what would happen; write nothing")
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
				st, err := s.store(ctx)
				if err != nil {
					return err
				}
				if c := st.Opened(); !*dry && (c.Draining() && c.BucketCount != n || c.Frozen()) {
					fmt.Fprintf(a.stderr, "waiting (at most %s) for the old epoch of the previous BucketCount change %d → %d to drain; "+
						"interrupted or timed out, this change writes nothing and exits 4\n", *wait, c.OldBucketCount, c.BucketCount)
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
				return printChange(a.stdout, res, n)
			}, nil
		}
	},
}

// printChange says what buckets set did: the change made (writers switched
// at once) and whether its old epoch ended, or which old buckets still
// drain.
func printChange(w io.Writer, res dynamo.ChangeResult, n int) error {
	if res.From == res.To && res.Ended {
		_, err := fmt.Fprintf(w, "BucketCount is %d (epoch %d); the old epoch of its change drained and ended after %s\n", n, res.Epoch, res.Watched.Round(time.Millisecond))
		return err
	}
	if res.From == res.To && len(res.Draining) == 0 {
		_, err := fmt.Fprintf(w, "BucketCount is %d already (epoch %d)\n", n, res.Epoch)
		return err
	}
	if res.From != res.To {
		fmt.Fprintf(w, "BucketCount changed from %d to %d (epoch %d): writers switched in %s without waiting\n", res.From, res.To, res.Epoch, res.Flip.Round(time.Millisecond))
	}
	if res.Ended {
		_, err := fmt.Fprintf(w, "the old epoch drained in %s and ended: the change is complete\n", res.Watched.Round(time.Millisecond))
		return err
	}
	_, err := fmt.Fprintf(w, "the change stands; old buckets %v still drain: the new messages of their keys wait for them. "+
		"The sweeper (or a relay's sweep, or buckets set %d again) ends the old epoch once they drained; outbox status shows them\n", res.Draining, n)
	return err
}

// printPlan says what buckets set would do (--dry-run).
func printPlan(w io.Writer, p dynamo.ChangePlan, now time.Time) error {
	if p.From == p.To && p.Previous == 0 && p.Frozen == 0 {
		_, err := fmt.Fprintf(w, "dry run: BucketCount is %d already (epoch %d): nothing would change\n", p.From, p.Epoch)
		return err
	}
	fmt.Fprintf(w, "dry run: nothing was written\n")
	switch {
	case p.Frozen != 0:
		fmt.Fprintf(w, "first    the change %d → %d an older version began (it froze the counters) is aborted: BucketCount stays %d at epoch %d\n",
			p.From, p.Frozen, p.From, p.Epoch+1)
	case p.Previous != 0 && len(p.PreviousDraining) > 0:
		fmt.Fprintf(w, "first    wait (at most %s) for the old epoch of the previous change %d → %d: old buckets %v still drain; "+
			"if they do not, nothing is written and buckets set exits 4\n", p.Timeout, p.Previous, p.From, p.PreviousDraining)
	case p.Previous != 0:
		fmt.Fprintf(w, "first    end the old epoch of the previous change %d → %d: it drained\n", p.Previous, p.From)
	}
	if p.From == p.To {
		return nil
	}
	fmt.Fprintf(w, "change   BucketCount %d → %d, epoch %d → %d: every writer (Go and Python) writes under %d from its next write, without waiting\n",
		p.From, p.To, p.Epoch, p.Epoch+1, p.To)
	fmt.Fprintf(w, "hold     %s\n", describeWaits(p))
	buckets := slices.Sorted(maps.Keys(p.Pending))
	if len(buckets) == 0 {
		fmt.Fprintf(w, "backlog  none: no message is pending in the old buckets, so every new bucket's gate opens at once\n")
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
		fmt.Fprintf(w, "backlog  the relays decide the %d%s pending messages of old buckets %s (the oldest is %s) before the new messages of their keys\n",
			total, more, strings.Join(list, ", "), oldest)
	}
	_, err := fmt.Fprintf(w, "then     the old epoch ends once drained; past %s it is overdue (the sweeper's BucketCountChangeOverdue); the change is never undone\n", p.Timeout)
	return err
}

// describeWaits says which new buckets' messages wait for which old
// buckets: compactly when each waits for one (a growth by a multiple) or
// all for all.
func describeWaits(p dynamo.ChangePlan) string {
	n := len(p.Waits[0])
	switch {
	case n == p.From:
		return fmt.Sprintf("each new bucket's messages wait until all %d old buckets drained (gcd(%d, %d) = 1)", p.From, p.From, p.To)
	case n == 1 && p.To > p.From:
		return fmt.Sprintf("new bucket b's messages wait until old bucket b mod %d drained", p.From)
	}
	var parts []string
	for b := range min(p.To, 4) {
		parts = append(parts, fmt.Sprintf("%d ← %v", b, p.Waits[b]))
	}
	more := ""
	if p.To > 4 {
		more = ", …"
	}
	return fmt.Sprintf("new bucket b's messages wait until the old buckets b' ≡ b (mod %d) drained: %s%s", p.From/n, strings.Join(parts, ", "), more)
}
