package main

import (
	"context"
	"fmt"
)

// The hand-over stage (issue 28, item 1): a busy outbox whose buckets are
// handed from one of the relay function's containers to the other at
// every invocation (the worst case a function can meet: each drain
// acquires the bucket its other container released and may still be
// resuming), in each publish mode, beside the same load on one warm
// container. added_p99_ms is what the hand-overs add to the commit →
// published p99: the switched run's p99 less the one-container run's.
// Relay containers, the sweeper and long-running relays hand a bucket
// over by the same Acquire and the same wait (docs/design.md §4.3), so
// the containers stand for every kind.

// handoverOptions are the stage's runs: rate msgs/s for seconds after the
// steady stage's warm-up, over buckets buckets. No modes: no stage.
type handoverOptions struct {
	modes   []relayMode
	rate    float64
	seconds float64
	buckets int
}

// handoverResult is one mode's pair of runs.
type handoverResult struct {
	Mode     string       `json:"mode"`
	Base     steadyResult `json:"one_container"`
	Switched steadyResult `json:"switched"`
	// AddedP99ms is Switched.P99ms - Base.P99ms.
	AddedP99ms float64 `json:"added_p99_ms"`
}

func handoverStage(ctx context.Context, e *env, g *gen, o options, res *results) error {
	h := o.handover
	for _, m := range h.modes {
		hr := handoverResult{Mode: m.Name}
		for i, containers := range []int{1, 2} {
			run := steadyRun{profile: profile{Name: "handover", Rate: h.rate, Seconds: h.seconds}, window: o.steadyWindow, warmup: o.steadyWarmup,
				handler: handlerRelay, mode: m, itemBytes: res.Capacity.MessageItemBytes, containers: containers}
			o.progress("handover, %s: %s on %d container(s), every invocation to the next", m.Name, run.profile, containers)
			var r steadyResult
			err := withStage(ctx, e, fmt.Sprintf("handover-%s-c%d", m.Name, containers), h.buckets, func(st *stage) (err error) {
				r, err = steady(ctx, st, g, run)
				return err
			}, m.Tables...)
			if i == 0 {
				hr.Base = r
			} else {
				hr.Switched = r
			}
			if err != nil {
				res.Handover = append(res.Handover, hr)
				return fmt.Errorf("handover %s, %d containers: %w", m.Name, containers, err)
			}
			o.progress("  p50 %.0f ms, p99 %.0f ms", r.P50ms, r.P99ms)
		}
		hr.AddedP99ms = hr.Switched.P99ms - hr.Base.P99ms
		res.Handover = append(res.Handover, hr)
	}
	return nil
}

// line is the mode's handover: line.
func (h handoverResult) line() string {
	w := h.Switched.Switches
	if w == nil {
		w = &switchStats{}
	}
	return fmt.Sprintf("handover: mode=%s rate=%g containers=2 switch=every_invocation handovers=%d waited=%d wait_p50_ms=%.0f wait_max_ms=%.0f p50_ms=%.1f p99_ms=%.1f one_container_p99_ms=%.1f added_p99_ms=%.1f control_writes_per_msg=%.3f one_container_control_writes_per_msg=%.3f failed_drains=%d",
		h.Mode, h.Switched.Profile.Rate, w.HandedOver, w.Waited, w.WaitP50ms, w.WaitMaxms, h.Switched.P50ms, h.Switched.P99ms, h.Base.P99ms, h.AddedP99ms,
		h.Switched.ControlWritesPerMsg, h.Base.ControlWritesPerMsg, w.FailedDrains)
}

// handoverDefaults: 50 msgs/s over 8 buckets (a busy bucket gets a message
// every 160 ms, so most hand-overs meet a releaser that may be resuming),
// 20 s in each mode.
var handoverDefaults = handoverOptions{modes: []relayMode{modeDelete, modeWatermark, modeTxn}, rate: 50, seconds: 20, buckets: 8}
