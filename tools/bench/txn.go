package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The transactional mode (kafka.TxnPublisher, OUTBOX_KAFKA_TRANSACTIONAL)
// beside the default (kafka.Publisher, idempotent) on the same run (issue
// 20, item 4): the backlog drain in turns with the default relay in the
// same rounds (each the median round), the steady stage at txnProfile, and
// the Kafka requests the publisher sends per batch, counted by a kgo hook
// on every client the publisher builds.
const txnProfile = "50"

// modeTxn is the relay in the default delete mode publishing through
// kafka.TxnPublisher.
var modeTxn = relayMode{Name: "txn", Transactional: true}

// txnResult compares the two publishers. Nil in a partial run.
type txnResult struct {
	RelayMsgsPerS   float64 `json:"relay_msgs_per_s"`
	DefaultMsgsPerS float64 `json:"default_msgs_per_s"`
	// Kafka requests per relay batch (one bucket's drained batch) in the
	// median drain, and by request type.
	RoundTripsPerBatch        float64          `json:"kafka_requests_per_batch"`
	DefaultRoundTripsPerBatch float64          `json:"default_kafka_requests_per_batch"`
	Requests                  map[string]int64 `json:"kafka_requests"`
	DefaultRequests           map[string]int64 `json:"default_kafka_requests"`
	Batches                   int64            `json:"batches"`
	DefaultBatches            int64            `json:"default_batches"`
	// The steady stage at txnProfile: commit-to-consume latency (a
	// read_committed consumer).
	Rate         string  `json:"steady_profile"`
	P50ms        float64 `json:"p50_ms"`
	P99ms        float64 `json:"p99_ms"`
	DefaultP50ms float64 `json:"default_p50_ms"`
	DefaultP99ms float64 `json:"default_p99_ms"`
	Kafka        string  `json:"kafka"` // what answered: kfake, or the brokers given
}

// txnOf builds the comparison from the median drains and the steady runs
// at txnProfile, or nil when the transactional drains did not run.
func txnOf(r *results, kafka string) *txnResult {
	tx, def := median(r.Rounds.Txn), r.Relay
	if tx.Messages == 0 || def.Messages == 0 {
		return nil
	}
	t := &txnResult{
		RelayMsgsPerS: tx.MsgsPerS, DefaultMsgsPerS: def.MsgsPerS,
		RoundTripsPerBatch: tx.KafkaRequestsPerBatch, DefaultRoundTripsPerBatch: def.KafkaRequestsPerBatch,
		Requests: tx.KafkaRequests, DefaultRequests: def.KafkaRequests, Batches: tx.Batches, DefaultBatches: def.Batches,
		Rate: txnProfile, Kafka: kafka,
	}
	for _, s := range r.Steady {
		if s.Handler != handlerRelay || s.Profile.Name != txnProfile {
			continue
		}
		switch s.Mode {
		case modeTxn.Name:
			t.P50ms, t.P99ms = s.P50ms, s.P99ms
		case modeDelete.Name:
			t.DefaultP50ms, t.DefaultP99ms = s.P50ms, s.P99ms
		}
	}
	return t
}

// line is the txn: line, beside the bench: line of the default.
func (t *txnResult) line() string {
	return fmt.Sprintf("txn: relay_msgs_per_s=%.0f default_msgs_per_s=%.0f p50_ms=%.1f p99_ms=%.1f default_p50_ms=%.1f default_p99_ms=%.1f rate=%s kafka_requests_per_batch=%.2f default_kafka_requests_per_batch=%.2f kafka=%s",
		t.RelayMsgsPerS, t.DefaultMsgsPerS, t.P50ms, t.P99ms, t.DefaultP50ms, t.DefaultP99ms, t.Rate, t.RoundTripsPerBatch, t.DefaultRoundTripsPerBatch, t.Kafka)
}

// requestCounter is a kgo hook counting the requests written to brokers,
// by request type.
type requestCounter struct {
	mu sync.Mutex
	n  map[int16]int64
}

var _ kgo.HookBrokerWrite = (*requestCounter)(nil)

func newRequestCounter() *requestCounter { return &requestCounter{n: map[int16]int64{}} }

func (c *requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return // not sent
	}
	c.mu.Lock()
	c.n[key]++
	c.mu.Unlock()
}

func (c *requestCounter) reset() {
	c.mu.Lock()
	clear(c.n)
	c.mu.Unlock()
}

// byName is the counts by request name, and their total.
func (c *requestCounter) byName() (map[string]int64, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int64{}
	var total int64
	for k, v := range c.n {
		out[kmsg.NameForKey(k)] += v
		total += v
	}
	return out, total
}

// requestSummary is counts as "Name=N, ...", largest first.
func requestSummary(counts map[string]int64) string {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	slices.SortStableFunc(names, func(a, b string) int { return int(counts[b] - counts[a]) })
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", n, counts[n])
	}
	return s
}

// txnDrains is -only txn's drains: rounds of the default relay and the
// transactional one in turns, each on a fresh outbox with the same backlog
// size; res.Relay is the default's median round.
func txnDrains(ctx context.Context, e *env, g *gen, tmpl *template, o options, res *results) error {
	for round := 1; round <= o.rounds; round++ {
		for i, m := range []relayMode{modeDelete, modeTxn} {
			o.progress("round %d/%d, relay (%s publisher): %d messages over 8 buckets", round, o.rounds, m.Name, o.relayMsgs)
			if err := withStage(ctx, e, fmt.Sprintf("txn-r%dd%d", round, i), 8, func(st *stage) error {
				bl, err := prefill(ctx, st, g, tmpl, o.relayMsgs)
				if err != nil {
					return err
				}
				st.meter.deletedBytes = bl.MaxItemSize
				d, err := relayDrain(ctx, st, bl, "relay engine, "+m.Name+" publisher, 8 buckets", m)
				if m.Transactional {
					res.Rounds.Txn = append(res.Rounds.Txn, d)
				} else {
					res.Rounds.Relay = append(res.Rounds.Relay, d)
				}
				o.progress("  %.0f msgs/s; %d batches, %.2f Kafka requests per batch: %s (load average %s)", d.MsgsPerS, d.Batches, d.KafkaRequestsPerBatch, requestSummary(d.KafkaRequests), d.Load)
				return err
			}); err != nil {
				return fmt.Errorf("round %d, relay (%s publisher): %w", round, m.Name, err)
			}
		}
	}
	res.Relay = median(res.Rounds.Relay)
	return nil
}
