package brokertest

import (
	"testing"

	"github.com/dynakafka/outbox/internal/harness/kafka/kfakeenv"
	"github.com/dynakafka/outbox/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Publish starts every record before waiting, so kgo batches them: a run
// costs a few produce requests, not one round trip per message.
func TestPublishBatchesRecords(t *testing.T) {
	k := kfakeenv.Kafka(t)
	kfakeenv.RequireKfake(t, k)
	topic := newTopic(t, k.KafkaCluster, 1, nil)
	p := newPublisher(t, k.KafkaCluster, kafka.Topics(topic))
	requests := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Count: -1, Observe: true})

	msgs := messages(topic, 500, sameKey("k"))
	if acked, err := p.Publish(testCtx(t), msgs); acked != len(msgs) || err != nil {
		t.Fatalf("Publish = %d, %v", acked, err)
	}
	if n := requests.Hits(); n < 1 || n > 20 {
		t.Fatalf("%d produce requests for %d messages; want a handful", n, len(msgs))
	}
	t.Logf("%d messages in %d produce requests", len(msgs), requests.Hits())
}
