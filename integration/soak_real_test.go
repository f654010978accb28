package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/soak"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// realCluster adapts testenv's cluster to soak.RealCluster.
type realCluster struct{ c *testenv.RealCluster }

func (r realCluster) Brokers() []string                            { return r.c.Plain }
func (r realCluster) Nodes() int                                   { return r.c.Nodes }
func (r realCluster) StopBroker(i int)                             { r.c.StopBroker(i) }
func (r realCluster) StartBroker(ctx context.Context, i int) error { return r.c.StartBroker(ctx, i) }

// TestRealKafkaSoak is the short soak of make test's real-broker lane: the
// transactional mode on a three-node Apache Kafka cluster (replication
// factor 3, min.insync.replicas 2), whose faults are real ones — a node
// killed (SIGKILL) and started again, one at a time, every few seconds;
// holders stalled past their lease so it is taken over (and their producer
// fenced by the new holder's); the relay crashed at every crash point; the
// DynamoDB faults and stream chaos of the kfake soak. The same checker and
// transactional oracle: lost=0 phantom=0 stale_visible=0 interleavings=0,
// duplicates by cause.
func TestRealKafkaSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak skipped in -short mode")
	}
	if _, real := testenv.RealKafkaMode(); !real {
		t.Skipf("needs a real Apache Kafka cluster: make test runs it in its real-broker lane (%s=real)", testenv.RealKafkaEnv)
	}
	c := testenv.RealKafka(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	res, err := soak.Run(ctx, soak.Config{Messages: 200, FaultRate: 1, StallChance: 0.2, Mode: outbox.DeleteMode, Txn: true, Kafka: realCluster{c}, Progress: soakLog{t}})
	fmt.Printf("kafka-real: version=%s nodes=%d %s\n", c.Version, c.Nodes, strings.Replace(res.Line(), "soak: ", "soak ", 1))
	t.Logf("faults by kind: %s", res.Kinds())
	t.Logf("read model: %s", res.ReadModel)
	t.Logf("rolled back %d, elapsed %v", res.RolledBack, res.Elapsed.Round(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range res.UnexplainedIDs {
		t.Logf("unexplained duplicate %s:", id)
		for _, line := range soak.Trace(id) {
			t.Logf("  %s %s", id[len(id)-6:], line)
		}
	}
	if !res.OK() {
		t.Fatalf("broken promises: %s; %s", res.Line(), res.Details())
	}
	if res.ByKind["kafka:broker-stopped"] == 0 || res.ByKind["relay:stall"] == 0 {
		t.Fatalf("the faults stopped no node (%d) or stalled no holder (%d)", res.ByKind["kafka:broker-stopped"], res.ByKind["relay:stall"])
	}
}

type soakLog struct{ t *testing.T }

func (w soakLog) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
