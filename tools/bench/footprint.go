package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/local/esm"
	"github.com/dynakafka/outbox/store/dynamo"
)

type binarySize struct {
	Arch  string `json:"arch"`
	Bytes int64  `json:"bytes"`
}

type footprintResult struct {
	Binaries   []binarySize `json:"bootstrap_sizes"`
	BuildFlags string       `json:"build_flags"`
	RunArch    string       `json:"run_arch"`
	// InitMs is from the first invocation's request to the bootstrap's
	// "outbox relay: ready" log line: process start, Go runtime, config,
	// AWS and Kafka clients, the config-item read and the topic check.
	InitMs float64 `json:"init_ms"`
	// InitSteps is how long each step of the relay's Build took, as its
	// "ready" line reports them (lambda/wiring.InitTimes): what InitMs
	// spends beyond process start and the Go runtime.
	InitSteps map[string]float64 `json:"init_steps_ms,omitempty"`
	// GoMemLimit is the GOMEMLIMIT the bootstrap ran with (-footprint-gomemlimit;
	// "": the Go runtime's default, none).
	GoMemLimit string `json:"gomemlimit,omitempty"`
	// ReportInitMs is the emulator's REPORT "Init Duration". This emulator
	// starts the function asynchronously and stops its clock at once, so
	// the figure is near zero and not an init time; kept for transparency.
	ReportInitMs float64 `json:"rie_report_init_duration_ms"`
	// ColdInvokeMs is the first (empty) invocation as the caller saw it,
	// init included.
	ColdInvokeMs  float64 `json:"cold_invoke_ms"`
	Messages      int     `json:"messages_drained"`
	Invocations   int     `json:"drain_invocations"`
	DrainSeconds  float64 `json:"drain_seconds"`
	PeakRSSBytes  int64   `json:"peak_rss_bytes"` // VmHWM of the bootstrap process
	RSSAfterBytes int64   `json:"rss_after_bytes"`
	Backlog       backlog `json:"backlog"`
	// ColdStarts are the starts of the bootstrap whose init is measured
	// (-footprint-cold-starts), a second apart, on an empty outbox of the
	// drained one's schema (InitMs and InitSteps are the first's), in a
	// DynamoDB Local of its own (InitOn "empty-dynamodb-local"), warmed up
	// by probes, or, on a given endpoint, beside the filled one
	// ("empty-tables"): DynamoDB Local's DescribeTable takes longer the
	// more items its database holds, in any table (57 ms with the 100,000
	// pre-filled messages against 11 ms empty, and as long on an empty
	// table beside them), which DynamoDB's does not (its ItemCount is
	// refreshed about every six hours).
	ColdStarts []coldStart `json:"cold_starts,omitempty"`
	InitOn     string      `json:"init_on,omitempty"`
	// ProbeFilled is the same probe on the filled tables, showing the
	// scan the inits leave out.
	ProbeFilled probe `json:"probe_filled_tables"`
	// DrainStart is the start of the process that drains, on the filled
	// tables (its init is not the measured one).
	DrainStart coldStart `json:"drain_start"`
}

// buildFlags are the release build's flags (the Makefile's build target).
var buildFlags = []string{"-trimpath", "-tags", "lambda.norpc", "-ldflags=-s -w"}

// buildBootstraps builds the relay Lambda for linux on each arch into dir
// and returns the sizes and the path of the binary for this machine's arch.
func buildBootstraps(ctx context.Context, root, dir string, arches []string) ([]binarySize, string, error) {
	var sizes []binarySize
	host := ""
	for _, arch := range arches {
		out := filepath.Join(dir, arch, "bootstrap")
		args := append([]string{"build"}, buildFlags...)
		args = append(args, "-o", out, "./relay")
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = filepath.Join(root, "lambda") // the Lambda functions' module
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, "", fmt.Errorf("go build ./lambda/relay for %s: %v\n%s", arch, err, b)
		}
		fi, err := os.Stat(out)
		if err != nil {
			return nil, "", err
		}
		sizes = append(sizes, binarySize{Arch: arch, Bytes: fi.Size()})
		if arch == runtime.GOARCH {
			host = out
		}
	}
	if host == "" {
		return sizes, "", fmt.Errorf("no bootstrap built for this machine's arch %s", runtime.GOARCH)
	}
	return sizes, host, nil
}

// footprint runs the relay bootstrap under the Lambda Runtime Interface
// Emulator (Kafka stays in this process, DynamoDB Local in its own): one
// empty invocation for the cold start, then invocations naming every bucket
// until the backlog is drained; the bootstrap's peak RSS is read from
// /proc/<pid>/status (VmHWM) of the bootstrap process, the emulator's child.
// footprintGoMemLimit is the -footprint-gomemlimit flag.
var footprintGoMemLimit string

// footprintPprof is the -footprint-pprof flag: a directory for the
// profiles of bench/profrelay, run instead of the release bootstrap.
var footprintPprof string

// buildProfRelay builds bench/profrelay into dir and returns its path.
func buildProfRelay(ctx context.Context, root, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out, err := filepath.Abs(filepath.Join(dir, "bootstrap"))
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-o", out, "./bench/profrelay")
	cmd.Dir = filepath.Join(root, "tools")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./bench/profrelay: %v\n%s", err, b)
	}
	return out, nil
}

// footprintBootstrap is the -footprint-bootstrap flag.
var footprintBootstrap string

// coldStart is one start of the bootstrap under the emulator: its init,
// and the round trips of the store's init step (the config item and both
// tables' DescribeTable, at once) timed from the bench just before.
type coldStart struct {
	InitMs    float64            `json:"init_ms"`
	InitSteps map[string]float64 `json:"init_steps_ms,omitempty"`
	// ColdInvokeMs is the first (empty) invocation as the caller saw it,
	// init included.
	ColdInvokeMs float64 `json:"cold_invoke_ms"`
	// ReportInitMs is the emulator's REPORT "Init Duration" (near zero:
	// see footprintResult).
	ReportInitMs float64 `json:"rie_report_init_duration_ms"`
	Probe        probe   `json:"probe"`
}

// probe is the bench's own GetItem of the config item and DescribeTable of
// both tables, all at once as dynamo.NewStore sends them, each timed.
type probe struct {
	GetItemMs       float64 `json:"get_item_ms"`
	DescribeTableMs float64 `json:"describe_table_ms"` // the slower of the two
	Ms              float64 `json:"ms"`                // all three, at once
}

// dbTarget is an outbox the bootstrap starts on: an endpoint, a client
// for the bench's probes and the tables.
type dbTarget struct {
	endpoint string
	client   *dynamodb.Client
	tables   dynamo.Tables
}

func (st *stage) target() dbTarget { return dbTarget{st.endpoint, st.plain, st.tables} }

func probeStore(ctx context.Context, t dbTarget) (probe, error) {
	var (
		p    probe
		wg   sync.WaitGroup
		errs [3]error
		took [3]time.Duration
	)
	start := time.Now()
	wg.Go(func() {
		_, errs[0] = t.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(t.tables.Control), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "config"}, "sk": &types.AttributeValueMemberS{Value: "config"}}})
		took[0] = time.Since(start)
	})
	for i, name := range []string{t.tables.Messages, t.tables.Control} {
		wg.Go(func() {
			_, errs[i+1] = t.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
			took[i+1] = time.Since(start)
		})
	}
	wg.Wait()
	p.Ms = ms(time.Since(start))
	p.GetItemMs, p.DescribeTableMs = ms(took[0]), ms(max(took[1], took[2]))
	return p, errors.Join(errs[:]...)
}

// startCold starts the bootstrap under the emulator on t and times its
// init through the first (empty) invocation. The caller closes the
// process.
func startCold(ctx context.Context, t dbTarget, rie, bootstrap string, env map[string]string) (*esm.RIEProcess, coldStart, func() string, error) {
	var (
		c       coldStart
		logMu   sync.Mutex
		logs    bytes.Buffer
		readyAt time.Time
	)
	record := func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		n, err := logs.Write(p)
		if readyAt.IsZero() && bytes.Contains(logs.Bytes(), []byte("outbox relay: ready")) {
			readyAt = time.Now()
		}
		return n, err
	}
	output := func() string { logMu.Lock(); defer logMu.Unlock(); return logs.String() }
	var err error
	if c.Probe, err = probeStore(ctx, t); err != nil {
		return nil, c, output, fmt.Errorf("probe DynamoDB Local: %w", err)
	}
	env = maps.Clone(env)
	env["OUTBOX_MESSAGES_TABLE"], env["OUTBOX_CONTROL_TABLE"] = t.tables.Messages, t.tables.Control
	env["OUTBOX_DYNAMODB_ENDPOINT"] = t.endpoint
	proc, err := esm.StartRIE(ctx, esm.RIEOptions{
		RIEPath: rie, BootstrapPath: bootstrap, Timeout: 900 * time.Second, Output: writerFunc(record), Env: env,
	})
	if err != nil {
		return nil, c, output, err
	}
	start := time.Now()
	if _, err := proc.Invoke(ctx, events.DynamoDBEvent{}); err != nil {
		proc.Close()
		return nil, c, output, fmt.Errorf("cold invocation: %w\n%s", err, output())
	}
	c.ColdInvokeMs = ms(time.Since(start))
	// The emulator prints its REPORT line after it has answered.
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c.ReportInitMs, err = initDuration(output()); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		proc.Close()
		return nil, c, output, err
	}
	logMu.Lock()
	ready := readyAt
	logMu.Unlock()
	if ready.IsZero() {
		proc.Close()
		return nil, c, output, fmt.Errorf("the bootstrap never logged \"outbox relay: ready\":\n%s", tail(output(), 4000))
	}
	c.InitMs = ms(ready.Sub(start))
	c.InitSteps = initSteps(output())
	return proc, c, output, nil
}

// footprint measures the inits on empty, an outbox created as the stage's
// was (same schema, bucket count, config item and stream; no items) in a
// DynamoDB Local holding nothing else (initOn says which), then starts
// the bootstrap on the stage's tables, pre-filled with bl, and drains the
// backlog.
func footprint(ctx context.Context, st *stage, empty dbTarget, initOn, rie, bootstrap string, bl backlog, coldStarts int) (footprintResult, error) {
	res := footprintResult{RunArch: runtime.GOARCH, GoMemLimit: footprintGoMemLimit, Backlog: bl, Messages: bl.Messages, InitOn: initOn}
	env := map[string]string{
		"OUTBOX_TOPICS":              st.topic,
		"KAFKA_BOOTSTRAP_SERVERS":    strings.Join(st.brokers, ","),
		"KAFKA_AUTH":                 "none",
		"AWS_REGION":                 st.awsCfg.Region,
		"AWS_ACCESS_KEY_ID":          dynamolocal.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY":      dynamolocal.SecretAccessKey,
		"AWS_LAMBDA_LOG_STREAM_NAME": "bench/[$LATEST]rie",
	}
	if footprintGoMemLimit != "" {
		env["GOMEMLIMIT"] = footprintGoMemLimit
	}
	if footprintPprof != "" {
		dir, err := filepath.Abs(footprintPprof)
		if err != nil {
			return res, err
		}
		env["OUTBOX_PROFILE_DIR"] = dir
	}
	// The measured cold starts, on the empty outbox, each a second after
	// the previous one's init; then the start that drains, on the filled
	// one.
	var (
		proc   *esm.RIEProcess
		output func() string
	)
	pause := func() error {
		proc.Close()
		select {
		case <-time.After(time.Second):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := range max(coldStarts, 1) {
		if proc != nil {
			if err := pause(); err != nil {
				return res, err
			}
		}
		var c coldStart
		var err error
		if proc, c, output, err = startCold(ctx, empty, rie, bootstrap, env); err != nil {
			return res, fmt.Errorf("cold start %d: %w", i+1, err)
		}
		res.ColdStarts = append(res.ColdStarts, c)
	}
	first := res.ColdStarts[0]
	res.InitMs, res.InitSteps, res.ColdInvokeMs, res.ReportInitMs = first.InitMs, first.InitSteps, first.ColdInvokeMs, first.ReportInitMs
	if err := pause(); err != nil {
		return res, err
	}
	var err error
	if res.ProbeFilled, err = probeStore(ctx, st.target()); err != nil {
		return res, fmt.Errorf("probe DynamoDB Local on the filled tables: %w", err)
	}
	if proc, res.DrainStart, output, err = startCold(ctx, st.target(), rie, bootstrap, env); err != nil {
		return res, fmt.Errorf("the draining start: %w", err)
	}
	defer proc.Close()
	pid, err := pidOf(bootstrap)
	if err != nil {
		return res, err
	}

	hints := events.DynamoDBEvent{}
	for b := range st.buckets {
		hints.Records = append(hints.Records, events.DynamoDBEventRecord{
			EventID: fmt.Sprintf("bench-%d", b), EventName: "INSERT", EventSource: "aws:dynamodb",
			Change: events.DynamoDBStreamRecord{
				// The bucket's last message: the relay drains a bucket up
				// to the highest sequence its hints name.
				Keys: map[string]events.DynamoDBAttributeValue{"b": events.NewNumberAttribute(strconv.Itoa(b)),
					"s": events.NewNumberAttribute(strconv.FormatInt(max(bl.Last[b], 1), 10))},
				SequenceNumber: fmt.Sprintf("%021d", b+1), StreamViewType: "KEYS_ONLY",
			},
		})
	}
	start := time.Now()
	for {
		res.Invocations++
		resp, err := proc.Invoke(ctx, hints)
		if err != nil {
			return res, fmt.Errorf("drain invocation: %w\n%s", err, tail(output(), 4000))
		}
		left, err := st.remaining(ctx)
		if err != nil {
			return res, err
		}
		if left == 0 {
			break
		}
		if res.Invocations >= 20 {
			return res, fmt.Errorf("%d messages left after %d invocations (last response %+v)\n%s", left, res.Invocations, resp, tail(output(), 4000))
		}
	}
	res.DrainSeconds = time.Since(start).Seconds()
	if res.PeakRSSBytes, res.RSSAfterBytes, err = memoryOf(pid); err != nil {
		return res, err
	}
	return res, nil
}

var (
	initRE     = regexp.MustCompile(`Init Duration: ([0-9.]+) ms`)
	initStepRE = regexp.MustCompile(`"init_([a-z_]+)_ms":([0-9.]+)`)
)

// initSteps reads the init steps from the bootstrap's "ready" line.
func initSteps(logs string) map[string]float64 {
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, "outbox relay: ready") {
			continue
		}
		steps := map[string]float64{}
		for _, m := range initStepRE.FindAllStringSubmatch(line, -1) {
			if v, err := strconv.ParseFloat(m[2], 64); err == nil {
				steps[m[1]] = v
			}
		}
		return steps
	}
	return nil
}

func initDuration(logs string) (float64, error) {
	m := initRE.FindStringSubmatch(logs)
	if m == nil {
		return 0, fmt.Errorf("no Init Duration in the emulator's REPORT line:\n%s", tail(logs, 4000))
	}
	return strconv.ParseFloat(m[1], 64)
}

// pidOf finds the process running the executable at path (the bootstrap
// the emulator started).
func pidOf(path string) (int, error) {
	want, err := filepath.EvalSymlinks(path)
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("peak RSS is read from /proc (Linux only): %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == want {
			return pid, nil
		}
	}
	return 0, errors.New("the bootstrap process was not found under /proc")
}

// memoryOf reads VmHWM (peak resident set) and VmRSS of pid, in bytes.
func memoryOf(pid int) (hwm, rss int64, err error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmHWM" && name != "VmRSS") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s of pid %d: %q", name, pid, rest)
		}
		if name == "VmHWM" {
			hwm = kb << 10
		} else {
			rss = kb << 10
		}
	}
	if hwm == 0 {
		return 0, 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
	}
	return hwm, rss, sc.Err()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// libraryRoot finds the outbox library's module root (the directory whose
// go.mod declares github.com/dynakafka/outbox) from the working directory up:
// the bench is its own module (tools/), so the nearest go.mod is not it.
func libraryRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(b) == "github.com/dynakafka/outbox" {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("the outbox library's go.mod was not found above the working directory; run the bench from the repository")
		}
		dir = parent
	}
}

// modulePath returns the path of a go.mod's module directive.
func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// installRIE runs scripts/install-rie.sh (idempotent) and returns the
// emulator's path.
func installRIE(ctx context.Context, root string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "install-rie.sh"))
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("install the Lambda RIE: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// initWarmProbes is how many probes warm the inits' DynamoDB Local up
// before the first measured start (its JVM compiles the calls' code as
// the drained outbox's pre-fill compiled its own).
const initWarmProbes = 300

// initTarget makes the outbox the measured inits start on: created as
// st's was, empty, in a DynamoDB Local of its own warmed up with probes
// ("empty-dynamodb-local"); with a given endpoint, beside st's
// ("empty-tables", where the other items still slow DynamoDB Local's
// DescribeTable). stop stops what it started.
func (e *env) initTarget(ctx context.Context, st *stage) (t dbTarget, initOn string, stop func(), err error) {
	stop = func() {}
	t = dbTarget{endpoint: st.endpoint, client: st.plain, tables: dynamo.Tables{Messages: st.tables.Messages + "-init", Control: st.tables.Control + "-init"}}
	initOn = "empty-tables"
	if e.endpoint == "" {
		inst, err := dynamolocal.Start(ctx, dynamolocal.Options{StartTimeout: 3 * time.Minute})
		if err != nil {
			return t, "", stop, fmt.Errorf("start the inits' DynamoDB Local: %w", err)
		}
		stop = func() { _ = inst.Stop() }
		e.mu.Lock()
		e.instances++
		e.mu.Unlock()
		cfg, err := awsConfig(ctx, inst.Endpoint)
		if err != nil {
			stop()
			return t, "", func() {}, err
		}
		t.endpoint, t.client, t.tables, initOn = inst.Endpoint, dynamolocal.NewClient(cfg, inst.Endpoint), st.tables, "empty-dynamodb-local"
	}
	if err := dynamo.CreateTables(ctx, t.client, t.tables, dynamo.BucketCount(st.buckets)); err != nil {
		stop()
		return t, "", func() {}, fmt.Errorf("create the inits' tables: %w", err)
	}
	for range initWarmProbes {
		if _, err := probeStore(ctx, t); err != nil {
			stop()
			return t, "", func() {}, fmt.Errorf("warm the inits' DynamoDB Local up: %w", err)
		}
	}
	return t, initOn, stop, nil
}
