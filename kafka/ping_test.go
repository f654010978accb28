package kafka

import (
	"net"
	"testing"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

func TestPing(t *testing.T) {
	t.Run("a broker answers", func(t *testing.T) {
		p := newPublisher(t, testenv.Kafka(t))
		if err := p.Ping(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("nothing listens", func(t *testing.T) {
		// A port that was free a moment ago: connections are refused.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		p, err := NewPublisher(testCtx(t), []string{addr})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.Ping(testCtx(t)); err == nil {
			t.Fatalf("Ping of %s succeeded", addr)
		}
	})
}
