package kfakeenv_test

import (
	"testing"

	"github.com/dynakafka/outbox/internal/harness/kafka/kfakeenv"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/twmb/franz-go/pkg/kfake"
)

func TestKafkaIsInProcessAndFresh(t *testing.T) {
	if testenv.KafkaFromEnv(t) != nil {
		t.Skip("the environment names the brokers")
	}
	a, b := kfakeenv.Kafka(t, kfake.NumBrokers(1)), kfakeenv.Kafka(t)
	if a.Cluster == nil || b.Cluster == nil {
		t.Fatal("no in-process cluster")
	}
	if a.Cluster == b.Cluster || a.Brokers[0] == b.Brokers[0] || len(a.Brokers) != 1 {
		t.Errorf("two calls share a cluster, or NumBrokers(1) was ignored: %v and %v", a.Brokers, b.Brokers)
	}
}

func TestRequireKfakeSkipsOnRealBrokers(t *testing.T) {
	var ran bool
	t.Run("real", func(t *testing.T) {
		kfakeenv.RequireKfake(t, &kfakeenv.Cluster{KafkaCluster: &testenv.KafkaCluster{Brokers: []string{"broker:9092"}}})
		ran = true
	})
	if ran {
		t.Error("RequireKfake did not skip without a kfake cluster")
	}
}
