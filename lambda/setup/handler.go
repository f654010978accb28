package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

// Resource properties of Custom::OutboxConfig. CloudFormation sends every
// value as a string.
const (
	propMessages = "MessagesTable"
	propControl  = "ControlTable"
	propBuckets  = "BucketCount"
	// propMode is "delete" or "watermark"; absent (a stack from before the
	// modes) means delete. propRetention is the watermark mode's retention
	// in whole hours; ignored in delete mode, 24 when absent.
	propMode      = "Mode"
	propRetention = "RetentionHours"
	// propTopics is the topics the outbox serves, comma-separated (the
	// stack's Topics parameter); empty means any topic. Absent (a stack
	// from before the topic list) leaves the stored list as it is.
	propTopics = "Topics"
	// propMaxBytes is the outbox's MaxMessageBytes (the stack's
	// MaxMessageBytes parameter), a shared setting of the config item.
	// Absent (a stack from before it) leaves the stored value as it is.
	propMaxBytes = "MaxMessageBytes"
	// propRegions is region mode's regions, comma-separated, in order (the
	// stack's Regions parameter, the same in every region's stack); empty
	// means the single-region mode. Absent (a stack from before it) leaves
	// the stored list as it is. The config item's takeovers are never the
	// stack's: they are kept (outbox regions takeover writes them).
	propRegions = "Regions"
	// propTables is where the stack's tables come from (the stack's Tables
	// parameter): create or global, and this stack writes the config item;
	// attach, and the tables are this region's replicas of the global
	// stack's, whose config item this stack only checks. Absent (a stack
	// from before it) means create.
	propTables = "Tables"
	// propRegion is the stack's region (AWS::Region); in region mode it must
	// be one of Regions. Absent (a stack from before it): not checked here
	// (the functions check OUTBOX_REGION at init).
	propRegion = "Region"
	// attrMessages and attrStream are what an attach stack takes from the
	// answer: the messages table it checked, and its replica's stream in
	// this region, on which the relay runs (CloudFormation has no way to
	// read an existing table's stream ARN, which carries a creation time).
	attrMessages = "MessagesTable"
	attrStream   = "MessagesStreamArn"
	// attrDigest is a digest of the config item's settings that processes
	// read only when they start (configDigest). The functions'
	// environment carries it as OUTBOX_CONFIG_DIGEST, which nothing
	// reads: the settings themselves are the config item's alone. When
	// one of them changes, so does the digest, CloudFormation updates the
	// functions, and their warm containers, built on the old settings,
	// give way to ones that read the new config item.
	attrDigest = "ConfigDigest"
)

// The Tables values.
const (
	tablesCreate = "create"
	tablesGlobal = "global"
	tablesAttach = "attach"
)

// attachPoll is how often an attach stack looks again for a config item
// that has not replicated yet; it waits until the invocation's deadline
// (less deadlineMargin).
const attachPoll = 5 * time.Second

// defaultRetentionHours is RetentionHours when the property is absent.
const defaultRetentionHours = 24

// deadlineMargin is how long before the invocation's deadline the handler
// stops working and answers: an invocation that times out sends no answer,
// and CloudFormation then waits an hour before it fails the stack.
const deadlineMargin = 10 * time.Second

// maxReason bounds the Reason sent back; CloudFormation refuses responses
// above 4096 bytes.
const maxReason = 1500

// Handler answers CloudFormation's Create, Update and Delete requests for
// Custom::OutboxConfig.
type Handler struct {
	client     dynamo.StoreAPI
	log        *slog.Logger
	initErr    error         // the function could not build its client: every request fails with it (deletes still succeed)
	attachPoll time.Duration // attachPoll; tests shorten it
}

// NewHandler returns the handler over client.
func NewHandler(client dynamo.StoreAPI, log *slog.Logger) *Handler {
	return &Handler{client: client, log: log, attachPoll: attachPoll}
}

// Handle is a cfn.CustomResourceFunction:
//
//   - Create and Update write the config item with BucketCount, Mode and (in
//     watermark mode) the retention through dynamo.Configure: written when
//     missing, left alone when equal, the retention changed at once, and
//     BucketCount or Mode changed only when the outbox is empty; otherwise
//     the request fails with a reason naming both values, and CloudFormation
//     rolls the stack back.
//   - With Tables attach (region mode, in a region whose tables are
//     replicas of another region's stack's), Create and Update write
//     nothing: they wait for the config item to replicate, refuse it unless
//     it says what the stack says (BucketCount, Regions, mode, retention,
//     topics, MaxMessageBytes), and answer the messages table's stream ARN
//     in this region.
//   - In region mode a stack whose region is not one of Regions is refused.
//   - Delete always succeeds and changes nothing: the tables are retained,
//     and their config item with them, so the retained outbox can still be
//     inspected and drained with the outbox CLI.
//
// The physical id is "outbox-config:<control table>", so an update that
// moves the outbox to another control table replaces the resource.
func (h *Handler) Handle(ctx context.Context, ev cfn.Event) (physicalID string, data map[string]any, err error) {
	log := h.log.With("request_type", string(ev.RequestType), "logical_id", ev.LogicalResourceID, "request_id", ev.RequestID)
	if ev.RequestType == cfn.RequestDelete {
		log.InfoContext(ctx, "outbox setup: delete: nothing to do; the tables and their config item are retained", "physical_id", ev.PhysicalResourceID)
		return ev.PhysicalResourceID, nil, nil
	}
	// On failure, keep the resource's identity: an update must not look
	// like a replacement. (On a failed create LambdaWrap uses the request id.)
	failID := ev.PhysicalResourceID
	fail := func(err error) (string, map[string]any, error) {
		log.ErrorContext(ctx, "outbox setup: refused", "err", err)
		return failID, nil, errors.New(truncate(err.Error(), maxReason))
	}
	switch ev.RequestType {
	case cfn.RequestCreate, cfn.RequestUpdate:
	default:
		return fail(fmt.Errorf("unknown request type %q", ev.RequestType))
	}
	if h.initErr != nil {
		return fail(fmt.Errorf("the setup function could not load its AWS configuration: %w", h.initErr))
	}
	tables, want, err := properties(ev.ResourceProperties)
	if err != nil {
		return fail(err)
	}
	tablesMode, err := placement(ev.ResourceProperties, want)
	if err != nil {
		return fail(err)
	}
	_, setTopics := ev.ResourceProperties[propTopics]
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-deadlineMargin))
		defer cancel()
	}
	if tablesMode == tablesAttach {
		data, err := h.attach(ctx, tables, want, ev.ResourceProperties)
		if err != nil {
			return fail(err)
		}
		log.InfoContext(ctx, "outbox setup: attached to the replicas; the config item says what the stack says",
			"messages_table", tables.Messages, "control_table", tables.Control, "stream", data[attrStream])
		return "outbox-config:" + tables.Control, data, nil
	}
	want = h.keepStored(ctx, tables, want, ev.ResourceProperties, setTopics)
	prev, err := dynamo.Configure(ctx, h.client, tables, want)
	if err != nil {
		return fail(configureError(tables, err))
	}
	logConfigured(ctx, log, tables, prev, want)
	return "outbox-config:" + tables.Control, map[string]any{
		propBuckets:   strconv.Itoa(want.BucketCount),
		propMode:      want.Mode.String(),
		propRetention: strconv.Itoa(int(want.Retention / time.Hour)),
		propTopics:    strings.Join(want.Topics, ","),
		propRegions:   strings.Join(want.Regions, ","),
		attrMessages:  tables.Messages,
		attrDigest:    configDigest(want),
	}, nil
}

// keepStored keeps in want what the stack does not state and the stored
// config item does: the topic list when the stack sets none, the header
// names (the stack states none), MaxMessageBytes and the regions when an
// older stack does not state them (outbox init may have written them), and
// the takeovers while the regions stay.
func (h *Handler) keepStored(ctx context.Context, tables dynamo.Tables, want outbox.Config, p map[string]any, setTopics bool) outbox.Config {
	if !setTopics {
		// Keep the stored list: this stack does not say one.
		want.Topics = nil
		if stored, err := dynamo.ReadConfig(ctx, h.client, tables); err == nil {
			want.Topics = stored.Topics
		}
	}
	stored, err := dynamo.ReadConfig(ctx, h.client, tables)
	if err != nil {
		return want
	}
	want.Headers = stored.Headers
	if _, ok := p[propMaxBytes]; !ok {
		want.MaxMessageBytes = stored.MaxMessageBytes
	}
	if _, ok := p[propRegions]; !ok {
		want.Regions = stored.Regions
	}
	if slices.Equal(want.Regions, stored.Regions) {
		want.TakenOver = stored.TakenOver
	}
	return want
}

// configureError is the reason CloudFormation shows for a refused
// configuration: which setting stays, what the stack asked, and where
// docs/deploy.md says how to change it.
func configureError(tables dynamo.Tables, err error) error {
	var (
		ce *dynamo.BucketCountChangeError
		me *dynamo.ModeChangeError
		ae *dynamo.ChangeAbortedError
	)
	switch {
	case errors.As(err, &ae):
		return fmt.Errorf("BucketCount stays %d (the stack asks for %d): %s (docs/deploy.md, Changing BucketCount)",
			ae.From, ae.To, strings.TrimPrefix(err.Error(), "dynamo: "))
	case errors.As(err, &ce):
		return fmt.Errorf("BucketCount stays %d (the stack asks for %d): %s (docs/deploy.md, Changing BucketCount)",
			ce.Stored, ce.Requested, strings.TrimPrefix(err.Error(), "dynamo: "))
	case errors.As(err, &me):
		return fmt.Errorf("OutboxMode stays %v (the stack asks for %v): %s (docs/deploy.md, Changing the mode)",
			me.Stored, me.Requested, strings.TrimPrefix(err.Error(), "dynamo: "))
	}
	return fmt.Errorf("outbox config item in %s: %w", tables.Control, err)
}

// logConfigured logs what the configuration changed, from prev to want.
func logConfigured(ctx context.Context, log *slog.Logger, tables dynamo.Tables, prev, want outbox.Config) {
	attrs := []any{"control_table", tables.Control, "bucket_count", want.BucketCount, "mode", want.Mode.String(), "retention", want.Retention.String(),
		"topics", dynamo.TopicList(want.Topics)}
	switch {
	case prev.BucketCount == 0:
		log.InfoContext(ctx, "outbox setup: config item written", attrs...)
	case prev.BucketCount != want.BucketCount || prev.Mode != want.Mode:
		log.InfoContext(ctx, "outbox setup: BucketCount changed online, or the mode on an empty outbox", append(attrs, "from_bucket_count", prev.BucketCount, "from_mode", prev.Mode.String())...)
	case prev.Retention != want.Retention && want.Mode == outbox.WatermarkMode:
		log.InfoContext(ctx, "outbox setup: retention changed; writers use it once they restart", append(attrs, "from_retention", prev.Retention.String())...)
	case !slices.Equal(prev.Topics, want.Topics):
		log.InfoContext(ctx, "outbox setup: topics changed; writers use them once they restart", append(attrs, "from_topics", dynamo.TopicList(prev.Topics))...)
	default:
		log.InfoContext(ctx, "outbox setup: config item already says so", attrs...)
	}
}

// configDigest is a digest of what processes read from the config item
// when they start and keep until they restart: the mode and retention,
// the topics, MaxMessageBytes, the header names and the regions (not
// BucketCount, which running writers and relays follow online, nor the
// takeovers, which relays re-read). A setting the item does not state
// digests as its default, which is what processes use.
func configDigest(c outbox.Config) string {
	topics := slices.Sorted(slices.Values(c.Topics))
	h := c.SharedHeaders()
	sum := sha256.Sum256(fmt.Appendf(nil, "mode=%s\nretention=%d\ntopics=%s\nmax_message_bytes=%d\nheaders=%s,%s,%s\nregions=%s\n",
		c.Mode, c.Retention/time.Second, strings.Join(topics, ","), c.SharedMaxMessageBytes(), h.MessageID, h.Bucket, h.Sequence, strings.Join(c.Regions, ",")))
	return hex.EncodeToString(sum[:8])
}

// placement reads Tables and Region and refuses what cannot work: Tables
// global or attach outside region mode, a stack in a region that is not
// one of Regions.
func placement(p map[string]any, c outbox.Config) (string, error) {
	mode := tablesCreate
	if v, ok := p[propTables]; ok {
		mode, _ = v.(string)
	}
	switch mode {
	case tablesCreate:
	case tablesGlobal, tablesAttach:
		if len(c.Regions) == 0 {
			return "", fmt.Errorf("property %s=%s is region mode's, and %s is empty: give every region's stack the same Regions list, or use Tables create", propTables, mode, propRegions)
		}
	default:
		return "", fmt.Errorf("property %s=%v: must be create, global or attach", propTables, p[propTables])
	}
	region, _ := p[propRegion].(string)
	if region != "" && len(c.Regions) > 0 && !slices.Contains(c.Regions, region) {
		return "", fmt.Errorf("this stack's region %s is not one of Regions %s: deploy the outbox's stacks only in its regions (or add %s to every stack's Regions, on an empty outbox)",
			region, strings.Join(c.Regions, ","), region)
	}
	return mode, nil
}

// attach checks, for a stack on another region's replicas, that the config
// item (written by the Tables global stack, replicated here) says what this
// stack says, waiting for it to replicate, and finds this region's stream
// of the messages table. It writes nothing: the config item has one writing
// region (docs/design.md §14.1, R1).
func (h *Handler) attach(ctx context.Context, tables dynamo.Tables, want outbox.Config, p map[string]any) (map[string]any, error) {
	stored, pairing, err := h.waitConfig(ctx, tables)
	if err != nil {
		return nil, err
	}
	var diffs []string
	differ := func(name string, stack, item any) {
		diffs = append(diffs, fmt.Sprintf("%s: the stack says %v, the config item %v", name, stack, item))
	}
	if !slices.Equal(want.Regions, stored.Regions) {
		differ("Regions", strings.Join(want.Regions, ","), strings.Join(stored.Regions, ","))
	}
	if want.BucketCount != stored.BucketCount {
		differ("BucketCount", want.BucketCount, stored.BucketCount)
	}
	if want.Mode != stored.Mode {
		differ("OutboxMode", want.Mode, stored.Mode)
	} else if want.Mode == outbox.WatermarkMode && want.Retention != stored.Retention {
		differ("OutboxRetentionHours", int(want.Retention/time.Hour), int(stored.Retention/time.Hour))
	}
	if _, ok := p[propTopics]; ok && !slices.Equal(want.Topics, stored.Topics) {
		differ("Topics", dynamo.TopicList(want.Topics), dynamo.TopicList(stored.Topics))
	}
	// 0 in the item means the default, as everywhere.
	if _, ok := p[propMaxBytes]; ok && want.SharedMaxMessageBytes() != stored.SharedMaxMessageBytes() {
		differ("MaxMessageBytes", want.SharedMaxMessageBytes(), stored.SharedMaxMessageBytes())
	}
	if len(diffs) > 0 {
		return nil, fmt.Errorf("Tables attach: this stack's parameters differ from the config item in %s (written by the Tables global stack): %s; give every region's stack the same values",
			tables.Control, strings.Join(diffs, "; "))
	}
	// The control table must be this outbox's: the item records its
	// messages table (the pairing the create path checks).
	if pairing != nil {
		return nil, fmt.Errorf("Tables attach: %w", pairing)
	}
	region, _ := p[propRegion].(string)
	stream, err := h.replicaStream(ctx, tables.Messages, region, stored.Regions)
	if err != nil {
		return nil, err
	}
	return map[string]any{
		propBuckets:   strconv.Itoa(stored.BucketCount),
		propMode:      stored.Mode.String(),
		propRetention: strconv.Itoa(int(stored.Retention / time.Hour)),
		propTopics:    strings.Join(stored.Topics, ","),
		propRegions:   strings.Join(stored.Regions, ","),
		attrMessages:  tables.Messages,
		attrStream:    stream,
		attrDigest:    configDigest(stored),
	}, nil
}

// replicaStream returns the stream ARN of this region's replica of the
// messages table, after checking that it is one: a plain table that only
// has the global table's name would get a relay on a stream that no
// writer's message reaches (the writers write the global table's other
// replicas), and nothing would say so. The table must be a global table
// replica whose replicas cover every region of Regions (DescribeTable may
// leave out the replica it describes: this region counts as present), with
// the KEYS_ONLY stream the Tables global stack gives it.
func (h *Handler) replicaStream(ctx context.Context, table, region string, regions []string) (string, error) {
	out, err := h.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
	if err != nil {
		return "", fmt.Errorf("Tables attach: describe the messages table %s: %w", table, err)
	}
	if out.Table == nil {
		return "", fmt.Errorf("Tables attach: describe the messages table %s: no description", table)
	}
	have := map[string]bool{region: true}
	var listed []string
	for _, r := range out.Table.Replicas {
		have[aws.ToString(r.RegionName)] = true
		listed = append(listed, aws.ToString(r.RegionName))
	}
	var missing []string
	for _, r := range regions {
		if !have[r] {
			missing = append(missing, r)
		}
	}
	switch {
	case len(out.Table.Replicas) == 0:
		return "", fmt.Errorf("Tables attach: the messages table %s in %s is not a global table replica (it has no replicas): give MessagesTableName/ControlTableName the Tables global stack's outputs, whose tables have a replica here; a plain table of the same name is not one", table, region)
	case len(missing) > 0:
		return "", fmt.Errorf("Tables attach: the messages table %s has replicas in %s, none in %s of Regions %s: add the replicas (update the Tables global stack's Regions, as docs/deploy.md says) before attaching",
			table, strings.Join(listed, ","), strings.Join(missing, ","), strings.Join(regions, ","))
	}
	spec := out.Table.StreamSpecification
	if out.Table.LatestStreamArn == nil || spec == nil || !aws.ToBool(spec.StreamEnabled) || spec.StreamViewType != types.StreamViewTypeKeysOnly {
		return "", fmt.Errorf("Tables attach: the messages table %s has no KEYS_ONLY stream in this region; it must be a replica of the Tables global stack's table, which has one", table)
	}
	return *out.Table.LatestStreamArn, nil
}

// waitConfig reads the config item, waiting every attachPoll while it has
// not replicated yet, until ctx ends, and returns it with the pairing
// check's verdict on it (dynamo.ReadConfigPaired: one read).
func (h *Handler) waitConfig(ctx context.Context, tables dynamo.Tables) (stored outbox.Config, pairing, err error) {
	start := time.Now()
	waited := func() error {
		return fmt.Errorf("Tables attach: no config item in %s after %s: the Tables global stack writes it and replication brings it here; deploy that stack first and wait for it to complete",
			tables.Control, time.Since(start).Round(time.Second))
	}
	for {
		c, pairing, err := dynamo.ReadConfigPaired(ctx, h.client, tables)
		var te *dynamo.TableError
		switch {
		case err == nil:
			return c, pairing, nil
		case ctx.Err() != nil:
			return outbox.Config{}, nil, waited()
		case errors.As(err, &te):
			return outbox.Config{}, nil, fmt.Errorf("Tables attach: %w; deploy the Tables global stack first, with this region in its Regions, and give its table names", err)
		case !errors.Is(err, dynamo.ErrNoConfig):
			return outbox.Config{}, nil, fmt.Errorf("Tables attach: read the config item in %s: %w", tables.Control, err)
		}
		t := time.NewTimer(h.attachPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return outbox.Config{}, nil, waited()
		case <-t.C:
		}
	}
}

// properties reads the resource properties, naming every problem.
func properties(p map[string]any) (dynamo.Tables, outbox.Config, error) {
	var errs []error
	str := func(name string) string {
		s, _ := p[name].(string)
		if strings.TrimSpace(s) == "" {
			errs = append(errs, fmt.Errorf("property %s is required (a table name)", name))
		}
		return s
	}
	tables := dynamo.Tables{Messages: str(propMessages), Control: str(propControl)}
	count, err := wholeNumber(p, propBuckets, "1..4096")
	if err != nil {
		errs = append(errs, err)
	}
	c := outbox.Config{BucketCount: count, Mode: outbox.DeleteMode}
	if v, ok := p[propMode]; ok {
		name, _ := v.(string)
		m, err := outbox.ParseMode(strings.TrimSpace(name))
		if err != nil {
			errs = append(errs, fmt.Errorf("property %s=%v: must be delete or watermark", propMode, v))
		}
		c.Mode = m
	}
	if c.Mode == outbox.WatermarkMode {
		hours := defaultRetentionHours
		if _, ok := p[propRetention]; ok {
			if hours, err = wholeNumber(p, propRetention, "at least 1"); err != nil {
				errs = append(errs, err)
			} else if hours < 1 {
				errs = append(errs, fmt.Errorf("property %s=%d: must be at least 1 (a message pending past its TTL can be deleted unpublished)", propRetention, hours))
			}
		}
		c.Retention = time.Duration(hours) * time.Hour
	}
	if _, ok := p[propMaxBytes]; ok {
		n, err := wholeNumber(p, propMaxBytes, "1024..104857596")
		switch {
		case err != nil:
			errs = append(errs, err)
		case n < 1024 || n > 100<<20-4:
			errs = append(errs, fmt.Errorf("property %s=%d: must be 1024..104857596", propMaxBytes, n))
		}
		c.MaxMessageBytes = n
	}
	if v, ok := p[propRegions]; ok {
		list, _ := v.(string)
		for r := range strings.SplitSeq(list, ",") {
			if r = strings.TrimSpace(r); r == "" {
				continue
			}
			if err := outbox.ValidateRegionID(r); err != nil {
				errs = append(errs, fmt.Errorf("property %s: %w", propRegions, err))
				continue
			}
			c.Regions = append(c.Regions, r)
		}
		if err := c.CheckRegions(); err != nil {
			errs = append(errs, fmt.Errorf("property %s=%q with BucketCount %d: %w", propRegions, list, c.BucketCount, err))
		}
	}
	if v, ok := p[propTopics]; ok {
		list, _ := v.(string)
		for t := range strings.SplitSeq(list, ",") {
			if t = strings.TrimSpace(t); t == "" {
				continue
			}
			if err := outbox.ValidateTopic(t); err != nil {
				errs = append(errs, fmt.Errorf("property %s: %w", propTopics, err))
				continue
			}
			c.Topics = append(c.Topics, t)
		}
	}
	return tables, c, errors.Join(errs...)
}

// wholeNumber reads a numeric property: CloudFormation sends a string, a
// hand-written event may hold a number.
func wholeNumber(p map[string]any, name, want string) (int, error) {
	switch v := p[name].(type) {
	case string:
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return 0, fmt.Errorf("property %s=%q is not a whole number", name, v)
		}
		return n, nil
	case float64:
		if float64(int(v)) != v {
			return 0, fmt.Errorf("property %s=%v is not a whole number", name, v)
		}
		return int(v), nil
	}
	return 0, fmt.Errorf("property %s is required (%s)", name, want)
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
