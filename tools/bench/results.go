package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
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
	IdleConns     []drainResult  `json:"idle_connections_experiment"`
	Relay         drainResult    `json:"relay"`
	Naive         drainResult    `json:"naive"`          // one loop: the FAQ's relay
	NaiveParallel drainResult    `json:"naive_parallel"` // one loop per bucket, 8 at once
	Buckets       []drainResult  `json:"per_bucket_overhead"`
	Capacity      capacityResult `json:"capacity"`
	// Steady has, for every profile, the relay's run in each mode and the
	// floor's, at the headline batching window; Sweep the relay's runs at
	// each rate and window of the sweep (make bench runs none).
	Steady    []steadyResult  `json:"steady"`
	Sweep     []steadyResult  `json:"sweep,omitempty"`
	Watermark *watermark      `json:"watermark,omitempty"`
	Txn       *txnResult      `json:"transactional,omitempty"`
	Footprint footprintResult `json:"footprint"`
	// Scale has, per bucket count, the relay and the floor at ten times
	// the steady stage's top rate (scale.go).
	Scale []scaleResult `json:"scale,omitempty"`
	// RunRelay is the long-running relay's commit → Kafka latency on an
	// idle outbox, polling alone and with the writer's notifier.
	RunRelay []runRelayResult `json:"runrelay,omitempty"`
	// Handover has, per publish mode, a busy outbox handed between two
	// containers at every invocation beside one warm container
	// (handover.go).
	Handover []handoverResult `json:"handover,omitempty"`
	// Rebucket is an online BucketCount change under writers (rebucket.go).
	Rebucket *rebucketResult `json:"rebucket,omitempty"`
	// Model is the modelled stage and its check against DynamoDB Local
	// (modelled.go).
	Model *modelResults `json:"model,omitempty"`
}

// watermark compares the relay's watermark mode with its default (issue
// 11, item 3): backlog drain throughput in both modes, run in turns in the
// same rounds (each the median round), and the watermark mode's WCU per
// message by AWS's rules: its writer at one message per transaction plus
// its relay (DeleteModeWCUPerMsg the same for the default mode). Nil in a
// partial run.
type watermark struct {
	RelayMsgsPerS       float64       `json:"relay_msgs_per_s"`
	DeleteModeMsgsPerS  float64       `json:"delete_mode_msgs_per_s"`
	WCUPerMsg           float64       `json:"wcu_per_msg"`
	DeleteModeWCUPerMsg float64       `json:"delete_mode_wcu_per_msg"`
	WriterWCUPerMsg     float64       `json:"writer_wcu_per_msg"`
	Relay               relayCapacity `json:"relay"`
	MessageItemBytes    int           `json:"message_item_bytes"`
	// Retained is how many messages the median round's drain left in the
	// table: all of them (the watermark relay deletes nothing).
	Retained int `json:"retained_items"`
}

// rounds are every round of the three drains run in turns; Raw.DynamoDB,
// Raw.Pipeline and Relay are their medians.
type rounds struct {
	DynamoDB []drainResult `json:"raw_dynamodb"`
	Pipeline []drainResult `json:"raw_pipeline"`
	Relay    []drainResult `json:"relay"`
	// Watermark has the rounds of the relay in watermark mode.
	Watermark []drainResult `json:"relay_watermark,omitempty"`
	// Txn has the rounds of the relay publishing transactionally.
	Txn []drainResult `json:"relay_transactional,omitempty"`
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
	modes := make([]string, len(o.modes))
	for i, m := range o.modes {
		modes[i] = m.Name
	}
	sweep := map[string]any{"rates_msgs_per_s": o.sweep.rates, "batching_windows_s": seconds(o.sweep.windows)}
	if len(o.sweep.rates) == 0 {
		sweep = nil
	}
	return map[string]any{
		"only": o.only, "relay_backlog": o.relayMsgs, "naive_backlog": o.naiveMsgs, "bucket_counts": append([]int{8}, o.bucketCounts...),
		"footprint_backlog": o.footprintMsgs, "steady_profiles": o.steady, "steady_batching_window_s": o.steadyWindow.Seconds(),
		"steady_warmup_s": o.steadyWarmup.Seconds(), "relay_modes": modes, "sweep": sweep,
		"capacity_transactions": o.txns, "rounds": o.rounds, "value_bytes": valueBytes, "relay_concurrency": 0, "raw_loops": rawLoops,
		"batch_size": relayBatch, "delete_concurrency": deleteParallel, "fresh_dynamodb_per_stage": o.endpoint == "",
		"fresh_kfake_per_stage": len(o.brokers) == 0,
	}
}

func seconds(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
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
	kafkaName := "kfake"
	if len(e.brokers) > 0 {
		kafkaName = "given-brokers"
	}
	r.Txn = txnOf(r, kafkaName)
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
	for _, st := range append(slices.Clone(r.Steady), r.Sweep...) {
		snaps = append(snaps, st.HandlerDynamo, st.WriterDynamo)
	}
	r.pairFloors()
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
	r.Goals = append(r.Goals, r.steadyGoals()...)
	r.Goals = append(r.Goals, r.Model.goals()...)
	for _, rr := range r.RunRelay {
		name := "runrelay_p99_ms"
		if rr.Notifier {
			name += "_notifier"
		}
		r.Goals = append(r.Goals, goal{Name: name, Target: fmt.Sprintf("<= PollInterval + 100 ms = %.0f", rr.GoalMs), Value: rr.P99ms,
			Met: rr.P99ms > 0 && rr.P99ms <= rr.GoalMs, Note: fmt.Sprintf("Relay.Run on an idle outbox, commit → consumer, %d messages", rr.Messages)})
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

// pairFloors gives every relay run of the steady stage the floor's p99 of
// the same profile and window, and their ratio.
func (r *results) pairFloors() {
	for i := range r.Steady {
		s := &r.Steady[i]
		if s.Handler != handlerRelay {
			continue
		}
		if f := r.floorOf(*s); f != nil && f.P99ms > 0 {
			s.FloorP99ms, s.VsFloorP99 = f.P99ms, s.P99ms/f.P99ms
		}
	}
}

func (r *results) floorOf(s steadyResult) *steadyResult {
	for i, f := range r.Steady {
		if f.Handler == handlerFloor && f.Profile.Name == s.Profile.Name && f.WindowS == s.WindowS {
			return &r.Steady[i]
		}
	}
	return nil
}

// steadyRelay is the relay's steady run of the named profile in the
// default mode, if there is one.
func (r *results) steadyRelay(name string) *steadyResult {
	for i, s := range r.Steady {
		if s.Handler == handlerRelay && s.Mode == modeDelete.Name && s.Profile.Name == name {
			return &r.Steady[i]
		}
	}
	return nil
}

// steadyGoals are issue 11's goals at 50 msgs/s over 8 buckets.
func (r *results) steadyGoals() []goal {
	s := r.steadyRelay("50")
	if s == nil {
		return nil
	}
	var model float64
	for _, t := range r.Capacity.Total {
		if t.PerTxn == 1 {
			model = t.ModelWCU
		}
	}
	return []goal{
		{Name: "steady_control_writes_per_msg_at_50", Target: "<= 0.3", Value: s.ControlWritesPerMsg, Met: s.ControlWritesPerMsg <= 0.3,
			Note: "the relay's writes to the control table per message"},
		{Name: "steady_wcu_per_msg_at_50", Target: fmt.Sprintf("<= 1.10 x backlog model %.4f = %.4f", model, 1.1*model), Value: s.WCU,
			Met: model > 0 && s.WCU <= 1.1*model, Note: "writer and relay, by AWS's rules; one message per transaction"},
		{Name: "steady_vs_floor_p99_at_50", Target: "<= 1.25", Value: s.VsFloorP99, Met: s.VsFloorP99 > 0 && s.VsFloorP99 <= 1.25,
			Note: "commit -> consumed p99, relay / floor, in the same run"},
	}
}

// line is the one-line summary of the drains.
func (r *results) line() string {
	s := r.Summary
	return fmt.Sprintf("bench: relay_msgs_per_s=%.0f raw_msgs_per_s=%.0f naive_msgs_per_s=%.0f relay_vs_raw=%.2f relay_vs_naive=%.1f",
		s.RelayMsgsPerS, s.RawMsgsPerS, s.NaiveMsgsPerS, s.RelayVsRaw, s.RelayVsNaive)
}

// lines are the run's summary lines: the drains' (unless the run was
// partial), one steady: line per profile (and relay mode), one sweep: line
// per rate, window and mode, and the watermark line once it is measured.
func (r *results) lines() []string {
	var out []string
	if r.Relay.Messages > 0 {
		out = append(out, r.line())
	}
	if r.Txn != nil {
		out = append(out, r.Txn.line())
	}
	for _, s := range r.Steady {
		if s.Handler == handlerRelay {
			out = append(out, s.steadyLine())
			if w := s.Switches; w != nil {
				out = append(out, fmt.Sprintf("container-switch: containers=%d switch_every_s=%g drains=%d resumed=%d acquired=%d waited=%d wait_p50_ms=%.0f wait_max_ms=%.0f wait_total_s=%.1f marks_under_own_release=%d failed_drains=%d drain_p50_ms=%.0f drain_p99_ms=%.0f drain_max_ms=%.0f control_writes_per_msg=%.3f p99_ms=%.1f",
					w.Containers, w.SwitchEveryS, w.Drains, w.Resumed, w.Acquired, w.Waited, w.WaitP50ms, w.WaitMaxms, w.WaitTotalS, w.MarkedHeld, w.FailedDrains,
					w.DrainP50ms, w.DrainP99ms, w.DrainMaxms, s.ControlWritesPerMsg, s.P99ms))
			}
		}
	}
	for _, s := range r.Sweep {
		out = append(out, s.sweepLine())
	}
	for _, h := range r.Handover {
		out = append(out, h.line())
	}
	if r.Rebucket != nil {
		out = append(out, r.Rebucket.line())
	}
	for _, s := range r.Scale {
		out = append(out, s.scaleLine(r.Scale[0]))
	}
	if f := r.Footprint; f.Messages > 0 {
		// Issue 21's goals: init <= 50 ms, peak RSS <= 64 MiB.
		out = append(out, fmt.Sprintf("footprint: messages=%d init_ms=%.1f peak_rss_mib=%.1f rss_after_mib=%.1f drain_msgs_per_s=%.0f invocations=%d",
			f.Messages, f.InitMs, float64(f.PeakRSSBytes)/(1<<20), float64(f.RSSAfterBytes)/(1<<20), float64(f.Messages)/max(f.DrainSeconds, 1e-9), f.Invocations))
		if len(f.InitSteps) > 0 {
			line := fmt.Sprintf("footprint-init: init_ms=%.1f", f.InitMs)
			for _, k := range []string{"aws_config", "store", "publisher", "relay"} {
				line += fmt.Sprintf(" %s_ms=%.1f", k, f.InitSteps[k])
			}
			if f.GoMemLimit != "" {
				line += " gomemlimit=" + f.GoMemLimit
			}
			out = append(out, line)
		}
		if len(f.ColdStarts) > 0 {
			out = append(out, f.coldLine())
		}
	}
	for _, rr := range r.RunRelay {
		out = append(out, rr.line())
	}
	if m := r.Model; m != nil {
		if m.Check != nil && m.Check.Model.Messages > 0 {
			out = append(out, m.Check.line())
		}
		for _, p := range m.Points {
			out = append(out, p.modelLine())
		}
	}
	if w := r.Watermark; w != nil {
		out = append(out, fmt.Sprintf("watermark: relay_msgs_per_s=%.0f delete_mode_msgs_per_s=%.0f wcu_per_msg=%.3f",
			w.RelayMsgsPerS, w.DeleteModeMsgsPerS, w.WCUPerMsg))
	}
	return out
}

// steadyLine is a relay run's steady: line; the window and the mode follow
// when they are not the defaults.
func (s steadyResult) steadyLine() string {
	floor, ratio := "n/a", "n/a"
	if s.FloorP99ms > 0 {
		floor, ratio = fmt.Sprintf("%.1f", s.FloorP99ms), fmt.Sprintf("%.2f", s.VsFloorP99)
	}
	l := fmt.Sprintf("steady: rate=%s control_writes_per_msg=%.3f wcu_per_msg=%.3f p99_ms=%.1f floor_p99_ms=%s steady_vs_floor_p99=%s",
		s.Profile.Name, s.ControlWritesPerMsg, s.WCU, s.P99ms, floor, ratio)
	if s.WindowS != 0 {
		l += fmt.Sprintf(" window_s=%g", s.WindowS)
	}
	if s.Mode != modeDelete.Name {
		l += " mode=" + s.Mode
	}
	return l
}

func (s steadyResult) sweepLine() string {
	return fmt.Sprintf("sweep: rate=%s window_s=%g mode=%s wcu_per_msg=%.3f rcu_per_msg=%.3f usd_per_million=%.2f invocations_per_msg=%.3f lambda_usd_per_million=%.2f total_usd_per_million=%.2f p50_ms=%.1f p99_ms=%.1f",
		s.Profile.Name, s.WindowS, s.Mode, s.WCU, s.RCU, s.USDPerMillion, s.InvocationsPerMsg, s.LambdaUSDPerMillion, s.TotalUSDPerMillion, s.P50ms, s.P99ms)
}

// write stores benchmarks.json, benchmarks.md and benchmarks.png in dir.
func (r *results) write(dir string) error {
	if err := r.writeJSON(filepath.Join(dir, "benchmarks.json")); err != nil {
		return err
	}
	if err := writeKeepingTrailer(filepath.Join(dir, "benchmarks.md"), r.markdown()); err != nil {
		return err
	}
	if err := r.chart(filepath.Join(dir, "benchmarks.png")); err != nil {
		return err
	}
	return r.writeCapacity(dir)
}

// keptByHand opens the part of benchmarks.md that a run does not write: the
// partial runs and back-to-back pairs added by hand since, which a run must
// not erase.
const keptByHand = "<!-- bench:kept-by-hand (make bench keeps everything below this line as it is) -->"

// writeKeepingTrailer writes page to path, followed by the file's part from
// keptByHand on, if it has one.
func writeKeepingTrailer(path, page string) error {
	if old, err := os.ReadFile(path); err == nil {
		if i := strings.Index(string(old), keptByHand); i >= 0 {
			page = strings.TrimRight(page, "\n") + "\n\n" + string(old[i:])
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.WriteFile(path, []byte(page), 0o644)
}

// writeJSON stores the results as JSON at path, making its directory.
func (r *results) writeJSON(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// coldLine summarises the footprint stage's measured cold starts, on an
// empty outbox of the drained one's schema (init_on: in a DynamoDB Local
// of its own, or beside the filled one): each init with its store step
// and the bench's own probe of the same round trips just before, then the
// min and median of the init, of the store step and of the probe over
// every start; then the same probe on the filled tables and the init of
// the start that drains them (DynamoDB Local's DescribeTable slows with
// the items its database holds, which DynamoDB's does not).
func (f footprintResult) coldLine() string {
	var inits, stores, probes, gets, describes []float64
	each := ""
	for i, c := range f.ColdStarts {
		inits, stores, probes = append(inits, c.InitMs), append(stores, c.InitSteps["store"]), append(probes, c.Probe.Ms)
		gets, describes = append(gets, c.Probe.GetItemMs), append(describes, c.Probe.DescribeTableMs)
		if i > 0 {
			each += ","
		}
		each += fmt.Sprintf("%.1f/%.1f/%.1f", c.InitMs, c.InitSteps["store"], c.Probe.Ms)
	}
	return fmt.Sprintf("footprint-cold: starts=%d init_on=%s init_ms_min=%.1f init_ms_median=%.1f store_ms_min=%.1f store_ms_median=%.1f probe_ms_min=%.1f probe_ms_median=%.1f probe_get_item_ms_median=%.1f probe_describe_table_ms_median=%.1f filled_probe_get_item_ms=%.1f filled_probe_describe_table_ms=%.1f filled_init_ms=%.1f each_init/store/probe_ms=%s",
		len(inits), cmp.Or(f.InitOn, "filled-tables"), slices.Min(inits), medianOf(inits), slices.Min(stores), medianOf(stores), slices.Min(probes), medianOf(probes), medianOf(gets), medianOf(describes),
		f.ProbeFilled.GetItemMs, f.ProbeFilled.DescribeTableMs, f.DrainStart.InitMs, each)
}

func medianOf(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
