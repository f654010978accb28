package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dynakafka/outbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestSmoke runs every stage of the benchmark with tiny volumes on the test
// binary's DynamoDB and Kafka. It checks that each stage ran, moved every
// message it was given and produced positive figures; it never checks how
// fast anything was.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole pipeline, builds the bootstrap and runs it under the Lambda RIE")
	}
	o := smokeOptions()
	// Build the bootstrap before anything is timed or bounded: on a fresh,
	// busy machine compiling it can take minutes, and that says nothing
	// about the bench. go test's -timeout bounds the whole test.
	root, err := libraryRoot()
	if err != nil {
		t.Fatal(err)
	}
	o.prebuilt.sizes, o.prebuilt.host, err = buildBootstraps(context.Background(), root, t.TempDir(), o.arches)
	if err != nil {
		t.Fatal(err)
	}
	d := testenv.DynamoDB(t)
	k := testenv.Kafka(t)
	o.endpoint, o.brokers, o.out = d.Endpoint, k.Brokers, t.TempDir()
	o.progress = t.Logf
	res, err := run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}

	moved := []struct {
		stage     string
		got, want int
	}{
		{"raw DynamoDB", res.Raw.DynamoDB.Messages, o.relayMsgs},
		{"raw Kafka", res.Raw.Kafka.Messages, o.relayMsgs},
		{"raw pipeline", res.Raw.Pipeline.Messages, o.relayMsgs},
		{"relay", res.Relay.Messages, o.relayMsgs},
		{"relay: records in the topic", int(res.Relay.Produced), o.relayMsgs},
		{"naive", res.Naive.Messages, o.naiveMsgs},
		{"naive: records in the topic", int(res.Naive.Produced), o.naiveMsgs},
		{"naive, 8 loops", res.NaiveParallel.Messages, o.naiveMsgs},
		{"per-bucket stages", len(res.Buckets), 1 + len(o.bucketCounts)},
		{"capacity: transaction sizes", len(res.Capacity.Writer), 3},
		{"latency: consumed of committed", res.Latency.Delivered, res.Latency.Committed},
		{"footprint: drained", res.Footprint.Messages, o.footprintMsgs},
		{"footprint: binaries", len(res.Footprint.Binaries), len(o.arches)},
	}
	for _, m := range moved {
		t.Run("moved/"+m.stage, func(t *testing.T) {
			if m.got != m.want {
				t.Errorf("%s: %d, want %d", m.stage, m.got, m.want)
			}
		})
	}
	for _, d := range append([]drainResult{res.Raw.DynamoDB, res.Raw.Pipeline, res.Relay, res.Naive, res.NaiveParallel}, res.Buckets...) {
		if d.Remaining != 0 {
			t.Errorf("%s left %d items in the table", d.Name, d.Remaining)
		}
	}

	positive := []struct {
		name string
		v    float64
	}{
		{"raw DynamoDB msgs/s", res.Raw.DynamoDB.MsgsPerS},
		{"raw Kafka msgs/s", res.Raw.Kafka.MsgsPerS},
		{"raw pipeline msgs/s", res.Raw.Pipeline.MsgsPerS},
		{"relay msgs/s", res.Summary.RelayMsgsPerS},
		{"naive msgs/s", res.Summary.NaiveMsgsPerS},
		{"naive 8 loops msgs/s", res.NaiveParallel.MsgsPerS},
		{"relay vs raw", res.Summary.RelayVsRaw},
		{"relay vs naive", res.Summary.RelayVsNaive},
		{"relay round trips per message", res.Summary.RoundTripsPerMsg},
		{"message item bytes", float64(res.Capacity.MessageItemBytes)},
		{"lease item bytes", float64(res.Capacity.LeaseItemBytes)},
		{"fence WCU", res.Capacity.FenceAWSRuleWCU},
		{"relay WCU per message", res.Capacity.Relay.AWSRuleWCU},
		{"relay RCU per message", res.Capacity.Relay.AWSRuleRCU},
		{"relay model WCU per message", res.Capacity.Relay.ModelWCU},
		{"latency p50", res.Latency.P50ms},
		{"latency p99", res.Latency.P99ms},
		{"init", res.Footprint.InitMs},
		{"peak RSS", float64(res.Footprint.PeakRSSBytes)},
		{"binary size", float64(res.Footprint.Binaries[0].Bytes)},
	}
	for _, w := range res.Capacity.Writer {
		positive = append(positive, struct {
			name string
			v    float64
		}{"writer WCU per message", w.AWSRuleWCU})
	}
	for _, b := range res.Buckets {
		positive = append(positive, struct {
			name string
			v    float64
		}{"per-bucket msgs/s", b.MsgsPerS})
	}
	for _, p := range positive {
		t.Run("positive/"+p.name, func(t *testing.T) {
			if !(p.v > 0) {
				t.Errorf("%s = %v, want a positive figure", p.name, p.v)
			}
		})
	}

	if line := res.line(); !strings.HasPrefix(line, "bench: relay_msgs_per_s=") || !strings.Contains(line, "relay_vs_naive=") {
		t.Errorf("summary line %q", line)
	}
	for _, f := range []string{"benchmarks.json", "benchmarks.md", "benchmarks.png"} {
		if fi, err := os.Stat(filepath.Join(o.out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}
