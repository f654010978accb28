package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/cfn"

	"github.com/dynakafka/outbox/store/dynamo"
)

// Resource properties of Custom::OutboxConfig. CloudFormation sends every
// value as a string.
const (
	propMessages = "MessagesTable"
	propControl  = "ControlTable"
	propBuckets  = "BucketCount"
)

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
//   - Create and Update write the config item with BucketCount through
//     dynamo.SetBucketCount: written when missing, left alone when equal,
//     changed only when the outbox is empty; otherwise the request fails with
//     a reason naming both counts, and CloudFormation rolls the stack back.
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
	tables, count, err := properties(ev.ResourceProperties)
	if err != nil {
		return fail(err)
	}
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-deadlineMargin))
		defer cancel()
	}
	prev, err := dynamo.SetBucketCount(ctx, h.client, tables, count)
	if err != nil {
		var ce *dynamo.BucketCountChangeError
		if errors.As(err, &ce) {
			return fail(fmt.Errorf("BucketCount stays %d (the stack asks for %d): %s (docs/deploy.md, Changing BucketCount)",
				ce.Stored, ce.Requested, strings.TrimPrefix(err.Error(), "dynamo: ")))
		}
		return fail(fmt.Errorf("outbox config item in %s: %w", tables.Control, err))
	}
	switch {
	case prev == 0:
		log.InfoContext(ctx, "outbox setup: config item written", "control_table", tables.Control, "bucket_count", count)
	case prev != count:
		log.InfoContext(ctx, "outbox setup: BucketCount changed on an empty outbox", "control_table", tables.Control, "from", prev, "to", count)
	default:
		log.InfoContext(ctx, "outbox setup: config item already says so", "control_table", tables.Control, "bucket_count", count)
	}
	return "outbox-config:" + tables.Control, map[string]any{propBuckets: strconv.Itoa(count)}, nil
}

// properties reads the resource properties, naming every problem.
func properties(p map[string]any) (dynamo.Tables, int, error) {
	var errs []error
	str := func(name string) string {
		s, _ := p[name].(string)
		if strings.TrimSpace(s) == "" {
			errs = append(errs, fmt.Errorf("property %s is required (a table name)", name))
		}
		return s
	}
	tables := dynamo.Tables{Messages: str(propMessages), Control: str(propControl)}
	var count int
	switch v := p[propBuckets].(type) {
	case string:
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			errs = append(errs, fmt.Errorf("property %s=%q is not a whole number", propBuckets, v))
		}
		count = n
	case float64: // a number in a hand-written event
		count = int(v)
		if float64(count) != v {
			errs = append(errs, fmt.Errorf("property %s=%v is not a whole number", propBuckets, v))
		}
	default:
		errs = append(errs, fmt.Errorf("property %s is required (1..4096)", propBuckets))
	}
	return tables, count, errors.Join(errs...)
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
