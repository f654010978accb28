package outbox

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Config is the outbox's stored configuration (the config item of the control
// table). Writers and relays read it at start and refuse to run when their own
// settings differ.
type Config struct {
	BucketCount int
	// FormatVersion is the item format version the outbox was created with.
	FormatVersion int
	// Mode is what the relay does with published messages.
	Mode Mode
	// Retention is how long a message item lives in WatermarkMode (its TTL,
	// set by the writer). Zero in DeleteMode.
	Retention time.Duration
	// Topics are the Kafka topics the outbox serves, sorted: writers refuse a
	// message for any other topic. Empty means any topic (a misspelt topic
	// is then accepted, and its bucket stops at the relay until the topic
	// exists or the message is parked).
	Topics []string
	// MaxMessageBytes bounds a message as a Kafka record (RecordSize), for
	// writers, relays and publishers alike. 0: the item has none, which
	// means DefaultMaxMessageBytes (SharedMaxMessageBytes).
	MaxMessageBytes int
	// Headers names the headers the publisher stamps and consumers read;
	// an empty name is the default one (SharedHeaders).
	Headers HeaderNames
	// BucketEpoch counts the online BucketCount changes the outbox went
	// through (0: none). Sequence counters record the epoch they serve, so
	// a writer that read an older one fails its next reservation and reads
	// the config item again, and message items record the epoch they were
	// reserved at (Entry.Epoch) for the relays' gate (docs/design.md §13).
	BucketEpoch int64
	// OldBucketCount is, while the old epoch of the last online BucketCount
	// change still drains, that epoch's count (BucketCount is already the
	// new one); 0 otherwise. Meanwhile relays drain buckets
	// 0..Span()-1, and a bucket's messages of the new epoch wait for the
	// old buckets that could share their keys (EpochGate).
	OldBucketCount int
	// ChangeDeadline is, while OldBucketCount is set, when the old epoch
	// should have drained: past it the change is overdue (the sweeper
	// reports it; nothing is undone). Zero otherwise.
	ChangeDeadline time.Time
	// NextBucketCount is set only on a config item that a version before
	// the cut-over left in the middle of a change of its own design (it
	// froze the counters until the old buckets drained): BucketCount is
	// still the old count. This version aborts such a change when it meets
	// it (the count stays, the counters move on to the next epoch).
	NextBucketCount int
	// Regions puts the outbox in region mode (for a DynamoDB global
	// table): the bucket range is cut into len(Regions) equal slices, in
	// this order, each written and drained by one region (region.go).
	// Empty: the default single-region mode, which refuses global tables.
	Regions []string
	// TakenOver maps a region whose slice another region's relays drain
	// (after a regional outage) to that region. Written by TakeOver and
	// HandBack; relays re-read it at every sweep.
	TakenOver map[string]string
}

// Draining reports whether the old epoch of an online BucketCount change
// still drains (OldBucketCount is set).
func (c Config) Draining() bool { return c.OldBucketCount != 0 }

// Frozen reports whether the config item describes a change begun by a
// version before the cut-over (NextBucketCount is set), which this version
// aborts.
func (c Config) Frozen() bool { return c.NextBucketCount != 0 }

// Span is how many buckets relays drain: BucketCount, or OldBucketCount
// while the old epoch drains and it is larger (after a shrink, the old
// buckets above the new count still hold the old epoch's messages).
func (c Config) Span() int { return max(c.BucketCount, c.OldBucketCount) }

// OpenEpoch is the highest BucketCount epoch whose messages every bucket
// may publish by this config item alone, without asking an EpochGate:
// BucketEpoch when no old epoch drains, else the epoch before it.
func (c Config) OpenEpoch() int64 {
	if c.Draining() {
		return c.BucketEpoch - 1
	}
	return c.BucketEpoch
}

// SharedMaxMessageBytes is the config item's MaxMessageBytes:
// DefaultMaxMessageBytes when the item has none.
func (c Config) SharedMaxMessageBytes() int {
	if c.MaxMessageBytes == 0 {
		return DefaultMaxMessageBytes
	}
	return c.MaxMessageBytes
}

// SharedHeaders is the config item's header names, defaults filled in.
func (c Config) SharedHeaders() HeaderNames { return c.Headers.WithDefaults() }

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

// CheckConfig verifies that a stored configuration is one this code can
// run on: a valid BucketCount and mode, and a format version it knows.
// Processes take the shared settings from it as they are; none states its
// own (docs/design.md §12).
func CheckConfig(stored Config) error {
	if !ValidBucketCount(stored.BucketCount) {
		return &MisconfigurationError{Setting: "BucketCount", Configured: fmt.Sprintf("1..%d", MaxBucketCount), Stored: fmt.Sprint(stored.BucketCount),
			Fix: fmt.Sprintf("the config item is corrupt: BucketCount must be 1..%d", MaxBucketCount)}
	}
	if stored.FormatVersion > FormatVersion {
		return &MisconfigurationError{Setting: "FormatVersion", Configured: fmt.Sprint(FormatVersion), Stored: fmt.Sprint(stored.FormatVersion),
			Fix: "the outbox was created by a newer version of this library; upgrade this process"}
	}
	if stored.Mode != DeleteMode && stored.Mode != WatermarkMode {
		return &MisconfigurationError{Setting: "Mode", Configured: "delete or watermark", Stored: stored.Mode.String(),
			Fix: "the config item is corrupt or newer than this library"}
	}
	return nil
}
