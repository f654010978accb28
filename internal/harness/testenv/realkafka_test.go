package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// TestRealKafka: the one-node cluster starts, takes a topic and round-trips
// a record on its PLAINTEXT listener; a second call returns the same cluster.
func TestRealKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JVM")
	}
	if _, real := testenv.RealKafkaMode(); !real {
		t.Skip("runs in make test's real-broker lane (" + testenv.RealKafkaEnv + "=real)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testenv.RealKafka(t, 1)
	if again := testenv.RealKafka(t, 1); again != c {
		t.Fatal("second call started another cluster")
	}
	k := c.Kafka()
	topic := testenv.Name(t, "real")
	testenv.CreateTopic(t, k, topic, 2)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic(topic), kgo.ConsumeTopics(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fs := cl.PollFetches(ctx)
	if err := fs.Err(); err != nil {
		t.Fatal(err)
	}
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "v" {
		t.Fatalf("read back %v, want one record v", recs)
	}
	t.Logf("Apache Kafka %s on %v", c.Version, c.Plain)
}
