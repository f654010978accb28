package outbox

import (
	"fmt"
	"slices"
	"strings"
)

// Region mode (Config.Regions) makes an outbox safe on a DynamoDB global
// table: the bucket range is cut into one slice per region, in the order of
// Config.Regions, and each region's writers reserve sequence numbers and put
// messages only in their own slice, while each region's relays drain only
// the slices their region drains (its own, and any it took over). No item is
// then written in two regions at once, so no conditional write ever has to
// arbitrate across regions and last-writer-wins replication never discards
// a write (docs/design.md §14).

// MaxRegionIDLength bounds a region id.
const MaxRegionIDLength = 32

// ValidateRegionID checks one region id: 1..MaxRegionIDLength characters of
// a-z, 0-9 and '-' (an AWS region name such as eu-west-1 fits).
func ValidateRegionID(id string) error {
	if id == "" || len(id) > MaxRegionIDLength {
		return fmt.Errorf("region id %q must be 1..%d characters", id, MaxRegionIDLength)
	}
	for _, r := range id {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return fmt.Errorf("region id %q may hold only a-z, 0-9 and '-'", id)
		}
	}
	return nil
}

// RegionMode reports whether the outbox is in region mode.
func (c Config) RegionMode() bool { return len(c.Regions) > 0 }

// CheckRegions validates the region settings of a configuration: unique
// valid ids, a BucketCount that the regions divide evenly, and takeovers
// between listed regions where a region that was taken over drains nothing
// itself (a takeover of a drainer moves its slices too: TakeOver).
func (c Config) CheckRegions() error {
	if !c.RegionMode() {
		if len(c.TakenOver) > 0 {
			return fmt.Errorf("takeovers %v without regions", c.TakenOver)
		}
		return nil
	}
	for i, id := range c.Regions {
		if err := ValidateRegionID(id); err != nil {
			return err
		}
		if slices.Contains(c.Regions[:i], id) {
			return fmt.Errorf("region %q is listed twice", id)
		}
	}
	if c.BucketCount%len(c.Regions) != 0 {
		return fmt.Errorf("BucketCount %d is not a multiple of the %d regions (%s): every region needs the same number of buckets",
			c.BucketCount, len(c.Regions), strings.Join(c.Regions, ","))
	}
	for from, by := range c.TakenOver {
		switch {
		case !slices.Contains(c.Regions, from) || !slices.Contains(c.Regions, by):
			return fmt.Errorf("takeover %s→%s names a region not in %s", from, by, strings.Join(c.Regions, ","))
		case from == by:
			return fmt.Errorf("region %s is recorded as taken over by itself", from)
		}
		if _, ok := c.TakenOver[by]; ok {
			return fmt.Errorf("region %s drains %s but was itself taken over", by, from)
		}
	}
	return nil
}

// RegionBuckets returns the slice [lo, hi) of the bucket range that region
// writes (ok false: not a region of the outbox).
func (c Config) RegionBuckets(region string) (lo, hi int, ok bool) {
	i := slices.Index(c.Regions, region)
	if i < 0 || c.BucketCount%len(c.Regions) != 0 {
		return 0, 0, false
	}
	per := c.BucketCount / len(c.Regions)
	return i * per, (i + 1) * per, true
}

// RegionOf returns the region whose slice holds bucket ("" in the default
// mode or out of range).
func (c Config) RegionOf(bucket int) string {
	if !c.RegionMode() || bucket < 0 || bucket >= c.BucketCount || c.BucketCount%len(c.Regions) != 0 {
		return ""
	}
	return c.Regions[bucket/(c.BucketCount/len(c.Regions))]
}

// Drainer returns the region whose relays drain region's slice: the region
// that took it over, or region itself.
func (c Config) Drainer(region string) string {
	if by, ok := c.TakenOver[region]; ok {
		return by
	}
	return region
}

// Drains returns the buckets region's relays drain: every bucket in the
// default mode (region ""), else the slices of the regions it drains.
func (c Config) Drains(region string) []int {
	var out []int
	for b := range c.BucketCount {
		if r := c.RegionOf(b); r == "" || c.Drainer(r) == region {
			out = append(out, b)
		}
	}
	return out
}

// RegionError reports a bucket that this relay's region does not drain: a
// replicated item of another region's slice, which that region's relays
// publish.
type RegionError struct {
	Bucket  int
	Region  string // this relay's region
	Drainer string // the region that drains the bucket
}

func (e *RegionError) Error() string {
	return fmt.Sprintf("outbox: bucket %d is drained by region %s, not by this relay's region %s (outbox regions takeover moves a region's buckets)",
		e.Bucket, e.Drainer, e.Region)
}

// OutboxErrorClass: a drain of another region's bucket is a caller's
// mistake that retrying does not fix.
func (e *RegionError) OutboxErrorClass() ErrorClass { return Fatal }

// CheckRegion validates a process's region against the stored
// configuration: required in region mode, in Regions, and refused in the
// default mode (a *MisconfigurationError naming the fix).
func CheckRegion(stored Config, region string) error {
	if err := stored.CheckRegions(); err != nil {
		return &MisconfigurationError{Setting: "Regions", Configured: region, Stored: strings.Join(stored.Regions, ","),
			Fix: "the config item's regions are inconsistent (" + err.Error() + "); rewrite them with outbox init --regions or the stack's Regions parameter"}
	}
	switch {
	case stored.RegionMode() && region == "":
		return &MisconfigurationError{Setting: "Region", Configured: `""`, Stored: strings.Join(stored.Regions, ","),
			Fix: "the outbox is in region mode: give every writer and relay its region (the Region option, OUTBOX_REGION)"}
	case stored.RegionMode() && !slices.Contains(stored.Regions, region):
		return &MisconfigurationError{Setting: "Region", Configured: region, Stored: strings.Join(stored.Regions, ","),
			Fix: "this process's region is not one of the outbox's regions: fix the Region option (OUTBOX_REGION), or add the region to the config item's list"}
	case !stored.RegionMode() && region != "":
		return &MisconfigurationError{Setting: "Region", Configured: region, Stored: "none (default single-region mode)",
			Fix: "the outbox is not in region mode: remove the Region option, or switch the outbox to region mode on an empty outbox (outbox init --regions)"}
	}
	return nil
}
