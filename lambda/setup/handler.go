package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/cfn"

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
	// MaxMessageBytes parameter, also the functions'
	// OUTBOX_MAX_MESSAGE_BYTES), a shared setting of the config item.
	// Absent (a stack from before it) leaves the stored value as it is.
	propMaxBytes = "MaxMessageBytes"
)

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
	client  dynamo.StoreAPI
	log     *slog.Logger
	initErr error // the function could not build its client: every request fails with it (deletes still succeed)
}

// NewHandler returns the handler over client.
func NewHandler(client dynamo.StoreAPI, log *slog.Logger) *Handler {
	return &Handler{client: client, log: log}
}

// Handle is a cfn.CustomResourceFunction:
//
//   - Create and Update write the config item with BucketCount, Mode and (in
//     watermark mode) the retention through dynamo.Configure: written when
//     missing, left alone when equal, the retention changed at once, and
//     BucketCount or Mode changed only when the outbox is empty; otherwise
//     the request fails with a reason naming both values, and CloudFormation
//     rolls the stack back.
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
	_, setTopics := ev.ResourceProperties[propTopics]
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-deadlineMargin))
		defer cancel()
	}
	if !setTopics {
		// Keep the stored list: this stack does not say one.
		want.Topics = nil
		if stored, err := dynamo.ReadConfig(ctx, h.client, tables); err == nil {
			want.Topics = stored.Topics
		}
	}
	// The stack states no header names, and an older stack no
	// MaxMessageBytes: keep the stored ones (outbox init may have written
	// them).
	if stored, err := dynamo.ReadConfig(ctx, h.client, tables); err == nil {
		want.Headers = stored.Headers
		if _, ok := ev.ResourceProperties[propMaxBytes]; !ok {
			want.MaxMessageBytes = stored.MaxMessageBytes
		}
	}
	prev, err := dynamo.Configure(ctx, h.client, tables, want)
	if err != nil {
		var (
			ce *dynamo.BucketCountChangeError
			me *dynamo.ModeChangeError
			ae *dynamo.ChangeAbortedError
		)
		switch {
		case errors.As(err, &ae):
			return fail(fmt.Errorf("BucketCount stays %d (the stack asks for %d): %s (docs/deploy.md, Changing BucketCount)",
				ae.From, ae.To, strings.TrimPrefix(err.Error(), "dynamo: ")))
		case errors.As(err, &ce):
			return fail(fmt.Errorf("BucketCount stays %d (the stack asks for %d): %s (docs/deploy.md, Changing BucketCount)",
				ce.Stored, ce.Requested, strings.TrimPrefix(err.Error(), "dynamo: ")))
		case errors.As(err, &me):
			return fail(fmt.Errorf("OutboxMode stays %v (the stack asks for %v): %s (docs/deploy.md, Changing the mode)",
				me.Stored, me.Requested, strings.TrimPrefix(err.Error(), "dynamo: ")))
		}
		return fail(fmt.Errorf("outbox config item in %s: %w", tables.Control, err))
	}
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
	return "outbox-config:" + tables.Control, map[string]any{
		propBuckets:   strconv.Itoa(want.BucketCount),
		propMode:      want.Mode.String(),
		propRetention: strconv.Itoa(int(want.Retention / time.Hour)),
		propTopics:    strings.Join(want.Topics, ","),
	}, nil
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
