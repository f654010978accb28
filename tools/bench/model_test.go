package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// modelKeys are the fields of a model: line, in order, and whether each
// is a number.
var modelKeys = []string{"buckets", "offered_msgs_per_s", "sustained_msgs_per_s", "committed_msgs_per_s", "relayed_msgs_per_s",
	"p50_ms", "p99_ms", "floor_p50_ms", "floor_p99_ms", "vs_floor_p99", "relay_cpu_ms_per_1000", "floor_cpu_ms_per_1000",
	"relay_peak_rss_mib", "dynamodb_calls_per_msg", "writer_calls_per_msg", "wcu_per_msg", "relay_wcu_per_msg", "rcu_per_msg",
	"usd_per_million", "throttled_writer", "throttled_relay", "msgs_per_invocation", "shards", "unconsumed", "machine_busy", "limit"}

var modelCheckKeys = []string{"rate", "buckets", "shards", "local_calls_per_msg", "model_calls_per_msg", "calls_diff", "local_p99_ms",
	"model_p99_ms", "p99_diff", "local_p50_ms", "model_p50_ms", "local_msgs_per_invocation", "model_msgs_per_invocation",
	"local_committed_msgs_per_s", "model_committed_msgs_per_s", "local_sustained", "local_rates_tried", "agree_within_25%", "latency"}

// fields splits "prefix: k=v k=v" into its keys and values, checking the
// keys against want, in order.
func fields(t *testing.T, line, prefix string, want []string) map[string]string {
	t.Helper()
	rest, ok := strings.CutPrefix(line, prefix+": ")
	if !ok {
		t.Fatalf("%q does not start with %q", line, prefix+": ")
	}
	out := map[string]string{}
	var keys []string
	for _, f := range strings.Fields(rest) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("%q: %q is not key=value", line, f)
		}
		keys = append(keys, k)
		out[k] = v
	}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("%s line has the fields\n  %v\nwant\n  %v", prefix, keys, want)
	}
	return out
}

// TestModelStageSmoke runs the model check and the modelled stage with
// tiny volumes (the check on the test binary's DynamoDB, the handlers in
// their own processes: this binary started again) and checks the lines
// they print: one model: line per point and a model-check: line, every
// field there and well formed. It never checks how fast anything was.
func TestModelStageSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts DynamoDB Local and the relay in processes of its own")
	}
	o := smokeOptions()
	o.only = "model"
	o.model.buckets, o.model.rates = []int{16, 64}, []float64{300}
	d := testenv.DynamoDB(t)
	k := testenv.Kafka(t)
	o.endpoint, o.brokers = d.Endpoint, k.Brokers
	o.progress = testProgress(t)
	res, err := run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var models, checks []string
	for _, l := range res.lines() {
		switch {
		case strings.HasPrefix(l, "model: "):
			models = append(models, l)
		case strings.HasPrefix(l, "model-check: "):
			checks = append(checks, l)
		}
	}
	if len(models) != len(o.model.buckets)*len(o.model.rates) || len(checks) != 1 {
		t.Fatalf("%d model: lines and %d model-check: lines, want %d and 1:\n%s", len(models), len(checks),
			len(o.model.buckets)*len(o.model.rates), strings.Join(res.lines(), "\n"))
	}
	number := func(line, k, v string) float64 {
		f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
		if err != nil {
			t.Errorf("%s: %s=%q is not a number", line, k, v)
		}
		return f
	}
	for i, l := range models {
		f := fields(t, l, "model", modelKeys)
		for _, k := range modelKeys {
			switch k {
			case "limit":
				if !strings.Contains(" none partition generator relay floor ", " "+f[k]+" ") {
					t.Errorf("%s: limit=%q", l, f[k])
				}
			case "vs_floor_p99":
				if f[k] != "n/a" {
					number(l, k, f[k])
				}
			default:
				number(l, k, f[k])
			}
		}
		p := res.Model.Points[i]
		if number(l, "buckets", f["buckets"]) != float64(p.Buckets) || p.Relay.Messages == 0 || p.Floor.Messages == 0 {
			t.Errorf("%s: the point's relay published %d, its floor %d", l, p.Relay.Messages, p.Floor.Messages)
		}
		// The relay ran in its own process: its CPU and memory are its own.
		if !(p.Relay.HandlerCPUSeconds > 0) || p.Relay.HandlerPeakRSSBytes <= 0 || !(p.Floor.HandlerCPUSeconds > 0) {
			t.Errorf("%s: relay CPU %v s, peak RSS %d, floor CPU %v s: want all measured", l, p.Relay.HandlerCPUSeconds, p.Relay.HandlerPeakRSSBytes, p.Floor.HandlerCPUSeconds)
		}
	}
	f := fields(t, checks[0], "model-check", modelCheckKeys)
	for _, k := range modelCheckKeys {
		switch k {
		case "local_sustained", "agree_within_25%":
			if f[k] != "yes" && f[k] != "no" {
				t.Errorf("%s: %s=%q", checks[0], k, f[k])
			}
		case "latency":
		case "local_rates_tried":
			for _, r := range strings.Split(f[k], ",") {
				number(checks[0], k, r)
			}
		default:
			number(checks[0], k, f[k])
		}
	}
}
