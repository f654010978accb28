// Package kfakeenv gives the tests that live beside the library's module an
// in-process kfake cluster, for kfake's options and its fault injection
// (ControlKey, Fault). The library's own tests use internal/harness/testenv.Kafka,
// which runs kfake in a process of its own: the library's go.mod may not
// require kfake, or every service that imports the library would get it in
// its module graph (TestConsumerModuleGraphIsLean). This package's module
// also holds the publisher's tests that need kfake in process or kadm
// (brokertest) and the kfake server testenv runs (server).
package kfakeenv

import (
	"strings"
	"testing"

	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Cluster is what Kafka returns: the brokers, and Cluster, the in-process
// kfake cluster, or nil when the tests run against real brokers
// (OUTBOX_TEST_KAFKA_BROKERS or OUTBOX_TEST_KAFKA=real).
type Cluster struct {
	*testenv.KafkaCluster
	Cluster *kfake.Cluster
}

// Kafka returns a new in-process kfake cluster built with opts (kfake's
// defaults: 3 brokers, no topics, no auto-creation), closed when the test
// ends; or the brokers testenv.KafkaFromEnv names, with opts ignored. Tests
// that rely on opts or on kfake-only features call RequireKfake.
func Kafka(t testing.TB, opts ...kfake.Opt) *Cluster {
	t.Helper()
	if k := testenv.KafkaFromEnv(t); k != nil {
		if len(opts) > 0 {
			t.Logf("kfakeenv.Kafka: real brokers %s; %d kfake option(s) ignored", strings.Join(k.Brokers, ","), len(opts))
		}
		return &Cluster{KafkaCluster: k}
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kfakeenv.Kafka: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &Cluster{KafkaCluster: &testenv.KafkaCluster{Brokers: c.ListenAddrs()}, Cluster: c}
}

// RequireKfake skips the test unless k is an in-process kfake cluster (for
// tests that inject faults with ControlKey or depend on kfake options).
func RequireKfake(t testing.TB, k *Cluster) {
	t.Helper()
	if k.Cluster == nil {
		t.Skipf("needs the in-process kfake cluster (fault injection or kfake options), not real brokers %s (unset %s and %s to run it)",
			strings.Join(k.Brokers, ","), testenv.KafkaBrokersEnv, testenv.RealKafkaEnv)
	}
}
