package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KafkaCluster is what Kafka returns: the brokers to dial, and Cluster, the
// in-process kfake cluster, or nil when the tests run against real brokers
// (OUTBOX_TEST_KAFKA_BROKERS). (Go allows no type named like the function.)
type KafkaCluster struct {
	Brokers []string
	Cluster *kfake.Cluster
	// Real is the Apache Kafka cluster RealKafka started, if these are its
	// brokers (OUTBOX_TEST_KAFKA=real).
	Real *RealCluster
}

// Kafka returns a new in-process kfake cluster built with opts (kfake's
// defaults: 3 brokers, no topics, no auto-creation), closed when the test
// ends; or, when OUTBOX_TEST_KAFKA_BROKERS is set, those brokers, shared by
// all tests, with opts ignored; or, when OUTBOX_TEST_KAFKA=real, the test
// binary's one-node Apache Kafka cluster (RealKafka), opts ignored. Tests
// that rely on opts or on kfake-only features call RequireKfake;
// CreateTopic works on all three.
func Kafka(t testing.TB, opts ...kfake.Opt) *KafkaCluster {
	t.Helper()
	if brokers := os.Getenv(KafkaBrokersEnv); brokers != "" {
		if len(opts) > 0 {
			t.Logf("testenv.Kafka: %s is set; %d kfake option(s) ignored", KafkaBrokersEnv, len(opts))
		}
		return &KafkaCluster{Brokers: splitBrokers(brokers)}
	}
	switch v := os.Getenv(RealKafkaEnv); v {
	case "":
	case "real":
		if len(opts) > 0 {
			t.Logf("testenv.Kafka: %s=real; %d kfake option(s) ignored", RealKafkaEnv, len(opts))
		}
		return RealKafka(t, 1).Kafka()
	default:
		t.Fatalf("testenv.Kafka: %s=%q; use \"real\" (a real Apache Kafka broker) or leave it unset (kfake)", RealKafkaEnv, v)
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("testenv.Kafka: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &KafkaCluster{Brokers: c.ListenAddrs(), Cluster: c}
}

// RealKafkaMode reports the value of OUTBOX_TEST_KAFKA and whether it asks
// for the real broker ("real"). Tests that only mean something against a real
// broker (SASL, TLS, ACLs, a stopped node) skip, saying why, unless it does:
// make test runs them in its real-broker lane.
func RealKafkaMode() (string, bool) {
	v := os.Getenv(RealKafkaEnv)
	return v, v == "real"
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
		t.Skipf("needs the in-process kfake cluster (fault injection or kfake options), not real brokers %s (unset %s and %s to run it)",
			strings.Join(k.Brokers, ","), KafkaBrokersEnv, RealKafkaEnv)
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
	WaitTopic(t, k, topic, partitions)
}

// WaitTopic waits until every broker's metadata lists topic with partitions
// partitions, each with a leader. A real broker learns of a new topic from
// the controller's metadata log after CreateTopics answers; a client that
// asks another broker (or the same one a moment early) would be told the
// topic does not exist.
func WaitTopic(t testing.TB, k *KafkaCluster, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range k.Brokers {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b))
		if err != nil {
			t.Fatalf("testenv.WaitTopic: client: %v", err)
		}
		last := "no answer"
		for {
			// A metadata request to this seed broker only.
			req := kmsg.NewPtrMetadataRequest()
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(topic)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl)
			if err == nil && len(resp.Topics) == 1 {
				rt := resp.Topics[0]
				ready := rt.ErrorCode == 0 && len(rt.Partitions) == int(partitions)
				for _, p := range rt.Partitions {
					ready = ready && p.ErrorCode == 0 && p.Leader >= 0
				}
				if ready {
					break
				}
				last = fmt.Sprintf("error code %d, %d partitions", rt.ErrorCode, len(rt.Partitions))
			} else if err != nil {
				last = err.Error()
			}
			select {
			case <-ctx.Done():
				cl.Close()
				t.Fatalf("testenv.WaitTopic: broker %s does not list topic %q with %d led partitions (%s)", b, topic, partitions, last)
			case <-time.After(50 * time.Millisecond):
			}
		}
		cl.Close()
	}
}
