package dynamo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/fanout"
)

// BucketCountChangeError is SetBucketCount refusing to change the outbox's
// BucketCount because a bucket still holds messages: after the change their
// keys would map to other buckets, and newer messages of a key could be
// published before its older ones.
type BucketCountChangeError struct {
	Stored, Requested int
	Bucket            int // the lowest bucket found holding messages
	Pending           int // messages seen in it (a lower bound)
}

func (e *BucketCountChangeError) Error() string {
	return fmt.Sprintf("dynamo: BucketCount cannot change from %d to %d while messages are pending (bucket %d holds at least %d): "+
		"stop the writers, let the relays drain every bucket (outbox status shows none pending), then change it; or keep BucketCount=%d",
		e.Stored, e.Requested, e.Bucket, e.Pending, e.Stored)
}

// RegionModeBucketCountError is ChangeBucketCount (and Configure) refusing
// an online BucketCount change in region mode: each region's writers and
// relays own a slice of the buckets, and the change would have to cut and
// watch every region's counters from one region, the cross-region
// arbitration region mode exists to avoid. Nothing is written.
type RegionModeBucketCountError struct {
	Stored, Requested int
	Regions           []string
}

func (e *RegionModeBucketCountError) Error() string {
	return fmt.Sprintf("dynamo: BucketCount cannot change online from %d to %d in region mode (regions [%s]): "+
		"stop the writers in every region, let the relays drain every bucket (outbox status shows none pending), "+
		"turn region mode off, change BucketCount, and turn region mode on again; or keep BucketCount=%d",
		e.Stored, e.Requested, strings.Join(e.Regions, ","), e.Stored)
}

// RegionsChangeError is Configure refusing to change the outbox's regions
// (region mode on or off, or another list) because a bucket still holds
// messages: the regions decide which buckets each region writes and
// drains, so a pending message could end up in a slice no relay drains.
type RegionsChangeError struct {
	Stored, Requested []string
	Bucket            int // the lowest bucket found holding messages
	Pending           int // messages seen in it (a lower bound)
}

func (e *RegionsChangeError) Error() string {
	return fmt.Sprintf("dynamo: the regions cannot change from [%s] to [%s] while messages are pending (bucket %d holds at least %d): "+
		"stop the writers in every region, let the relays drain every bucket (outbox status shows none pending), then change them in every region's stack",
		strings.Join(e.Stored, ","), strings.Join(e.Requested, ","), e.Bucket, e.Pending)
}

// ModeChangeError is Configure refusing to change the outbox's mode because
// a bucket still holds pending messages: they were written under the other
// mode's rules (with a TTL or without one), so they must be published first.
type ModeChangeError struct {
	Stored, Requested outbox.Mode
	Bucket            int // the lowest bucket found holding messages
	Pending           int // messages seen in it (a lower bound)
}

func (e *ModeChangeError) Error() string {
	return fmt.Sprintf("dynamo: the mode cannot change from %v to %v while messages are pending (bucket %d holds at least %d): "+
		"stop the writers, let the relays drain every bucket (outbox status shows none pending), then change it and restart writers and relays; or keep %v",
		e.Stored, e.Requested, e.Bucket, e.Pending, e.Stored)
}

// The config item's format versions (its attribute v). Version 1 holds the
// bucket count alone: every DeleteMode outbox has it, so a DeleteMode outbox
// stays readable and writable by code that predates the modes. Version 2
// adds the mode (md, "watermark") and the retention (rt, seconds) of a
// WatermarkMode outbox. Code that predates the modes refuses version 2 with
// a *outbox.MisconfigurationError ("created by a newer version of this
// library; upgrade"), and must: it would replace retained messages by
// tombstones, and write messages without a TTL, which then never expire.
//
// The topics the outbox serves (tp, a string set; absent means any topic)
// do not change the version, in either mode: code that predates them reads
// the item as before and ignores tp, so an older writer accepts any topic
// (what it always did: the list is a check against mistakes, and nothing
// written under it depends on it), while an older Configure or
// SetBucketCount keeps tp untouched (its update names only the attributes
// it knows). Raising the version would instead make every older writer and
// relay refuse to start over a check they do not need.
//
// Every other item keeps outbox.FormatVersion in both modes; Config reports
// that item format as FormatVersion, whatever the config item's version.
//
// Version 3 is a config item with a BucketCount epoch (be: an online
// BucketCount change happened, rebucket.go), or in region mode (rg, the
// regions in order; rgt, the takeovers), or both. Code that predates them
// refuses it at start, loudly, as above: it would write under a stale
// count, or write and drain every bucket in every region — the loss region
// mode exists to prevent. Code already running when a change began is
// refused by its counters (sequence, MovedCounter). (Versions before the
// cut-over also wrote nb and cd, a change in progress, at version 3.)
//
// Version 4 is a config item whose old epoch still drains (ob, cd): code
// before the cut-over would publish the new epoch's messages without the
// gate (outbox.EpochGate), so it refuses the item at start. Once the old
// epoch ended (ob removed) the item is version 3 again.
const (
	configV1 = 1
	configV2 = 2
	configV3 = 3
	configV4 = 4
)

// configItem is the config item that says c.
func configItem(c outbox.Config) map[string]types.AttributeValue {
	item := controlKey(configPK, configSK)
	item[attrBuckets] = numAttr(int64(c.BucketCount))
	item[attrVersion] = numAttr(configV1)
	if c.Mode == outbox.WatermarkMode {
		item[attrVersion] = numAttr(configV2)
		item[attrMode] = strAttr(c.Mode.String())
		item[attrRetention] = numAttr(int64(c.Retention / time.Second))
	}
	if c.BucketEpoch > 0 || c.Draining() || c.Frozen() {
		item[attrVersion] = numAttr(configV3)
		item[attrBktEpoch] = numAttr(c.BucketEpoch)
	}
	if c.Frozen() {
		item[attrNextBkts] = numAttr(int64(c.NextBucketCount))
		item[attrChangeDL] = numAttr(c.ChangeDeadline.UnixMilli())
	}
	if len(c.Topics) > 0 {
		item[attrTopics] = &types.AttributeValueMemberSS{Value: slices.Clone(c.Topics)}
	}
	if len(c.Regions) > 0 {
		item[attrVersion] = numAttr(configV3)
		list := &types.AttributeValueMemberL{}
		for _, r := range c.Regions {
			list.Value = append(list.Value, strAttr(r))
		}
		item[attrRegions] = list
		if len(c.TakenOver) > 0 {
			m := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
			for from, by := range c.TakenOver {
				m.Value[from] = strAttr(by)
			}
			item[attrTakenOver] = m
		}
	}
	if c.Draining() {
		item[attrVersion] = numAttr(configV4)
		item[attrOldBkts] = numAttr(int64(c.OldBucketCount))
		item[attrChangeDL] = numAttr(c.ChangeDeadline.UnixMilli())
	}
	if c.MaxMessageBytes != 0 {
		item[attrMaxBytes] = numAttr(int64(c.MaxMessageBytes))
	}
	for attr, name := range sharedHeaderAttrs(c.Headers) {
		if name != "" {
			item[attr] = strAttr(name)
		}
	}
	return item
}

// sharedHeaderAttrs maps the config item's header attributes to h's names.
func sharedHeaderAttrs(h outbox.HeaderNames) map[string]string {
	return map[string]string{attrIDHeader: h.MessageID, attrBktHeader: h.Bucket, attrSeqHeader: h.Sequence}
}

// decodeConfig reads a config item. It refuses a version newer than this
// code reads with a *outbox.MisconfigurationError, and an item that
// contradicts itself with an *ItemError.
func decodeConfig(item map[string]types.AttributeValue) (outbox.Config, error) {
	c, v, err := decodeCountAndVersion(item)
	if err != nil {
		return outbox.Config{}, err
	}
	rt, err := decodeModeAndRetention(item, &c)
	if err != nil {
		return outbox.Config{}, err
	}
	if err := decodeEpoch(item, &c); err != nil {
		return outbox.Config{}, err
	}
	if err := decodeShared(item, &c); err != nil {
		return outbox.Config{}, err
	}
	if c.Regions, c.TakenOver, err = decodeRegions(item); err != nil {
		return outbox.Config{}, err
	}
	if err := checkConfigItem(c, v, rt); err != nil {
		return outbox.Config{}, err
	}
	return c, nil
}

// decodeCountAndVersion reads the bucket count and the item's format
// version (v), refusing a version newer than this code knows.
func decodeCountAndVersion(item map[string]types.AttributeValue) (c outbox.Config, v int64, err error) {
	bc, err := intAttr(item, attrBuckets, true)
	if err == nil && !outbox.ValidBucketCount(bc) {
		err = &ItemError{Attribute: attrBuckets, Reason: fmt.Sprintf("bucket count %d is outside 1..%d", bc, outbox.MaxBucketCount)}
	}
	if err != nil {
		return c, 0, err
	}
	if v, err = intAttr(item, attrVersion, true); err != nil {
		return c, 0, err
	}
	if v > configV4 {
		return c, 0, &outbox.MisconfigurationError{Setting: "FormatVersion", Configured: strconv.Itoa(configV4), Stored: strconv.FormatInt(v, 10),
			Fix: "the outbox was created by a newer version of this library; upgrade"}
	}
	return outbox.Config{BucketCount: int(bc), FormatVersion: outbox.FormatVersion, Mode: outbox.DeleteMode}, v, nil
}

// decodeModeAndRetention reads the publish mode and the retention into c
// and returns the retention as stored, in seconds (0 when absent).
func decodeModeAndRetention(item map[string]types.AttributeValue, c *outbox.Config) (int64, error) {
	if _, ok := item[attrMode]; ok {
		name, err := stringAttr(item, attrMode)
		if err != nil {
			return 0, err
		}
		if c.Mode, err = outbox.ParseMode(name); err != nil {
			return 0, &ItemError{Attribute: attrMode, Reason: err.Error()}
		}
	}
	rt, err := intAttr(item, attrRetention, false)
	switch {
	case errors.Is(err, errMissing):
		rt = 0
	case err != nil:
		return 0, err
	}
	c.Retention = time.Duration(rt) * time.Second
	return rt, nil
}

// decodeShared reads the settings writers, relays and publishers share:
// the topics allowlist, the largest message and the header names.
func decodeShared(item map[string]types.AttributeValue, c *outbox.Config) error {
	var err error
	if v, ok := item[attrTopics]; ok {
		ss, ok := v.(*types.AttributeValueMemberSS)
		if !ok {
			return &ItemError{Attribute: attrTopics, Reason: "not a string set"}
		}
		if c.Topics, err = cleanTopics(ss.Value); err != nil {
			return &ItemError{Attribute: attrTopics, Reason: err.Error()}
		}
	}
	mb, err := intAttr(item, attrMaxBytes, false)
	switch {
	case errors.Is(err, errMissing):
	case err != nil:
		return err
	default:
		c.MaxMessageBytes = int(mb)
	}
	for attr, field := range map[string]*string{attrIDHeader: &c.Headers.MessageID, attrBktHeader: &c.Headers.Bucket, attrSeqHeader: &c.Headers.Sequence} {
		if _, ok := item[attr]; ok {
			if *field, err = stringAttr(item, attr); err != nil {
				return err
			}
		}
	}
	if err := checkShared(*c); err != nil {
		return &ItemError{Attribute: attrMaxBytes + "/" + attrIDHeader, Reason: err.Error()}
	}
	return nil
}

// checkConfigItem refuses an item whose parts contradict each other or its
// format version v (rt: the retention as stored, in seconds).
func checkConfigItem(c outbox.Config, v, rt int64) error {
	switch {
	case c.Draining() && v < configV4:
		return &ItemError{Attribute: attrVersion, Reason: fmt.Sprintf(
			"a config item whose old BucketCount epoch drains must have format version %d, so that older relays refuse it; it has %d", configV4, v)}
	case c.RegionMode() && v < configV3:
		return &ItemError{Attribute: attrVersion, Reason: fmt.Sprintf(
			"a region-mode config item must have format version %d, so that older relays and writers refuse it; it has %d (write it with dynamo.Configure)", configV3, v)}
	case c.CheckRegions() != nil:
		return &ItemError{Attribute: attrRegions, Reason: c.CheckRegions().Error()}
	case c.Mode == outbox.WatermarkMode && v < configV2:
		return &ItemError{Attribute: attrVersion, Reason: fmt.Sprintf(
			"a watermark-mode config item must have format version %d, so that older relays and writers refuse it; it has %d (write it with dynamo.Configure)", configV2, v)}
	case c.Mode == outbox.WatermarkMode && c.Retention < MinRetention:
		return &ItemError{Attribute: attrRetention, Reason: fmt.Sprintf("retention %v in watermark mode; it must be at least %v", c.Retention, MinRetention)}
	case c.Mode == outbox.DeleteMode && rt != 0:
		return &ItemError{Attribute: attrRetention, Reason: "a retention in delete mode: the item contradicts itself"}
	}
	return nil
}

// decodeRegions reads the config item's regions and takeovers.
func decodeRegions(item map[string]types.AttributeValue) ([]string, map[string]string, error) {
	av, ok := item[attrRegions]
	if !ok {
		if _, ok := item[attrTakenOver]; ok {
			return nil, nil, &ItemError{Attribute: attrTakenOver, Reason: "takeovers without regions"}
		}
		return nil, nil, nil
	}
	list, ok := av.(*types.AttributeValueMemberL)
	if !ok {
		return nil, nil, &ItemError{Attribute: attrRegions, Reason: "not a list"}
	}
	var regions []string
	for _, v := range list.Value {
		s, ok := v.(*types.AttributeValueMemberS)
		if !ok {
			return nil, nil, &ItemError{Attribute: attrRegions, Reason: "a region that is not a string"}
		}
		regions = append(regions, s.Value)
	}
	var taken map[string]string
	if av, ok := item[attrTakenOver]; ok {
		m, ok := av.(*types.AttributeValueMemberM)
		if !ok {
			return nil, nil, &ItemError{Attribute: attrTakenOver, Reason: "not a map"}
		}
		taken = map[string]string{}
		for from, v := range m.Value {
			s, ok := v.(*types.AttributeValueMemberS)
			if !ok {
				return nil, nil, &ItemError{Attribute: attrTakenOver, Reason: "a drainer that is not a string"}
			}
			taken[from] = s.Value
		}
	}
	return regions, taken, nil
}

// checkWanted validates a configuration to write, filling in the default
// retention of WatermarkMode.
func checkWanted(c outbox.Config) (outbox.Config, error) {
	s := defaultSettings()
	s.bucketCount, s.mode, s.modeSet, s.retention = c.BucketCount, c.Mode, true, c.Retention
	if !outbox.ValidBucketCount(c.BucketCount) {
		return c, &outbox.OptionError{Option: "BucketCount", Value: c.BucketCount, Reason: fmt.Sprintf("must be 1..%d", outbox.MaxBucketCount)}
	}
	if err := s.validate(); err != nil {
		// Configure's Config field is Mode.
		if oe, ok := err.(*outbox.OptionError); ok && oe.Option == "WithMode" {
			oe.Option = "Mode"
		}
		return c, err
	}
	if c.Mode == outbox.WatermarkMode && c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	topics, err := cleanTopics(c.Topics)
	if err != nil {
		return c, &outbox.OptionError{Option: "Topics", Value: c.Topics, Reason: err.Error()}
	}
	c.Topics = topics
	if err := checkShared(c); err != nil {
		return c, err
	}
	if err := c.CheckRegions(); err != nil {
		return c, &outbox.OptionError{Option: "Regions", Value: c.Regions, Reason: err.Error()}
	}
	c.FormatVersion = outbox.FormatVersion
	return c, nil
}

// checkShared validates the shared settings of a configuration (0 and ""
// are the defaults).
func checkShared(c outbox.Config) error {
	if c.MaxMessageBytes != 0 && (c.MaxMessageBytes < outbox.RecordOverhead || c.MaxMessageBytes > maxSharedMessageBytes) {
		return &outbox.OptionError{Option: "MaxMessageBytes", Value: c.MaxMessageBytes,
			Reason: fmt.Sprintf("must be %d..%d, and at most every topic's max.message.bytes", outbox.RecordOverhead, maxSharedMessageBytes)}
	}
	return c.Headers.Check()
}

// maxSharedMessageBytes is the largest MaxMessageBytes the Kafka publisher
// accepts (100 MiB less kgo's 4-byte batch length prefix).
const maxSharedMessageBytes = 100<<20 - 4

// cleanTopics checks a topic list and returns it sorted without duplicates
// (nil for none: any topic).
func cleanTopics(topics []string) ([]string, error) {
	var out []string
	for _, t := range topics {
		if err := outbox.ValidateTopic(t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// sameConfig compares what a config item says.
func sameConfig(a, b outbox.Config) bool {
	return a.BucketCount == b.BucketCount && a.Mode == b.Mode && a.Retention == b.Retention && slices.Equal(a.Topics, b.Topics) &&
		a.MaxMessageBytes == b.MaxMessageBytes && a.Headers == b.Headers && slices.Equal(a.Regions, b.Regions) && maps.Equal(a.TakenOver, b.TakenOver)
}

// SetBucketCount makes the outbox's config item say bucketCount, keeping its
// mode, retention and topics. It is Configure for tools that set the bucket count
// alone; with no config item yet it writes a DeleteMode one. It returns the
// count stored before, 0 when there was none.
func SetBucketCount(ctx context.Context, client StoreAPI, tables Tables, bucketCount int) (previous int, err error) {
	if !outbox.ValidBucketCount(bucketCount) {
		return 0, &outbox.OptionError{Option: "BucketCount", Value: bucketCount, Reason: fmt.Sprintf("must be 1..%d", outbox.MaxBucketCount)}
	}
	prev, err := configure(ctx, client, tables, func(stored outbox.Config) outbox.Config {
		stored.BucketCount = bucketCount
		return stored
	})
	return prev.BucketCount, err
}

// Configure makes the outbox's config item say want (BucketCount, Mode,
// Retention, Topics, MaxMessageBytes and Headers; FormatVersion is ignored,
// a WatermarkMode Retention of 0 means DefaultRetention, empty Topics means
// any topic, and MaxMessageBytes 0 or an empty header name means none
// stated: each component's own option, or the default — pass the stored
// values to keep them). It is for deployment tools (the stack's custom
// resource) on tables that already exist:
//
//   - no config item yet: it is written;
//   - the same settings: nothing is written;
//   - another Retention only: it is changed at once. Writers read the
//     retention when they start, so each one uses the new value after its
//     next restart; messages already written keep their TTL;
//   - other Topics: changed at once; writers read the list when they start
//     and refuse other topics after their next restart. Messages already
//     written are published whatever the list says;
//   - another MaxMessageBytes or header names: changed at once; writers,
//     relays and publishers read them when they start, and one whose own
//     option states the old value is refused at its next start;
//   - another BucketCount (the same Mode): changed online, while writers
//     and relays run, by ChangeBucketCount with opts (ChangeTimeout,
//     ChangeGapTimeout): writers switch at once; it returns once the old
//     epoch drained or at the timeout (the change stands either way). A
//     *ChangeAbortedError, nothing written, when the previous change's old
//     epoch does not drain in time;
//   - another Mode (with or without another BucketCount): changed only if
//     the outbox is empty, that is no message is pending in any bucket
//     below OutOfRangeProbe of the larger count — each bucket is probed
//     with Store.ReadLease and Store.Peek after its cleaned mark, never by
//     subtracting a head from a counter, since fences and published
//     messages can lie between the two. Otherwise it fails with a
//     *BucketCountChangeError or a *ModeChangeError. The emptiness check
//     cannot stop a writer that commits after it: stop the writers before
//     changing the mode, and start them (and the relays) again afterwards
//     — writers and relays read it at start.
//
// Every change is conditional on the config item being what was read (a
// concurrent change makes it fail, naming it). It returns the configuration
// stored before (zero when there was none).
func Configure(ctx context.Context, client StoreAPI, tables Tables, want outbox.Config, opts ...ChangeOption) (previous outbox.Config, err error) {
	want, err = checkWanted(want)
	if err != nil {
		return outbox.Config{}, err
	}
	previous, err = configure(ctx, client, tables, func(outbox.Config) outbox.Config { return want }, opts...)
	if err != nil {
		return previous, err
	}
	// The item also records its messages table (pairing.go).
	return previous, recordPairing(ctx, client, tables)
}

// configure reads the config item and writes change(stored) if it differs
// (change(zero Config) when there is none), with the checks of Configure.
func configure(ctx context.Context, client StoreAPI, tables Tables, change func(stored outbox.Config) outbox.Config, opts ...ChangeOption) (outbox.Config, error) {
	if err := tables.validate(); err != nil {
		return outbox.Config{}, err
	}
	if client == nil {
		return outbox.Config{}, &outbox.OptionError{Option: "client", Value: nil, Reason: "a DynamoDB client is required"}
	}
	stored, item, err := readConfigItem(ctx, client, tables.Control)
	if err := checkSingleRegion(ctx, client, tables, change(stored).RegionMode()); err != nil {
		return outbox.Config{}, err
	}
	if err == nil {
		err = checkPairing(item, tables)
	}
	var missing *types.ResourceNotFoundException
	switch {
	case errors.As(err, &missing):
		return outbox.Config{}, fmt.Errorf("dynamo: the control table %s does not exist (create the tables first): %w", tables.Control, missing)
	case errors.Is(err, ErrNoConfig):
		want, err := checkWanted(change(outbox.Config{Mode: outbox.DeleteMode}))
		if err != nil {
			return outbox.Config{}, err
		}
		err = writeNewConfig(ctx, client, tables.Control, want)
		if !isConditionFailed(err) {
			return outbox.Config{}, err
		}
		// Another writer created it first: compare with what it wrote.
		if stored, err = readConfig(ctx, client, tables.Control); err != nil {
			return outbox.Config{}, err
		}
	case err != nil:
		return outbox.Config{}, err
	}
	want, err := checkWanted(change(stored))
	if err != nil {
		return stored, err
	}
	if stored.Mode == want.Mode && (stored.BucketCount != want.BucketCount || stored.Frozen()) {
		// Online (rebucket.go); then the other settings, if any.
		first := stored
		if _, err := ChangeBucketCount(ctx, client, tables, want.BucketCount, opts...); err != nil {
			return first, err
		}
		if stored, err = readConfig(ctx, client, tables.Control); err != nil {
			return first, err
		}
		prev := first
		want.BucketEpoch, want.OldBucketCount, want.ChangeDeadline, want.NextBucketCount = stored.BucketEpoch, stored.OldBucketCount, stored.ChangeDeadline, 0
		if sameConfig(stored, want) {
			return prev, nil
		}
		return prev, replaceConfig(ctx, client, tables.Control, stored, want)
	}
	want.BucketEpoch, want.OldBucketCount, want.ChangeDeadline, want.NextBucketCount = stored.BucketEpoch, stored.OldBucketCount, stored.ChangeDeadline, stored.NextBucketCount
	if sameConfig(stored, want) {
		return stored, nil
	}
	if stored.BucketCount != want.BucketCount || stored.Mode != want.Mode || !slices.Equal(stored.Regions, want.Regions) {
		s := &Store{client: client, tables: tables, cfg: defaultSettings()}
		bucket, pending, err := s.firstPending(ctx, stored.BucketCount, want.BucketCount)
		switch {
		case err != nil:
			return stored, err
		case pending > 0 && !slices.Equal(stored.Regions, want.Regions):
			return stored, &RegionsChangeError{Stored: stored.Regions, Requested: want.Regions, Bucket: bucket, Pending: pending}
		case pending > 0 && stored.BucketCount != want.BucketCount:
			return stored, &BucketCountChangeError{Stored: stored.BucketCount, Requested: want.BucketCount, Bucket: bucket, Pending: pending}
		case pending > 0:
			return stored, &ModeChangeError{Stored: stored.Mode, Requested: want.Mode, Bucket: bucket, Pending: pending}
		}
	}
	return stored, replaceConfig(ctx, client, tables.Control, stored, want)
}

// configAttrs are the config item's attributes that say its configuration.
var configAttrs = []string{attrBuckets, attrVersion, attrMode, attrRetention, attrTopics, attrMaxBytes, attrIDHeader, attrBktHeader, attrSeqHeader,
	attrBktEpoch, attrOldBkts, attrNextBkts, attrChangeDL, attrRegions, attrTakenOver}

// replaceConfig changes the config item from old to c, conditional on it
// still saying old; a resent write that applied already is recognised.
func replaceConfig(ctx context.Context, client updateItemAPI, table string, old, c outbox.Config) error {
	oldItem, item := configItem(old), configItem(c)
	var cond expression.ConditionBuilder
	var upd expression.UpdateBuilder
	for i, attr := range configAttrs {
		var ci expression.ConditionBuilder
		if v, ok := oldItem[attr]; ok {
			ci = expression.Name(attr).Equal(expression.Value(v))
		} else {
			ci = expression.AttributeNotExists(expression.Name(attr))
		}
		if i == 0 {
			cond = ci
		} else {
			cond = cond.And(ci)
		}
		if v, ok := item[attr]; ok {
			upd = upd.Set(expression.Name(attr), expression.Value(v))
		} else {
			upd = upd.Remove(expression.Name(attr))
		}
	}
	e, err := buildExpr("config", expression.NewBuilder().WithCondition(cond).WithUpdate(upd))
	if err != nil {
		return err
	}
	_, err = client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 str(table),
		Key:                       controlKey(configPK, configSK),
		UpdateExpression:          e.Update(),
		ConditionExpression:       e.Condition(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
	})
	what := describeChange(old, c)
	switch {
	case err == nil:
		return nil
	case isConditionFailed(err) && appliedConfig(ctx, client, table, item):
		// An SDK resend of a write that applied: ours.
		return nil
	case isConditionFailed(err):
		return fmt.Errorf("dynamo: the config item in %s changed while %s; read it (outbox status) and try again", table, what)
	default:
		return fmt.Errorf("dynamo: change the config item in %s (%s): %w", table, what, err)
	}
}

// appliedConfig reports whether the config item in table holds every
// attribute of want (a conditional write that failed because it had
// applied already, its response lost and the request resent).
func appliedConfig(ctx context.Context, client updateItemAPI, table string, want map[string]types.AttributeValue) bool {
	get, ok := client.(getItemAPI)
	if !ok {
		return false
	}
	out, err := get.GetItem(ctx, &dynamodb.GetItemInput{TableName: str(table), Key: controlKey(configPK, configSK), ConsistentRead: new(true)})
	if err != nil || len(out.Item) == 0 {
		return false
	}
	for _, attr := range configAttrs {
		w, inWant := want[attr]
		h, inHave := out.Item[attr]
		if inWant != inHave || inWant && !attrEqual(w, h) {
			return false
		}
	}
	return true
}

// attrEqual compares the attribute values a config item holds.
func attrEqual(a, b types.AttributeValue) bool {
	switch x := a.(type) {
	case *types.AttributeValueMemberN:
		y, ok := b.(*types.AttributeValueMemberN)
		return ok && x.Value == y.Value
	case *types.AttributeValueMemberS:
		y, ok := b.(*types.AttributeValueMemberS)
		return ok && x.Value == y.Value
	case *types.AttributeValueMemberSS:
		y, ok := b.(*types.AttributeValueMemberSS)
		return ok && slices.Equal(slices.Sorted(slices.Values(x.Value)), slices.Sorted(slices.Values(y.Value)))
	case *types.AttributeValueMemberL: // the regions, in order
		y, ok := b.(*types.AttributeValueMemberL)
		return ok && slices.EqualFunc(x.Value, y.Value, attrEqual)
	case *types.AttributeValueMemberM: // the takeovers
		y, ok := b.(*types.AttributeValueMemberM)
		if !ok || len(x.Value) != len(y.Value) {
			return false
		}
		for k, v := range x.Value {
			if w, ok := y.Value[k]; !ok || !attrEqual(v, w) {
				return false
			}
		}
		return true
	}
	return false
}

// describeChange says what a config change changes, for errors.
func describeChange(old, c outbox.Config) string {
	var parts []string
	if old.BucketCount != c.BucketCount {
		parts = append(parts, fmt.Sprintf("BucketCount was being changed from %d to %d", old.BucketCount, c.BucketCount))
	}
	switch {
	case !old.Draining() && c.Draining():
		parts = append(parts, fmt.Sprintf("a BucketCount change from %d to %d was being made", c.OldBucketCount, c.BucketCount))
	case old.Draining() && !c.Draining():
		parts = append(parts, fmt.Sprintf("the old epoch of the BucketCount change from %d to %d was being ended", old.OldBucketCount, old.BucketCount))
	case old.Frozen() && !c.Frozen():
		parts = append(parts, fmt.Sprintf("an older version's BucketCount change from %d to %d was being aborted", old.BucketCount, old.NextBucketCount))
	}
	if old.Mode != c.Mode {
		parts = append(parts, fmt.Sprintf("the mode was being changed from %v to %v", old.Mode, c.Mode))
	}
	if old.Retention != c.Retention {
		parts = append(parts, fmt.Sprintf("the retention was being changed from %v to %v", old.Retention, c.Retention))
	}
	if !slices.Equal(old.Topics, c.Topics) {
		parts = append(parts, fmt.Sprintf("the topics were being changed from %s to %s", TopicList(old.Topics), TopicList(c.Topics)))
	}
	if !slices.Equal(old.Regions, c.Regions) {
		parts = append(parts, fmt.Sprintf("the regions were being changed from [%s] to [%s]", strings.Join(old.Regions, ","), strings.Join(c.Regions, ",")))
	}
	if !maps.Equal(old.TakenOver, c.TakenOver) {
		parts = append(parts, fmt.Sprintf("the takeovers were being changed from %v to %v", old.TakenOver, c.TakenOver))
	}
	if old.SharedMaxMessageBytes() != c.SharedMaxMessageBytes() {
		parts = append(parts, fmt.Sprintf("MaxMessageBytes was being changed from %d to %d", old.SharedMaxMessageBytes(), c.SharedMaxMessageBytes()))
	}
	if old.SharedHeaders() != c.SharedHeaders() {
		parts = append(parts, fmt.Sprintf("the header names were being changed from %+v to %+v", old.SharedHeaders(), c.SharedHeaders()))
	}
	return strings.Join(parts, " and ")
}

// TopicList says a config item's topic list in words: the names, or "any"
// for an empty list.
func TopicList(topics []string) string {
	if len(topics) == 0 {
		return "any"
	}
	return strings.Join(topics, ",")
}

// writeNewConfig puts the config item unless one exists. A constant
// condition (expr.go): never overwrite a stored config.
func writeNewConfig(ctx context.Context, client putItemAPI, table string, c outbox.Config) error {
	_, err := client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                str(table),
		Item:                     configItem(c),
		ConditionExpression:      str("attribute_not_exists(#pk)"),
		ExpressionAttributeNames: names(attrPK),
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("dynamo: write the config item to %s: %w", table, err)
	}
	return err
}

// emptyProbeConcurrency bounds the bucket probes checkEmpty runs at once.
const emptyProbeConcurrency = 16

// firstPending returns the lowest bucket that holds a message and how many
// it holds (0, 0 when none), among the buckets a relay or a sweeper of
// either count would look at.
func (s *Store) firstPending(ctx context.Context, stored, requested int) (bucket, pending int, err error) {
	upper := outbox.OutOfRangeProbe(max(stored, requested))
	type found struct{ bucket, pending int }
	var (
		mu    sync.Mutex
		first *found
	)
	err = fanout.Each(ctx, upper, emptyProbeConcurrency, func(ctx context.Context, b int) error {
		n, err := s.pendingIn(ctx, b)
		if err != nil || n == 0 {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if first == nil || b < first.bucket {
			first = &found{b, n}
		}
		return nil
	})
	if err != nil || first == nil {
		return 0, 0, err
	}
	return first.bucket, first.pending, nil
}

// pendingIn counts the messages of bucket b after its cleaned mark: first
// with a short probe, which settles any bucket with a message near its
// start, then, when that found only fences or nothing, with a long one that
// reads the rest of the bucket (up to maxQueryLimit items).
func (s *Store) pendingIn(ctx context.Context, b int) (int, error) {
	l, err := s.ReadLease(ctx, b)
	if err != nil {
		return 0, err
	}
	for _, limit := range []int{100, maxQueryLimit} {
		n, _, err := s.Peek(ctx, b, l.Cleaned, limit)
		if err != nil || n > 0 {
			return n, err
		}
	}
	return 0, nil
}

// ReadConfig reads the outbox's config item consistently, without opening a
// Store: ErrNoConfig when there is none, a *TableError when the control
// table does not exist, a *outbox.MisconfigurationError when it was written
// by a newer version of this library.
func ReadConfig(ctx context.Context, client interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}, tables Tables) (outbox.Config, error) {
	return readConfig(ctx, client, tables.Control)
}
