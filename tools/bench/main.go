// Command bench measures the outbox on real parts, in one run: the raw
// limits of DynamoDB (consistent Query + BatchWriteItem delete) and Kafka
// (produce) at the relay's own concurrency, the relay engine draining a
// pre-filled backlog, a naive send-then-mark relay, the capacity units per
// message (a model by AWS's rules, cross-checked with ReturnConsumedCapacity),
// the steady state (offered rates through the local event-source mapping and
// the relay Lambda's handler, beside the floor of the architecture: cost and
// commit-to-consume latency), the relay Lambda's footprint (binary size, init
// time, peak RSS under the Lambda Runtime Interface Emulator), the relay's
// overhead per bucket, and the modelled stage: the same pipeline at 1,000 to
// 20,000 msgs/s on a model of DynamoDB (ddbmodel) with the relay in a process
// of its own, checked against DynamoDB Local at a rate Local sustains.
//
// Each stage gets a fresh DynamoDB Local (its throughput drops as stream
// records pile up) and a fresh in-process Kafka (kfake), unless
// OUTBOX_DYNAMODB_ENDPOINT or KAFKA_BOOTSTRAP_SERVERS name endpoints to use
// instead.
//
//	make bench                    # writes docs/benchmarks.{json,md,png}
//	cd tools && go run ./bench -smoke -out /tmp/bench
//	cd tools && go run ./bench -only steady              # the steady lines alone
//	cd tools && go run ./bench -only scale               # the scale lines alone
//	cd tools && go run ./bench -only runrelay            # the runrelay lines alone
//	cd tools && go run ./bench -only steady -sweep -out /tmp/s   # + cost by rate and window
//	cd tools && go run ./bench -only txn                 # the transactional mode beside the default
//	cd tools && go run ./bench -only handover            # the handover lines alone
//	cd tools && go run ./bench -only rebucket            # the rebucket line alone
//	cd tools && go run ./bench -only model               # the model check and the modelled stage
//
// It ends with the lines:
//
//	bench: relay_msgs_per_s=… raw_msgs_per_s=… naive_msgs_per_s=… relay_vs_raw=… relay_vs_naive=…
//	txn: relay_msgs_per_s=… default_msgs_per_s=… p50_ms=… p99_ms=… default_p50_ms=… default_p99_ms=… rate=50 kafka_requests_per_batch=… …
//	steady: rate=10 control_writes_per_msg=… wcu_per_msg=… p99_ms=… floor_p99_ms=… steady_vs_floor_p99=…
//	steady: rate=50 …
//	steady: rate=200 …
//	steady: rate=burst …
//	handover: mode=delete … added_p99_ms=…   (and mode=watermark, mode=txn)
//	rebucket: rate=200 from=8 to=16 … write_pause_p99_ms=…
//	scale: buckets=8 offered_msgs_per_s=2000 … limit=dynamodb-local|none …
//	scale: buckets=16 …, 32, 64, 128
//	runrelay: p50_ms=… p99_ms=… poll_ms=200 …
//	runrelay: p50_ms=… p99_ms=… poll_ms=200 … notifier=true
//	model-check: rate=100 buckets=8 shards=… local_calls_per_msg=… model_calls_per_msg=… calls_diff=…% local_p99_ms=… model_p99_ms=… p99_diff=…% … agree_within_25%=yes|no …
//	model: buckets=16 offered_msgs_per_s=1000 sustained_msgs_per_s=… p50_ms=… p99_ms=… floor_p99_ms=… vs_floor_p99=… relay_cpu_ms_per_1000=… relay_peak_rss_mib=… dynamodb_calls_per_msg=… wcu_per_msg=… … limit=none|partition|generator|relay|floor
//	model: … one per bucket count (16, 64, 256) and offered rate (1000, 5000, 10000, 20000)
//
// and, with -sweep, one sweep: line per rate, batching window and relay mode.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/dynakafka/outbox/store/dynamo"
	"github.com/dynakafka/outbox/tools/bench/ddbmodel"
)

// options are the volumes and places of one run.
type options struct {
	smoke         bool
	only          string // "": every stage; "steady": the capacity and steady stages
	out           string // directory for benchmarks.{json,md,png}; "" writes nothing
	endpoint      string
	brokers       []string
	relayMsgs     int // raw and relay backlog
	naiveMsgs     int
	bucketCounts  []int // per-bucket overhead stages besides the relay stage's 8
	footprintMsgs int
	// footprintColdStarts: how often the footprint stage starts the
	// bootstrap (-footprint-cold-starts).
	footprintColdStarts int
	runRelayMsgs        int         // the long-running relay stage: messages per variant
	rounds              int         // turns of raw DynamoDB, raw pipeline and relay
	txns                map[int]int // capacity: transactions per messages-per-transaction
	arches              []string
	// The steady stage: each profile with the relay in each mode and with
	// the floor, at the mapping's batching window steadyWindow, each after
	// a warm-up of steadyWarmup.
	steady       []profile
	steadyWindow time.Duration
	steadyWarmup time.Duration
	modes        []relayMode
	// containers, switchEvery: the relay function's containers in the
	// steady stage (steadyRun).
	containers  int
	switchEvery time.Duration
	sweep       sweepOptions
	scale       scaleOptions
	handover    handoverOptions
	rebucket    rebucketOptions
	model       modelOptions
	// prebuilt: bootstraps built before the run (tests build them before
	// any time budget starts); empty: the footprint stage builds them.
	prebuilt prebuilt
	progress func(format string, args ...any)
}

// sweepOptions is the grid of the cost sweep: the relay alone (in each
// mode) at each rate for each batching window, for seconds(rate) after the
// warm-up. No rates: no sweep.
type sweepOptions struct {
	rates   []float64
	windows []time.Duration
	seconds func(rate float64) float64
}

// prebuilt names relay bootstraps already built, and their sizes.
type prebuilt struct {
	sizes []binarySize
	host  string // the binary for this machine's arch
}

// The steady stage's loads. The burst is 10x the base rate: 50 msgs/s
// with 500 msgs/s from 5 s to 10 s, measured for 25 s in all (20 s after
// the burst for the relay to catch up).
func fullProfiles() []profile {
	return []profile{
		{Name: "10", Rate: 10, Seconds: 60},
		{Name: "50", Rate: 50, Seconds: 30},
		{Name: "200", Rate: 200, Seconds: 20},
		{Name: "burst", Rate: 50, Seconds: 25, BurstRate: 500, BurstAt: 5, BurstFor: 5},
	}
}

func fullOptions() options {
	return options{
		relayMsgs: 20_000, naiveMsgs: 1_000, rounds: 3, bucketCounts: []int{32, 64},
		footprintMsgs: 100_000, footprintColdStarts: 5, runRelayMsgs: 200, txns: map[int]int{1: 300, 10: 60, 100: 12}, arches: []string{"amd64", "arm64"},
		steady: fullProfiles(), steadyWarmup: 3 * time.Second, modes: []relayMode{modeDelete, modeWatermark},
		// Off unless -sweep: at least a minute per rate and window.
		sweep: sweepOptions{rates: nil, windows: []time.Duration{0, time.Second, 5 * time.Second},
			seconds: func(rate float64) float64 { return min(120, max(20, 600/rate)) }},
		// Ten times the steady stage's 200 msgs/s; 128 writers commit
		// 2,000 msgs/s while a commit takes under 64 ms.
		scale:    scaleOptions{buckets: []int{8, 16, 32, 64, 128}, rate: 2000, seconds: 5, warmup: time.Second, writers: 128},
		handover: handoverDefaults,
		rebucket: rebucketDefaults,
		model:    fullModelOptions(),
	}
}

func smokeOptions() options {
	return options{
		// Every stage and path once, at the least volume that still
		// moves messages through it: make test runs this on a busy
		// 2-core machine beside two other lanes.
		smoke: true, relayMsgs: 400, naiveMsgs: 40, rounds: 1, bucketCounts: []int{16},
		footprintMsgs: 400, footprintColdStarts: 2, runRelayMsgs: 2, txns: map[int]int{1: 4, 10: 2, 100: 1}, arches: []string{runtime.GOARCH},
		steady: []profile{
			{Name: "10", Rate: 10, Seconds: 1},
			{Name: "50", Rate: 50, Seconds: 0.6},
			{Name: "burst", Rate: 50, Seconds: 0.6, BurstRate: 500, BurstAt: 0.2, BurstFor: 0.2},
		},
		steadyWarmup: 300 * time.Millisecond, modes: []relayMode{modeDelete, modeWatermark},
		sweep: sweepOptions{rates: []float64{50}, windows: []time.Duration{time.Second},
			seconds: func(float64) float64 { return 1.5 }},
		scale:    scaleOptions{buckets: []int{16}, rate: 200, seconds: 0.5, warmup: 200 * time.Millisecond, writers: 16},
		handover: handoverOptions{modes: []relayMode{modeDelete}, rate: 50, seconds: 0.6, buckets: 8, switchEvery: 100 * time.Millisecond, rounds: 1},
		rebucket: rebucketOptions{rate: 50, seconds: 1, changeAt: 0.3, buckets: 4, to: 8},
		model:    smokeModelOptions(),
	}
}

func main() {
	if childMain() {
		return
	}
	smoke := flag.Bool("smoke", false, "tiny volumes: check that every stage runs (seconds, not minutes)")
	out := flag.String("out", "docs", "directory for benchmarks.json, benchmarks.md and benchmarks.png (empty: write nothing); with -only, for steady.json or txn.json")
	render := flag.String("render", "", "write benchmarks.md and benchmarks.png again from this benchmarks.json, running nothing")
	only := flag.String("only", "", `"steady": run only the capacity and steady stages (and -sweep); "txn": only the transactional mode beside the default (their backlog drains in turns, the steady stage at 50 msgs/s) and the txn: line; "scale": only the capacity and scale stages; "footprint": only the capacity and footprint stages; "runrelay": only the long-running relay's latency; "handover": only the capacity and hand-over stages; "rebucket": only the capacity stage and an online BucketCount change under writers; "model": only the capacity stage, the model check and the modelled stage; and print their lines`)
	scaleBuckets := flag.String("scale-buckets", "", "bucket counts of the scale stage (default 8,16,32,64,128)")
	scaleRate := flag.Float64("scale-rate", 0, "offered rate of the scale stage, msgs/s (default 2000)")
	scaleSeconds := flag.Float64("scale-seconds", 0, "measured seconds of each scale run (default 5, after a 1 s warm-up)")
	scaleWarmup := flag.Duration("scale-warmup", 0, "warm-up of each scale run, at its rate (default 1s)")
	scaleWriters := flag.Int("scale-writers", 0, "writers of the scale stage (default 128)")
	window := flag.Duration("window", 0, "the event-source mapping's MaximumBatchingWindow for the steady stage (0 to 300s)")
	sweep := flag.Bool("sweep", false, "also run the cost sweep: the relay at each -sweep-rates for each -sweep-windows")
	rates := flag.String("sweep-rates", "1,10,50,200", "offered rates of the sweep, msgs/s")
	windows := flag.String("sweep-windows", "0,1s,5s", "batching windows of the sweep")
	profiles := flag.String("profiles", "", `the steady stage's profiles to run, by name ("10,50,200,burst"; empty: all)`)
	modes := flag.String("modes", "", `the relay modes of the steady stage ("delete,watermark"; empty: both)`)
	handoverWarmup := flag.Duration("handover-warmup", 0, "the hand-over stage's warm-up before each run is measured (default 20s: past the slow start of two fresh containers)")
	handoverSwitch := flag.Duration("handover-switch", -1, "the hand-over stage's switch interval between the two containers (default 1s; 0: every invocation to the other container)")
	containers := flag.Int("containers", 1, "the relay function's containers in the steady stage: separate processes sharing the owner id (1: one warm container)")
	switchEvery := flag.Duration("switch-every", 0, "with -containers above 1: send invocations to one container this long, then to the next (0: every invocation to the next, the worst case)")
	coldStarts := flag.Int("footprint-cold-starts", 0, "the footprint stage starts the bootstrap this many times, a second apart, on an empty outbox of the drained one's schema in a DynamoDB Local of its own (DynamoDB Local's DescribeTable slows with every item its database holds; DynamoDB's does not), and reports each init (min and median too); then once more on the filled tables, to drain (default 5; -smoke: 2)")
	flag.StringVar(&footprintBootstrap, "footprint-bootstrap", "", "the footprint stage runs this relay bootstrap instead of building one (to compare two builds; no binary sizes)")
	flag.StringVar(&footprintPprof, "footprint-pprof", "", "the footprint stage runs bench/profrelay (the relay bootstrap with heap profiles) instead of the release bootstrap and writes heap-peak.pprof and allocs.pprof into this directory")
	serve := flag.String("model-serve", "", "serve the DynamoDB model's HTTP API on this address (host:port) with no latency or capacity limits, running nothing else: point a test suite at it (OUTBOX_TEST_DYNAMODB_ENDPOINT=http://host:port)")
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile (the bench: writers, model, kfake, mapping, consumer) to this file")
	mf := modelFlags()
	flag.StringVar(&footprintGoMemLimit, "footprint-gomemlimit", "", `the footprint stage's bootstrap runs with this GOMEMLIMIT ("48MiB"; empty: none)`)
	flag.Parse()
	if *serve != "" {
		db := ddbmodel.New(ddbmodel.Config{Latency: ddbmodel.Fixed(0), WCUPerKey: -1, RCUPerKey: -1})
		fmt.Fprintln(os.Stderr, "bench: serving the DynamoDB model on http://"+*serve)
		if err := http.ListenAndServe(*serve, db.Handler("serve")); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if *render != "" {
		if err := rerender(*render, *out); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	o := fullOptions()
	if *smoke {
		o = smokeOptions()
	}
	o.out, o.only, o.steadyWindow = *out, *only, *window
	o.containers, o.switchEvery = *containers, *switchEvery
	if *handoverWarmup > 0 {
		o.handover.warmup = *handoverWarmup
	}
	if *handoverSwitch >= 0 {
		o.handover.switchEvery = *handoverSwitch
	}
	o.footprintColdStarts = cmp.Or(*coldStarts, o.footprintColdStarts)
	if *scaleBuckets != "" {
		o.scale.buckets = nil
		for _, f := range brokerList(*scaleBuckets) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 || n > 1000 {
				fmt.Fprintf(os.Stderr, "bench: -scale-buckets %q: want bucket counts 1 to 1000\n", *scaleBuckets)
				os.Exit(2)
			}
			o.scale.buckets = append(o.scale.buckets, n)
		}
	}
	o.scale.rate = cmp.Or(*scaleRate, o.scale.rate)
	o.scale.seconds = cmp.Or(*scaleSeconds, o.scale.seconds)
	o.scale.writers = cmp.Or(*scaleWriters, o.scale.writers)
	o.scale.warmup = cmp.Or(*scaleWarmup, o.scale.warmup)
	if err := mf.apply(&o.model); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if *sweep {
		var err error
		if o.sweep.rates, o.sweep.windows, err = parseSweep(*rates, *windows); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
	}
	var err error
	if o.steady, err = pick(o.steady, *profiles, "-profiles", func(p profile) string { return p.Name }); err == nil {
		o.modes, err = pick(o.modes, *modes, "-modes", func(m relayMode) string { return m.Name })
	}
	if err == nil {
		err = o.validate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if o.only != "" && !flagSet("out") {
		o.out = "" // a partial run does not overwrite docs/
	}
	o.endpoint = os.Getenv("OUTBOX_DYNAMODB_ENDPOINT")
	o.brokers = brokerList(os.Getenv("KAFKA_BOOTSTRAP_SERVERS"))
	o.progress = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	for _, l := range res.lines() {
		fmt.Println(l)
	}
}

// validate refuses options the stages cannot run with.
func (o options) validate() error {
	switch o.only {
	case "", "steady", "txn", "scale", "footprint", "runrelay", "handover", "rebucket", "model":
	default:
		return fmt.Errorf(`-only %q: the partial runs are "steady", "txn", "scale", "footprint", "runrelay", "handover", "rebucket" and "model"`, o.only)
	}
	if err := o.model.validate(); err != nil {
		return err
	}
	if len(o.scale.buckets) > 0 && (!(o.scale.rate > 0) || !(o.scale.seconds > 0) || o.scale.writers < 1) {
		return fmt.Errorf("scale stage: rate %v, seconds %v and writers %d must be positive", o.scale.rate, o.scale.seconds, o.scale.writers)
	}
	windows := append([]time.Duration{o.steadyWindow}, o.sweep.windows...)
	for _, w := range windows {
		if w < 0 || w > 300*time.Second {
			return fmt.Errorf("batching window %v: must be 0 to 300s (Lambda's limits)", w)
		}
	}
	if o.containers < 0 || o.switchEvery < 0 {
		return fmt.Errorf("-containers %d, -switch-every %v: want at least one container and a switch interval of 0 or more", o.containers, o.switchEvery)
	}
	for _, r := range o.sweep.rates {
		if !(r > 0) {
			return fmt.Errorf("sweep rate %v: must be positive", r)
		}
	}
	return nil
}

// pick keeps the elements of all named in the comma-separated list names
// (empty: all of them), in all's order; a name that is none of them is an
// error that lists the valid ones.
func pick[T any](all []T, names, flagName string, name func(T) string) ([]T, error) {
	if names == "" {
		return all, nil
	}
	want := map[string]bool{}
	for _, n := range brokerList(names) {
		want[n] = true
	}
	var valid []string
	var kept []T
	for _, x := range all {
		valid = append(valid, name(x))
		if want[name(x)] {
			kept = append(kept, x)
			delete(want, name(x))
		}
	}
	if len(want) > 0 || len(kept) == 0 {
		return nil, fmt.Errorf("%s %q: choose among %v", flagName, names, valid)
	}
	return kept, nil
}

// parseSweep reads -sweep-rates and -sweep-windows.
func parseSweep(rates, windows string) ([]float64, []time.Duration, error) {
	var rs []float64
	for _, f := range brokerList(rates) {
		r, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("-sweep-rates %q: %w", rates, err)
		}
		rs = append(rs, r)
	}
	var ws []time.Duration
	for _, f := range brokerList(windows) {
		if f == "0" {
			ws = append(ws, 0)
			continue
		}
		w, err := time.ParseDuration(f)
		if err != nil {
			return nil, nil, fmt.Errorf("-sweep-windows %q: %w", windows, err)
		}
		ws = append(ws, w)
	}
	if len(rs) == 0 || len(ws) == 0 {
		return nil, nil, fmt.Errorf("-sweep needs at least one rate and one window")
	}
	return rs, ws, nil
}

// flagSet tells whether the flag was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// rerender reads a results file and writes its page and chart into dir.
func rerender(path, dir string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return res.write(dir)
}

// run runs every stage in order and writes the results.
func run(ctx context.Context, o options) (*results, error) {
	if o.progress == nil {
		o.progress = func(string, ...any) {}
	}
	e := &env{endpoint: o.endpoint, brokers: o.brokers, run: runID()}
	res := &results{Generated: time.Now().UTC().Format(time.RFC3339), Smoke: o.smoke, Machine: machineInfo()}
	res.Settings = settingsOf(o)
	g := newGen(8, uint64(time.Now().UnixNano()))

	if o.only == "runrelay" {
		if err := runRelayStage(ctx, e, o, res); err != nil {
			return nil, err
		}
		res.finish(e)
		return res, nil // a partial run writes nothing
	}

	// Capacity first: it also makes the item template every backlog uses.
	o.progress("capacity: writer at 1, 10 and 100 messages per transaction")
	tmpl, err := capacityStage(ctx, e, g, o, res)
	if err != nil {
		return nil, fmt.Errorf("capacity: %w", err)
	}

	switch o.only {
	case "":
		if err := drainStages(ctx, e, g, tmpl, o, res); err != nil {
			return nil, err
		}
	case "txn":
		if err := txnDrains(ctx, e, g, tmpl, o, res); err != nil {
			return nil, err
		}
		o.steady = slices.DeleteFunc(slices.Clone(o.steady), func(p profile) bool { return p.Name != txnProfile })
		o.modes = []relayMode{modeDelete}
	}

	if o.only == "" || o.only == "steady" || o.only == "txn" {
		if err := steadyStage(ctx, e, g, o, res); err != nil {
			return nil, err
		}
	}
	if o.only == "" || o.only == "handover" {
		if err := handoverStage(ctx, e, g, o, res); err != nil {
			return nil, err
		}
	}
	if o.only == "" || o.only == "rebucket" {
		if err := rebucketStage(ctx, e, g, o, res); err != nil {
			return nil, err
		}
	}
	if o.only == "" || o.only == "scale" {
		if err := scaleStage(ctx, e, o, res); err != nil {
			return nil, err
		}
	}

	if o.only == "" {
		if err := runRelayStage(ctx, e, o, res); err != nil {
			return nil, err
		}
	}
	if o.only == "" || o.only == "model" {
		if err := modelCheck(ctx, e, o, res); err != nil {
			return nil, err
		}
		if err := modelStage(ctx, e, o, res); err != nil {
			return nil, err
		}
	}
	if o.only == "" || o.only == "footprint" {
		o.progress("footprint: building the relay bootstrap for %v", o.arches)
		if err := footprintStage(ctx, e, g, tmpl, o, res); err != nil {
			return nil, fmt.Errorf("footprint: %w", err)
		}
	}

	res.finish(e)
	switch {
	case o.out == "":
	case o.only != "":
		// A partial run: its numbers only, never the pages of a full one.
		if err := res.writeJSON(filepath.Join(o.out, o.only+".json")); err != nil {
			return nil, err
		}
		o.progress("wrote %s", filepath.Join(o.out, o.only+".json"))
	default:
		if err := res.write(o.out); err != nil {
			return nil, err
		}
		o.progress("wrote %s", filepath.Join(o.out, "benchmarks.{json,md,png}"))
	}
	return res, nil
}

// drainStages are the backlog drains: raw Kafka, the rounds of raw
// DynamoDB, raw pipeline and relay (8, 32 and 64 buckets), the idle
// connections experiment and the naive relays.
func drainStages(ctx context.Context, e *env, g *gen, tmpl *template, o options, res *results) error {
	o.progress("raw Kafka: %d records", o.relayMsgs)
	if err := withStage(ctx, e, "rawkafka", 8, func(st *stage) (err error) {
		res.Raw.Kafka, err = rawKafka(ctx, st, g, o.relayMsgs)
		o.progress("  %.0f msgs/s", res.Raw.Kafka.MsgsPerS)
		return err
	}); err != nil {
		return fmt.Errorf("raw Kafka: %w", err)
	}

	// The three drains that the headline ratios compare run in turns, so
	// that a burst of load from elsewhere hits one round of each rather
	// than one stage; each figure is the median of its rounds.
	type drainStage struct {
		name    string
		buckets int
		out     *[]drainResult
		run     func(context.Context, *stage, backlog) (drainResult, error)
		// tables: the outbox's mode; tmpl: its message item (nil: the
		// capacity stage's, delete mode).
		tables []dynamo.TablesOption
		tmpl   *template
	}
	relayStage := func(n int) func(context.Context, *stage, backlog) (drainResult, error) {
		return func(ctx context.Context, st *stage, bl backlog) (drainResult, error) {
			return relayDrain(ctx, st, bl, fmt.Sprintf("relay engine (defaults: 8 buckets at once, BatchSize 500), %d buckets", n), modeDelete)
		}
	}
	// The watermark mode's message items carry a TTL: its own template and
	// writer cost, from a watermark outbox.
	o.progress("capacity, watermark mode: writer at 1 message per transaction")
	wm, err := watermarkCapacity(ctx, e, g, o)
	if err != nil {
		return fmt.Errorf("capacity, watermark mode: %w", err)
	}
	stages := []drainStage{
		{name: "raw DynamoDB: consistent Query + BatchWriteItem delete", buckets: 8, out: &res.Rounds.DynamoDB, run: rawDynamo},
		{name: "raw pipeline: Query → produce → delete by hand", buckets: 8, out: &res.Rounds.Pipeline, run: rawPipeline},
		{name: "relay: the engine with default options", buckets: 8, out: &res.Rounds.Relay, run: relayStage(8)},
		{name: "relay, watermark mode: nothing written per message", buckets: 8, out: &res.Rounds.Watermark, tables: modeWatermark.Tables, tmpl: wm.tmpl,
			run: func(ctx context.Context, st *stage, bl backlog) (drainResult, error) {
				return relayDrain(ctx, st, bl, "relay engine in watermark mode (defaults otherwise), 8 buckets", modeWatermark)
			}},
		{name: "relay, transactional: one Kafka transaction per batch", buckets: 8, out: &res.Rounds.Txn,
			run: func(ctx context.Context, st *stage, bl backlog) (drainResult, error) {
				return relayDrain(ctx, st, bl, "relay engine publishing through kafka.TxnPublisher (defaults otherwise), 8 buckets", modeTxn)
			}},
	}
	res.Rounds.Buckets = make([][]drainResult, len(o.bucketCounts))
	for i, n := range o.bucketCounts {
		stages = append(stages, drainStage{name: fmt.Sprintf("relay, %d buckets (per-bucket overhead)", n), buckets: n, out: &res.Rounds.Buckets[i], run: relayStage(n)})
	}
	gens := map[int]*gen{8: g}
	for round := 1; round <= o.rounds; round++ {
		for i, sg := range stages {
			o.progress("round %d/%d, %s: %d messages over %d buckets", round, o.rounds, sg.name, o.relayMsgs, sg.buckets)
			if gens[sg.buckets] == nil {
				gens[sg.buckets] = newGen(sg.buckets, uint64(sg.buckets))
			}
			if err := withStage(ctx, e, fmt.Sprintf("r%dd%d", round, i), sg.buckets, func(st *stage) error {
				bl, err := prefill(ctx, st, gens[sg.buckets], cmp.Or(sg.tmpl, tmpl), o.relayMsgs)
				if err != nil {
					return err
				}
				st.meter.deletedBytes = bl.MaxItemSize
				d, err := sg.run(ctx, st, bl)
				*sg.out = append(*sg.out, d)
				o.progress("  %.0f msgs/s, %.4f DynamoDB calls per message (load average %s)", d.MsgsPerS, d.CallsPerM, d.Load)
				if d.Batches > 0 {
					o.progress("  %d batches, %.2f Kafka requests per batch: %s", d.Batches, d.KafkaRequestsPerBatch, requestSummary(d.KafkaRequests))
				}
				if err != nil || res.Capacity.LeaseItemBytes > 0 || i != 2 {
					return err
				}
				res.Capacity.LeaseItemBytes, err = storedSize(ctx, st, st.tables.Control, controlKey("bucket#0", "lease"))
				return err
			}, sg.tables...); err != nil {
				return fmt.Errorf("round %d, %s: %w", round, sg.name, err)
			}
		}
	}
	res.Raw.DynamoDB, res.Raw.Pipeline, res.Relay = median(res.Rounds.DynamoDB), median(res.Rounds.Pipeline), median(res.Rounds.Relay)
	delWriter := 0.0
	for _, w := range res.Capacity.Writer {
		if w.PerTxn == 1 {
			delWriter = w.AWSRuleWCU
		}
	}
	res.Watermark = wm.result(median(res.Rounds.Watermark), res.Relay, delWriter)

	// The SDK keeps 10 idle connections per host; 8 buckets with 4 deletes
	// each keep up to 32 calls in flight, so connections are closed and
	// opened all the time. One round of raw DynamoDB and relay with 64.
	for _, i := range []int{0, 2} {
		sg := stages[i]
		o.progress("%s, 64 idle connections per host: %d messages over 8 buckets", sg.name, o.relayMsgs)
		if err := withStage(ctx, e, fmt.Sprintf("idle%d", i), 8, func(st *stage) error {
			st.keepIdle(idleConnsExperiment)
			bl, err := prefill(ctx, st, g, tmpl, o.relayMsgs)
			if err != nil {
				return err
			}
			st.meter.deletedBytes = bl.MaxItemSize
			d, err := sg.run(ctx, st, bl)
			d.Name += fmt.Sprintf(", %d idle connections per host", idleConnsExperiment)
			res.IdleConns = append(res.IdleConns, d)
			o.progress("  %.0f msgs/s, %d TCP connections opened (load average %s)", d.MsgsPerS, d.Dynamo.Dials, d.Load)
			return err
		}); err != nil {
			return fmt.Errorf("%s with %d idle connections: %w", sg.name, idleConnsExperiment, err)
		}
	}

	for _, loops := range []int{1, rawLoops} {
		o.progress("naive relay, %d loop(s): %d messages", loops, o.naiveMsgs)
		if err := withStage(ctx, e, fmt.Sprintf("naive%d", loops), 8, func(st *stage) (err error) {
			bl, err := prefill(ctx, st, g, tmpl, o.naiveMsgs)
			if err != nil {
				return err
			}
			st.meter.deletedBytes = bl.MaxItemSize
			d, err := naiveDrain(ctx, st, bl, loops)
			if loops == 1 {
				res.Naive = d
			} else {
				res.NaiveParallel = d
			}
			o.progress("  %.0f msgs/s", d.MsgsPerS)
			return err
		}); err != nil {
			return fmt.Errorf("naive, %d loop(s): %w", loops, err)
		}
	}

	res.Buckets = append(res.Buckets, res.Relay)
	for _, rs := range res.Rounds.Buckets {
		res.Buckets = append(res.Buckets, median(rs))
	}
	return nil
}

// idleConnsExperiment is the MaxIdleConnsPerHost tried against the SDK's
// default of 10: enough for 8 buckets × 4 concurrent deletes.
const idleConnsExperiment = 64

// median is the round with the median throughput (the lower middle one
// for an even count).
func median(rounds []drainResult) drainResult {
	if len(rounds) == 0 {
		return drainResult{}
	}
	s := slices.Clone(rounds)
	slices.SortFunc(s, func(a, b drainResult) int { return cmp.Compare(a.MsgsPerS, b.MsgsPerS) })
	return s[(len(s)-1)/2]
}

// withStage opens a stage (a fresh DynamoDB Local and kfake unless
// endpoints were given) whose outbox is created with opts, runs fn and
// closes it.
func withStage(ctx context.Context, e *env, name string, buckets int, fn func(*stage) error, opts ...dynamo.TablesOption) error {
	st, err := e.open(ctx, name, buckets, opts...)
	if err != nil {
		return err
	}
	defer st.close()
	return fn(st)
}

func capacityStage(ctx context.Context, e *env, g *gen, o options, res *results) (*template, error) {
	var tmpl *template
	err := withStage(ctx, e, "capacity", 8, func(st *stage) (err error) {
		if tmpl, err = newTemplate(ctx, st, g); err != nil {
			return err
		}
		size := itemBytes(tmpl.item(g.message(st.topic, 0)))
		st.meter.deletedBytes = size
		c := &res.Capacity
		c.MessageItemBytes = size
		if c.Writer, err = writerCapacity(ctx, st, g, size, o.txns); err != nil {
			return err
		}
		if c.CounterItemBytes, err = storedSize(ctx, st, st.tables.Control, controlKey("bucket#0", "seq")); err != nil {
			return err
		}
		c.FenceLocalWCU, c.FenceAWSRuleWCU, c.FenceItemBytes, err = fenceCost(ctx, st)
		return err
	})
	return tmpl, err
}

// steadyStage runs every profile with the relay in each mode and then with
// the floor, one right after the other so that they meet the same load
// from elsewhere, at the headline batching window; then the sweep, if any:
// the relay alone in each mode, at each rate for each window. Every run has
// a fresh stage.
func steadyStage(ctx context.Context, e *env, g *gen, o options, res *results) error {
	one := func(run steadyRun) (steadyResult, error) {
		p, name := run.profile, run.handler
		if run.handler == handlerRelay {
			name += "-" + run.mode.Name
		}
		o.progress("steady %s, %s, batching window %v: %s after a %v warm-up", p.Name, name, run.window, p, run.warmup)
		var r steadyResult
		var tables []dynamo.TablesOption
		if run.handler == handlerRelay {
			tables = run.mode.Tables
		}
		err := withStage(ctx, e, fmt.Sprintf("steady-%s-w%g-%s", p.Name, run.window.Seconds(), name), 8, func(st *stage) (err error) {
			r, err = steady(ctx, st, g, run)
			return err
		}, tables...)
		o.progress("  p50 %.0f ms, p99 %.0f ms; %.1f msgs per invocation; per message %.3f control-table writes, %.3f WCU, %.3f RCU (load average %s)",
			r.P50ms, r.P99ms, r.MsgsPerInvocation, r.ControlWritesPerMsg, r.WCU, r.RCU, r.Load)
		if err != nil {
			return r, fmt.Errorf("steady %s, %s, window %v: %w", p.Name, name, run.window, err)
		}
		return r, nil
	}
	base := steadyRun{window: o.steadyWindow, warmup: o.steadyWarmup, itemBytes: res.Capacity.MessageItemBytes,
		containers: o.containers, switchEvery: o.switchEvery}
	for _, p := range o.steady {
		var runs []steadyRun
		modes := o.modes
		if p.Name == txnProfile {
			modes = append(slices.Clone(modes), modeTxn) // the transactional mode beside the default
		}
		for _, m := range modes {
			run := base
			run.profile, run.handler, run.mode = p, handlerRelay, m
			runs = append(runs, run)
		}
		floor := base
		floor.profile, floor.handler = p, handlerFloor
		for _, run := range append(runs, floor) {
			r, err := one(run)
			res.Steady = append(res.Steady, r)
			if err != nil {
				return err
			}
		}
	}
	for _, w := range o.sweep.windows {
		for _, rate := range o.sweep.rates {
			for _, m := range o.modes {
				run := base
				run.window, run.handler, run.mode = w, handlerRelay, m
				run.profile = profile{Name: strconv.FormatFloat(rate, 'f', -1, 64), Rate: rate, Seconds: o.sweep.seconds(rate)}
				r, err := one(run)
				res.Sweep = append(res.Sweep, r)
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func footprintStage(ctx context.Context, e *env, g *gen, tmpl *template, o options, res *results) error {
	root, err := libraryRoot()
	if err != nil {
		return err
	}
	f := &res.Footprint
	host := o.prebuilt.host
	f.Binaries = o.prebuilt.sizes
	if host == "" && footprintBootstrap == "" && footprintPprof == "" {
		dir, err := os.MkdirTemp("", "outbox-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if f.Binaries, host, err = buildBootstraps(ctx, root, dir, o.arches); err != nil {
			return err
		}
	}
	f.BuildFlags = "CGO_ENABLED=0 GOOS=linux go -C lambda build -trimpath -tags lambda.norpc -ldflags='-s -w' ./relay"
	switch {
	case footprintPprof != "":
		if host, err = buildProfRelay(ctx, root, footprintPprof); err != nil {
			return err
		}
		f.BuildFlags = "bench/profrelay (-footprint-pprof)"
	case footprintBootstrap != "":
		if host, err = filepath.Abs(footprintBootstrap); err != nil {
			return err
		}
		f.BuildFlags = "-footprint-bootstrap " + footprintBootstrap
	}
	rie, err := installRIE(ctx, root)
	if err != nil {
		return err
	}
	o.progress("footprint: %d messages drained by the bootstrap under the Lambda RIE", o.footprintMsgs)
	return withStage(ctx, e, "footprint", 8, func(st *stage) error {
		bl, err := prefill(ctx, st, g, tmpl, o.footprintMsgs)
		if err != nil {
			return err
		}
		empty, initOn, stop, err := e.initTarget(ctx, st)
		if err != nil {
			return err
		}
		defer stop()
		r, err := footprint(ctx, st, empty, initOn, rie, host, bl, o.footprintColdStarts)
		r.Binaries, r.BuildFlags = f.Binaries, f.BuildFlags
		*f = r
		return err
	})
}
