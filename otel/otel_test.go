package otel_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/otel"
)

// Inject replaces a stale traceparent and keeps the other headers; Extract
// reads back the same span context; a failed span records its error.
func TestTracerHeaders(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := otel.NewTracer(otel.TracerProvider(tp))
	ctx, end := tr.Start(context.Background(), "enqueue", outbox.SpanStart{Kind: outbox.SpanProducer,
		Attributes: []slog.Attr{slog.String("s", "v"), slog.Int("n", 3), slog.Bool("b", true), slog.Duration("d", time.Second)}})
	in := []outbox.Header{{Key: "a", Value: []byte("1")}, {Key: outbox.TraceParentHeader, Value: []byte("stale")}}
	hs := tr.Inject(ctx, in)
	if len(hs) != 2 || hs[0].Key != "a" || hs[1].Key != outbox.TraceParentHeader || string(hs[1].Value) == "stale" {
		t.Fatalf("headers after Inject: %q", hs)
	}
	got := trace.SpanContextFromContext(tr.Extract(context.Background(), hs))
	want := trace.SpanContextFromContext(ctx)
	if got.TraceID() != want.TraceID() || got.SpanID() != want.SpanID() || !got.IsRemote() {
		t.Fatalf("extracted %v, want %v (remote)", got, want)
	}
	if sc := trace.SpanContextFromContext(tr.Extract(context.Background(), in[:1])); sc.IsValid() {
		t.Fatalf("headers without trace context gave %v", sc)
	}
	end(errors.New("boom"))
	s := rec.Ended()[0]
	if s.Status().Description != "boom" || len(s.Events()) != 1 || len(s.Attributes()) != 4 || s.Attributes()[3] != attribute.Float64("d", 1) {
		t.Fatalf("span status %v events %v attributes %v", s.Status(), s.Events(), s.Attributes())
	}
}

func TestInboxMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m, err := otel.NewInboxMetrics(mp.Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	msg := inbox.Message{Topic: "orders"}
	m.Processed(inbox.Result{Message: msg, Status: inbox.Applied, Gap: 2, Duration: time.Millisecond}, nil)
	m.Processed(inbox.Result{Message: msg, Status: inbox.Duplicate}, nil)
	m.Processed(inbox.Result{Message: msg, Status: inbox.Applied, Gap: 1}, nil)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if s, ok := mt.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range s.DataPoints {
					st, _ := dp.Attributes.Value("outbox.inbox.status")
					sums[mt.Name+"/"+st.AsString()] += dp.Value
				}
			}
		}
	}
	want := map[string]int64{"outbox.inbox.records/applied": 2, "outbox.inbox.records/duplicate": 1, "outbox.inbox.sequence_gap/": 3}
	for k, v := range want {
		if sums[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, sums[k], v, sums)
		}
	}
}
