package ddbmodel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"
)

// Dist is a distribution of latencies that the model draws each call's
// from.
type Dist interface {
	Sample() time.Duration
	String() string
}

// z99 is the standard normal's 99th percentile.
const z99 = 2.3263478740408408

// LogNormal is the log-normal distribution with median P50 whose 99th
// percentile is P99 (σ = ln(P99/P50)/z₀.₉₉). P99 equal to P50 is a
// constant.
type LogNormal struct{ P50, P99 time.Duration }

func (d LogNormal) Sample() time.Duration {
	if d.P50 <= 0 {
		return 0
	}
	sigma := 0.0
	if d.P99 > d.P50 {
		sigma = math.Log(float64(d.P99)/float64(d.P50)) / z99
	}
	return time.Duration(float64(d.P50) * math.Exp(sigma*rand.NormFloat64()))
}

func (d LogNormal) String() string { return fmt.Sprintf("lognormal(p50 %v, p99 %v)", d.P50, d.P99) }

// Empirical draws uniformly from measured latencies.
type Empirical []time.Duration

func (d Empirical) Sample() time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[rand.IntN(len(d))]
}

func (d Empirical) String() string {
	if len(d) == 0 {
		return "empirical(none)"
	}
	s := slices.Sorted(slices.Values(d))
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("empirical(%d samples, p50 %v, p99 %v)", len(s), q(0.5), q(0.99))
}

// Fixed is a constant latency (0: none).
type Fixed time.Duration

func (d Fixed) Sample() time.Duration { return time.Duration(d) }
func (d Fixed) String() string        { return fmt.Sprintf("fixed(%v)", time.Duration(d)) }

// TracePoint is one measured call: when it began, from the start of the
// measured run, and how long it took.
type TracePoint struct{ At, D time.Duration }

// Trace replays latencies measured over a run, in time: a call made At
// after Start draws one of the latencies measured within Window of the
// same offset (the nearest measured one when none is), so that the slow
// spells of the measured run fall at the same moments of the model's.
// Before Start it draws from all of them.
type Trace struct {
	start  atomic.Int64 // unix nanoseconds; 0: not started
	points []TracePoint // by At
	window time.Duration
}

// NewTrace is a trace of points (in any order).
func NewTrace(points []TracePoint, window time.Duration) *Trace {
	p := slices.Clone(points)
	slices.SortFunc(p, func(a, b TracePoint) int { return int(a.At - b.At) })
	return &Trace{points: p, window: window}
}

// Start aligns the trace's offset 0 with at.
func (t *Trace) Start(at time.Time) { t.start.Store(at.UnixNano()) }

func (t *Trace) Sample() time.Duration {
	n := len(t.points)
	if n == 0 {
		return 0
	}
	s := t.start.Load()
	if s == 0 {
		return t.points[rand.IntN(n)].D
	}
	at := time.Duration(time.Now().UnixNano() - s)
	lo, _ := slices.BinarySearchFunc(t.points, at-t.window, func(p TracePoint, x time.Duration) int { return int(p.At - x) })
	hi, _ := slices.BinarySearchFunc(t.points, at+t.window, func(p TracePoint, x time.Duration) int { return int(p.At - x) })
	if hi > lo {
		return t.points[lo+rand.IntN(hi-lo)].D
	}
	// None within the window: the nearest.
	i := min(lo, n-1)
	if i > 0 && at-t.points[i-1].At < t.points[i].At-at {
		i--
	}
	return t.points[i].D
}

func (t *Trace) String() string {
	ds := make(Empirical, len(t.points))
	for i, p := range t.points {
		ds[i] = p.D
	}
	return "trace " + ds.String() + fmt.Sprintf(" replayed in time (window ±%v)", t.window)
}
