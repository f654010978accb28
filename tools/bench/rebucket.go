package main

import (
	"context"
	"fmt"
	"time"

	"github.com/dynakafka/outbox/store/dynamo"
)

// The rebucket stage (issue 28, item 5): an outbox of 8 buckets grown to
// 16 online (dynamo.ChangeBucketCount, what outbox buckets set runs) while
// writers offer 200 msgs/s through the steady pipeline (the table's
// stream, the event-source mapping, the relay function's handler). What a
// service sees is how long its writes pause: write_pause_p99_ms is the p99
// of the durations of the writes in flight while the change ran (begun
// before it ended and returned after it began), beside the p99 of the
// writes outside it, and write_added_p99_ms the difference: what the
// change added to a write (on DynamoDB Local a write's own time at 200
// msgs/s is about a second, which the pause includes).

// rebucketOptions are the stage's run: rate msgs/s for seconds after the
// steady stage's warm-up, the change from buckets to to at changeAt
// seconds. A zero rate: no stage.
type rebucketOptions struct {
	rate, seconds, changeAt float64
	buckets, to             int
}

var rebucketDefaults = rebucketOptions{rate: 200, seconds: 12, changeAt: 4, buckets: 8, to: 16}

// span is when something began and ended.
type span struct{ start, end time.Time }

func (s span) overlaps(o span) bool { return s.start.Before(o.end) && o.start.Before(s.end) }

// changeStats is what the writers saw of a change.
type changeStats struct {
	ChangeMs     float64 `json:"change_ms"` // ChangeBucketCount's call
	Err          string  `json:"error,omitempty"`
	DuringWrites int     `json:"writes_during"`
	PauseP50ms   float64 `json:"write_pause_p50_ms"`
	PauseP99ms   float64 `json:"write_pause_p99_ms"`
	PauseMaxms   float64 `json:"write_pause_max_ms"`
	OtherP99ms   float64 `json:"write_p99_ms_outside"`
}

// changeResult sorts the measured writes into those in flight during the
// change and the others.
func changeResult(o *offered) *changeStats {
	c := &changeStats{}
	if o.change == nil {
		c.Err = "the change did not run"
		return c
	}
	c.ChangeMs = ms(o.change.end.Sub(o.change.start))
	if o.changeErr != nil {
		c.Err = o.changeErr.Error()
	}
	var during, other []float64
	for _, w := range o.spans {
		if w.overlaps(*o.change) {
			during = append(during, ms(w.end.Sub(w.start)))
		} else {
			other = append(other, ms(w.end.Sub(w.start)))
		}
	}
	c.DuringWrites = len(during)
	c.PauseP50ms, c.PauseP99ms, c.PauseMaxms = pct(during, 0.5), pct(during, 0.99), pct(during, 1)
	c.OtherP99ms = pct(other, 0.99)
	return c
}

func rebucketStage(ctx context.Context, e *env, g *gen, o options, res *results) error {
	rb := o.rebucket
	if !(rb.rate > 0) {
		return nil
	}
	run := steadyRun{profile: profile{Name: "rebucket", Rate: rb.rate, Seconds: rb.seconds}, window: o.steadyWindow, warmup: o.steadyWarmup,
		handler: handlerRelay, mode: modeDelete, itemBytes: res.Capacity.MessageItemBytes, changeAt: rb.changeAt}
	o.progress("rebucket: %s over %d buckets, grown to %d online at %gs", run.profile, rb.buckets, rb.to, rb.changeAt)
	var r steadyResult
	err := withStage(ctx, e, "rebucket", rb.buckets, func(st *stage) (err error) {
		run.change = func(ctx context.Context) error {
			_, err := dynamo.ChangeBucketCount(ctx, st.plain, st.tables, rb.to)
			return err
		}
		r, err = steady(ctx, st, g, run)
		return err
	})
	res.Rebucket = &rebucketResult{From: rb.buckets, To: rb.to, Run: r}
	if err != nil {
		return fmt.Errorf("rebucket: %w", err)
	}
	if c := r.Change; c != nil && c.Err != "" {
		return fmt.Errorf("rebucket: the change failed: %s", c.Err)
	}
	return nil
}

// rebucketResult is the stage's run.
type rebucketResult struct {
	From int          `json:"from"`
	To   int          `json:"to"`
	Run  steadyResult `json:"run"`
}

func (r rebucketResult) line() string {
	c := r.Run.Change
	if c == nil {
		c = &changeStats{}
	}
	return fmt.Sprintf("rebucket: rate=%g from=%d to=%d change_ms=%.0f writes_during=%d write_pause_p50_ms=%.1f write_pause_p99_ms=%.1f write_pause_max_ms=%.1f write_p99_ms_outside=%.1f write_added_p99_ms=%.1f p99_ms=%.1f write_failures=%d",
		r.Run.Profile.Rate, r.From, r.To, c.ChangeMs, c.DuringWrites, c.PauseP50ms, c.PauseP99ms, c.PauseMaxms, c.OtherP99ms, c.PauseP99ms-c.OtherP99ms, r.Run.P99ms, r.Run.WriteFailures)
}
