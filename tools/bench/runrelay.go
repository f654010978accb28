package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
)

// runRelayPoll is the PollInterval of the long-running relay stage.
const runRelayPoll = 200 * time.Millisecond

// runRelayResult is the commit → Kafka latency of the long-running relay
// (Relay.Run, the container path) on an idle outbox: each message is
// committed alone, at a random phase of the relay's polls, after the one
// before it arrived.
type runRelayResult struct {
	// Notifier: the writer and the relay share a relay.Notifier (the
	// writer wakes the relay); otherwise the relay finds each message by
	// polling.
	Notifier bool    `json:"notifier"`
	PollMs   float64 `json:"poll_ms"`
	Messages int     `json:"messages"`
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
	// GoalMs is PollInterval + 100 ms: the p99 the polling relay should
	// reach on an idle outbox (issue 18).
	GoalMs float64 `json:"goal_ms"`
	// DrainP50ms and DrainP99ms are the durations of the relay's drains
	// that published (relay.DrainStats.Duration: lease read, Pending,
	// produce, marking): the rest of a polled message's latency is its
	// wait for the next sweep and that sweep's probe.
	DrainP50ms float64 `json:"drain_p50_ms"`
	DrainP99ms float64 `json:"drain_p99_ms"`
	Load       string  `json:"loadavg_after"`
}

// drainTimes is a relay.Metrics that keeps the durations of the drains
// that published.
type drainTimes struct {
	mu  sync.Mutex
	mss []float64
}

func (d *drainTimes) Batch(relay.BatchStats) {}
func (d *drainTimes) Drain(s relay.DrainStats) {
	if s.Published > 0 {
		d.mu.Lock()
		d.mss = append(d.mss, ms(s.Duration))
		d.mu.Unlock()
	}
}

func (r runRelayResult) line() string {
	l := fmt.Sprintf("runrelay: p50_ms=%.1f p99_ms=%.1f poll_ms=%.0f messages=%d max_ms=%.1f drain_p50_ms=%.1f", r.P50ms, r.P99ms, r.PollMs, r.Messages, r.MaxMs, r.DrainP50ms)
	if r.Notifier {
		l += " notifier=true"
	}
	return l
}

// runRelayStage measures Relay.Run without, then with, the notifier, each
// on a fresh stage.
func runRelayStage(ctx context.Context, e *env, o options, res *results) error {
	for _, notify := range []bool{false, true} {
		o.progress("long-running relay (Relay.Run, PollInterval %v), notifier %v: %d messages one at a time", runRelayPoll, notify, o.runRelayMsgs)
		var r runRelayResult
		err := withStage(ctx, e, fmt.Sprintf("runrelay-%v", notify), 8, func(st *stage) (err error) {
			r, err = runRelay(ctx, st, o.runRelayMsgs, notify)
			return err
		})
		if err != nil {
			return fmt.Errorf("long-running relay, notifier %v: %w", notify, err)
		}
		o.progress("  p50 %.0f ms, p99 %.0f ms, max %.0f ms; drains that published: p50 %.0f ms, p99 %.0f ms (load average %s)", r.P50ms, r.P99ms, r.MaxMs, r.DrainP50ms, r.DrainP99ms, r.Load)
		res.RunRelay = append(res.RunRelay, r)
	}
	return nil
}

// runRelay runs the relay with Relay.Run on st and commits n messages, one
// at a time: each after the one before was consumed, plus a random pause
// below PollInterval (so commits fall at every phase of the polls). The
// latency of a message is from its Write's return to its arrival at a
// consumer fetching with a 10 ms wait; a few messages first warm the
// producer and the consumer up (not counted).
func runRelay(ctx context.Context, st *stage, n int, notify bool) (runRelayResult, error) {
	r := runRelayResult{Notifier: notify, PollMs: ms(runRelayPoll), Messages: n, GoalMs: ms(runRelayPoll + 100*time.Millisecond)}
	var wopts []dynamo.WriterOption
	drains := &drainTimes{}
	ropts := []relay.Option{relay.PollInterval(runRelayPoll), relay.WithMetrics(drains)}
	if notify {
		nt := relay.NewNotifier()
		wopts = append(wopts, dynamo.WithNotifier(nt))
		ropts = append(ropts, relay.WithNotifier(nt))
	}
	w, err := dynamo.NewWriter(ctx, st.plain, st.tables, wopts...)
	if err != nil {
		return r, err
	}
	store, err := dynamo.NewStore(ctx, st.plain, st.tables)
	if err != nil {
		return r, err
	}
	pub, err := kafka.NewPublisher(ctx, st.brokers, kafka.Topics(st.topic))
	if err != nil {
		return r, err
	}
	defer pub.Close()
	rl, err := relay.New(ctx, store, pub, ropts...)
	if err != nil {
		return r, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(st.brokers...), kgo.ConsumeTopics(st.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		return r, err
	}
	defer cl.Close()

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	runErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		runErr <- rl.Run(runCtx)
	}()
	arrived := make(chan string, 16)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for runCtx.Err() == nil {
			fs := cl.PollFetches(runCtx)
			fs.EachRecord(func(rec *kgo.Record) {
				select {
				case arrived <- string(rec.Key):
				case <-runCtx.Done():
				}
			})
		}
	}()

	warmup := 1 + n/100 // 3 in make bench, 1 in the smoke test
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 18))
	var lat []float64
	for i := range warmup + n {
		select {
		case <-time.After(50*time.Millisecond + time.Duration(rnd.Int64N(int64(runRelayPoll)))):
		case <-ctx.Done():
			return r, ctx.Err()
		}
		key := "runrelay-" + strconv.Itoa(i)
		if _, err := w.Write(ctx, nil, outbox.Message{Topic: st.topic, Key: []byte(key), Value: []byte("idle")}); err != nil {
			return r, fmt.Errorf("write %d: %w", i, err)
		}
		committed := time.Now()
		for got := ""; got != key; {
			select {
			case got = <-arrived:
			case err := <-runErr:
				return r, fmt.Errorf("Relay.Run stopped: %v", err)
			case <-time.After(time.Minute):
				return r, fmt.Errorf("message %d not consumed a minute after its commit", i)
			case <-ctx.Done():
				return r, ctx.Err()
			}
		}
		if i >= warmup {
			lat = append(lat, ms(time.Since(committed)))
		}
	}
	r.P50ms, r.P99ms, r.MaxMs = pct(lat, 0.5), pct(lat, 0.99), pct(lat, 1)
	drains.mu.Lock()
	r.DrainP50ms, r.DrainP99ms = pct(drains.mss, 0.5), pct(drains.mss, 0.99)
	drains.mu.Unlock()
	r.Load = loadavg()
	return r, nil
}
