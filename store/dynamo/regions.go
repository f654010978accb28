package dynamo

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/dynakafka/outbox"
)

// TakeOver records in the config item of a region-mode outbox that region
// by's relays drain region from's slice of buckets from now on — and every
// slice that from was draining — after a regional outage (outbox regions
// takeover). Run it against by's tables (its own endpoint): the change is
// a conditional write there, replicated to the others, and by's relays pick
// it up at their next sweep; from's relays stop draining those buckets when
// the item reaches them. Until then both regions may publish the same
// messages (duplicates, each region in sequence order: docs/design.md
// §14.4). A gap in a slice taken over is never fenced by the taker. It
// returns the configuration stored before. Errors: an *outbox.OptionError
// for a region that is not the outbox's, or the same region twice.
func TakeOver(ctx context.Context, client StoreAPI, tables Tables, from, by string) (outbox.Config, error) {
	if err := checkRegionsArg(ctx, client, tables, from, by); err != nil {
		return outbox.Config{}, err
	}
	if from == by {
		return outbox.Config{}, &outbox.OptionError{Option: "region", Value: from, Reason: "a region cannot take over its own buckets (to end a takeover, hand them back)"}
	}
	return resendSafe(ctx, client, tables, func(stored outbox.Config) outbox.Config {
		c := stored
		c.TakenOver = maps.Clone(stored.TakenOver)
		if c.TakenOver == nil {
			c.TakenOver = map[string]string{}
		}
		for r, d := range c.TakenOver {
			if d == from {
				c.TakenOver[r] = by
			}
		}
		c.TakenOver[from] = by
		delete(c.TakenOver, by) // by drains its own slice again
		return c
	})
}

// HandBack records that region drains its own slice again (outbox regions
// handback), ending a TakeOver. Run it against the taker's tables once the
// region's relays are back; the taker's relays stop draining the slice at
// their next sweep, after which the region's own relays may drain it
// (until then, duplicates again, never loss). Gaps the taker left unfenced
// are fenced by the region's own relays.
func HandBack(ctx context.Context, client StoreAPI, tables Tables, region string) (outbox.Config, error) {
	if err := checkRegionsArg(ctx, client, tables, region); err != nil {
		return outbox.Config{}, err
	}
	return resendSafe(ctx, client, tables, func(stored outbox.Config) outbox.Config {
		c := stored
		c.TakenOver = maps.Clone(stored.TakenOver)
		delete(c.TakenOver, region)
		if len(c.TakenOver) == 0 {
			c.TakenOver = nil
		}
		return c
	})
}

// resendSafe is configure for a takeover change: the update is
// conditional on the config item read, so an SDK resend of an update that
// was applied (its response lost) fails its condition; the item then says
// what the change wanted, and that is success.
func resendSafe(ctx context.Context, client StoreAPI, tables Tables, change func(outbox.Config) outbox.Config) (outbox.Config, error) {
	prev, err := configure(ctx, client, tables, change)
	if err == nil {
		return prev, nil
	}
	if cur, rerr := readConfig(ctx, client, tables.Control); rerr == nil && prev.BucketCount != 0 &&
		maps.Equal(cur.TakenOver, change(prev).TakenOver) && slices.Equal(cur.Regions, prev.Regions) {
		return prev, nil
	}
	return prev, err
}

// checkRegionsArg refuses, with an *outbox.OptionError, region names that
// are not the stored outbox's regions.
func checkRegionsArg(ctx context.Context, client StoreAPI, tables Tables, names ...string) error {
	if err := tables.validate(); err != nil {
		return err
	}
	stored, err := readConfig(ctx, client, tables.Control)
	if err != nil {
		return err
	}
	if !stored.RegionMode() {
		return &outbox.OptionError{Option: "region", Value: names, Reason: "the outbox is not in region mode"}
	}
	for _, n := range names {
		if !slices.Contains(stored.Regions, n) {
			return &outbox.OptionError{Option: "region", Value: n, Reason: fmt.Sprintf("not one of the outbox's regions (%s)", strings.Join(stored.Regions, ","))}
		}
	}
	return nil
}
