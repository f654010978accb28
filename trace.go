package outbox

import (
	"context"
	"log/slog"
)

// W3C Trace Context header names. A Tracer's Inject writes them into a
// message's headers; the relay passes headers through, so every record
// carries its writer's trace context to the consumer.
const (
	TraceParentHeader = "traceparent"
	TraceStateHeader  = "tracestate"
)

// Tracer connects the outbox to a tracing system without this module
// depending on one: the writer (store/dynamo), the publisher (kafka) and the
// inbox take one as an option, and github.com/dynakafka/outbox/otel adapts
// OpenTelemetry to it (a separate module, so that services that do not trace
// never download OpenTelemetry). Implementations must be safe for
// concurrent use. Without a Tracer nothing is traced and no header is added.
//
// The spans the outbox starts:
//
//	enqueue  SpanProducer, child of the writer's context; its context is
//	         injected into every message of the transaction
//	publish  SpanProducer, one per published run of a bucket (the relay's
//	         batch), linked to each message's context
//	process  SpanConsumer, one per consumed record, child of the context the
//	         record carries
//
// so one trace runs from the writer's span through enqueue to the consumer's
// span, and the relay's batch spans link to the messages they carried.
type Tracer interface {
	// Start starts a span named name, a child of the span in ctx, and
	// returns ctx with it and the function that ends it (with the
	// operation's error, nil for success). Attributes use slog's typed
	// values (string, int64, bool, ...).
	Start(ctx context.Context, name string, s SpanStart) (context.Context, func(error))
	// Inject returns headers with the trace context of ctx written into
	// them (W3C traceparent and tracestate, replacing any already there).
	// It may modify headers' backing array only beyond its length.
	Inject(ctx context.Context, headers []Header) []Header
	// Extract returns ctx with the remote trace context carried by headers
	// as its parent, or ctx unchanged when they carry none.
	Extract(ctx context.Context, headers []Header) context.Context
}

// SpanKind says what a span does, as OpenTelemetry's span kinds.
type SpanKind int

// Span kinds.
const (
	SpanInternal SpanKind = iota
	SpanProducer
	SpanConsumer
)

// SpanStart describes a span to start.
type SpanStart struct {
	Kind SpanKind
	// Links are trace contexts to link the span to, each as carried in a
	// message's headers (see Tracer.Extract); header sets that carry none
	// are skipped.
	Links [][]Header
	// Attributes of the span.
	Attributes []slog.Attr
}
