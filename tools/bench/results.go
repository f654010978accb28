package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
)

type results struct {
	Generated string         `json:"generated"`
	Smoke     bool           `json:"smoke"`
	Machine   machine        `json:"machine"`
	Settings  map[string]any `json:"settings"`
	Summary   summary        `json:"summary"`
	Goals     []goal         `json:"goals"`
	Raw       rawResults     `json:"raw"`
	Rounds    rounds         `json:"rounds"`
	// IdleConns are raw DynamoDB and the relay with 64 idle connections
	// per host kept by the measured client (one round each).
	IdleConns     []drainResult   `json:"idle_connections_experiment"`
	Relay         drainResult     `json:"relay"`
	Naive         drainResult     `json:"naive"`          // one loop: the FAQ's relay
	NaiveParallel drainResult     `json:"naive_parallel"` // one loop per bucket, 8 at once
	Buckets       []drainResult   `json:"per_bucket_overhead"`
	Capacity      capacityResult  `json:"capacity"`
	Latency       latencyResult   `json:"latency"`
	Footprint     footprintResult `json:"footprint"`
}

// rounds are every round of the three drains run in turns; Raw.DynamoDB,
// Raw.Pipeline and Relay are their medians.
type rounds struct {
	DynamoDB []drainResult `json:"raw_dynamodb"`
	Pipeline []drainResult `json:"raw_pipeline"`
	Relay    []drainResult `json:"relay"`
	// Buckets has the rounds of the relay with each of the per-bucket
	// overhead stages' bucket counts (32 and 64).
	Buckets [][]drainResult `json:"relay_by_buckets"`
}

type rawResults struct {
	DynamoDB drainResult `json:"dynamodb"`
	Kafka    drainResult `json:"kafka"`
	MsgsPerS float64     `json:"msgs_per_s"` // min of the two
	// Pipeline is both jobs done by hand, one after the other per bucket:
	// what is left of the raw limit when DynamoDB and Kafka share the CPU.
	Pipeline drainResult `json:"pipeline"`
}

type summary struct {
	RelayMsgsPerS   float64 `json:"relay_msgs_per_s"`
	RawMsgsPerS     float64 `json:"raw_msgs_per_s"`
	NaiveMsgsPerS   float64 `json:"naive_msgs_per_s"`
	RelayVsRaw      float64 `json:"relay_vs_raw"`
	RelayVsNaive    float64 `json:"relay_vs_naive"`
	RelayVsPipeline float64 `json:"relay_vs_raw_pipeline"`
	// RelayVsNaiveParallel compares with the naive relay run at the
	// relay's concurrency (8 loops).
	RelayVsNaiveParallel float64 `json:"relay_vs_naive_parallel"`
	RoundTripsPerMsg     float64 `json:"dynamodb_round_trips_per_relayed_msg"`
}

type goal struct {
	Name   string  `json:"name"`
	Target string  `json:"target"`
	Value  float64 `json:"value"`
	Met    bool    `json:"met"`
	Note   string  `json:"note,omitempty"`
}

type machine struct {
	CPU            string `json:"cpu"`
	Cores          int    `json:"cores"`
	OS             string `json:"os_arch"`
	Go             string `json:"go"`
	DynamoDBLocal  string `json:"dynamodb_local"`
	Instances      int    `json:"dynamodb_local_instances"`
	Kfake          string `json:"kfake"`
	FranzGo        string `json:"franz_go"`
	AWSSDKDynamoDB string `json:"aws_sdk_dynamodb"`
	Kafka          string `json:"kafka"`
	LoadStart      string `json:"loadavg_start"`
	LoadEnd        string `json:"loadavg_end"`
}

func machineInfo() machine {
	m := machine{Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version(), LoadStart: loadavg()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/twmb/franz-go/pkg/kfake":
				m.Kfake = d.Version
			case "github.com/twmb/franz-go":
				m.FranzGo = d.Version
			case "github.com/aws/aws-sdk-go-v2/service/dynamodb":
				m.AWSSDKDynamoDB = d.Version
			}
		}
	}
	return m
}

// loadavg is /proc/loadavg's 1, 5 and 15 minute load averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func settingsOf(o options) map[string]any {
	return map[string]any{
		"relay_backlog": o.relayMsgs, "naive_backlog": o.naiveMsgs, "bucket_counts": append([]int{8}, o.bucketCounts...),
		"footprint_backlog": o.footprintMsgs, "latency_offered_per_s": o.latencyRate, "latency_seconds": o.latencyFor.Seconds(),
		"capacity_transactions": o.txns, "rounds": o.rounds, "value_bytes": valueBytes, "relay_concurrency": relayConcurrency,
		"batch_size": relayBatch, "delete_concurrency": deleteParallel, "fresh_dynamodb_per_stage": o.endpoint == "",
		"fresh_kfake_per_stage": len(o.brokers) == 0,
	}
}

// finish computes the summary, the capacity totals and the goals.
func (r *results) finish(e *env) {
	r.Machine.LoadEnd = loadavg()
	r.Machine.DynamoDBLocal, r.Machine.Instances = e.dynamoVersion, e.instances
	if e.endpoint != "" {
		r.Machine.DynamoDBLocal = "given endpoint " + e.endpoint
	}
	r.Machine.Kafka = "kfake " + r.Machine.Kfake + ", in this process"
	if len(e.brokers) > 0 {
		r.Machine.Kafka = "given brokers " + strings.Join(e.brokers, ",")
	}
	r.Raw.MsgsPerS = min(r.Raw.DynamoDB.MsgsPerS, r.Raw.Kafka.MsgsPerS)
	s := &r.Summary
	s.RelayMsgsPerS, s.RawMsgsPerS, s.NaiveMsgsPerS = r.Relay.MsgsPerS, r.Raw.MsgsPerS, r.Naive.MsgsPerS
	if s.RawMsgsPerS > 0 {
		s.RelayVsRaw = s.RelayMsgsPerS / s.RawMsgsPerS
	}
	if s.NaiveMsgsPerS > 0 {
		s.RelayVsNaive = s.RelayMsgsPerS / s.NaiveMsgsPerS
	}
	if r.NaiveParallel.MsgsPerS > 0 {
		s.RelayVsNaiveParallel = s.RelayMsgsPerS / r.NaiveParallel.MsgsPerS
	}
	if r.Raw.Pipeline.MsgsPerS > 0 {
		s.RelayVsPipeline = s.RelayMsgsPerS / r.Raw.Pipeline.MsgsPerS
	}
	s.RoundTripsPerMsg = r.Relay.CallsPerM

	c := &r.Capacity
	c.Relay = relayCapacityOf(r.Relay, c.MessageItemBytes)
	c.Naive = relayCapacityOf(r.Naive, c.MessageItemBytes)
	c.Total = totals(c.Writer, c.Relay, c.MessageItemBytes)
	snaps := []snapshot{r.Relay.Dynamo, r.Naive.Dynamo, r.NaiveParallel.Dynamo, r.Raw.DynamoDB.Dynamo, r.Raw.Pipeline.Dynamo}
	for _, w := range c.Writer {
		snaps = append(snaps, w.Dynamo)
	}
	c.LocalVsAWS = localDifferences(snaps...)
	c.Prices = map[string]any{"region": "us-east-1", "table_class": "standard", "usd_per_million_wru": pricePerMillionWRU,
		"usd_per_million_rru": pricePerMillionRRU, "price_as_of": priceDate, "assumption": "check the current DynamoDB price list"}

	r.Goals = []goal{
		{Name: "relay_vs_raw", Target: ">= 0.85", Value: s.RelayVsRaw, Met: s.RelayVsRaw >= 0.85},
		{Name: "relay_vs_naive", Target: ">= 10 (20 excellent)", Value: s.RelayVsNaive, Met: s.RelayVsNaive >= 10,
			Note: "the FAQ's relay as written: one loop"},
		{Name: "relay_vs_naive_parallel", Target: ">= 10 (not required; same concurrency as the relay)", Value: s.RelayVsNaiveParallel,
			Met: s.RelayVsNaiveParallel >= 10, Note: "the naive loop run 8 at once, one per bucket"},
		{Name: "dynamodb_round_trips_per_relayed_msg", Target: "<= 0.05 at BatchSize 500", Value: s.RoundTripsPerMsg, Met: s.RoundTripsPerMsg > 0 && s.RoundTripsPerMsg <= 0.05},
	}
	for _, t := range c.Total {
		excess := t.AWSRuleWCU - t.MinWCU
		r.Goals = append(r.Goals, goal{
			Name: fmt.Sprintf("wcu_per_msg_at_%d_per_txn", t.PerTxn), Target: fmt.Sprintf("= model minimum %.4f", t.MinWCU),
			Value: t.AWSRuleWCU, Met: excess < 0.005,
			Note: fmt.Sprintf("%+.4f WCU per message above the minimum: lease acquire and release per drain of %d messages per bucket",
				excess, r.Relay.Messages/max(1, r.Relay.Backlog.Buckets)),
		})
	}
}

// line is the one-line summary.
func (r *results) line() string {
	s := r.Summary
	return fmt.Sprintf("bench: relay_msgs_per_s=%.0f raw_msgs_per_s=%.0f naive_msgs_per_s=%.0f relay_vs_raw=%.2f relay_vs_naive=%.1f",
		s.RelayMsgsPerS, s.RawMsgsPerS, s.NaiveMsgsPerS, s.RelayVsRaw, s.RelayVsNaive)
}

// write stores benchmarks.json, benchmarks.md and benchmarks.png in dir.
func (r *results) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "benchmarks.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "benchmarks.md"), []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	return r.chart(filepath.Join(dir, "benchmarks.png"))
}
