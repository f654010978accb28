package handler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/dynakafka/outbox"
)

// SweepRunner is the part of *outbox.Relay the sweeper handler uses.
type SweepRunner interface {
	Sweep(ctx context.Context) (outbox.SweepReport, error)
}

// Sweeper handles the schedule's events. Build it with NewSweeper.
type Sweeper struct {
	relay SweepRunner
	log   *slog.Logger
	now   func() time.Time
}

// NewSweeper returns the sweeper handler over r.
func NewSweeper(r SweepRunner, log *slog.Logger) *Sweeper {
	return &Sweeper{relay: r, log: log, now: time.Now}
}

// Summary is the sweeper's invocation result: the backlog it saw and what it
// did. It is also logged as one JSON line.
type Summary struct {
	Pending          int     `json:"pending"`
	PendingTruncated bool    `json:"pending_truncated"`
	OldestAgeSeconds float64 `json:"oldest_age_s"`
	Live             int     `json:"live_relays"`
	Share            int     `json:"share"`
	Ready            []int   `json:"ready"`
	Drained          []int   `json:"drained"`
	Held             []int   `json:"held"`
	Skipped          []int   `json:"skipped"`
	Failed           []int   `json:"failed"`
	OutOfRange       []int   `json:"out_of_range"`
}

// Handle runs one sweep, which ends ResponseMargin before the invocation's
// deadline. A misconfiguration (messages in buckets outside the range) fails
// the invocation, so the function's Errors alarm fires; a bucket that could
// not be drained is logged and retried on the next schedule.
func (h *Sweeper) Handle(ctx context.Context, ev events.CloudWatchEvent) (Summary, error) {
	wctx, cancel := workContext(ctx)
	defer cancel()
	rep, err := h.relay.Sweep(wctx)
	s := Summary{Pending: rep.Pending, PendingTruncated: rep.Truncated, Live: rep.Live, Share: rep.Share,
		Ready: rep.Ready, Drained: rep.Drained, Held: rep.Held, Skipped: rep.Skipped}
	if !rep.Oldest.IsZero() {
		s.OldestAgeSeconds = max(0, h.now().Sub(rep.Oldest).Seconds())
	}
	for b, berr := range rep.Errors {
		s.Failed = append(s.Failed, b)
		h.log.WarnContext(ctx, "outbox sweeper: bucket not drained; the next sweep retries", "bucket", b, "err", berr)
	}
	for b := range rep.OutOfRange {
		s.OutOfRange = append(s.OutOfRange, b)
	}
	h.log.InfoContext(ctx, "outbox sweeper: backlog", "summary", s, "scheduled_at", ev.Time)
	var re *outbox.BucketRangeError
	if errors.As(err, &re) {
		h.log.ErrorContext(ctx, "outbox sweeper: MISCONFIGURATION: messages in buckets outside the configured range will never be relayed; every writer must use the outbox's BucketCount",
			"out_of_range", s.OutOfRange, "err", err)
		return s, err
	}
	if err != nil {
		h.log.ErrorContext(ctx, "outbox sweeper: sweep failed", "err", err)
		return s, err
	}
	return s, nil
}
