package otel

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
)

// Attribute keys of the relay's metrics.
const (
	// ErrorClassKey is the class of a failed publish or drain: retriable,
	// fatal or record-permanent (outbox.ErrorClass.String()).
	ErrorClassKey = attribute.Key("outbox.error.class")
)

// RelayMetrics is a relay.Metrics on OpenTelemetry, for relays that run
// as long-lived processes (Relay.Run on ECS or EKS), where there are no
// invocations to write CloudWatch EMF lines for. Install it with
// relay.WithMetrics. It records what the Lambda relay's EMF line carries
// (docs/deploy.md, Metrics), as instruments:
//
//	outbox.relay.messages.published  counter, {message}: messages Kafka acknowledged
//	outbox.relay.publish.failures    counter, {publish}: publishes that did not get every message acknowledged, by outbox.error.class
//	outbox.relay.publish.duration    histogram, s: per publish
//	outbox.relay.batch.size          histogram, {message}: messages per publish
//	outbox.relay.leases.acquired     counter, {lease}: leases acquired with a write
//	outbox.relay.leases.lost         counter, {lease}: drains that lost their lease
//	outbox.relay.leases.taken_over   counter, {lease}: leases taken from an expired holder
//	outbox.relay.messages.parked     counter, {message}: records moved to the dead letters
//	outbox.relay.fences.written      counter, {fence}: fences written over gaps
//	outbox.relay.gap.wait            counter, s: time drains waited for missing sequence numbers
//	outbox.relay.drain.duration      histogram, s: per drain
//	outbox.relay.buckets.failed      counter, {drain}: drains that failed, by outbox.error.class (a bucket held by another relay, which was woken, is not a failure)
//
// The backlog figures of the sweeper function (pending messages, oldest
// age, stuck buckets) come from sweep reports, which Relay.Run does not
// hand to Metrics. Safe for concurrent use.
type RelayMetrics struct {
	attrs metric.MeasurementOption

	published, failures, acquired, lost, takenOver, parked, fenced, failed metric.Int64Counter
	gapWait                                                                metric.Float64Counter
	publishDuration, drainDuration                                         metric.Float64Histogram
	batchSize                                                              metric.Int64Histogram
}

var _ relay.Metrics = (*RelayMetrics)(nil)

// NewRelayMetrics creates the instruments on meter (nil: the global
// MeterProvider's meter for ScopeName). Every measurement carries attrs,
// for example attribute.String("outbox.name", messagesTable) when one
// process relays several outboxes.
func NewRelayMetrics(meter metric.Meter, attrs ...attribute.KeyValue) (*RelayMetrics, error) {
	if meter == nil {
		meter = otel.GetMeterProvider().Meter(ScopeName)
	}
	m := &RelayMetrics{attrs: metric.WithAttributeSet(attribute.NewSet(attrs...))}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.published = counter("outbox.relay.messages.published", "{message}", "Messages Kafka acknowledged")
	m.failures = counter("outbox.relay.publish.failures", "{publish}", "Publishes that did not get every message acknowledged, by error class")
	m.acquired = counter("outbox.relay.leases.acquired", "{lease}", "Bucket leases acquired with a write")
	m.lost = counter("outbox.relay.leases.lost", "{lease}", "Drains that lost their bucket's lease (expired or taken over)")
	m.takenOver = counter("outbox.relay.leases.taken_over", "{lease}", "Leases acquired from a holder whose lease had expired unreleased")
	m.parked = counter("outbox.relay.messages.parked", "{message}", "Records moved to the dead letters")
	m.fenced = counter("outbox.relay.fences.written", "{fence}", "Fences written over reserved numbers no writer committed")
	m.failed = counter("outbox.relay.buckets.failed", "{drain}", "Drains that failed, by error class")
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc))
		errs = append(errs, err)
		return h
	}
	m.publishDuration = seconds("outbox.relay.publish.duration", "Duration of each publish, until Kafka acknowledged or failed it")
	m.drainDuration = seconds("outbox.relay.drain.duration", "Duration of each drain of a bucket")
	var err error
	m.gapWait, err = meter.Float64Counter("outbox.relay.gap.wait", metric.WithUnit("s"),
		metric.WithDescription("Time drains waited for missing sequence numbers"))
	errs = append(errs, err)
	m.batchSize, err = meter.Int64Histogram("outbox.relay.batch.size", metric.WithUnit("{message}"),
		metric.WithDescription("Messages per publish"))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otel: %w", err)
	}
	return m, nil
}

// Batch implements relay.Metrics.
func (m *RelayMetrics) Batch(s relay.BatchStats) {
	ctx := context.Background()
	if s.Acked > 0 {
		m.published.Add(ctx, int64(s.Acked), m.attrs)
	}
	if s.Messages == 0 {
		return // a record parked, or tombstones passed over: no publish
	}
	m.publishDuration.Record(ctx, s.PublishDuration.Seconds(), m.attrs)
	m.batchSize.Record(ctx, int64(s.Messages), m.attrs)
	if s.Err != nil && s.Acked < s.Messages {
		m.failures.Add(ctx, 1, m.attrs, metric.WithAttributes(ErrorClassKey.String(s.Class.String())))
	}
}

// Drain implements relay.Metrics.
func (m *RelayMetrics) Drain(s relay.DrainStats) {
	ctx := context.Background()
	add := func(c metric.Int64Counter, n int) {
		if n > 0 {
			c.Add(ctx, int64(n), m.attrs)
		}
	}
	add(m.acquired, b2i(s.Acquired))
	add(m.lost, b2i(s.LeaseLost))
	add(m.takenOver, b2i(s.TakenOver))
	add(m.parked, s.Parked)
	add(m.fenced, s.Fenced)
	if s.GapWait > 0 {
		m.gapWait.Add(ctx, s.GapWait.Seconds(), m.attrs)
	}
	m.drainDuration.Record(ctx, s.Duration.Seconds(), m.attrs)
	if s.Err != nil && !errors.Is(s.Err, outbox.ErrLeaseHeld) {
		m.failed.Add(ctx, 1, m.attrs, metric.WithAttributes(ErrorClassKey.String(s.Class.String())))
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
