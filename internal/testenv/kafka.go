package testenv

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaCluster is what Kafka returns: the brokers to dial, and Cluster, the
// in-process kfake cluster, or nil when the tests run against real brokers
// (OUTBOX_TEST_KAFKA_BROKERS). (Go allows no type named like the function.)
type KafkaCluster struct {
	Brokers []string
	Cluster *kfake.Cluster
}

// Kafka returns a new in-process kfake cluster built with opts (kfake's
// defaults: 3 brokers, no topics, no auto-creation), closed when the test
// ends; or, when OUTBOX_TEST_KAFKA_BROKERS is set, those brokers, shared by
// all tests, with opts ignored. Tests that rely on opts or on kfake-only
// features call RequireKfake; CreateTopic works on both.
func Kafka(t testing.TB, opts ...kfake.Opt) *KafkaCluster {
	t.Helper()
	if brokers := os.Getenv(KafkaBrokersEnv); brokers != "" {
		if len(opts) > 0 {
			t.Logf("testenv.Kafka: %s is set; %d kfake option(s) ignored", KafkaBrokersEnv, len(opts))
		}
		return &KafkaCluster{Brokers: splitBrokers(brokers)}
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("testenv.Kafka: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &KafkaCluster{Brokers: c.ListenAddrs(), Cluster: c}
}

func splitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// RequireKfake skips the test unless k is an in-process kfake cluster (for
// tests that inject faults with ControlKey or depend on kfake options).
func RequireKfake(t testing.TB, k *KafkaCluster) {
	t.Helper()
	if k.Cluster == nil {
		t.Skipf("needs the in-process kfake cluster (fault injection or kfake options), not real brokers %s (unset %s to run it)",
			strings.Join(k.Brokers, ","), KafkaBrokersEnv)
	}
}

// CreateTopic creates topic with the given number of partitions and the
// broker's default replication factor, on kfake or real brokers alike, and
// fails the test if it cannot.
func CreateTopic(t testing.TB, k *KafkaCluster, topic string, partitions int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatalf("testenv.CreateTopic: client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, -1, nil, topic); err != nil {
		t.Fatalf("testenv.CreateTopic %q: %v", topic, err)
	}
}
