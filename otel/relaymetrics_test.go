package otel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/otel"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// collected is what a manual reader collected: each counter's sum and each
// histogram's count and sum, keyed by name and, when it has one, the error
// class; outbox.name must be on every point.
type collected struct {
	sums   map[string]float64
	counts map[string]uint64
}

func collect(t *testing.T, reader *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	c := collected{sums: map[string]float64{}, counts: map[string]uint64{}}
	key := func(name string, attrs attribute.Set) string {
		if v, ok := attrs.Value("outbox.name"); !ok || v.AsString() != "orders-outbox" {
			t.Errorf("%s: attributes %v lack outbox.name", name, attrs.ToSlice())
		}
		if v, ok := attrs.Value(otel.ErrorClassKey); ok {
			return name + "/" + v.AsString()
		}
		return name
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					c.sums[key(m.Name, p.Attributes)] += float64(p.Value)
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					c.sums[key(m.Name, p.Attributes)] += p.Value
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					c.counts[key(m.Name, p.Attributes)] += p.Count
					c.sums[key(m.Name, p.Attributes)] += float64(p.Sum)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					c.counts[key(m.Name, p.Attributes)] += p.Count
					c.sums[key(m.Name, p.Attributes)] += p.Sum
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return c
}

func newRelayMetrics(t *testing.T) (*otel.RelayMetrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m, err := otel.NewRelayMetrics(mp.Meter("test"), attribute.String("outbox.name", "orders-outbox"))
	if err != nil {
		t.Fatal(err)
	}
	return m, reader
}

func TestRelayMetricsRecordsWhatTheEngineReports(t *testing.T) {
	m, reader := newRelayMetrics(t)
	fatal := outbox.WithClass(errors.New("TOPIC_AUTHORIZATION_FAILED"), outbox.Fatal)
	m.Batch(relay.BatchStats{Messages: 500, Acked: 500, PublishDuration: 20 * time.Millisecond})
	m.Batch(relay.BatchStats{Messages: 10, Acked: 4, Err: fatal, Class: outbox.Fatal, PublishDuration: 10 * time.Millisecond})
	m.Batch(relay.BatchStats{Messages: 1, Err: errors.New("timeout"), Class: outbox.Retriable})
	m.Batch(relay.BatchStats{Messages: 2, Acked: 2, Err: errors.New("head update throttled")}) // published; not a publish failure
	m.Batch(relay.BatchStats{Parked: 1, Err: errors.New("too large"), Class: outbox.RecordPermanent})
	m.Drain(relay.DrainStats{Acquired: true, TakenOver: true, Fenced: 2, GapWait: 1500 * time.Millisecond, Duration: time.Second})
	m.Drain(relay.DrainStats{Resumed: true, LeaseLost: true, Parked: 1, Duration: time.Second, Err: outbox.ErrLeaseLost, Class: outbox.Retriable})
	m.Drain(relay.DrainStats{Err: outbox.ErrLeaseHeld, Class: outbox.Retriable}) // woken the holder: not a failure
	m.Drain(relay.DrainStats{Acquired: true, Err: fatal, Class: outbox.Fatal})

	c := collect(t, reader)
	wantSums := map[string]float64{
		"outbox.relay.messages.published":         506,
		"outbox.relay.publish.failures/fatal":     1,
		"outbox.relay.publish.failures/retriable": 1,
		"outbox.relay.batch.size":                 513,
		"outbox.relay.leases.acquired":            2,
		"outbox.relay.leases.lost":                1,
		"outbox.relay.leases.taken_over":          1,
		"outbox.relay.messages.parked":            1,
		"outbox.relay.fences.written":             2,
		"outbox.relay.gap.wait":                   1.5,
		"outbox.relay.publish.duration":           0.03,
		"outbox.relay.buckets.failed/retriable":   1,
		"outbox.relay.buckets.failed/fatal":       1,
		"outbox.relay.drain.duration":             2,
	}
	for k, want := range wantSums {
		if got := c.sums[k]; got < want-1e-9 || got > want+1e-9 {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
	for k := range c.sums {
		if _, ok := wantSums[k]; !ok {
			t.Errorf("unexpected %s = %v", k, c.sums[k])
		}
	}
	wantCounts := map[string]uint64{"outbox.relay.publish.duration": 4, "outbox.relay.batch.size": 4, "outbox.relay.drain.duration": 4}
	for k, want := range wantCounts {
		if c.counts[k] != want {
			t.Errorf("%s: %d samples, want %d", k, c.counts[k], want)
		}
	}
}

type failingPublisher struct{ err error }

func (p *failingPublisher) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	return len(msgs), nil
}

// Installed with relay.WithMetrics on a real relay (memory store): a
// drain that publishes, then one that a fatal error stops.
func TestRelayMetricsOnARelay(t *testing.T) {
	m, reader := newRelayMetrics(t)
	ctx := context.Background()
	s := memory.New(2)
	for range 7 {
		if err := s.Put(outbox.Message{ID: outbox.NewID(), Bucket: 1, Sequence: s.Reserve(1, 1), Topic: "t", Value: []byte("v"), CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	p := &failingPublisher{}
	r, err := relay.New(ctx, s, p, relay.WithMetrics(m), relay.BatchSize(3), relay.DeadlineMargin(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.DrainBucket(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p.err = outbox.WithClass(errors.New("TOPIC_AUTHORIZATION_FAILED"), outbox.Fatal)
	if err := s.Put(outbox.Message{ID: outbox.NewID(), Bucket: 0, Sequence: s.Reserve(0, 1), Topic: "t", Value: []byte("v"), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.DrainBucket(ctx, 0); outbox.Classify(err) != outbox.Fatal {
		t.Fatalf("drain of bucket 0: %v, want a fatal error", err)
	}
	c := collect(t, reader)
	if c.sums["outbox.relay.messages.published"] != 7 || c.counts["outbox.relay.batch.size"] != 4 ||
		c.sums["outbox.relay.publish.failures/fatal"] != 1 || c.sums["outbox.relay.buckets.failed/fatal"] != 1 ||
		c.sums["outbox.relay.leases.acquired"] != 2 || c.counts["outbox.relay.drain.duration"] != 2 {
		t.Fatalf("collected %v, counts %v", c.sums, c.counts)
	}
}
