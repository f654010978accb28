package otel

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/dynakafka/outbox/inbox"
)

// InboxMetrics is an inbox.Metrics on OpenTelemetry:
//
//	outbox.inbox.records           counter, attributes messaging.destination.name and outbox.inbox.status (applied, duplicate, stale, failed)
//	outbox.inbox.sequence_gap      counter of sequence numbers skipped before applied records (Result.Gap), by topic
//	outbox.inbox.process.duration  histogram of Process durations, seconds, by topic and status
type InboxMetrics struct {
	records  metric.Int64Counter
	gaps     metric.Int64Counter
	duration metric.Float64Histogram
}

var _ inbox.Metrics = (*InboxMetrics)(nil)

// NewInboxMetrics creates the instruments on meter (nil: the global
// MeterProvider's meter for ScopeName).
func NewInboxMetrics(meter metric.Meter) (*InboxMetrics, error) {
	if meter == nil {
		meter = otel.GetMeterProvider().Meter(ScopeName)
	}
	m := &InboxMetrics{}
	var err error
	if m.records, err = meter.Int64Counter("outbox.inbox.records", metric.WithUnit("{record}"),
		metric.WithDescription("Records the inbox processed, by outcome")); err != nil {
		return nil, fmt.Errorf("otel: %w", err)
	}
	if m.gaps, err = meter.Int64Counter("outbox.inbox.sequence_gap", metric.WithUnit("{sequence}"),
		metric.WithDescription("Sequence numbers skipped before applied records (fences, parked messages, other topics)")); err != nil {
		return nil, fmt.Errorf("otel: %w", err)
	}
	if m.duration, err = meter.Float64Histogram("outbox.inbox.process.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of Process, the callback and the transaction included")); err != nil {
		return nil, fmt.Errorf("otel: %w", err)
	}
	return m, nil
}

// Processed records one Process.
func (m *InboxMetrics) Processed(r inbox.Result, _ error) {
	ctx := context.Background()
	topic := attribute.String("messaging.destination.name", r.Message.Topic)
	status := attribute.String("outbox.inbox.status", r.Status.String())
	m.records.Add(ctx, 1, metric.WithAttributes(topic, status))
	if r.Gap > 0 {
		m.gaps.Add(ctx, r.Gap, metric.WithAttributes(topic))
	}
	m.duration.Record(ctx, r.Duration.Seconds(), metric.WithAttributes(topic, status))
}
