// Package schedule drives a scheduled Lambda handler locally the way an
// EventBridge rule with a rate expression does: one "Scheduled Event" per
// period, built like EventBridge's, invoked one at a time. The clock is
// pluggable so tests can fire the schedule without waiting.
package schedule

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
)

// Clock gives the schedule its time and its ticks.
type Clock interface {
	Now() time.Time
	// Tick returns a channel that delivers the time every period.
	Tick(period time.Duration) (ticks <-chan time.Time, stop func())
}

// WallClock is the real clock.
type WallClock struct{}

func (WallClock) Now() time.Time { return time.Now() }

func (WallClock) Tick(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// ManualClock fires only when Fire is called: a test clock.
type ManualClock struct {
	now   time.Time
	ticks chan time.Time
}

// NewManualClock returns a ManualClock at start.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{now: start, ticks: make(chan time.Time)}
}

func (c *ManualClock) Now() time.Time { return c.now }

func (c *ManualClock) Tick(time.Duration) (<-chan time.Time, func()) { return c.ticks, func() {} }

// Fire advances the clock by d and delivers one tick; it blocks until the
// schedule has taken it (i.e. the previous invocation has finished).
func (c *ManualClock) Fire(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	select {
	case c.ticks <- c.now:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Options describe the rule.
type Options struct {
	Rate    time.Duration // default 1 minute, as rate(1 minute)
	Region  string        // default us-east-1
	Account string        // default 000000000000
	Rule    string        // default "outbox-sweeper-schedule"
	Clock   Clock         // default WallClock
	// Timeout bounds each invocation like the function's timeout. Default 1 minute.
	Timeout time.Duration
	// Immediately invokes once at start instead of waiting a period.
	Immediately bool
}

// Event builds a Scheduled Event as EventBridge delivers it.
func Event(o Options, at time.Time) events.CloudWatchEvent {
	o = o.withDefaults()
	return events.CloudWatchEvent{
		Version:    "0",
		ID:         uuid.NewString(),
		DetailType: "Scheduled Event",
		Source:     "aws.events",
		AccountID:  o.Account,
		Time:       at.UTC().Truncate(time.Second),
		Region:     o.Region,
		Resources:  []string{fmt.Sprintf("arn:aws:events:%s:%s:rule/%s", o.Region, o.Account, o.Rule)},
		Detail:     json.RawMessage("{}"),
	}
}

func (o Options) withDefaults() Options {
	if o.Rate == 0 {
		o.Rate = time.Minute
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.Account == "" {
		o.Account = "000000000000"
	}
	if o.Rule == "" {
		o.Rule = "outbox-sweeper-schedule"
	}
	if o.Clock == nil {
		o.Clock = WallClock{}
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	return o
}

// Run invokes fn once per period until ctx is done. Invocations never
// overlap; an error is passed to onErr (nil: ignored) and the schedule goes
// on, as EventBridge's does.
func Run(ctx context.Context, o Options, fn func(context.Context, events.CloudWatchEvent) error, onErr func(error)) error {
	o = o.withDefaults()
	if o.Rate < time.Second {
		return fmt.Errorf("schedule: Rate %v is below EventBridge's minimum of one minute and our floor of one second", o.Rate)
	}
	ticks, stop := o.Clock.Tick(o.Rate)
	defer stop()
	invoke := func(at time.Time) {
		ictx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		if err := fn(ictx, Event(o, at)); err != nil && onErr != nil {
			onErr(err)
		}
	}
	if o.Immediately {
		invoke(o.Clock.Now())
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case at := <-ticks:
			invoke(at)
		}
	}
}
