package kafka

import (
	"context"
	"fmt"
)

// Ping checks that a broker answers, with the configured TLS and SASL: one
// Metadata request naming no topic, which Kafka (and MSK IAM) allows to any
// client that may connect. NewPublisher with Topics already talks to the
// brokers; Ping is the check for a publisher without them, so that a
// wrong address, port, certificate or credential fails at start rather than
// on the first message.
func (p *Publisher) Ping(ctx context.Context) error {
	if err := p.cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka: no broker answered: %w", err)
	}
	return nil
}
