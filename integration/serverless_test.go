package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/attrib"
	"github.com/dynakafka/outbox/internal/harness/checker"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/local/esm"
	"github.com/dynakafka/outbox/local/schedule"
	"github.com/dynakafka/outbox/relay"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func (e *env) streamARN(ctx context.Context, t *testing.T) string {
	t.Helper()
	out, err := e.dynamo.Client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(e.tables.Messages)})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.Table.LatestStreamArn)
}

// mapping starts a local event-source mapping on the messages stream that
// invokes inv, configured like template.yaml's event source.
func (e *env) mapping(ctx context.Context, t *testing.T, inv esm.Invoker, opts ...esm.Opt) *esm.Mapping {
	t.Helper()
	base := []esm.Opt{esm.BatchSize(500), esm.Filter(esm.InsertsOnly), esm.MaximumRetryAttempts(5),
		esm.BisectBatchOnFunctionError(true), esm.ReportBatchItemFailures(true)}
	m, err := esm.New(e.dynamo.Streams, e.streamARN(ctx, t), inv, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	mctx, cancel := context.WithCancel(ctx)
	go func() { defer close(done); _ = m.Run(mctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

// writeKeyed writes n messages over keys, several per transaction, each key's
// messages numbered in commit order; it records them in chk.
func (e *env) writeKeyed(ctx context.Context, t *testing.T, chk *checker.Checker, writer int, n int, keys int) {
	t.Helper()
	counters := map[string]int64{}
	for i := 0; i < n; i += 5 {
		key := fmt.Sprintf("w%d-k%d", writer, (i/5)%keys)
		var msgs []outbox.Message
		for j := i; j < min(i+5, n); j++ {
			counters[key]++
			msgs = append(msgs, outbox.Message{ID: outbox.NewID(), Topic: e.topic, Key: []byte(key), Value: []byte(fmt.Sprint(counters[key]))})
		}
		if _, err := e.writer.Write(ctx, nil, msgs...); err != nil {
			t.Errorf("write: %v", err)
			return
		}
		for _, m := range msgs {
			var order int64
			fmt.Sscan(string(m.Value), &order)
			chk.Committed(m.ID, key, order)
		}
	}
}

func (e *env) checkDelivery(ctx context.Context, t *testing.T, chk *checker.Checker) <-chan struct{} {
	return e.consume(ctx, t, func(id string, key, value []byte) {
		var order int64
		fmt.Sscan(string(value), &order)
		chk.Delivered(id, id, string(key), order)
	})
}

func waitDelivered(t *testing.T, chk *checker.Checker, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for chk.Missing() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d committed messages not delivered within %v", chk.Missing(), within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Enqueue → stream → local event-source mapping → relay handler → Kafka.
func TestStreamToKafkaThroughTheEventSourceMapping(t *testing.T) {
	t.Parallel() // mostly waiting on the stream: overlaps the other long tests
	e := newEnv(t, 8)
	// Bounds against hangs, not speed checks: the long tests of this
	// package run in parallel on what may be a busy 2-core machine.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	chk := checker.New()
	// No fault is injected, but on a busy machine a resumed drain can
	// outlast its window before its tombstones land (they are then
	// published again): the attribution tells those from a decided
	// message published again.
	at := attrib.New(e.store, e.pub, chk)
	rl, err := relay.New(ctx, at, at.ViaAs("relay", e.pub), relay.DeadlineMargin(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	fn := handler.NewRelay(rl, 8, quiet)
	m := e.mapping(ctx, t, esm.InProcess(fn.Handle, esm.Timeout(time.Minute)))
	cctx, stop := context.WithCancel(ctx)
	consumed := e.checkDelivery(cctx, t, chk)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); e.writeKeyed(ctx, t, chk, w, 500, 10) }()
	}
	wg.Wait()
	waitDelivered(t, chk, 8*time.Minute)
	time.Sleep(300 * time.Millisecond)
	stop()
	<-consumed
	r := chk.Result()
	st := m.Stats()
	ov := at.Overlaps()
	t.Logf("esm: committed=%d delivered_unique=%d duplicates=%d unexplained=%d %s invocations=%d records=%d published_by_handler=%d duplicates_by_cause=%s",
		r.Committed, r.DeliveredUnique, r.Duplicates, r.Unexplained, ov, st.Invocations, st.RecordsSeen, fn.Counters().Published.Load(), r.Causes())
	if ov.UnadmittedCount() > 0 {
		t.Errorf("I4: one bucket published by two processes at once %d times outside any documented window: %s", ov.UnadmittedCount(), ov.Details())
	}
	for _, id := range r.UnexplainedIDs {
		for _, line := range at.Trace(id) {
			t.Logf("unexplained %s: %s", id, line)
		}
	}
	if !r.OK() || r.Committed != 2000 {
		t.Fatalf("result %+v", r)
	}
	if fn.Counters().Published.Load() == 0 || st.Invocations == 0 {
		t.Fatal("the relay handler never published: delivery came from elsewhere")
	}
}

// With no event-source mapping at all, the sweeper alone delivers everything.
func TestSweeperAloneDeliversEverything(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	chk := checker.New()
	for w := range 2 {
		e.writeKeyed(ctx, t, chk, w, 400, 7)
	}
	cctx, stop := context.WithCancel(ctx)
	consumed := e.checkDelivery(cctx, t, chk)
	sw, err := handler.NewSweeper(e.relay(t, relay.RelayID("sweeper"), relay.DeadlineMargin(time.Second)), quiet)
	if err != nil {
		t.Fatal(err)
	}
	clk := schedule.NewManualClock(time.Now())
	runDone := make(chan struct{})
	sctx, stopSchedule := context.WithCancel(ctx)
	var (
		mu        sync.Mutex
		summaries []handler.Summary
	)
	go func() {
		defer close(runDone)
		_ = schedule.Run(sctx, schedule.Options{Clock: clk}, func(ctx context.Context, ev events.CloudWatchEvent) error {
			s, err := sw.Handle(ctx, ev)
			mu.Lock()
			summaries = append(summaries, s)
			mu.Unlock()
			return err
		}, func(err error) { t.Errorf("sweep: %v", err) })
	}()
	// One minute passes on the schedule's clock: one sweep.
	if err := clk.Fire(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, chk, 8*time.Minute)
	// The next minute's tick is taken only when the first sweep has ended;
	// let the second (idle) sweep finish too.
	if err := clk.Fire(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(summaries) == 2 })
	stopSchedule()
	<-runDone
	time.Sleep(200 * time.Millisecond)
	stop()
	<-consumed
	r := chk.Result()
	if !r.OK() || r.Committed != 800 || r.Duplicates != 0 {
		t.Fatalf("result %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	first := summaries[0]
	if first.Pending == 0 || len(first.Ready) == 0 || fmt.Sprint(first.Drained) != fmt.Sprint(first.Ready) || len(first.Failed) != 0 {
		t.Fatalf("first sweep %+v; it should have seen the backlog and drained every ready bucket", first)
	}
	if summaries[1].Pending != 0 {
		t.Fatalf("second sweep still saw %d pending", summaries[1].Pending)
	}
	if left := e.pendingMessages(ctx, t); left != 0 {
		t.Fatalf("%d messages left after the sweep", left)
	}
}

// countingPublisher counts what its inner publisher acknowledged.
type countingPublisher struct {
	inner outbox.Publisher
	n     atomic.Int64
}

func (p *countingPublisher) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	n, err := p.inner.Publish(ctx, msgs)
	p.n.Add(int64(n))
	return n, err
}

// The relay (through the event-source mapping) and the sweeper run at once
// over the same buckets; both must drain something, and never the same
// bucket at the same time.
func TestRelayAndSweeperConcurrently(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 8)
	// A bound against hangs, not a speed check (go test -timeout is the last
	// resort): on a loaded machine DynamoDB Local alone can take minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	chk := checker.New()
	// Duplicates are legal when a publish was not decided before the
	// bucket was read again (on a busy machine a resumed drain can outlast
	// its window); the attribution tells those from a decided message read
	// again, which would be a bug.
	at := attrib.New(e.store, e.pub, chk)
	// Each publishes through its own probe: the I4 check compares their
	// publish intervals per bucket.
	relayPub := &countingPublisher{inner: at.ViaAs("relay", e.pub)}
	sweepPub := &countingPublisher{inner: at.ViaAs("sweeper", e.pub)}
	// The sweeper sweeps back to back with no SweepMinAge, so the two take
	// buckets from each other all the time: a short ResumeWindow (and the
	// LeaseMargin inside it) keeps each handover's wait short.
	common := []relay.Option{relay.DeadlineMargin(time.Second), relay.BatchSize(50),
		relay.LeaseMargin(500 * time.Millisecond), relay.MaxClockSkew(500 * time.Millisecond), relay.ResumeWindow(1500 * time.Millisecond)}
	rl, err := relay.New(ctx, at, relayPub, append(common, relay.RelayID("relay"))...)
	if err != nil {
		t.Fatal(err)
	}
	sweeper, err := relay.New(ctx, at, sweepPub, append(common, relay.RelayID("sweeper"))...)
	if err != nil {
		t.Fatal(err)
	}
	fn := handler.NewRelay(rl, 8, quiet)
	// A batching window lets the sweeper reach some buckets first.
	e.mapping(ctx, t, esm.InProcess(fn.Handle, esm.Timeout(time.Minute)), esm.MaximumBatchingWindow(500*time.Millisecond))
	sw, err := handler.NewSweeper(sweeper, quiet)
	if err != nil {
		t.Fatal(err)
	}
	clk := schedule.NewManualClock(time.Now())
	sctx, cancelSchedule := context.WithCancel(ctx)
	runDone := make(chan struct{})
	var stopping atomic.Bool
	go func() {
		defer close(runDone)
		_ = schedule.Run(sctx, schedule.Options{Clock: clk}, func(ctx context.Context, ev events.CloudWatchEvent) error {
			if stopping.Load() {
				return nil // the test is over: no new sweep
			}
			_, err := sw.Handle(ctx, ev)
			return err
		}, func(err error) { t.Errorf("sweep: %v", err) })
	}()
	// stopSchedule ends the schedule without cancelling a sweep in flight
	// (a cancelled sweep fails with "context canceled", which is no failure
	// of the sweeper): the last tick is taken only once the sweep before it
	// has returned, and it sweeps nothing. Every error onErr sees is real.
	stopSchedule := func() {
		stopping.Store(true)
		if err := clk.Fire(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		cancelSchedule()
	}
	cctx, stop := context.WithCancel(ctx)
	consumed := e.checkDelivery(cctx, t, chk)
	var wg sync.WaitGroup
	writing := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); e.writeKeyed(ctx, t, chk, w, 600, 10) }()
	}
	go func() { wg.Wait(); close(writing) }()
	// Fire the schedule continuously while the writers write.
fire:
	for {
		select {
		case <-writing:
			break fire
		default:
		}
		if err := clk.Fire(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitDelivered(t, chk, 8*time.Minute)
	stopSchedule()
	<-runDone
	time.Sleep(300 * time.Millisecond)
	stop()
	<-consumed
	r := chk.Result()
	ov := at.Overlaps()
	t.Logf("relay published %d, sweeper published %d, duplicates %d unexplained %d %s duplicates_by_cause=%s",
		relayPub.n.Load(), sweepPub.n.Load(), r.Duplicates, r.Unexplained, ov, r.Causes())
	if ov.UnadmittedCount() > 0 {
		t.Errorf("I4: the relay and the sweeper published one bucket at once %d times outside any documented window: %s", ov.UnadmittedCount(), ov.Details())
	}
	for _, id := range r.UnexplainedIDs {
		for _, line := range at.Trace(id) {
			t.Logf("unexplained %s: %s", id, line)
		}
	}
	if !r.OK() || r.Committed != 2400 {
		t.Fatalf("result %+v", r)
	}
	if relayPub.n.Load() == 0 || sweepPub.n.Load() == 0 {
		t.Fatalf("relay published %d and sweeper %d; both must have drained something", relayPub.n.Load(), sweepPub.n.Load())
	}
}

// bootstrapUnderRIE builds the function lambda/<fn> and starts it under the
// Lambda Runtime Interface Emulator with the environment of e plus extra;
// logs gets its output.
func bootstrapUnderRIE(ctx context.Context, t *testing.T, e *env, fn string, extra map[string]string, logs io.Writer) *esm.RIEProcess {
	t.Helper()
	root := repoRoot(t)
	rie := installRIE(t, root)
	bootstrap := buildBootstrap(t, root, t.TempDir(), fn)
	env := e.functionEnv(e.dynamo.Endpoint, "rie")
	maps.Copy(env, extra)
	proc, err := esm.StartRIE(ctx, esm.RIEOptions{RIEPath: rie, BootstrapPath: bootstrap, Timeout: 60 * time.Second, Output: logs, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Close() })
	return proc
}

// lockedBuffer is a bytes.Buffer for a writer in another goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// emfLines returns the function output's EMF lines, decoded, after checking
// their namespace and dimension.
func emfLines(t *testing.T, out string, table string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, `{"_aws":`) {
			continue
		}
		var doc struct {
			AWS struct {
				CloudWatchMetrics []struct {
					Namespace  string
					Dimensions [][]string
				}
			} `json:"_aws"`
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &doc); err != nil {
			t.Fatalf("EMF line %s: %v", line, err)
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		d := doc.AWS.CloudWatchMetrics
		if len(d) != 1 || d[0].Namespace != handler.Namespace || fmt.Sprint(d[0].Dimensions) != "[[Outbox]]" || m["Outbox"] != table || m["level"] != "INFO" {
			t.Fatalf("EMF line with another namespace, dimension or level: %s", line)
		}
		lines = append(lines, m)
	}
	return lines
}

// The real relay bootstrap, built from lambda/relay, runs under the Lambda
// Runtime Interface Emulator and is invoked by the event-source mapping. It
// writes one EMF line per invocation.
func TestRelayBootstrapUnderRIE(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the bootstrap and the emulator")
	}
	e := newEnv(t, 4)
	if e.dynamo.Endpoint == "" {
		t.Skip("needs a DynamoDB endpoint the bootstrap can reach")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	logs := &lockedBuffer{}
	proc := bootstrapUnderRIE(ctx, t, e, "relay", nil, logs)
	m := e.mapping(ctx, t, proc)
	chk := checker.New()
	cctx, stop := context.WithCancel(ctx)
	consumed := e.checkDelivery(cctx, t, chk)
	e.writeKeyed(ctx, t, chk, 0, 300, 6)
	func() {
		defer func() {
			if t.Failed() {
				t.Logf("function output:\n%s", logs.String())
			}
		}()
		waitDelivered(t, chk, 2*time.Minute)
	}()
	stop()
	<-consumed
	if r := chk.Result(); !r.OK() || r.Committed != 300 {
		t.Fatalf("result %+v", r)
	}
	if m.Stats().Invocations == 0 {
		t.Fatal("the bootstrap was never invoked")
	}
	// An invocation's output may reach the pipe after its response: wait
	// for a line per invocation, for a while.
	var (
		out         string
		lines       []map[string]any
		invocations int64
	)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		invocations = m.Stats().Invocations
		out = logs.String()
		if lines = emfLines(t, out, e.tables.Messages); len(lines) >= int(invocations) || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(out, "outbox relay: ready") || !strings.Contains(out, `"requestId"`) {
		t.Fatalf("the bootstrap's logs lack its init line or a request id:\n%s", out)
	}
	published := 0.0
	for _, l := range lines {
		n, _ := l["MessagesPublished"].(float64)
		published += n
	}
	if len(lines) != int(invocations) || published < 300 {
		t.Fatalf("%d EMF lines for %d invocations, %v messages published in them; want one line per invocation and at least 300:\n%s",
			len(lines), invocations, published, out)
	}
	t.Logf("relay EMF line: %s", firstLineWith(out, `"MessagesPublished":`))
}

// The real sweeper bootstrap, built from lambda/sweeper, under the emulator:
// a scheduled invocation drains what the stream path never saw and writes
// one EMF line with the backlog it found.
func TestSweeperBootstrapUnderRIE(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the bootstrap and the emulator")
	}
	e := newEnv(t, 4)
	if e.dynamo.Endpoint == "" {
		t.Skip("needs a DynamoDB endpoint the bootstrap can reach")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	chk := checker.New()
	e.writeKeyed(ctx, t, chk, 0, 40, 4)
	logs := &lockedBuffer{}
	proc := bootstrapUnderRIE(ctx, t, e, "sweeper", map[string]string{"OUTBOX_SWEEP_MIN_AGE": "0s"}, logs)
	event, err := os.ReadFile("../lambda/handler/testdata/scheduled.json")
	if err != nil {
		t.Fatal(err)
	}
	sweep := func() {
		t.Helper()
		res, err := http.Post(proc.URL, "application/json", bytes.NewReader(event))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || bytes.Contains(body, []byte(`"errorMessage"`)) {
			t.Fatalf("sweep: %d %s\n%s", res.StatusCode, body, logs.String())
		}
	}
	sweep() // drains everything it found
	sweep() // finds nothing
	// The second invocation's output may reach the pipe after its
	// response (as the relay's test says): wait for both lines, for a while
	// (a hang guard, not a speed bound).
	var lines []map[string]any
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if lines = emfLines(t, logs.String(), e.tables.Messages); len(lines) >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if len(lines) != 2 {
		t.Fatalf("%d EMF lines for 2 invocations:\n%s", len(lines), logs.String())
	}
	first, second := lines[0], lines[1]
	if first["PendingMessages"] != 40.0 || first["StuckBuckets"] != 0.0 || first["LiveRelays"] != 1.0 || first["BucketsFailed"] != 0.0 ||
		first["ParkedMessages"] != 0.0 || second["PendingMessages"] != 0.0 || second["OldestPendingAge"] != 0.0 {
		t.Fatalf("EMF lines %v and %v", first, second)
	}
	if age, _ := first["OldestPendingAge"].(float64); age <= 0 {
		t.Fatalf("OldestPendingAge %v with 40 messages pending", first["OldestPendingAge"])
	}
	t.Logf("sweeper EMF line: %s", firstLineWith(logs.String(), `"PendingMessages":`))
}

// functionEnv is the environment of a function bootstrap on e, reaching
// DynamoDB at endpoint; logStream names its execution environment.
func (e *env) functionEnv(endpoint, logStream string) map[string]string {
	return map[string]string{
		"OUTBOX_MESSAGES_TABLE":      e.tables.Messages,
		"OUTBOX_CONTROL_TABLE":       e.tables.Control,
		"OUTBOX_TOPICS":              e.topic,
		"OUTBOX_DYNAMODB_ENDPOINT":   endpoint,
		"KAFKA_BOOTSTRAP_SERVERS":    strings.Join(e.kafka.Brokers, ","),
		"KAFKA_AUTH":                 "none",
		"AWS_REGION":                 e.dynamo.Config.Region,
		"AWS_ACCESS_KEY_ID":          dynamolocal.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY":      dynamolocal.SecretAccessKey,
		"AWS_LAMBDA_LOG_STREAM_NAME": "2026/11/30/[$LATEST]" + logStream,
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func firstLineWith(out, s string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, `{"_aws":`) && strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func installRIE(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "install-rie.sh"))
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("install the Lambda RIE: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}
