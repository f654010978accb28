package main

import (
	"context"
	"fmt"
	"time"
)

// The scale stage (issue 21, item 3) offers ten times the steady stage's
// top rate (200 msgs/s) to outboxes of 8 to 64 buckets, through the same
// pipeline as the steady stage (writers, the table's stream, the local
// event-source mapping, the relay Lambda's handler), and the floor at the
// same rate and bucket count beside it. On one DynamoDB Local the writers
// may not reach the offered rate: the stage then reports what they
// committed and says that DynamoDB Local was the limit (limit=dynamodb-local:
// the writers committed under 95 % of the offered rate).

// scaleOptions are the scale stage's runs: the relay (default mode) and the
// floor at rate msgs/s for seconds after a warm-up (at the same rate), with
// writers writers,
// at each bucket count. No bucket counts: no stage.
type scaleOptions struct {
	buckets []int
	rate    float64
	seconds float64
	warmup  time.Duration
	writers int
}

// scaleResult is one bucket count's pair of runs.
type scaleResult struct {
	Buckets int          `json:"buckets"`
	Relay   steadyResult `json:"relay"`
	Floor   steadyResult `json:"floor"`
}

// limited tells whether the writers, not the relay, held the rate down:
// they committed under 95 % of the offered rate in either run.
func (s scaleResult) limited() bool { return !s.Relay.sustained() || !s.Floor.sustained() }

// relayedPerS is the handler's throughput: the messages it published over
// the time from its first measured invocation until the stream was idle.
func (r steadyResult) relayedPerS() float64 {
	if r.MeasuredSeconds <= 0 {
		return 0
	}
	return float64(r.Messages) / r.MeasuredSeconds
}

func scaleStage(ctx context.Context, e *env, o options, res *results) error {
	for _, n := range o.scale.buckets {
		g := newGen(n, uint64(time.Now().UnixNano()))
		p := profile{Name: fmt.Sprintf("scale-%d", n), Rate: o.scale.rate, Seconds: o.scale.seconds}
		sr := scaleResult{Buckets: n}
		for _, h := range []string{handlerRelay, handlerFloor} {
			run := steadyRun{profile: p, window: o.steadyWindow, warmup: o.scale.warmup, handler: h, mode: modeDelete,
				itemBytes: res.Capacity.MessageItemBytes, writers: o.scale.writers}
			o.progress("scale: %d buckets, %s: %s with %d writers after a %v warm-up", n, h, p, o.scale.writers, run.warmup)
			var r steadyResult
			err := withStage(ctx, e, fmt.Sprintf("scale-b%d-%s", n, h), n, func(st *stage) (err error) {
				r, err = steady(ctx, st, g, run)
				return err
			})
			o.progress("  committed %.0f msgs/s (commit p50 %.0f ms), relayed %.0f msgs/s; p50 %.0f ms, p99 %.0f ms; %.1f msgs per invocation; per message %.3f control-table writes, %.3f WCU (load average %s)",
				r.AchievedPerS, r.CommitP50ms, r.relayedPerS(), r.P50ms, r.P99ms, r.MsgsPerInvocation, r.ControlWritesPerMsg, r.WCU, r.Load)
			if h == handlerRelay {
				sr.Relay = r
			} else {
				sr.Floor = r
			}
			if err != nil {
				res.Scale = append(res.Scale, sr)
				return fmt.Errorf("scale %d buckets, %s: %w", n, h, err)
			}
		}
		if sr.Floor.P99ms > 0 {
			sr.Relay.FloorP99ms, sr.Relay.VsFloorP99 = sr.Floor.P99ms, sr.Relay.P99ms/sr.Floor.P99ms
		}
		res.Scale = append(res.Scale, sr)
	}
	return nil
}

// scaleLine is a bucket count's scale: line; its growth columns compare it
// with the first (smallest) bucket count of the stage.
func (s scaleResult) scaleLine(first scaleResult) string {
	limit := "none"
	if s.limited() {
		limit = "dynamodb-local"
	}
	grow := func(v, base float64) string {
		if base <= 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2f", v/base)
	}
	r, f := s.Relay, s.Floor
	return fmt.Sprintf("scale: buckets=%d offered_msgs_per_s=%g writers=%d committed_msgs_per_s=%.0f relayed_msgs_per_s=%.0f p50_ms=%.1f p99_ms=%.1f "+
		"floor_committed_msgs_per_s=%.0f floor_p50_ms=%.1f floor_p99_ms=%.1f vs_floor_p99=%s wcu_per_msg=%.3f control_writes_per_msg=%.3f "+
		"msgs_per_invocation=%.1f floor_msgs_per_invocation=%.1f commit_p50_ms=%.1f limit=%s "+
		"p99_vs_b%d=%s wcu_vs_b%d=%s control_vs_b%d=%s",
		s.Buckets, r.Profile.Rate, r.Writers, r.AchievedPerS, r.relayedPerS(), r.P50ms, r.P99ms,
		f.AchievedPerS, f.P50ms, f.P99ms, grow(r.P99ms, f.P99ms), r.WCU, r.ControlWritesPerMsg,
		r.MsgsPerInvocation, f.MsgsPerInvocation, r.CommitP50ms, limit,
		first.Buckets, grow(r.P99ms, first.Relay.P99ms), first.Buckets, grow(r.WCU, first.Relay.WCU),
		first.Buckets, grow(r.ControlWritesPerMsg, first.Relay.ControlWritesPerMsg))
}
