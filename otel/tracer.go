package otel

import (
	"context"
	"log/slog"
	"slices"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/dynakafka/outbox"
)

// ScopeName is the instrumentation scope of the outbox's spans and metrics.
const ScopeName = "github.com/dynakafka/outbox"

// Tracer is an outbox.Tracer on OpenTelemetry. It is safe for concurrent
// use.
type Tracer struct {
	tr   trace.Tracer
	prop propagation.TextMapPropagator
}

var _ outbox.Tracer = (*Tracer)(nil)

// Option configures NewTracer.
type Option func(*tracerConfig)

type tracerConfig struct {
	tp   trace.TracerProvider
	prop propagation.TextMapPropagator
}

// TracerProvider sets where spans go. Default otel.GetTracerProvider() (the
// global provider, as set with otel.SetTracerProvider), read by NewTracer.
func TracerProvider(tp trace.TracerProvider) Option {
	return func(c *tracerConfig) { c.tp = tp }
}

// Propagator sets how trace context is written into and read from headers.
// Default propagation.TraceContext{}: W3C traceparent and tracestate, which
// every OpenTelemetry SDK reads, in any language.
func Propagator(p propagation.TextMapPropagator) Option {
	return func(c *tracerConfig) { c.prop = p }
}

// NewTracer returns a Tracer.
func NewTracer(opts ...Option) *Tracer {
	var c tracerConfig
	for _, o := range opts {
		o(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.prop == nil {
		c.prop = propagation.TraceContext{}
	}
	return &Tracer{tr: c.tp.Tracer(ScopeName), prop: c.prop}
}

// Start starts a span; the returned function ends it, recording a non-nil
// error as the span's error status.
func (t *Tracer) Start(ctx context.Context, name string, s outbox.SpanStart) (context.Context, func(error)) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(spanKind(s.Kind)), trace.WithAttributes(attributes(s.Attributes)...)}
	for _, hs := range s.Links {
		if sc := trace.SpanContextFromContext(t.Extract(context.Background(), hs)); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	ctx, span := t.tr.Start(ctx, name, opts...)
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// Inject writes ctx's trace context into headers, replacing what they carry.
func (t *Tracer) Inject(ctx context.Context, headers []outbox.Header) []outbox.Header {
	c := carrier{hs: headers}
	t.prop.Inject(ctx, &c)
	return c.hs
}

// Extract returns ctx with the remote span context headers carry.
func (t *Tracer) Extract(ctx context.Context, headers []outbox.Header) context.Context {
	return t.prop.Extract(ctx, &carrier{hs: headers})
}

// carrier is a propagation.TextMapCarrier over message headers. Get reads
// the last header of a key (the one stamped last); Set replaces every
// header of the key.
type carrier struct{ hs []outbox.Header }

func (c *carrier) Get(key string) string {
	for i := len(c.hs) - 1; i >= 0; i-- {
		if c.hs[i].Key == key {
			return string(c.hs[i].Value)
		}
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	c.hs = slices.DeleteFunc(c.hs, func(h outbox.Header) bool { return h.Key == key })
	c.hs = append(c.hs, outbox.Header{Key: key, Value: []byte(value)})
}

func (c *carrier) Keys() []string {
	keys := make([]string, 0, len(c.hs))
	for _, h := range c.hs {
		keys = append(keys, h.Key)
	}
	return keys
}

func spanKind(k outbox.SpanKind) trace.SpanKind {
	switch k {
	case outbox.SpanProducer:
		return trace.SpanKindProducer
	case outbox.SpanConsumer:
		return trace.SpanKindConsumer
	}
	return trace.SpanKindInternal
}

func attributes(as []slog.Attr) []attribute.KeyValue {
	kvs := make([]attribute.KeyValue, 0, len(as))
	for _, a := range as {
		v := a.Value.Resolve()
		switch v.Kind() {
		case slog.KindString:
			kvs = append(kvs, attribute.String(a.Key, v.String()))
		case slog.KindInt64:
			kvs = append(kvs, attribute.Int64(a.Key, v.Int64()))
		case slog.KindUint64:
			kvs = append(kvs, attribute.Int64(a.Key, int64(v.Uint64())))
		case slog.KindBool:
			kvs = append(kvs, attribute.Bool(a.Key, v.Bool()))
		case slog.KindFloat64:
			kvs = append(kvs, attribute.Float64(a.Key, v.Float64()))
		case slog.KindDuration:
			kvs = append(kvs, attribute.Float64(a.Key, v.Duration().Seconds()))
		default:
			kvs = append(kvs, attribute.String(a.Key, v.String()))
		}
	}
	return kvs
}
