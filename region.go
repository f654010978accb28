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
