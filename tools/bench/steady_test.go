package main

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestProfileSchedule(t *testing.T) {
	tests := []struct {
		name                    string
		p                       profile
		warmup                  time.Duration
		warm, measured, inBurst int
	}{
		{"steady", profile{Name: "10", Rate: 10, Seconds: 2}, 500 * time.Millisecond, 5, 20, 0},
		{"no warm-up", profile{Name: "50", Rate: 50, Seconds: 1}, 0, 0, 50, 0},
		// 0.8 s at 50/s and 0.2 s at 500/s.
		{"burst", profile{Name: "burst", Rate: 50, Seconds: 1, BurstRate: 500, BurstAt: 0.2, BurstFor: 0.2}, time.Second, 50, 140, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var warm, measured, burst int
			last := math.Inf(-1)
			for _, at := range tt.p.schedule(tt.warmup) {
				if at <= last {
					t.Fatalf("schedule not increasing at %v", at)
				}
				last = at
				switch {
				case at < 0:
					warm++
				default:
					measured++
					if tt.p.inBurst(at) {
						burst++
					}
				}
			}
			// Floating-point steps may put one send on either side of a
			// boundary.
			near := func(got, want int) bool { return got >= want-1 && got <= want+1 }
			if !near(warm, tt.warm) || !near(measured, tt.measured) || !near(burst, tt.inBurst) {
				t.Errorf("warm-up %d, measured %d, in the burst %d; want %d, %d, %d (±1)", warm, measured, burst, tt.warm, tt.measured, tt.inBurst)
			}
		})
	}
}

// TestAWSUnitsBatchGetItem checks the meter's rule for BatchGetItem: each
// key a GetItem of its own, rounded up to 4 KB per item, one unit for a key
// that names nothing, nothing for a key returned unprocessed.
func TestAWSUnitsBatchGetItem(t *testing.T) {
	item := func(bytes int) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"v": &types.AttributeValueMemberB{Value: make([]byte, bytes-1)}}
	}
	key := map[string]types.AttributeValue{"b": num(0), "s": num(1)}
	keys := func(n int) []map[string]types.AttributeValue {
		out := make([]map[string]types.AttributeValue, n)
		for i := range out {
			out[i] = key
		}
		return out
	}
	tests := []struct {
		name        string
		asked       int
		found       []map[string]types.AttributeValue
		unprocessed int
		want        float64
	}{
		{"small items", 3, []map[string]types.AttributeValue{item(900), item(900), item(900)}, 0, 3},
		{"per item, not summed", 2, []map[string]types.AttributeValue{item(3000), item(3000)}, 0, 2},
		{"an item over 4 KB", 1, []map[string]types.AttributeValue{item(5000)}, 0, 2},
		{"a key that names nothing", 3, []map[string]types.AttributeValue{item(900)}, 0, 3},
		{"unprocessed keys", 4, []map[string]types.AttributeValue{item(900)}, 3, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{"m": {Keys: keys(tt.asked)}}}
			out := &dynamodb.BatchGetItemOutput{Responses: map[string][]map[string]types.AttributeValue{"m": tt.found}}
			if tt.unprocessed > 0 {
				out.UnprocessedKeys = map[string]types.KeysAndAttributes{"m": {Keys: keys(tt.unprocessed)}}
			}
			if got := awsUnits(in, out, 0); got != tt.want {
				t.Errorf("units = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSteadyPerMessage checks the per-message arithmetic on counted calls.
func TestSteadyPerMessage(t *testing.T) {
	relay := snapshot{Ops: map[string]opStats{
		"UpdateItem control":      {Calls: 30, AWSUnits: 30},
		"Query messages":          {Calls: 10, AWSUnits: 10},
		"BatchWriteItem messages": {Calls: 10, AWSUnits: 20},
	}}
	writer := snapshot{Ops: map[string]opStats{
		"TransactWriteItems messages": {Calls: 40, AWSUnits: 80},
		"UpdateItem control":          {Calls: 40, AWSUnits: 40},
	}}
	r := steadyResult{Messages: 20, Invocations: 5, HandlerDynamo: relay, WriterDynamo: writer, WriterMessages: 40}
	r.perMessage()
	want := map[string][2]float64{
		"calls":          {r.CallsPerMsg, 2.5},
		"control writes": {r.ControlWritesPerMsg, 1.5},
		"handler WCU":    {r.HandlerWCU, 2.5},
		"handler RCU":    {r.HandlerRCU, 0.5},
		"writer WCU":     {r.WriterWCU, 3},
		"WCU":            {r.WCU, 5.5},
		"RCU":            {r.RCU, 0.5},
		"invocations":    {r.InvocationsPerMsg, 0.25},
		"per invocation": {r.MsgsPerInvocation, 4},
		"USD":            {r.USDPerMillion, 5.5*pricePerMillionWRU + 0.5*pricePerMillionRRU},
	}
	for name, gw := range want {
		if math.Abs(gw[0]-gw[1]) > 1e-9 {
			t.Errorf("%s per message = %v, want %v", name, gw[0], gw[1])
		}
	}
}

func TestSteadyLine(t *testing.T) {
	base := steadyResult{Profile: profile{Name: "50"}, Handler: handlerRelay, Mode: modeDelete.Name,
		ControlWritesPerMsg: 1.1384, WCU: 5.1384, P99ms: 3341.26, FloorP99ms: 320.04, VsFloorP99: 10.44}
	windowed, noFloor, other := base, base, base
	windowed.WindowS = 1
	noFloor.FloorP99ms, noFloor.VsFloorP99 = 0, 0
	other.Mode = "watermark"
	tests := []struct {
		name string
		r    steadyResult
		want string
	}{
		{"headline", base, "steady: rate=50 control_writes_per_msg=1.138 wcu_per_msg=5.138 p99_ms=3341.3 floor_p99_ms=320.0 steady_vs_floor_p99=10.44"},
		{"window", windowed, "steady: rate=50 control_writes_per_msg=1.138 wcu_per_msg=5.138 p99_ms=3341.3 floor_p99_ms=320.0 steady_vs_floor_p99=10.44 window_s=1"},
		{"no floor", noFloor, "steady: rate=50 control_writes_per_msg=1.138 wcu_per_msg=5.138 p99_ms=3341.3 floor_p99_ms=n/a steady_vs_floor_p99=n/a"},
		{"mode", other, "steady: rate=50 control_writes_per_msg=1.138 wcu_per_msg=5.138 p99_ms=3341.3 floor_p99_ms=320.0 steady_vs_floor_p99=10.44 mode=watermark"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.r.steadyLine()
			if got != tt.want {
				t.Errorf("line\n got %s\nwant %s", got, tt.want)
			}
			if m := steadyLine.FindStringSubmatch(got); (m != nil) != (tt.name == "headline" || tt.name == "no floor") {
				t.Errorf("the smoke test's pattern matches %q: %v", got, m != nil)
			}
		})
	}
	// The watermark line appears once the stage fills it in.
	r := &results{Steady: []steadyResult{base}}
	if got := strings.Join(r.lines(), "\n"); strings.Contains(got, "watermark:") {
		t.Errorf("a watermark line without a watermark run: %q", got)
	}
	r.Watermark = &watermark{RelayMsgsPerS: 2600, DeleteModeMsgsPerS: 2100, WCUPerMsg: 3.0021}
	if got := r.lines(); got[len(got)-1] != "watermark: relay_msgs_per_s=2600 delete_mode_msgs_per_s=2100 wcu_per_msg=3.002" {
		t.Errorf("lines end with %q", got[len(got)-1])
	}
}

// A scale: line says whether the writers reached the offered rate and
// compares each bucket count with the first.
func TestScaleLine(t *testing.T) {
	run := func(committed, p99, wcu, control float64) steadyResult {
		return steadyResult{Profile: profile{Rate: 2000, Seconds: 1}, Writers: 128, Offered: 2000, AchievedPerS: committed,
			Messages: 1000, MeasuredSeconds: 2, P50ms: 40, P99ms: p99, WCU: wcu, ControlWritesPerMsg: control, MsgsPerInvocation: 50, CommitP50ms: 30}
	}
	b8 := scaleResult{Buckets: 8, Relay: run(2000, 200, 4, 0.1), Floor: run(1990, 100, 3, 0)}
	b64 := scaleResult{Buckets: 64, Relay: run(1000, 600, 4.2, 0.4), Floor: run(1990, 100, 3, 0)}
	r := &results{Scale: []scaleResult{b8, b64}}
	want := []string{
		"scale: buckets=8 offered_msgs_per_s=2000 writers=128 committed_msgs_per_s=2000 relayed_msgs_per_s=500 p50_ms=40.0 p99_ms=200.0 " +
			"floor_committed_msgs_per_s=1990 floor_p50_ms=40.0 floor_p99_ms=100.0 vs_floor_p99=2.00 wcu_per_msg=4.000 control_writes_per_msg=0.100 " +
			"msgs_per_invocation=50.0 floor_msgs_per_invocation=50.0 commit_p50_ms=30.0 limit=none p99_vs_b8=1.00 wcu_vs_b8=1.00 control_vs_b8=1.00",
		"scale: buckets=64 offered_msgs_per_s=2000 writers=128 committed_msgs_per_s=1000 relayed_msgs_per_s=500 p50_ms=40.0 p99_ms=600.0 " +
			"floor_committed_msgs_per_s=1990 floor_p50_ms=40.0 floor_p99_ms=100.0 vs_floor_p99=6.00 wcu_per_msg=4.200 control_writes_per_msg=0.400 " +
			"msgs_per_invocation=50.0 floor_msgs_per_invocation=50.0 commit_p50_ms=30.0 limit=dynamodb-local p99_vs_b8=3.00 wcu_vs_b8=1.05 control_vs_b8=4.00",
	}
	if got := r.lines(); !slices.Equal(got, want) {
		t.Errorf("lines\n got %q\nwant %q", got, want)
	}
}
