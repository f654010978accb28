package main

import (
	"cmp"
	"context"
	"fmt"
	"time"
)

// The hand-over stage (issue 28, item 1): a busy outbox whose buckets are
// handed from one of the relay function's containers to the other every
// switchEvery (each drain after a switch acquires the bucket the other
// container released and may still be resuming), in each publish mode,
// beside the same load on one warm container. added_p99_ms is what the
// hand-overs add to the commit → published p99: the switched runs' p99
// less the one-container runs'. A switch a second apart hands every busy
// bucket over once a second, and no message meets two hand-overs (each
// costs at most ResumeWindow, 500 ms, and a drain); with every invocation
// to the other container (-handover-switch 0) a message committed during
// one hand-over's wait is drained after the next one's. The pair runs
// twice, in turns, and the p99s are each pair's mean: one run's first
// seconds on a fresh DynamoDB Local can hold its tail. Relay containers,
// the sweeper and long-running relays hand a bucket over by the same
// Acquire and the same wait (docs/design.md §4.3), so the containers stand
// for every kind.

// handoverOptions are the stage's runs: rate msgs/s for seconds after the
// steady stage's warm-up, over buckets buckets. No modes: no stage.
type handoverOptions struct {
	// warmup: each run's offered load before it is measured (0: the
	// steady stage's). Two fresh containers on fresh tables start slow —
	// their first drains took about 2 s each here, a backlog builds, and
	// with every second's switch the stage took 8–35 s to leave it — so
	// the default waits 20 s, and the runs measure hand-overs of warm
	// containers. -handover-warmup 3s measures the start as well.
	warmup      time.Duration
	modes       []relayMode
	rate        float64
	seconds     float64
	buckets     int
	switchEvery time.Duration
	rounds      int
}

// handoverResult is one mode's runs.
type handoverResult struct {
	Mode        string         `json:"mode"`
	SwitchEvery float64        `json:"switch_every_s"`
	Base        []steadyResult `json:"one_container"`
	Switched    []steadyResult `json:"switched"`
	// BaseP99ms and SwitchedP99ms are the runs' mean p99s, AddedP99ms
	// their difference.
	BaseP99ms, SwitchedP99ms, AddedP99ms float64
}

func handoverStage(ctx context.Context, e *env, g *gen, o options, res *results) error {
	h := o.handover
	for _, m := range h.modes {
		hr := handoverResult{Mode: m.Name, SwitchEvery: h.switchEvery.Seconds()}
		for round := range max(h.rounds, 1) {
			for _, containers := range []int{1, 2} {
				run := steadyRun{profile: profile{Name: "handover", Rate: h.rate, Seconds: h.seconds}, window: o.steadyWindow, warmup: cmp.Or(h.warmup, o.steadyWarmup),
					handler: handlerRelay, mode: m, itemBytes: res.Capacity.MessageItemBytes, containers: containers, switchEvery: h.switchEvery}
				o.progress("handover, %s, round %d: %s on %d container(s), switching every %v", m.Name, round+1, run.profile, containers, h.switchEvery)
				var r steadyResult
				err := withStage(ctx, e, fmt.Sprintf("handover-%s-c%d-r%d", m.Name, containers, round), h.buckets, func(st *stage) (err error) {
					r, err = steady(ctx, st, g, run)
					return err
				}, m.Tables...)
				if containers == 1 {
					hr.Base = append(hr.Base, r)
				} else {
					hr.Switched = append(hr.Switched, r)
				}
				if err != nil {
					res.Handover = append(res.Handover, hr)
					return fmt.Errorf("handover %s, %d containers: %w", m.Name, containers, err)
				}
				o.progress("  p50 %.0f ms, p99 %.0f ms", r.P50ms, r.P99ms)
			}
		}
		hr.BaseP99ms, hr.SwitchedP99ms = meanP99(hr.Base), meanP99(hr.Switched)
		hr.AddedP99ms = hr.SwitchedP99ms - hr.BaseP99ms
		res.Handover = append(res.Handover, hr)
	}
	return nil
}

func meanP99(rs []steadyResult) float64 {
	var sum float64
	for _, r := range rs {
		sum += r.P99ms
	}
	return sum / float64(max(len(rs), 1))
}

// line is the mode's handover: line.
func (h handoverResult) line() string {
	var hand, waited, failed int
	var waits []float64
	var cw, baseCW float64
	for _, r := range h.Switched {
		if w := r.Switches; w != nil {
			hand, waited, failed = hand+w.HandedOver, waited+w.Waited, failed+w.FailedDrains
			waits = append(waits, w.WaitMaxms)
		}
		cw += r.ControlWritesPerMsg / float64(len(h.Switched))
	}
	for _, r := range h.Base {
		baseCW += r.ControlWritesPerMsg / float64(len(h.Base))
	}
	var rate, warmup float64
	if len(h.Switched) > 0 {
		rate, warmup = h.Switched[0].Profile.Rate, h.Switched[0].WarmupS
	}
	return fmt.Sprintf("handover: mode=%s rate=%g warmup_s=%g containers=2 switch_every_s=%g runs=%d handovers=%d waited=%d wait_max_ms=%.0f p99_ms=%.1f one_container_p99_ms=%.1f added_p99_ms=%.1f control_writes_per_msg=%.3f one_container_control_writes_per_msg=%.3f failed_drains=%d",
		h.Mode, rate, warmup, h.SwitchEvery, len(h.Switched), hand, waited, pct(waits, 1), h.SwitchedP99ms, h.BaseP99ms, h.AddedP99ms, cw, baseCW, failed)
}

// handoverDefaults: 50 msgs/s over 8 buckets (a busy bucket gets a message
// every 160 ms, so most hand-overs meet a releaser that may be resuming),
// a switch every second, 20 s per run, two rounds in each mode.
var handoverDefaults = handoverOptions{warmup: 20 * time.Second, modes: []relayMode{modeDelete, modeWatermark, modeTxn}, rate: 50, seconds: 20, buckets: 8,
	switchEvery: time.Second, rounds: 2}
