package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

var regionsCommand = &command{
	name:    "regions",
	args:    "[takeover FROM --by REGION | handback REGION]",
	summary: "region mode: show which region drains which buckets; take a failed region's buckets over, or hand them back",
	description: `For an outbox in region mode (a DynamoDB global table; outbox init --regions):
without arguments it prints each region's buckets and the region whose relays
drain them.

takeover FROM --by REGION records that REGION's relays drain FROM's buckets
(and any FROM was draining) from now on: run it after a regional outage,
against REGION's tables (--endpoint/--region of the region taking over). Its
relays start on them at their next sweep. FROM's relays stop draining them
when the record replicates to FROM; until then both regions may publish the
same messages (duplicates, each in sequence order). A gap in a bucket taken
over is never fenced: it may be a commit of FROM that has not replicated yet.

handback REGION ends a takeover once REGION's relays are back: the taker's
relays stop at their next sweep, REGION's resume at theirs.

In region mode, outbox drain and outbox park act as a relay of the region in
OUTBOX_REGION (set it to the region whose tables you connect to), on the
buckets that region drains only; without it they are refused (exit 3).`,
	example: `outbox regions --region eu-west-1
outbox regions takeover us-east-1 --by eu-west-1 --region eu-west-1
outbox regions handback us-east-1 --region eu-west-1`,
	timeout: time.Minute,
	bind: func(fs *flag.FlagSet) func(*app, *connection, []string) (action, error) {
		by := fs.String("by", "", "takeover: the `REGION` whose relays take the buckets over")
		return func(_ *app, _ *connection, args []string) (action, error) {
			var verb, target string
			switch {
			case len(args) == 0:
			case len(args) == 2 && (args[0] == "takeover" || args[0] == "handback"):
				verb, target = args[0], args[1]
				if err := outbox.ValidateRegionID(target); err != nil {
					return nil, usagef("%s: %v", verb, err)
				}
			default:
				return nil, usagef("want no argument, takeover FROM --by REGION, or handback REGION; got %q", strings.Join(args, " "))
			}
			switch {
			case verb == "takeover" && *by == "":
				return nil, usagef("takeover needs --by: the region whose relays take %s's buckets over", target)
			case verb == "takeover" && outbox.ValidateRegionID(*by) != nil:
				return nil, usagef("--by: %v", outbox.ValidateRegionID(*by))
			case verb != "takeover" && *by != "":
				return nil, usagef("--by applies to takeover only")
			}
			return func(ctx context.Context, a *app, s *session) error {
				if _, err := s.store(ctx); err != nil {
					return err
				}
				var err error
				switch verb {
				case "takeover":
					_, err = dynamo.TakeOver(ctx, s.db, s.tables, target, *by)
				case "handback":
					_, err = dynamo.HandBack(ctx, s.db, s.tables, target)
				}
				if err != nil {
					return err
				}
				st, err := dynamo.NewStore(ctx, s.db, s.tables)
				if err != nil {
					return err
				}
				c, err := st.Config(ctx)
				if err != nil {
					return err
				}
				return printRegions(a, c)
			}, nil
		}
	},
}

// printRegions prints each region's buckets and who drains them.
func printRegions(a *app, c outbox.Config) error {
	if !c.RegionMode() {
		_, err := fmt.Fprintf(a.stdout, "single-region outbox (no region mode): every relay drains buckets 0..%d\n", c.BucketCount-1)
		return err
	}
	for _, r := range c.Regions {
		lo, hi, _ := c.RegionBuckets(r)
		note := ""
		if d := c.Drainer(r); d != r {
			note = " (taken over)"
		}
		if _, err := fmt.Fprintf(a.stdout, "region %s: buckets %d..%d, drained by %s%s\n", r, lo, hi-1, c.Drainer(r), note); err != nil {
			return err
		}
	}
	return nil
}

// regionList parses --regions.
func regionList(s string) ([]string, error) {
	var list []string
	for r := range strings.SplitSeq(s, ",") {
		r = strings.TrimSpace(r)
		if err := outbox.ValidateRegionID(r); err != nil {
			return nil, usagef("--regions: %v", err)
		}
		if slices.Contains(list, r) {
			return nil, usagef("--regions: %s is listed twice", r)
		}
		list = append(list, r)
	}
	return list, nil
}

// regionsOf is status's view of the regions (nil in the single-region
// mode).
func regionsOf(c outbox.Config) []regionStatus {
	var out []regionStatus
	for _, r := range c.Regions {
		lo, hi, _ := c.RegionBuckets(r)
		out = append(out, regionStatus{Region: r, From: lo, To: hi - 1, DrainedBy: c.Drainer(r)})
	}
	return out
}
