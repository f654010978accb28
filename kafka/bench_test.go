package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// BenchmarkPublish measures the throughput cost of Strict mode: 8 buckets
// publish batches of 500 messages of 200 bytes (keys spread over 16
// partitions) concurrently through one publisher, in the default mode, in
// Strict mode without failures (one produce request in flight per broker),
// and in Strict mode right after a failure (each bucket produces one record
// at a time). Reported as messages/s.
//
//	go test -run '^$' -bench BenchmarkPublish -benchtime 20x ./kafka
func BenchmarkPublish(b *testing.B) {
	for _, mode := range []string{"default", "strict", "strict-after-failure"} {
		b.Run(mode, func(b *testing.B) {
			k := testenv.Kafka(b)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			topic := testenv.Name(b, "bench")
			testenv.CreateTopic(b, k, topic, 16)
			opts := []Option{Topics(topic)}
			if mode != "default" {
				opts = append(opts, Strict())
			}
			p, err := NewPublisher(ctx, k.Brokers, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			const buckets, batch = 8, 500
			value := make([]byte, 200)
			batches := make([][]outbox.Message, buckets)
			for bk := range batches {
				for i := range batch {
					batches[bk] = append(batches[bk], outbox.Message{ID: outbox.NewID(), Bucket: bk, Sequence: int64(i + 1), Topic: topic,
						Key: fmt.Appendf(nil, "key-%d-%d", bk, i%32), Value: value, CreatedAt: time.Now()})
				}
			}
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				var wg sync.WaitGroup
				for bk := range buckets {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if mode == "strict-after-failure" {
							// As after a failure: one record at a time.
							p.carefulMu.Lock()
							p.careful[bk] = true
							p.carefulMu.Unlock()
						}
						if n, err := p.Publish(ctx, batches[bk]); err != nil || n != batch {
							b.Errorf("publish: %d %v", n, err)
						}
					}()
				}
				wg.Wait()
			}
			b.ReportMetric(float64(b.N*buckets*batch)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
