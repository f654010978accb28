package main

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/lambda/wiring"
	"github.com/dynakafka/outbox/local/esm"
	"github.com/dynakafka/outbox/relay"
)

// The relay function's containers. Lambda runs a function's invocations in
// whichever execution environment is free; consecutive invocations of one
// shard usually land on the same warm one, but nothing keeps a bucket on
// one container. Each container is a process of its own: its own relay and
// memory, so it cannot resume another's released hold (docs/design.md
// §4.3), while the owner id is the one they share. startContainers models
// a function with run.containers of them and sends invocations to them as
// run.switchEvery says, to measure what a switch costs.

// drainLog collects the relay's DrainStats through relay.WithMetrics.
type drainLog struct {
	mu     sync.Mutex
	drains []relay.DrainStats
}

func (l *drainLog) Batch(relay.BatchStats) {}

func (l *drainLog) Drain(st relay.DrainStats) {
	l.mu.Lock()
	l.drains = append(l.drains, st)
	l.mu.Unlock()
}

// switchStats is what a switch between containers cost in a run: the
// drains that acquired a lease (a write; with its release, two) and, of
// those, the ones that waited for the previous container's resume window,
// and how long.
type switchStats struct {
	Containers    int     `json:"containers"` // 1: one warm container
	SwitchEveryS  float64 `json:"switch_every_s"`
	Drains        int     `json:"drains"`
	Resumed       int     `json:"resumed"`
	Acquired      int     `json:"acquired"`
	HandedOver    int     `json:"handed_over"` // acquisitions from another container's release
	Waited        int     `json:"waited"`      // acquisitions that waited ResumeWindow (a hand-over)
	WaitP50ms     float64 `json:"wait_p50_ms"`
	WaitMaxms     float64 `json:"wait_max_ms"`
	WaitTotalS    float64 `json:"wait_total_s"`
	MarkedHeld    int     `json:"resume_marks_under_own_release"`
	FailedDrains  int     `json:"failed_drains"`
	WaitedOnHold  int     `json:"held_by_another"` // drains that met a hold (ErrLeaseHeld or a holder wait)
	DrainP50ms    float64 `json:"drain_p50_ms"`
	DrainP99ms    float64 `json:"drain_p99_ms"`
	DrainMaxms    float64 `json:"drain_max_ms"`
	PerSwitchNote string  `json:"note"`
}

func (l *drainLog) result(run steadyRun) *switchStats {
	if run.handler != handlerRelay {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &switchStats{Containers: run.containers, SwitchEveryS: run.switchEvery.Seconds(), Drains: len(l.drains),
		PerSwitchNote: "an acquisition from another container's release waits ResumeWindow (500 ms) before its first read, or fences with Kafka transactions"}
	var waits, durs []float64
	for _, d := range l.drains {
		durs = append(durs, ms(d.Duration))
		switch {
		case d.Resumed:
			s.Resumed++
		case d.Acquired:
			s.Acquired++
		}
		if d.HandedOver {
			s.HandedOver++
		}
		if d.ResumeWait > 0 {
			s.Waited++
			waits = append(waits, ms(d.ResumeWait))
			s.WaitTotalS += d.ResumeWait.Seconds()
		}
		if d.ResumeMarkHeld {
			s.MarkedHeld++
		}
		if d.Err != nil {
			s.FailedDrains++
		}
		if d.Waited > 0 || d.Err != nil && d.Class == outbox.Retriable {
			s.WaitedOnHold++
		}
	}
	s.WaitP50ms, s.WaitMaxms = pct(waits, 0.5), pct(waits, 1)
	s.DrainP50ms, s.DrainP99ms, s.DrainMaxms = pct(durs, 0.5), pct(durs, 0.99), pct(durs, 1)
	return s
}

// startContainers builds run.containers relay handlers as startHandler
// builds one, and returns a handler that sends each invocation to one of
// them: the same one until run.switchEvery has passed since the last
// switch, then the next (every invocation the next when it is 0).
func startContainers(ctx context.Context, st *stage, run steadyRun, drains *drainLog) (esm.Handler, func() int64, func(), error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := config.Config{
		MessagesTable: st.tables.Messages, ControlTable: st.tables.Control, BatchSize: relayBatch, Topics: []string{st.topic},
		LeaseDuration: 30 * time.Second, GapTimeout: 10 * time.Second,
		Brokers: st.brokers, Auth: config.AuthNone, Region: st.awsCfg.Region, DynamoEndpoint: st.endpoint,
		Transactional: run.mode.Transactional,
	}
	var (
		handlers []*handler.Relay
		closers  []func()
	)
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	for range run.containers {
		relayAWS := st.awsCfg.Copy()
		relayAWS.APIOptions = append(relayAWS.APIOptions, st.meter.register)
		parts, err := wiring.BuildWith(ctx, cfg, relayAWS, quiet, "bench-relay", relay.WithMetrics(drains))
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		closers = append(closers, parts.Close)
		handlers = append(handlers, handler.NewRelay(parts.Relay, cfg.Concurrency, quiet))
	}
	var (
		mu       sync.Mutex
		next     int
		switched = time.Now()
	)
	handle := func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		mu.Lock()
		if run.switchEvery == 0 || time.Since(switched) >= run.switchEvery {
			next, switched = (next+1)%len(handlers), time.Now()
		}
		h := handlers[next]
		mu.Unlock()
		return h.Handle(ctx, ev)
	}
	published := func() int64 {
		var n int64
		for _, h := range handlers {
			n += h.Counters().Published.Load()
		}
		return n
	}
	return handle, published, closeAll, nil
}
