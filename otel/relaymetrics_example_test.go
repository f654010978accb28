package otel_test

import (
	"context"
	"log"

	"go.opentelemetry.io/otel/attribute"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/otel"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// A relay that runs as a process records its metrics with the global
// MeterProvider (set up by the service's OpenTelemetry SDK).
func ExampleNewRelayMetrics() {
	ctx := context.Background()
	rm, err := otel.NewRelayMetrics(nil, attribute.String("outbox.name", "orders-outbox"))
	if err != nil {
		log.Fatal(err)
	}
	var pub outbox.Publisher = &failingPublisher{} // kafka.NewPublisher in a service
	r, err := relay.New(ctx, memory.New(8), pub, relay.WithMetrics(rm))
	if err != nil {
		log.Fatal(err)
	}
	_ = r // r.Run(ctx) until the service stops
	// Output:
}
