package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

func TestMain(m *testing.M) {
	if childMain() { // the modelled stage's handler process: this binary, started again
		return
	}
	testenv.Main(m)
}

// testProgress logs the bench's progress with the seconds since it began.
func testProgress(t *testing.T) func(format string, args ...any) {
	began := time.Now()
	return func(format string, args ...any) {
		t.Logf("%5.1fs "+format, append([]any{time.Since(began).Seconds()}, args...)...)
	}
}

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
	o.progress = testProgress(t)
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
		{"relay, watermark mode", median(res.Rounds.Watermark).Messages, o.relayMsgs},
		{"relay, watermark mode: records in the topic", int(median(res.Rounds.Watermark).Produced), o.relayMsgs},
		{"relay, watermark mode: messages kept in the table", median(res.Rounds.Watermark).Remaining, o.relayMsgs},
		{"naive", res.Naive.Messages, o.naiveMsgs},
		{"naive: records in the topic", int(res.Naive.Produced), o.naiveMsgs},
		{"naive, 8 loops", res.NaiveParallel.Messages, o.naiveMsgs},
		{"per-bucket stages", len(res.Buckets), 1 + len(o.bucketCounts)},
		{"capacity: transaction sizes", len(res.Capacity.Writer), 3},
		{"steady: runs", len(res.Steady), len(o.steady)*(len(o.modes)+1) + 1}, // + the transactional mode at txnProfile
		{"sweep: runs", len(res.Sweep), len(o.sweep.rates) * len(o.sweep.windows) * len(o.modes)},
		{"scale: bucket counts", len(res.Scale), len(o.scale.buckets)},
		{"footprint: drained", res.Footprint.Messages, o.footprintMsgs},
		{"footprint: cold starts", len(res.Footprint.ColdStarts), o.footprintColdStarts},
		{"runrelay: variants (polling, notifier)", len(res.RunRelay), 2},
		{"handover: modes", len(res.Handover), len(o.handover.modes)},
		{"rebucket: writes during the change", min(rebucketWrites(res), 1), 1},
		{"footprint: binaries", len(res.Footprint.Binaries), len(o.arches)},
		{"model: points", len(modelOf(res).Points), len(o.model.rates) * len(o.model.buckets)},
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
		{"watermark relay msgs/s", watermarkOf(res).RelayMsgsPerS},
		{"watermark: delete mode msgs/s", watermarkOf(res).DeleteModeMsgsPerS},
		{"watermark WCU per message", watermarkOf(res).WCUPerMsg},
		{"watermark writer WCU per message", watermarkOf(res).WriterWCUPerMsg},
		{"watermark relay WCU per message", watermarkOf(res).Relay.AWSRuleWCU},
		{"init", res.Footprint.InitMs},
		{"peak RSS", float64(res.Footprint.PeakRSSBytes)},
		{"binary size", float64(res.Footprint.Binaries[0].Bytes)},
	}
	for _, h := range res.Handover {
		positive = append(positive, struct {
			name string
			v    float64
		}{"handover p99, " + h.Mode, h.SwitchedP99ms}, struct {
			name string
			v    float64
		}{"handover one-container p99, " + h.Mode, h.BaseP99ms})
	}
	for _, rr := range res.RunRelay {
		if rr.Messages != o.runRelayMsgs {
			t.Errorf("runrelay, notifier %v: %d messages, want %d", rr.Notifier, rr.Messages, o.runRelayMsgs)
		}
		positive = append(positive, struct {
			name string
			v    float64
		}{fmt.Sprintf("runrelay p99, notifier %v", rr.Notifier), rr.P99ms})
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

	checkSteady(t, o, res)
	checkWatermark(t, res)
	checkTxn(t, res)

	lines := res.lines()
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "bench: relay_msgs_per_s=") || !strings.Contains(lines[0], "relay_vs_naive=") {
		t.Errorf("summary lines %q", lines)
	}
	for _, f := range []string{"benchmarks.json", "benchmarks.md", "benchmarks.png"} {
		if fi, err := os.Stat(filepath.Join(o.out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

// txnLine is the line issue 20 asks make bench to print for the
// transactional mode, beside the default's bench: line.
var txnLine = regexp.MustCompile(`^txn: relay_msgs_per_s=(\S+) default_msgs_per_s=(\S+) p50_ms=(\S+) p99_ms=(\S+) default_p50_ms=(\S+) default_p99_ms=(\S+) rate=50 kafka_requests_per_batch=(\S+) default_kafka_requests_per_batch=(\S+) kafka=(kfake|given-brokers)$`)

// checkTxn: one txn: line, right after the bench: line, of positive
// figures; the transactional drain moved every message, committed its
// batches (EndTxn requests) and the default sent none.
func checkTxn(t *testing.T, res *results) {
	lines := res.lines()
	if len(lines) < 2 || !txnLine.MatchString(lines[1]) {
		t.Fatalf("line 2 of %q is not a txn: line of the form %s", lines, txnLine)
	}
	for _, f := range txnLine.FindStringSubmatch(lines[1])[1:9] {
		if v, err := strconv.ParseFloat(f, 64); err != nil || !(v > 0) {
			t.Errorf("txn line %q: %q is not a positive number", lines[1], f)
		}
	}
	// A committed transaction also appends a commit marker to each
	// partition it wrote; each batch is one bucket's, on one partition.
	tx := median(res.Rounds.Txn)
	if tx.Messages != res.Relay.Messages || tx.Produced != int64(tx.Messages)+tx.Batches {
		t.Errorf("transactional drain moved %d messages in %d batches, %d offsets in the topic (want messages + one commit marker per batch); the default moved %d",
			tx.Messages, tx.Batches, tx.Produced, res.Relay.Messages)
	}
	if tx.KafkaRequests["EndTxn"] < tx.Batches {
		t.Errorf("transactional drain: %d EndTxn requests for %d batches (%v)", tx.KafkaRequests["EndTxn"], tx.Batches, tx.KafkaRequests)
	}
	if n := res.Relay.KafkaRequests["EndTxn"]; n != 0 {
		t.Errorf("the default publisher sent %d EndTxn requests", n)
	}
}

// modelOf is res.Model, or an empty one when the stage did not fill it.
func modelOf(res *results) modelResults {
	if res.Model == nil {
		return modelResults{}
	}
	return *res.Model
}

// watermarkOf is res.Watermark, or a zero one (whose figures then fail
// the positive checks) when the stage did not fill it.
func watermarkOf(res *results) watermark {
	if res.Watermark == nil {
		return watermark{}
	}
	return *res.Watermark
}

// watermarkLine is the line issue 11 asks make bench to print for the
// watermark mode.
var watermarkLine = regexp.MustCompile(`^watermark: relay_msgs_per_s=(\S+) delete_mode_msgs_per_s=(\S+) wcu_per_msg=(\S+)$`)

// checkWatermark: one watermark line, last, of positive figures; the
// watermark relay wrote no message-table item (it deletes and marks
// nothing), and its writer paid no more than the delete mode's.
func checkWatermark(t *testing.T, res *results) {
	lines := res.lines()
	var found []string
	for _, l := range lines {
		if strings.HasPrefix(l, "watermark:") {
			found = append(found, l)
		}
	}
	if len(found) != 1 || lines[len(lines)-1] != found[0] {
		t.Fatalf("watermark lines %q, want one, last, in %q", found, lines)
	}
	m := watermarkLine.FindStringSubmatch(found[0])
	if m == nil {
		t.Fatalf("watermark line %q does not have the form %s", found[0], watermarkLine)
	}
	for _, f := range m[1:] {
		if v, err := strconv.ParseFloat(f, 64); err != nil || !(v > 0) {
			t.Errorf("watermark line %q: %q is not a positive number", found[0], f)
		}
	}
	wm := median(res.Rounds.Watermark)
	for _, k := range wm.Dynamo.keys() {
		if op, table := splitKey(k); table == "messages" && !isRead(op) && wm.Dynamo.Ops[k].Calls > 0 {
			t.Errorf("the watermark relay called %s on the messages table %d times; it writes nothing per message", op, wm.Dynamo.Ops[k].Calls)
		}
	}
	if w := watermarkOf(res); w.WriterWCUPerMsg > w.DeleteModeWCUPerMsg {
		t.Errorf("watermark writer WCU per message %.4f above the delete mode's total %.4f", w.WriterWCUPerMsg, w.DeleteModeWCUPerMsg)
	}
}

// steadyLine is the line issue 11 asks make bench to print per load.
var steadyLine = regexp.MustCompile(`^steady: rate=(\S+) control_writes_per_msg=(\S+) wcu_per_msg=(\S+) p99_ms=(\S+) floor_p99_ms=(\S+) steady_vs_floor_p99=(\S+)$`)

// checkSteady checks the steady stage's and the sweep's runs: every
// message committed after the warm-up was consumed, every figure is there
// and positive, and the figures agree with each other and with AWS's
// capacity rules (never how fast or how cheap anything was).
func checkSteady(t *testing.T, o options, res *results) {
	t.Helper()
	minWriterWCU := 2*writeUnits(res.Capacity.MessageItemBytes) + 1 // the transactional put and the counter
	for _, s := range append(append([]steadyResult{}, res.Steady...), res.Sweep...) {
		name := "steady/" + s.Profile.Name + "/" + s.Handler + "/" + s.Mode + "/" + strconv.FormatFloat(s.WindowS, 'g', -1, 64)
		t.Run(name, func(t *testing.T) {
			if s.Committed == 0 || s.Committed != s.Offered || s.Consumed != s.Committed {
				t.Errorf("offered %d, committed %d, consumed %d after the warm-up: want all offered committed and consumed", s.Offered, s.Committed, s.Consumed)
			}
			for _, f := range []struct {
				name string
				v    float64
			}{
				{"p50", s.P50ms}, {"p99", s.P99ms}, {"invocations", float64(s.Invocations)}, {"messages published", float64(s.Messages)},
				{"msgs per invocation", s.MsgsPerInvocation}, {"invocations per msg", s.InvocationsPerMsg}, {"calls per msg", s.CallsPerMsg},
				{"WCU per msg", s.WCU}, {"RCU per msg", s.RCU}, {"USD per million", s.USDPerMillion}, {"committed per s", s.AchievedPerS},
			} {
				if !(f.v > 0) {
					t.Errorf("%s = %v, want a positive figure", f.name, f.v)
				}
			}
			if !(s.P50ms <= s.P99ms && s.P99ms <= s.MaxMs) {
				t.Errorf("p50 %v, p99 %v, max %v: not in order", s.P50ms, s.P99ms, s.MaxMs)
			}
			if s.Profile.BurstRate > 0 && !(s.BurstP99ms > 0) {
				t.Errorf("burst p99 = %v, want a positive figure", s.BurstP99ms)
			}
			if math.Abs(s.WCU-(s.HandlerWCU+s.WriterWCU)) > 1e-9 || math.Abs(s.RCU-(s.HandlerRCU+s.WriterRCU)) > 1e-9 {
				t.Errorf("total WCU %v / RCU %v is not handler %v / %v + writer %v / %v", s.WCU, s.RCU, s.HandlerWCU, s.HandlerRCU, s.WriterWCU, s.WriterRCU)
			}
			if s.WriterWCU < minWriterWCU {
				t.Errorf("writer WCU per message %v, below the %v that AWS's rules charge for its put and counter update", s.WriterWCU, minWriterWCU)
			}
			switch s.Handler {
			case handlerRelay:
				switch s.Mode {
				case modeWatermark.Name:
					// Nothing written per message: no write to the
					// messages table at all.
					for k, v := range s.HandlerDynamo.Ops {
						if op, table := splitKey(k); table == "messages" && !isRead(op) && v.Calls > 0 {
							t.Errorf("relay in watermark mode called %s on the messages table %d times", op, v.Calls)
						}
					}
					if s.ControlWritesPerMsg < 0 || !(s.HandlerRCU > 0) {
						t.Errorf("relay in watermark mode: control writes %v, RCU %v per message", s.ControlWritesPerMsg, s.HandlerRCU)
					}
				default:
					// Every message a measured invocation publishes, it
					// replaces by a tombstone (one write unit, like a
					// delete). Lease and head writes may be none at all in
					// a short window: a warm relay resumes its buckets and
					// writes heads lazily.
					if s.HandlerWCU < 1 || s.ControlWritesPerMsg < 0 || !(s.HandlerRCU > 0) {
						t.Errorf("relay: WCU %v (want >= 1, the tombstone), control writes %v, RCU %v per message", s.HandlerWCU, s.ControlWritesPerMsg, s.HandlerRCU)
					}
				}
				if s.WindowS == 0 && (s.FloorP99ms <= 0 || math.Abs(s.VsFloorP99-s.P99ms/s.FloorP99ms) > 1e-9) {
					t.Errorf("steady_vs_floor_p99 %v, p99 %v, floor p99 %v", s.VsFloorP99, s.P99ms, s.FloorP99ms)
				}
			case handlerFloor:
				// Reads only, and at least one RCU for each item it published.
				if s.HandlerWCU != 0 || s.ControlWritesPerMsg != 0 || s.HandlerRCU < 1 {
					t.Errorf("floor: WCU %v and control writes %v (want 0), RCU %v (want >= 1) per message", s.HandlerWCU, s.ControlWritesPerMsg, s.HandlerRCU)
				}
				for k, v := range s.HandlerDynamo.Ops {
					if op, _ := splitKey(k); op != "BatchGetItem" && v.Calls > 0 {
						t.Errorf("floor called %s %d times", k, v.Calls)
					}
				}
			default:
				t.Errorf("handler %q", s.Handler)
			}
			if s.WindowS > 0 {
				// With a batching window, a shard's invocations begin at
				// least a window apart (none of these batches is full).
				most := (s.MeasuredSeconds/s.WindowS+1)*float64(max(1, s.ESM.Shards)) + float64(s.ESM.Retries+s.ESM.Bisections)
				if float64(s.Invocations) > most {
					t.Errorf("%d invocations in %.2f s with a %g s batching window over %d shard(s): the window was not applied",
						s.Invocations, s.MeasuredSeconds, s.WindowS, s.ESM.Shards)
				}
			}
		})
	}
	names := map[string][]string{} // loads by mode
	for _, l := range res.lines() {
		if !strings.HasPrefix(l, "steady: ") {
			continue
		}
		mode := modeDelete.Name
		for _, other := range []relayMode{modeWatermark, modeTxn} {
			if rest, ok := strings.CutSuffix(l, " mode="+other.Name); ok {
				l, mode = rest, other.Name
			}
		}
		m := steadyLine.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("steady line %q does not have the form %s", l, steadyLine)
			continue
		}
		names[mode] = append(names[mode], m[1])
		for i, f := range m[2:] {
			// control_writes_per_msg (the first figure) may be 0.
			if v, err := strconv.ParseFloat(f, 64); err != nil || v < 0 || i > 0 && !(v > 0) {
				t.Errorf("steady line %q: %q is not a positive number", l, f)
			}
		}
	}
	var want []string
	for _, p := range o.steady {
		want = append(want, p.Name)
	}
	for _, m := range o.modes {
		if strings.Join(names[m.Name], ",") != strings.Join(want, ",") {
			t.Errorf("steady lines in %s mode for loads %v, want %v", m.Name, names[m.Name], want)
		}
	}
	if got := strings.Join(names[modeTxn.Name], ","); got != txnProfile {
		t.Errorf("steady lines in txn mode for loads %q, want %s", got, txnProfile)
	}
	goals := 0
	for _, g := range res.Goals {
		if strings.HasPrefix(g.Name, "steady_") && strings.HasSuffix(g.Name, "_at_50") {
			goals++
		}
	}
	if goals != 3 {
		t.Errorf("%d steady goals at 50 msgs/s, want 3", goals)
	}
}

// rebucketWrites is how many writes ran during the rebucket stage's change.
func rebucketWrites(res *results) int {
	if res.Rebucket == nil || res.Rebucket.Run.Change == nil {
		return 0
	}
	return res.Rebucket.Run.Change.DuringWrites
}
