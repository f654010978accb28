package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/store/dynamo"
)

// TestRealEndToEnd is the end-to-end run (TestEndToEnd's writers, relays,
// consumer and checker, at a smaller volume) against a three-node Apache
// Kafka cluster (replication factor 3, min.insync.replicas 2), in both
// modes. When half the messages are committed one node is killed (SIGKILL,
// no controlled shutdown) and stays down until the mode's run is over: with
// acks=all and min.insync.replicas 2 nothing may be lost, duplicated without
// an attributed cause, or reordered. A third-party consumer (kafka-python)
// then reads the topic and checks order per key, headers and placement on
// its own. make test runs it in its real-broker lane (OUTBOX_TEST_KAFKA=real).
func TestRealEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run skipped in -short mode")
	}
	if _, real := testenv.RealKafkaMode(); !real {
		t.Skipf("needs a real Apache Kafka cluster: make test runs it in its real-broker lane (%s=real)", testenv.RealKafkaEnv)
	}
	python := installKafkaPython(t)
	c := testenv.RealKafka(t, 3)
	for _, m := range []struct {
		mode   outbox.Mode
		target int
		opts   []dynamo.TablesOption
	}{
		{outbox.DeleteMode, 1500, nil},
		{outbox.WatermarkMode, 800, []dynamo.TablesOption{dynamo.WithMode(outbox.WatermarkMode), dynamo.Retention(2 * time.Hour)}},
	} {
		t.Run(m.mode.String(), func(t *testing.T) {
			const victim = 1 // node 2 of 3
			stopped := 0
			r, env := endToEnd(t, m.mode, m.target, e2eRun{kafka: c.Kafka(), midway: func() {
				c.StopBroker(victim)
				stopped++
			}}, m.opts...)
			if stopped == 0 && !t.Failed() {
				t.Error("the run ended before a broker was stopped")
			}
			fmt.Printf("kafka-real: version=%s nodes=%d e2e_lost=%d order_violations=%d broker_stopped=%d mode=%s committed=%d duplicates=%d\n",
				c.Version, c.Nodes, r.Lost, r.OrderViolations, stopped, m.mode, r.Committed, r.Duplicates)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := c.StartBroker(ctx, victim); err != nil {
				t.Fatalf("restart node %d: %v", victim+1, err)
			}
			if t.Failed() {
				return
			}
			thirdPartyCheck(ctx, t, python, c.Plain, env.topic, 8, r.DeliveredUnique, r.Deliveries)
		})
	}
}

// thirdPartyCheck runs testdata/thirdparty_consumer.py (kafka-python) over
// topic and fails t unless it reads wantUnique messages in order per key,
// with their headers, on the partitions the Java client would choose, and
// wantRecords records in all: the copies the Go checker read and judged
// (endToEnd reads the topic to its end offsets once the relays' client is
// closed, so both read to the same end).
func thirdPartyCheck(ctx context.Context, t *testing.T, python string, brokers []string, topic string, partitions, wantUnique, wantRecords int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, python, filepath.Join("testdata", "thirdparty_consumer.py"),
		strings.Join(brokers, ","), topic, strconv.Itoa(partitions), strconv.Itoa(wantUnique), outbox.DefaultMessageIDHeader, strconv.Itoa(wantRecords))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	fmt.Print(string(out))
	if err != nil {
		t.Fatalf("third-party consumer: %v\n%s%s", err, out, stderr.String())
	}
}

// installKafkaPython runs scripts/install-kafka-python.sh and returns the
// virtualenv's python; it fails the test with the installer's message.
func installKafkaPython(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join("..", "scripts", "install-kafka-python.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("install kafka-python: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}
