// Package otel adapts OpenTelemetry to the outbox: NewTracer is an
// outbox.Tracer for the writer (dynamo.WithTracer), the publisher
// (kafka.WithTracer) and the inbox (inbox.WithTracer), propagating W3C
// trace context (traceparent, tracestate) in message and record headers, so
// one trace runs from the span that wrote a message to the span that
// consumed it; NewInboxMetrics records the inbox's outcomes and sequence
// gaps as OpenTelemetry metrics; NewRelayMetrics is a relay.Metrics for
// relays that run as long-lived processes (Relay.Run on ECS or EKS), with
// the figures the Lambda relay writes as CloudWatch EMF lines.
//
// It is a module of its own (github.com/dynakafka/outbox/otel), so that a
// service using the outbox without tracing never downloads OpenTelemetry.
//
//	tr := otel.NewTracer() // the global TracerProvider, W3C propagation
//	w, _ := dynamo.NewWriter(ctx, db, tables, dynamo.WithTracer(tr))
//	pub, _ := kafka.NewPublisher(ctx, brokers, kafka.WithTracer(tr))
//	ib, _ := inbox.New(ctx, db, "orders-view-inbox", inbox.WithTracer(tr))
//	rm, _ := otel.NewRelayMetrics(nil, attribute.String("outbox.name", tables.Messages))
//	r, _ := relay.New(ctx, store, pub, relay.WithMetrics(rm))
package otel
