package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KafkaCluster is what Kafka returns: the brokers to dial; and Real, the
// Apache Kafka cluster RealKafka started, if these are its brokers
// (OUTBOX_TEST_KAFKA=real). (Go allows no type named like the function.)
type KafkaCluster struct {
	Brokers []string
	// Real is the Apache Kafka cluster RealKafka started, if these are its
	// brokers (OUTBOX_TEST_KAFKA=real).
	Real *RealCluster
}

// Kafka returns a new kfake cluster of three brokers, no topics and no
// auto-creation, in a process of its own (KfakeServer), stopped when the
// test ends; or, when OUTBOX_TEST_KAFKA_BROKERS is set, those brokers,
// shared by all tests; or, when OUTBOX_TEST_KAFKA=real, the test binary's
// one-node Apache Kafka cluster (RealKafka). The library's module may not
// require kfake (a service that imports the library would get it in its
// module graph), so tests that need kfake in process, for its options or
// for fault injection, live in modules beside the library and call
// internal/harness/kafka/kfakeenv.Kafka. CreateTopic works on all of them.
func Kafka(t testing.TB) *KafkaCluster {
	t.Helper()
	if k := KafkaFromEnv(t); k != nil {
		return k
	}
	return &KafkaCluster{Brokers: startKfakeServer(t)}
}

// KafkaFromEnv returns the brokers OUTBOX_TEST_KAFKA_BROKERS or
// OUTBOX_TEST_KAFKA=real ask for, or nil when neither is set (kfake).
func KafkaFromEnv(t testing.TB) *KafkaCluster {
	t.Helper()
	if brokers := os.Getenv(KafkaBrokersEnv); brokers != "" {
		return &KafkaCluster{Brokers: splitBrokers(brokers)}
	}
	switch v := os.Getenv(RealKafkaEnv); v {
	case "":
		return nil
	case "real":
		return RealKafka(t, 1).Kafka()
	default:
		t.Fatalf("testenv.Kafka: %s=%q; use \"real\" (a real Apache Kafka broker) or leave it unset (kfake)", RealKafkaEnv, v)
		return nil
	}
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

// CreateTopic creates topic with the given number of partitions and the
// broker's default replication factor, on kfake or real brokers alike, and
// fails the test if it cannot.
func CreateTopic(t testing.TB, k *KafkaCluster, topic string, partitions int32) {
	t.Helper()
	CreateTopicConfigs(t, k, topic, partitions, nil)
}

// CreateTopicConfigs is CreateTopic with topic configs (nil for the
// broker's defaults). It waits until every broker lists the topic.
func CreateTopicConfigs(t testing.TB, k *KafkaCluster, topic string, partitions int32, configs map[string]string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatalf("testenv.CreateTopic: client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, -1
	for name, v := range configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = name, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil && len(resp.Topics) != 1 {
		err = fmt.Errorf("%d topics in the answer", len(resp.Topics))
	}
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
		if msg := resp.Topics[0].ErrorMessage; err != nil && msg != nil {
			err = fmt.Errorf("%w: %s", err, *msg)
		}
	}
	if err != nil {
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

// RequireKfake skips the test unless k is a kfake cluster of Kafka's (for
// tests whose timing or settings only kfake gives; those that need kfake in
// process, for fault injection or kfake options, use internal/harness/kafka/kfakeenv).
func RequireKfake(t testing.TB, k *KafkaCluster) {
	t.Helper()
	if k.Real != nil || os.Getenv(KafkaBrokersEnv) != "" {
		t.Skipf("needs kfake, not real brokers %s (unset %s and %s to run it)",
			strings.Join(k.Brokers, ","), KafkaBrokersEnv, RealKafkaEnv)
	}
}

// AlterTopicConfig sets the topic config name to value
// (IncrementalAlterConfigs) and fails the test if the broker refuses.
func AlterTopicConfig(t testing.TB, k *KafkaCluster, topic, name, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatalf("testenv.AlterTopicConfig: client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op, c.Value = name, kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(value)
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil && len(resp.Resources) != 1 {
		err = fmt.Errorf("%d resources in the answer", len(resp.Resources))
	}
	if err == nil {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("testenv.AlterTopicConfig %s %s=%s: %v", topic, name, value, err)
	}
}

// DeleteTopic deletes topic and waits until no broker lists it any more, on
// kfake or real brokers alike, and fails the test if it cannot.
func DeleteTopic(t testing.TB, k *KafkaCluster, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatalf("testenv.DeleteTopic: client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 30_000
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.TopicNames = append(req.TopicNames, topic) // versions before 6
	resp, err := req.RequestWith(ctx, cl)
	if err == nil && len(resp.Topics) != 1 {
		err = fmt.Errorf("%d topics in the answer", len(resp.Topics))
	}
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("testenv.DeleteTopic %q: %v", topic, err)
	}
	for _, b := range k.Brokers {
		bc, err := kgo.NewClient(kgo.SeedBrokers(b))
		if err != nil {
			t.Fatalf("testenv.DeleteTopic: client: %v", err)
		}
		for {
			mreq := kmsg.NewPtrMetadataRequest()
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = kmsg.StringPtr(topic)
			mreq.Topics = append(mreq.Topics, mt)
			mresp, err := mreq.RequestWith(ctx, bc)
			if err == nil && (len(mresp.Topics) == 0 || mresp.Topics[0].ErrorCode == kerr.UnknownTopicOrPartition.Code) {
				break
			}
			select {
			case <-ctx.Done():
				bc.Close()
				t.Fatalf("testenv.DeleteTopic: broker %s still lists topic %q", b, topic)
			case <-time.After(50 * time.Millisecond):
			}
		}
		bc.Close()
	}
}
