package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/sequence"
	"github.com/dynakafka/outbox/store/dynamo"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func TestMain(m *testing.M) { testenv.Main(m) }

// t0 is the clock of every golden run.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// cli runs command lines the way main does, with the environment, clock,
// relay id and standard input it is given, and records a transcript.
type cli struct {
	t        *testing.T
	env      map[string]string
	now      time.Time
	stdin    string
	connects int // calls of connect: the first possible network I/O
	// conn is prepended to every command line (after the command name);
	// replace maps strings that change between runs (table names, the
	// endpoint) to stable placeholders in the transcript.
	conn    []string
	replace []string
	out     bytes.Buffer
}

func newCLI(t *testing.T) *cli {
	return &cli{t: t, env: map[string]string{}, now: t0}
}

// run runs `outbox args...` and returns its exit code, standard output and
// standard error.
func (c *cli) run(args ...string) (int, string, string) {
	c.t.Helper()
	if len(args) > 0 && len(c.conn) > 0 {
		args = append(append([]string{args[0]}, c.conn...), args[1:]...)
	}
	var stdout, stderr bytes.Buffer
	a := &app{
		stdout: &stdout, stderr: &stderr, stdin: strings.NewReader(c.stdin),
		getenv:  func(k string) string { return c.env[k] },
		now:     func() time.Time { return c.now },
		relayID: func() string { return "outbox-cli/test" },
		connect: func(ctx context.Context, conn connection) (*session, error) {
			c.connects++
			return connect(ctx, conn)
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	code := a.run(ctx, args)
	return code, stdout.String(), stderr.String()
}

// step runs args, checks the exit code and adds the run to the transcript
// (the connection flags left out).
func (c *cli) step(wantCode int, args ...string) string {
	c.t.Helper()
	code, stdout, stderr := c.run(args...)
	if code != wantCode {
		c.t.Errorf("outbox %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, wantCode, stdout, stderr)
	}
	fmt.Fprintf(&c.out, "$ outbox %s\n", strings.Join(args, " "))
	if code != 0 {
		fmt.Fprintf(&c.out, "[exit %d]\n", code)
	}
	c.out.WriteString(stdout)
	c.out.WriteString(stderr)
	c.out.WriteString("\n")
	return stdout
}

var requestID = regexp.MustCompile(`RequestID: [0-9A-Za-z-]+`)

func (c *cli) normalise(s string) string {
	return requestID.ReplaceAllString(strings.NewReplacer(c.replace...).Replace(s), "RequestID: REQUEST-ID")
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/outbox -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test ./cmd/outbox -update rewrites it; review the diff)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestHelp(t *testing.T) {
	cases := [][]string{{"--help"}, {"-h"}, {"help"}}
	for _, cmd := range commands {
		cases = append(cases, []string{cmd.name, "--help"}, []string{"help", cmd.name}, []string{cmd.name, "-h"})
	}
	for _, args := range cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			c := newCLI(t)
			code, stdout, stderr := c.run(args...)
			if code != exitOK || stderr != "" || c.connects != 0 {
				t.Fatalf("exit %d, stderr %q, %d connects", code, stderr, c.connects)
			}
			name := "outbox"
			if args[0] != "help" && !strings.HasPrefix(args[0], "-") {
				name = args[0]
			} else if len(args) > 1 {
				name = args[1]
			}
			if !strings.Contains(stdout, "Example") && name != "outbox" {
				t.Errorf("help of %s has no example", name)
			}
			golden(t, filepath.Join("help", name+".txt"), stdout)
		})
	}
}

// TestUsageErrorsBeforeAnyIO runs every command line that is wrong on its
// face: each must exit 2 (usage) and say what to fix without building a
// client.
func TestUsageErrorsBeforeAnyIO(t *testing.T) {
	c := newCLI(t)
	tables := []string{"--messages", "m", "--control", "c"}
	with := func(args ...string) []string { return append(append([]string{args[0]}, tables...), args[1:]...) }
	for _, args := range [][]string{
		{},
		{"bogus"},
		{"help", "bogus"},
		{"status", "--bogus"},
		{"status"},
		{"status", "--messages", "m"},
		with("status", "--local"),
		with("status", "--endpoint", "localhost:8000"),
		with("status", "--timeout", "0s"),
		with("status", "--timeout", "soon"),
		with("status", "extra"),
		with("status", "--bucket", "-2"),
		with("status", "--bucket", "4096"),
		with("status", "--live-within", "0s"),
		with("status", "--json=maybe"),
		with("parked", "--bucket", "5000"),
		with("parked", "all"),
		with("replay"),
		with("replay", "--bucket", "1"),
		with("replay", "--bucket", "1", "--seq", "-1"),
		with("replay", "--bucket", "x", "--seq", "1"),
		with("replay", "--bucket", "1", "--seq", "1", "--value", "testdata/no-such-file"),
		with("replay", "--bucket", "1", "--seq", "1", "--from", "1", "--to", "2"),
		with("replay", "--bucket", "1", "--from", "3"),
		with("replay", "--bucket", "1", "--to", "3"),
		with("replay", "--bucket", "1", "--from", "5", "--to", "3"),
		with("replay", "--bucket", "1", "--from", "1", "--to", "3", "--value", "testdata/no-such-file"),
		with("replay", "--bucket", "1", "--from", "1", "--to", "3"),
		with("replay", "--bucket", "1", "--from", "1", "--to", "3", "--brokers", "b:9092", "--auth", "kerberos"),
		with("drop", "--seq", "1"),
		with("drop", "--bucket", "4096", "--seq", "1"),
		with("drain"),
		with("drain", "abc"),
		with("drain", "-1"),
		with("drain", "1", "2"),
		with("drain", "1"),
		with("drain", "1", "--brokers", "broker"),
		with("drain", "1", "--brokers", "b:9092", "--auth", "kerberos"),
		with("drain", "1", "--brokers", "b:9092", "--auth", "sasl-scram-sha-512"),
		with("init"),
		with("init", "--buckets", "0"),
		with("init", "--buckets", "-1"),
		with("init", "--buckets", "4097"),
		with("init", "--buckets", "eight"),
		with("init", "--buckets", "8", "--mode", "archive"),
		with("init", "--buckets", "8", "--retention", "48h"),
		with("init", "--buckets", "8", "--mode", "watermark", "--retention", "30m"),
		with("enqueue"),
		with("enqueue", "testdata/no-such-file"),
		with("enqueue", "a.json", "b.json"),
		with("enqueue", "testdata/help/outbox.txt"),
		{"local", "--messages", "m", "--control", "m"},
		{"local", "--topics", " , "},
		{"local", "--buckets", "0"},
		{"local", "--dynamodb-port", "65536"},
		{"local", "--kafka-port", "-1"},
		{"local", "extra"},
		{"local", "--endpoint", "http://127.0.0.1:8000"},
	} {
		c.step(exitUsage, args...)
	}
	if c.connects != 0 {
		t.Fatalf("%d connects for command lines that are wrong on their face", c.connects)
	}
	golden(t, "usage_errors.txt", c.out.String())
}

// TestEnvironmentNamesTheTables: OUTBOX_MESSAGES_TABLE and
// OUTBOX_CONTROL_TABLE stand in for the flags, and a flag wins.
func TestEnvironmentNamesTheTables(t *testing.T) {
	c := newCLI(t)
	var got []connection
	c.env = map[string]string{"OUTBOX_MESSAGES_TABLE": "env-m", "OUTBOX_CONTROL_TABLE": "env-c"}
	probe := func(args ...string) {
		var stdout, stderr bytes.Buffer
		a := &app{stdout: &stdout, stderr: &stderr, getenv: func(k string) string { return c.env[k] }, now: time.Now,
			connect: func(_ context.Context, conn connection) (*session, error) {
				got = append(got, conn)
				return nil, errors.New("stop here")
			}}
		if code := a.run(context.Background(), args); code != exitFailed {
			t.Fatalf("outbox %v: exit %d, %s", args, code, stderr.String())
		}
	}
	probe("status")
	probe("status", "--messages", "flag-m")
	if len(got) != 2 || got[0].messages != "env-m" || got[0].control != "env-c" || got[1].messages != "flag-m" || got[1].control != "env-c" {
		t.Fatalf("connections %+v", got)
	}
}

// outboxEnv is a fresh outbox on the test DynamoDB and a cli pointed at it.
func outboxEnv(t *testing.T) (*cli, *testenv.Dynamo, dynamo.Tables) {
	t.Helper()
	d := testenv.DynamoDB(t)
	tables := dynamo.Tables{Messages: testenv.Name(t, "m"), Control: testenv.Name(t, "c")}
	c := newCLI(t)
	c.conn = []string{"--local", "--endpoint", d.Endpoint, "--region", d.Config.Region, "--messages", tables.Messages, "--control", tables.Control}
	c.replace = []string{tables.Messages, "MESSAGES", tables.Control, "CONTROL", d.Endpoint, "ENDPOINT"}
	return c, d, tables
}

// newCounter is a Counter over tables' outbox, as its writers reserve.
func newCounter(ctx context.Context, t *testing.T, d *testenv.Dynamo, tables dynamo.Tables) *sequence.Counter {
	t.Helper()
	stored, err := dynamo.ReadConfig(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	counter, err := sequence.NewCounter(d.Client, tables.Control, stored, "")
	if err != nil {
		t.Fatal(err)
	}
	return counter
}

type fixedClock time.Time

func (f fixedClock) Now() time.Time { return time.Time(f) }

func id(n int) string { return fmt.Sprintf("01941f29-7c00-7000-8000-%012d", n) }

// seed fills a BucketCount 4 outbox as of t0:
//
//	bucket 0  never used
//	bucket 1  three messages (90, 60, 30 s old), leased by relay-a for 20 s more
//	bucket 2  sequence 1 reserved and never committed, 2 committed 5 s ago;
//	          relay-b saw the gap 4 s ago and let go
//	bucket 3  sequence 1 parked 3 min ago by relay-b, whose lease then
//	          expired without a release; sequence 2 pending for 2 min
//
// relay-a's heartbeat is 5 s old (live), relay-b's 2 min (not live).
func seed(t *testing.T, c *cli, d *testenv.Dynamo, tables dynamo.Tables) {
	t.Helper()
	c.step(exitOK, "init", "--buckets", "4")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := dynamo.NewWriter(ctx, d.Client, tables, dynamo.WithClock(fixedClock(t0)))
	if err != nil {
		t.Fatal(err)
	}
	st, err := dynamo.NewStore(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	counter := newCounter(ctx, t, d, tables)
	n := 0
	write := func(bucket int, ago time.Duration, value string) {
		t.Helper()
		n++
		m := outbox.Message{ID: id(n), Topic: "orders", Key: fmt.Appendf(nil, "order-%d", n), Value: []byte(value),
			Partition: outbox.PartitionOf(int32(bucket)), CreatedAt: t0.Add(-ago)}
		if _, err := w.Write(ctx, nil, m); err != nil {
			t.Fatal(err)
		}
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write(1, 90*time.Second, `{"order":1}`)
	write(1, 60*time.Second, `{"order":2}`)
	write(1, 30*time.Second, `{"order":3}`)
	must(st.Acquire(ctx, 1, "relay-a", t0.Add(-10*time.Second), 30*time.Second))

	must(counter.Reserve(ctx, 2, 1))
	write(2, 5*time.Second, `{"order":4}`)
	l, err := st.Acquire(ctx, 2, "relay-b", t0.Add(-4*time.Second), 30*time.Second)
	must(nil, err)
	l, err = st.Update(ctx, l, outbox.LeaseUpdate{Gap: 1, GapSince: t0.Add(-4 * time.Second)}, t0.Add(-4*time.Second))
	must(nil, err)
	must(st.Release(ctx, l, 0, 0))

	write(3, 10*time.Minute, strings.Repeat("x", 2000))
	write(3, 2*time.Minute, `{"order":6}`)
	l, err = st.Acquire(ctx, 3, "relay-b", t0.Add(-3*time.Minute), 30*time.Second)
	must(nil, err)
	must(st.Park(ctx, l, outbox.Parked{Bucket: 3, Sequence: 1, Reason: "MESSAGE_TOO_LARGE: the broker refused the record", Attempts: 3,
		FirstFailure: t0.Add(-3*time.Minute - 10*time.Second), LastFailure: t0.Add(-3 * time.Minute)}, t0.Add(-3*time.Minute)))

	must(nil, st.Heartbeat(ctx, "relay-a", t0.Add(-5*time.Second), 30*time.Second))
	must(nil, st.Heartbeat(ctx, "relay-b", t0.Add(-2*time.Minute), 30*time.Second))
}

func TestStatusAndDeadLetters(t *testing.T) {
	c, d, tables := outboxEnv(t)
	seed(t, c, d, tables)

	c.step(exitOK, "status")
	c.step(exitOK, "status", "--active")
	c.step(exitOK, "status", "--bucket", "2")
	c.step(exitUsage, "status", "--bucket", "4")
	c.step(exitOK, "parked")
	c.step(exitOK, "parked", "--bucket", "1")
	golden(t, "status.txt", c.normalise(c.out.String()))

	c.out.Reset()
	statusJSON := c.step(exitOK, "status", "--json")
	parkedJSON := c.step(exitOK, "parked", "--json")
	golden(t, "status_json.txt", c.normalise(c.out.String()))
	for _, js := range []string{statusJSON, parkedJSON} {
		if !json.Valid([]byte(js)) {
			t.Fatalf("not JSON:\n%s", js)
		}
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(statusJSON), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Totals.Pending != 6 || rep.Totals.Parked != 1 || rep.Totals.Gaps != 1 || rep.Totals.LeasesHeld != 1 ||
		*rep.Totals.OldestPendingAgeSeconds != 120 || len(rep.LiveRelays.IDs) != 1 {
		t.Errorf("totals %+v, live %v", rep.Totals, rep.LiveRelays.IDs)
	}

	// Repair the parked payload and replay it; then park it again and drop it.
	c.out.Reset()
	c.stdin = `{"order":5,"repaired":true}`
	c.step(exitOK, "replay", "--bucket", "3", "--seq", "1", "--value", "-")
	c.step(exitOK, "status", "--bucket", "3")
	c.step(exitOK, "parked")
	c.step(exitFailed, "replay", "--bucket", "3", "--seq", "1")
	c.step(exitFailed, "drop", "--bucket", "3", "--seq", "1")
	golden(t, "replay.txt", c.normalise(c.out.String()))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := dynamo.NewStore(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	pending, _, err := st.Pending(ctx, 3, 1, 10)
	if err != nil || len(pending) != 2 || pending[1].Message.ID != id(5) || string(pending[1].Message.Value) != c.stdin ||
		string(pending[1].Message.Key) != "order-5" || pending[1].Sequence != 3 {
		t.Fatalf("bucket 3 after replay: %+v, %v", pending, err)
	}
}

func TestDropAndInit(t *testing.T) {
	c, d, tables := outboxEnv(t)
	seed(t, c, d, tables)
	c.step(exitOK, "drop", "--bucket", "3", "--seq", "1")
	c.step(exitOK, "parked", "--bucket", "3")
	c.step(exitOK, "init", "--buckets", "4")
	c.step(exitMisconfigured, "init", "--buckets", "8")
	// --topics sets the list, status shows it and no warning; init without
	// it keeps the list; --topics "" empties it.
	c.step(exitOK, "init", "--buckets", "4", "--topics", "orders, audit")
	c.step(exitOK, "init", "--buckets", "4")
	c.step(exitOK, "status", "--bucket", "3")
	c.step(exitUsage, "init", "--buckets", "4", "--topics", "orders,order events")
	// A list that drops a stored topic is refused unless --replace-topics.
	c.step(exitMisconfigured, "init", "--buckets", "4", "--topics", "orders")
	c.step(exitUsage, "init", "--buckets", "4", "--replace-topics")
	c.step(exitOK, "init", "--buckets", "4", "--topics", "orders", "--replace-topics")
	c.step(exitOK, "init", "--buckets", "4", "--topics", "")
	golden(t, "drop_init.txt", c.normalise(c.out.String()))
}

// init writes the shared settings into the config item, keeps them when not
// given, and refuses another value than the stored one.
func TestInitSharedSettings(t *testing.T) {
	c, d, tables := outboxEnv(t)
	c.step(exitOK, "init", "--buckets", "2", "--max-message-bytes", "2097152", "--bucket-header", "bkt")
	c.step(exitOK, "init", "--buckets", "2")
	c.step(exitOK, "init", "--buckets", "2", "--max-message-bytes", "2097152")
	c.step(exitMisconfigured, "init", "--buckets", "2", "--max-message-bytes", "1048576")
	c.step(exitMisconfigured, "init", "--buckets", "2", "--bucket-header", "x-outbox-bucket")
	c.step(exitUsage, "init", "--buckets", "2", "--max-message-bytes", "12")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stored, err := dynamo.ReadConfig(ctx, d.Client, tables)
	if err != nil || stored.MaxMessageBytes != 2<<20 || stored.Headers != (outbox.HeaderNames{Bucket: "bkt"}) {
		t.Fatalf("config item %+v, %v; want MaxMessageBytes 2097152 and bucket header bkt", stored, err)
	}
}

func TestMissingOutbox(t *testing.T) {
	c, _, _ := outboxEnv(t)
	for _, args := range [][]string{{"status"}, {"parked"}, {"drop", "--bucket", "0", "--seq", "1"}} {
		c.step(exitMisconfigured, args...)
	}
	golden(t, "missing_outbox.txt", c.normalise(c.out.String()))
}

func TestDrain(t *testing.T) {
	c, d, tables := outboxEnv(t)
	k := testenv.Kafka(t)
	topic := testenv.Name(t, "orders")
	testenv.CreateTopic(t, k, topic, 2)
	c.replace = append(c.replace, topic, "TOPIC", strings.Join(k.Brokers, ","), "BROKERS")
	c.step(exitOK, "init", "--buckets", "2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := dynamo.NewWriter(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 4; n++ {
		bucket := int32(1) // three messages in bucket 1 (partition 1), the fourth in bucket 0
		if n == 4 {
			bucket = 0
		}
		m := outbox.Message{ID: id(n), Topic: topic, Key: fmt.Appendf(nil, "order-%d", n), Value: []byte("v"), Partition: outbox.PartitionOf(bucket)}
		if _, err := w.Write(ctx, nil, m); err != nil {
			t.Fatal(err)
		}
	}
	st, err := dynamo.NewStore(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	// relay-a holds bucket 0 until t0 (2030): drain must leave it alone.
	if _, err := st.Acquire(ctx, 0, "relay-a", t0, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	brokers := strings.Join(k.Brokers, ",")
	c.step(exitOK, "drain", "1", "--brokers", brokers, "--auth", "none")
	c.step(exitOK, "drain", "--brokers", brokers, "--auth", "none", "1") // nothing left: a no-op
	c.env["KAFKA_AUTH"] = "none"
	c.env["KAFKA_BOOTSTRAP_SERVERS"] = brokers // as the relay Lambda reads it
	c.step(exitNotDrained, "drain", "0")
	c.step(exitUsage, "drain", "2")
	golden(t, "drain.txt", c.normalise(c.out.String()))

	recs := consume(t, k, topic, 3)
	for i, r := range recs {
		var msgID string
		for _, h := range r.Headers {
			if h.Key == outbox.DefaultMessageIDHeader {
				msgID = string(h.Value)
			}
		}
		if r.Partition != 1 || msgID != id(i+1) {
			t.Errorf("record %d: partition %d, message id %q; want partition 1, %s", i, r.Partition, msgID, id(i+1))
		}
	}
	l, err := st.ReadLease(ctx, 1)
	if err != nil || l.Head != 3 || l.Owner != "" || l.HeldAt(time.Now()) {
		t.Fatalf("bucket 1 after drain: %+v, %v; want head 3, handed back (no owner)", l, err)
	}
	// The relay's next drain does not wait for a resume by the CLI.
	if l, err = st.Acquire(ctx, 1, "relay/fn", time.Now(), 30*time.Second); err != nil || l.PrevReleasedBy != "" || l.TakenOver {
		t.Fatalf("the relay's acquisition after drain: %+v, %v; want no ResumeWindow wait (PrevReleasedBy empty), no takeover", l, err)
	}
}

// TestReplayRange: in watermark mode the relay keeps what it published,
// status shows the retained range, and replay publishes part of it again
// with the original ids; above the head, or in delete mode, it is refused.
func TestReplayRange(t *testing.T) {
	c, d, tables := outboxEnv(t)
	k := testenv.Kafka(t)
	topic := testenv.Name(t, "orders")
	testenv.CreateTopic(t, k, topic, 2)
	brokers := strings.Join(k.Brokers, ",")
	c.replace = append(c.replace, topic, "TOPIC", brokers, "BROKERS")
	c.step(exitOK, "init", "--buckets", "2", "--mode", "watermark", "--retention", "48h")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := dynamo.NewWriter(ctx, d.Client, tables, dynamo.WithClock(fixedClock(t0.Add(-time.Hour))))
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 5; n++ {
		m := outbox.Message{ID: id(n), Topic: topic, Key: fmt.Appendf(nil, "order-%d", n), Value: fmt.Appendf(nil, "v%d", n), Partition: outbox.PartitionOf(1)}
		if _, err := w.Write(ctx, nil, m); err != nil {
			t.Fatal(err)
		}
	}
	c.env["KAFKA_AUTH"] = "none"
	c.env["KAFKA_BOOTSTRAP_SERVERS"] = brokers
	c.step(exitOK, "drain", "1")
	c.step(exitOK, "status")
	c.step(exitOK, "replay", "--bucket", "1", "--from", "2", "--to", "4")
	c.step(exitUsage, "replay", "--bucket", "1", "--from", "4", "--to", "9")
	c.step(exitUsage, "replay", "--bucket", "2", "--from", "1", "--to", "1")
	c.step(exitOK, "init", "--buckets", "2", "--mode", "watermark", "--retention", "48h")
	c.step(exitMisconfigured, "init", "--buckets", "2")
	golden(t, "replay_range.txt", c.normalise(c.out.String()))

	var rep statusReport
	if err := json.Unmarshal([]byte(c.step(exitOK, "status", "--json", "--bucket", "1")), &rep); err != nil {
		t.Fatal(err)
	}
	if r := rep.Buckets[0].Retained; rep.Config.Mode != "watermark" || rep.Config.RetentionSeconds != 48*3600 || r == nil || r.First != 1 || r.Last != 5 {
		t.Errorf("status --json: config %+v, retained %+v; want watermark, 172800 s, 1..5", rep.Config, r)
	}
	recs := consume(t, k, topic, 8)
	var got []string
	for _, r := range recs {
		var msgID, seq string
		for _, h := range r.Headers {
			switch h.Key {
			case outbox.DefaultMessageIDHeader:
				msgID = string(h.Value)
			case outbox.DefaultSequenceHeader:
				seq = string(h.Value)
			}
		}
		got = append(got, seq+"="+msgID)
	}
	want := []string{"1=" + id(1), "2=" + id(2), "3=" + id(3), "4=" + id(4), "5=" + id(5), "2=" + id(2), "3=" + id(3), "4=" + id(4)}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("records (sequence=id) %v, want %v", got, want)
	}

	// A delete-mode outbox retains nothing.
	del, _, _ := outboxEnv(t)
	del.env = c.env
	del.step(exitOK, "init", "--buckets", "1")
	if code, _, stderr := del.run("replay", "--bucket", "0", "--from", "1", "--to", "1"); code != exitMisconfigured || !strings.Contains(stderr, "watermark mode") {
		t.Errorf("replay in delete mode: exit %d, %s", code, stderr)
	}
}

// consume reads n records of topic from the start, in offset order per
// partition.
func consume(t *testing.T, k *testenv.KafkaCluster, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard, not a budget
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records: %v", len(recs), n, ctx.Err())
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		recs = append(recs, fs.Records()...)
	}
	return recs
}

// TestStatusWarnsOfAResetCounter: a counter below its bucket's head means
// new messages land at or below the head, where the relay takes them for
// leftovers and deletes them unpublished; status must say so.
func TestStatusWarnsOfAResetCounter(t *testing.T) {
	c, d, tables := outboxEnv(t)
	c.step(exitOK, "init", "--buckets", "1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := dynamo.NewStore(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	// Head 5 with no counter item: as after restoring only the messages
	// table, or deleting the counter by hand.
	l, err := st.Acquire(ctx, 0, "relay-a", t0, 30*time.Second)
	if err == nil {
		_, err = st.Update(ctx, l, outbox.LeaseUpdate{Head: 5, Cleaned: 5}, t0)
	}
	if err != nil {
		t.Fatal(err)
	}
	stdout := c.step(exitOK, "status")
	if !strings.Contains(stdout, "WARNING bucket 0: the counter (0) is below the head (5)") {
		t.Fatalf("no warning:\n%s", stdout)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(c.step(exitOK, "status", "--json")), &rep); err != nil || len(rep.Warnings) != 1 || rep.Totals.Pending != 0 {
		t.Fatalf("JSON warnings %q, pending %d, %v", rep.Warnings, rep.Totals.Pending, err)
	}
}

// TestEndpointKeepsTheCredentialChain: --endpoint (LocalStack, VPC, FIPS)
// changes where DynamoDB is reached, not who signs; only --local selects
// DynamoDB Local's static credentials.
func TestEndpointKeepsTheCredentialChain(t *testing.T) {
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMTHECHAIN")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	const endpoint = "https://dynamodb-fips.us-gov-west-1.amazonaws.com"
	for _, tc := range []struct {
		local   bool
		wantKey string
	}{
		{false, "AKIDFROMTHECHAIN"},
		{true, "outboxlocal"},
	} {
		s, err := connect(context.Background(), connection{messages: "m", control: "c", endpoint: endpoint, region: "us-gov-west-1", local: tc.local})
		if err != nil {
			t.Fatal(err)
		}
		creds, err := s.aws.Credentials.Retrieve(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if creds.AccessKeyID != tc.wantKey {
			t.Errorf("local=%v: access key %q, want %q", tc.local, creds.AccessKeyID, tc.wantKey)
		}
		if got := s.db.Options().BaseEndpoint; got == nil || *got != endpoint {
			t.Errorf("local=%v: DynamoDB endpoint %v, want %s", tc.local, got, endpoint)
		}
		if s.aws.Region != "us-gov-west-1" {
			t.Errorf("local=%v: region %q", tc.local, s.aws.Region)
		}
	}
}

// TestLocalEndpointSkipsTheChecksum: DynamoDB Local sends no CRC32 with its
// error responses, and the SDK warned of a checksum mismatch on standard
// error at every expected error of a CLI pointed at it by the lines
// `outbox local` prints (AWS_ENDPOINT_URL_DYNAMODB); a remote endpoint keeps
// the check.
func TestLocalEndpointSkipsTheChecksum(t *testing.T) {
	isolateAWSEnv(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMTHECHAIN")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_REGION", "us-east-1")
	for _, tc := range []struct {
		env, flag string
		skip      bool
	}{
		{"http://127.0.0.1:8000", "", true},
		{"http://localhost:8000", "", true},
		{"", "http://127.0.0.1:8000", true},
		{"", "https://dynamodb-fips.us-east-1.amazonaws.com", false},
		{"", "", false},
	} {
		t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", tc.env)
		s, err := connect(context.Background(), connection{messages: "m", control: "c", endpoint: tc.flag})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.db.Options().DisableValidateResponseChecksum; got != tc.skip {
			t.Errorf("AWS_ENDPOINT_URL_DYNAMODB=%q --endpoint %q: checksum validation off = %v, want %v", tc.env, tc.flag, got, tc.skip)
		}
	}
}

// TestNoCredentialsSaysWhatToDo: without credentials (and without --local)
// the SDK's chain ends at the EC2 instance metadata service, whose error
// named neither cause nor fix; the CLI says how to give credentials, before
// anything is sent.
func TestNoCredentialsSaysWhatToDo(t *testing.T) {
	isolateAWSEnv(t)
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1") // nothing listens there
	t.Setenv("AWS_REGION", "us-east-1")
	c := newCLI(t)
	code, stdout, stderr := c.run("status", "--messages", "orders-outbox", "--control", "orders-outbox-control", "--timeout", "2m")
	if code != exitFailed || stdout != "" {
		t.Fatalf("exit %d, stdout %q, want 1 and nothing", code, stdout)
	}
	for _, want := range []string{"no AWS credentials", "AWS_PROFILE", "AWS_ACCESS_KEY_ID", "outbox local", "--local --endpoint"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
}

// isolateAWSEnv clears the AWS settings of the environment the test runs
// in (a developer's profile, credentials or endpoints), so that only what a
// test sets counts.
func isolateAWSEnv(t *testing.T) {
	t.Helper()
	none := filepath.Join(t.TempDir(), "none")
	for _, k := range []string{"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
}

// A bucket stopped by a missing topic shows its REASON in status (and
// --json); park refuses what is not its first pending message and a bucket
// another relay holds, writing nothing, and parks the head, after which
// status shows no reason and parked lists it.
func TestParkAndStatusReason(t *testing.T) {
	c, d, tables := outboxEnv(t)
	seed(t, c, d, tables)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := dynamo.NewStore(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RecordStuck(ctx, 3, outbox.Stuck{Sequence: 2, MessageID: id(6), Topic: "order-evnts", Class: outbox.Fatal,
		Reason: `kafka: topic "order-evnts" does not exist; create it (the relay does not create topics)`,
		Since:  t0.Add(-5 * time.Minute), Last: t0.Add(-time.Minute), Count: 42}); err != nil {
		t.Fatal(err)
	}
	c.step(exitOK, "status", "--bucket", "3")
	c.step(exitOK, "status", "--bucket", "3", "--json")
	c.step(exitUsage, "park", "--bucket", "3")
	c.step(exitUsage, "park", "--bucket", "3", "--head", "--seq", "2")
	c.step(exitFailed, "park", "--bucket", "3", "--seq", "3")
	c.step(exitNotDrained, "park", "--bucket", "1", "--head")
	c.step(exitOK, "park", "--bucket", "3", "--head", "--reason", "topic typo")
	c.step(exitOK, "status", "--bucket", "3")
	c.step(exitOK, "parked", "--bucket", "3")
	c.step(exitFailed, "park", "--bucket", "3", "--head")
	golden(t, "park.txt", c.normalise(c.out.String()))
	if ps, err := st.ListParked(ctx, 3, 0); err != nil || len(ps) != 2 || ps[1].Sequence != 2 || ps[1].Message.ID != id(6) ||
		!strings.Contains(ps[1].Reason, "topic typo") || !strings.Contains(ps[1].Reason, "does not exist") {
		t.Fatalf("parked %+v, %v", ps, err)
	}
}

// TestContainment: a message for a topic that does not exist (the outbox
// lists no topics, so the writer accepts it) stops its bucket at the
// relay; outbox status names the reason, outbox park moves the message
// aside, the rest of the bucket flows, and once the topic exists outbox
// replay puts the parked message back and it is published: nothing lost.
// The relay is outbox drain, the relay Lambda's wiring.
func TestContainment(t *testing.T) {
	c, d, tables := outboxEnv(t)
	c.now = time.Now()
	k := testenv.Kafka(t)
	good, typo := testenv.Name(t, "orders"), testenv.Name(t, "order-evnts")
	testenv.CreateTopic(t, k, good, 1)
	brokers := strings.Join(k.Brokers, ",")
	c.env["KAFKA_AUTH"], c.env["KAFKA_BOOTSTRAP_SERVERS"] = "none", brokers
	c.step(exitOK, "init", "--buckets", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := dynamo.NewWriter(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	topics := []string{good, typo, good, good, good}
	for n, topic := range topics {
		m := outbox.Message{ID: id(n + 1), Topic: topic, Key: fmt.Appendf(nil, "order-%d", n+1), Value: []byte("v")}
		if _, err := w.Write(ctx, nil, m); err != nil {
			t.Fatalf("write %d (topic %s): %v", n+1, topic, err)
		}
	}

	// The relay publishes 1 and stops at 2, whatever it is asked.
	c.step(exitFailed, "drain", "0")
	c.step(exitFailed, "drain", "0")
	status := c.step(exitOK, "status")
	row := ""
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(l, "0 ") {
			row = l
		}
	}
	shown := strings.Contains(status, "REASON") && strings.Contains(row, "stopped at 2") &&
		strings.Contains(row, typo) && strings.Contains(row, "does not exist")
	if !shown {
		t.Errorf("status does not say why bucket 0 is stopped:\n%s", status)
	}

	c.step(exitOK, "park", "--bucket", "0", "--head", "--reason", "misspelt topic")
	c.step(exitOK, "drain", "0")
	after := c.step(exitOK, "status", "--json")
	var rep statusReport
	if err := json.Unmarshal([]byte(after), &rep); err != nil {
		t.Fatal(err)
	}
	flowed := consumeIDs(t, k, good, 4)
	unblocked := len(rep.Buckets) == 1 && rep.Buckets[0].Pending == 0 && rep.Buckets[0].Stuck == nil && rep.Buckets[0].Parked == 1 &&
		slices.Equal(flowed, []string{id(1), id(3), id(4), id(5)})
	if !unblocked {
		t.Errorf("after park and drain: bucket %+v, %s published %v; want 1, 3, 4, 5 published, nothing pending or stopped", rep.Buckets, good, flowed)
	}

	testenv.CreateTopic(t, k, typo, 1)
	c.step(exitOK, "replay", "--bucket", "0", "--seq", "2")
	c.step(exitOK, "drain", "0")
	replayed := consumeIDs(t, k, typo, 1)
	published := map[string]bool{}
	for _, s := range append(flowed, replayed...) {
		published[s] = true
	}
	lost := 0
	for n := range topics {
		if !published[id(n+1)] {
			lost++
		}
	}
	if lost != 0 || !slices.Equal(replayed, []string{id(2)}) {
		t.Errorf("replayed %v to %s; %d of %d messages never published", replayed, typo, lost, len(topics))
	}
	fmt.Printf("containment: stuck_reason_shown=%d unblocked=%d lost=%d\n", b2i(shown), b2i(unblocked), lost)
	if t.Failed() {
		t.Logf("transcript:\n%s", c.normalise(c.out.String()))
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// consumeIDs consumes n records of topic from its start and returns their
// message ids, in order.
func consumeIDs(t *testing.T, k *testenv.KafkaCluster, topic string, n int) []string {
	t.Helper()
	var ids []string
	for _, r := range consume(t, k, topic, n) {
		for _, h := range r.Headers {
			if h.Key == outbox.DefaultMessageIDHeader {
				ids = append(ids, string(h.Value))
			}
		}
	}
	return ids
}

// TestTablesMustBelongTogether: every command checks that both tables
// exist and belong together before it reads or writes anything else; a
// mistyped or swapped name exits 3 and says what to fix, and init with a
// mistyped messages table creates nothing.
func TestTablesMustBelongTogether(t *testing.T) {
	c, d, tables := outboxEnv(t)
	typo := tables.Messages + "-typo"
	c.replace = append([]string{typo, "MESSAGES-TYPO"}, c.replace...)
	c.step(exitOK, "init", "--buckets", "2")
	c.step(exitMisconfigured, "status", "--messages", typo)
	c.step(exitMisconfigured, "parked", "--messages", typo)
	c.step(exitMisconfigured, "drop", "--messages", typo, "--bucket", "0", "--seq", "1")
	c.step(exitMisconfigured, "drain", "--messages", typo, "0", "--brokers", "127.0.0.1:1", "--auth", "none")
	c.step(exitMisconfigured, "init", "--messages", typo, "--buckets", "2")
	c.step(exitMisconfigured, "status", "--messages", tables.Control, "--control", tables.Messages)
	golden(t, "tables.txt", c.normalise(c.out.String()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := d.Client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &typo}); err == nil {
		t.Fatal("init created the mistyped messages table")
	}
}

// TestReplayAfterAShrink: a message parked in bucket 3 of 4 outlives
// `outbox buckets set 2`, which removes its bucket: parked --bucket 3 still
// lists it and replay puts it in its key's bucket under the new count.
func TestReplayAfterAShrink(t *testing.T) {
	c, d, tables := outboxEnv(t)
	c.step(exitOK, "init", "--buckets", "4")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := dynamo.NewWriter(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Write(ctx, nil, outbox.Message{ID: id(1), Topic: "orders", Partition: outbox.PartitionOf(3), Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	st, err := dynamo.NewStore(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	l, err := st.Acquire(ctx, 3, "relay-a", time.Now(), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l, err = st.Park(ctx, l, outbox.Parked{Bucket: 3, Sequence: res.Messages[0].Sequence, Reason: "INVALID_RECORD"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Release(ctx, l, l.Head, l.Cleaned); err != nil {
		t.Fatal(err)
	}
	c.step(exitOK, "buckets", "set", "2")
	if out := c.step(exitOK, "parked", "--bucket", "3"); !strings.Contains(out, id(1)) {
		t.Errorf("parked --bucket 3 after the shrink:\n%s", out)
	}
	if out := c.step(exitOK, "replay", "--bucket", "3", "--seq", "1"); !strings.Contains(out, "into bucket 1") {
		t.Errorf("replay after the shrink:\n%s", out)
	}
	// Partition 3 of BucketCount 2 is bucket 1.
	pending, _, err := st.Pending(ctx, 1, 0, 10)
	if err != nil || len(pending) != 1 || pending[0].Message.ID != id(1) {
		t.Fatalf("bucket 1 after the replay: %+v, %v", pending, err)
	}
	if left, err := st.ListParked(ctx, 3, 0); err != nil || len(left) != 0 {
		t.Fatalf("dead letters left in bucket 3: %+v, %v", left, err)
	}
}

// TestChecksBeforeKafka: the bucket's range (against BucketCount) and, for
// replay, the outbox's mode are checked before Kafka is contacted (the
// brokers here refuse every connection), for drain and replay, and every
// bad Kafka setting is reported at once.
func TestChecksBeforeKafka(t *testing.T) {
	c, _, _ := outboxEnv(t)
	c.step(exitOK, "init", "--buckets", "2")
	c.step(exitUsage, "drain", "2", "--brokers", "127.0.0.1:1", "--auth", "none")
	c.step(exitUsage, "replay", "--bucket", "5", "--from", "1", "--to", "2", "--brokers", "127.0.0.1:1", "--auth", "none")
	c.step(exitMisconfigured, "replay", "--bucket", "1", "--from", "1", "--to", "2", "--brokers", "127.0.0.1:1", "--auth", "none")
	// A dead letter may sit beyond the count (a shrink removed its
	// bucket): replay and drop look, and find none here.
	c.step(exitFailed, "replay", "--bucket", "5", "--seq", "1")
	c.step(exitFailed, "drop", "--bucket", "5", "--seq", "1")
	c.step(exitUsage, "drain", "0", "--brokers", "localhost", "--auth", "kerberos", "--topics", "bad topic")
	c.step(exitUsage, "drain", "x", "--brokers", "localhost")
	golden(t, "before_kafka.txt", c.normalise(c.out.String()))
}

// TestStatusExplainsUnknownOldest: a bucket whose pending numbers hold no
// message yet (here a reservation not committed; after a drain, published
// messages whose head was not written yet) shows OLDEST "?" and a note
// that says why and when it resolves.
func TestStatusExplainsUnknownOldest(t *testing.T) {
	c, d, tables := outboxEnv(t)
	c.step(exitOK, "init", "--buckets", "2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	counter := newCounter(ctx, t, d, tables)
	if _, err := counter.Reserve(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	c.step(exitOK, "status")
	js := c.step(exitOK, "status", "--json")
	golden(t, "status_unknown_oldest.txt", c.normalise(c.out.String()))
	var rep statusReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "bucket 1") {
		t.Fatalf("notes %q, %v", rep.Notes, err)
	}
}

// buckets set changes BucketCount online: the old epoch ends at once on an
// empty outbox; with a pending message (no relay runs here) the change
// stands, its old epoch draining; status shows the epoch and the old
// buckets.
func TestBucketsSet(t *testing.T) {
	c, d, tables := outboxEnv(t)
	c.step(exitOK, "init", "--buckets", "4")
	if out := c.step(exitOK, "buckets", "set", "8"); !strings.Contains(out, "BucketCount changed from 4 to 8 (epoch 1)") {
		t.Errorf("buckets set 8 said %q", out)
	}
	if out := c.step(exitOK, "buckets", "set", "8"); !strings.Contains(out, "BucketCount is 8 already (epoch 1)") {
		t.Errorf("buckets set 8 again said %q", out)
	}
	c.step(exitUsage, "buckets", "set", "0")
	c.step(exitUsage, "buckets", "8")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := dynamo.NewWriter(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, nil, outbox.Message{Topic: "orders", Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	// No relay runs: the change stands, its old epoch draining.
	if out := c.step(exitOK, "buckets", "set", "2", "--change-timeout", "300ms"); !strings.Contains(out, "BucketCount changed from 8 to 2 (epoch 2)") ||
		!strings.Contains(out, "still drain") {
		t.Errorf("buckets set 2 with a message pending said %q", out)
	}
	// status shows the old buckets above the new count while they drain.
	if out := c.step(exitOK, "status"); !strings.Contains(out, "BucketCount 2 (epoch 2)") || !strings.Contains(out, "\n7       ") {
		t.Errorf("status after the change said %q; want the old buckets 0..7 listed", out)
	}
}

// init --regions puts an outbox in region mode; regions shows the slices,
// takeover and handback move one, and the mistakes are refused before
// anything is written.
func TestRegions(t *testing.T) {
	c, d, tables := outboxEnv(t)
	c.step(exitUsage, "init", "--buckets", "3", "--regions", "us-east-1,eu-west-1")
	c.step(exitUsage, "init", "--buckets", "4", "--regions", "us-east-1,us-east-1")
	c.step(exitOK, "init", "--buckets", "4", "--regions", "us-east-1,eu-west-1")
	c.step(exitMisconfigured, "init", "--buckets", "4", "--regions", "eu-west-1,us-east-1")
	if got := c.step(exitOK, "regions"); !strings.Contains(got, "region us-east-1: buckets 0..1, drained by us-east-1\n") ||
		!strings.Contains(got, "region eu-west-1: buckets 2..3, drained by eu-west-1\n") {
		t.Errorf("regions printed %q", got)
	}
	c.step(exitUsage, "regions", "takeover", "us-east-1")
	c.step(exitUsage, "regions", "handback", "eu-west-1", "--by", "us-east-1")
	c.step(exitFailed, "regions", "takeover", "ap-south-1", "--by", "eu-west-1")
	if got := c.step(exitOK, "regions", "takeover", "us-east-1", "--by", "eu-west-1"); !strings.Contains(got, "region us-east-1: buckets 0..1, drained by eu-west-1 (taken over)") {
		t.Errorf("takeover printed %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if stored, err := dynamo.ReadConfig(ctx, d.Client, tables); err != nil || stored.TakenOver["us-east-1"] != "eu-west-1" {
		t.Fatalf("config item %+v, %v; want us-east-1 taken over by eu-west-1", stored, err)
	}
	if got := c.step(exitOK, "status"); !strings.Contains(got, "regions  us-east-1 0..1 (taken over by eu-west-1), eu-west-1 2..3\n") {
		t.Errorf("status during the takeover printed %q", got)
	}
	if got := c.step(exitOK, "regions", "handback", "us-east-1"); !strings.Contains(got, "drained by us-east-1\n") {
		t.Errorf("handback printed %q", got)
	}
}

// buckets set --dry-run says what would happen (writers switch at once,
// which new buckets wait for which old ones, the backlog) and writes
// nothing; a change whose old bucket cannot drain (no relay runs) stands
// at --change-timeout (exit 0, naming the bucket), outbox status shows the
// old epoch draining, and a second change waits for it and, timed out,
// writes nothing and exits 4.
func TestBucketsSetDryRunAndDraining(t *testing.T) {
	c, d, tables := outboxEnv(t)
	c.step(exitOK, "init", "--buckets", "4")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := dynamo.NewWriter(ctx, d.Client, tables, dynamo.WithClock(fixedClock(t0.Add(-90*time.Second))))
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Write(ctx, nil, outbox.Message{Topic: "orders", Key: []byte("k"), Value: []byte("pending")})
	if err != nil {
		t.Fatal(err)
	}
	b := res.Messages[0].Bucket
	out := c.step(exitOK, "buckets", "set", "8", "--dry-run", "--change-timeout", "45s")
	for _, want := range []string{
		"dry run: nothing was written",
		"BucketCount 4 → 8, epoch 0 → 1: every writer (Go and Python) writes under 8 from its next write, without waiting",
		"new bucket b's messages wait until old bucket b mod 4 drained",
		fmt.Sprintf("the 1 pending messages of old buckets %d (1) (the oldest is 1m30s old)", b),
		"past 45s it is overdue",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("buckets set --dry-run printed\n%s\nwant %q in it", out, want)
		}
	}
	cfg, err := dynamo.ReadConfig(ctx, d.Client, tables)
	if err != nil || cfg.BucketCount != 4 || cfg.BucketEpoch != 0 || cfg.Draining() {
		t.Errorf("config after --dry-run %+v, %v: want it unchanged", cfg, err)
	}
	out = c.step(exitOK, "buckets", "set", "8", "--change-timeout", "300ms")
	if !strings.Contains(out, "BucketCount changed from 4 to 8 (epoch 1)") || !strings.Contains(out, fmt.Sprintf("old buckets [%d] still drain", b)) {
		t.Errorf("buckets set with a bucket that cannot drain printed %q; want the change made and bucket %d draining", out, b)
	}
	if cfg, err := dynamo.ReadConfig(ctx, d.Client, tables); err != nil || cfg.BucketCount != 8 || cfg.BucketEpoch != 1 || cfg.OldBucketCount != 4 {
		t.Errorf("config after the change %+v, %v: want BucketCount 8 at epoch 1, the old epoch of 4 draining", cfg, err)
	}
	if out := c.step(exitOK, "status"); !strings.Contains(out, fmt.Sprintf("change   BucketCount 4 → 8: old buckets [%d] still drain", b)) {
		t.Errorf("status while the old epoch drains printed\n%s", out)
	}
	code, _, stderr := c.run("buckets", "set", "16", "--change-timeout", "300ms")
	if code != exitNotDrained || !strings.Contains(stderr, "was aborted before the flip") || !strings.Contains(stderr, fmt.Sprintf("(buckets [%d])", b)) {
		t.Errorf("a second change while the first's old bucket cannot drain: exit %d, stderr %q; want exit %d, aborted naming bucket %d", code, stderr, exitNotDrained, b)
	}
	if cfg, err := dynamo.ReadConfig(ctx, d.Client, tables); err != nil || cfg.BucketCount != 8 || cfg.BucketEpoch != 1 || cfg.OldBucketCount != 4 {
		t.Errorf("config after the aborted second change %+v, %v: want it unchanged", cfg, err)
	}
}

// outbox status says what an old epoch still draining holds back, and
// what to look at once it is past its deadline.
func TestStatusSaysWhatAnOldEpochHolds(t *testing.T) {
	for _, c := range []struct {
		deadline time.Time
		want     string
	}{
		{t0.Add(20 * time.Second), "change   BucketCount 8 → 16: writers write under 16; old buckets [3] still drain (by 2030-01-02T03:04:25Z): the new messages of their keys wait for them"},
		{t0.Add(-95 * time.Second), "old buckets [3] still drain 1m35s past the deadline 2030-01-02T03:02:30Z: the new messages of their keys wait (are relays running?"},
	} {
		r := &statusReport{At: t0, Config: configStatus{BucketCount: 16, Mode: "delete", OldBucketCount: 8, OldBucketsDraining: []int{3}, ChangeDeadline: &c.deadline}}
		var out strings.Builder
		if err := r.render(&out); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("status with an old epoch whose deadline is %v:\n%s\nwant %q in it", c.deadline, out.String(), c.want)
		}
	}
}
