package testenv

import (
	"context"
	"sync"
	"testing"

	"github.com/dynakafka/outbox/local/kafkalocal"
)

// RealKafkaEnv, set to "real", routes Kafka to a real Apache Kafka broker
// started by RealKafka (one node) instead of kfake: make test's real-broker
// lane reruns the Kafka suites that way.
const RealKafkaEnv = "OUTBOX_TEST_KAFKA"

// RealCluster is a real Apache Kafka KRaft cluster on loopback
// (local/kafkalocal.Cluster: its listeners, CA, Libs and Java, and
// AddSCRAMUser, StopBroker and StartBroker), started by RealKafka once per
// test binary and node count and stopped by Main.
type RealCluster struct{ *kafkalocal.Cluster }

var (
	realMu       sync.Mutex
	realClusters = map[int]*RealCluster{}
	realErrs     = map[int]error{}
)

// RealKafka returns the test binary's real Apache Kafka cluster of nodes
// nodes (1 or 3), starting it on the first call; Main stops it. A three-node
// cluster replicates everything three times with min.insync.replicas 2, so
// it survives one stopped node. It fails the test, with the installer's or
// the broker's message, if the broker cannot be installed or started: a
// suite that needs it must not pass without it.
func RealKafka(t testing.TB, nodes int) *RealCluster {
	t.Helper()
	if nodes != 1 && nodes != 3 {
		t.Fatalf("testenv.RealKafka: %d nodes; use 1 (the fast path) or 3 (replication 3, min.insync.replicas 2)", nodes)
	}
	if !mainEntered.Load() {
		t.Fatal("testenv.RealKafka: this test binary's TestMain does not call testenv.Main, " +
			"which stops the brokers when the tests end; add\n\n\tfunc TestMain(m *testing.M) { testenv.Main(m) }")
	}
	realMu.Lock()
	defer realMu.Unlock()
	if c := realClusters[nodes]; c != nil {
		return c
	}
	if err := realErrs[nodes]; err != nil {
		t.Fatalf("testenv.RealKafka: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := kafkalocal.Start(ctx, nodes)
	if err != nil {
		realErrs[nodes] = err
		t.Fatalf("testenv.RealKafka: %v", err)
	}
	realClusters[nodes] = &RealCluster{c}
	return realClusters[nodes]
}

// stopRealKafka stops every cluster RealKafka started (called by Main).
func stopRealKafka() {
	realMu.Lock()
	defer realMu.Unlock()
	for n, c := range realClusters {
		c.Stop()
		delete(realClusters, n)
	}
}

// Kafka returns the cluster's PLAINTEXT listeners as a KafkaCluster.
func (c *RealCluster) Kafka() *KafkaCluster {
	return &KafkaCluster{Brokers: append([]string(nil), c.Plain...), Real: c}
}
