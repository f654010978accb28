package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/internal/proc"
	"github.com/dynakafka/outbox/store/dynamo"
)

// localSettings are the variables outbox local must print.
var localSettings = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_DYNAMODB",
	"OUTBOX_MESSAGES_TABLE", "OUTBOX_CONTROL_TABLE", "OUTBOX_TOPICS", "KAFKA_BOOTSTRAP_SERVERS", "KAFKA_AUTH"}

// TestLocal runs `outbox local` as a user does (the CLI built by make cli,
// from the repository's root; with OUTBOX_TEST_KAFKA=real, --real) and, with
// nothing but the settings it prints, the Go writer (the SDK's default
// configuration, as a service loads it), the Python writer, the CLI (also
// with another access key and region, which DynamoDB Local without
// -sharedDb would answer "table does not exist") and a request through the
// enqueue function's handler; then reads the four messages from the topic,
// where the relay it runs published them, and stops it with Ctrl-C.
func TestLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI and starts DynamoDB Local and Kafka")
	}
	_, real := testenv.RealKafkaMode()
	root := testenv.RepoRoot()
	dir := t.TempDir()
	cli := makeCLI(t, root, filepath.Join(dir, "bin"))

	const topic = "svc-events"
	envFile := filepath.Join(dir, "local.env")
	args := []string{"local", "--messages", "svc-outbox", "--topics", topic + ",svc-audit", "--buckets", "4",
		"--dynamodb-port", "0", "--kafka-port", "0", "--env-file", envFile}
	if real {
		args = append(args, "--real")
	}
	cmd := exec.Command(cli, args...)
	cmd.Dir = root
	stdout, pw := io.Pipe()
	cmd.Stdout = pw
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	logs := func() string { b, _ := os.ReadFile(stderr.Name()); return string(b) }
	start := time.Now()
	p, err := proc.Launch(cmd) // killed with this test binary, if it dies first
	if err != nil {
		t.Fatal(err)
	}
	go func() { <-p.Exited; pw.Close() }() // Wait has copied all of its output
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			p.Kill()
		}
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()

	// Its settings, until it says it is ready. The deadline only keeps a
	// hung start from holding the test to its timeout.
	env := map[string]string{}
	var printed strings.Builder
	deadline := time.After(10 * time.Minute)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				<-p.Exited
				t.Fatalf("outbox local exited before it was ready (%v):\n%s\n%s", p.Err, printed.String(), logs())
			}
			printed.WriteString(l + "\n")
			if l == "# outbox local: ready" {
				break wait
			}
			if kv, ok := strings.CutPrefix(l, "export "); ok {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
		case <-deadline:
			t.Fatalf("outbox local not ready after 10 minutes:\n%s\n%s", printed.String(), logs())
		}
	}
	up := time.Since(start)
	go func() { // the rest of its output, so that it never blocks on a full pipe
		for range lines {
		}
	}()
	for _, k := range localSettings {
		if env[k] == "" {
			t.Fatalf("outbox local printed no %s:\n%s", k, printed.String())
		}
	}
	if b, err := os.ReadFile(envFile); err != nil || !strings.Contains(printed.String(), string(b)) {
		t.Errorf("--env-file %s holds %q (%v), not the printed lines", envFile, b, err)
	}
	// A fresh shell with the printed lines, and no other AWS settings.
	isolateAWSEnv(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	shell := append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "clients", "python"), "PYTHONDONTWRITEBYTECODE=1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// The Go writer, configured as a service configures it.
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := dynamo.NewWriter(ctx, dynamodb.NewFromConfig(cfg), dynamo.Tables{Messages: os.Getenv("OUTBOX_MESSAGES_TABLE"), Control: os.Getenv("OUTBOX_CONTROL_TABLE")})
	if err != nil {
		t.Fatalf("go writer: %v", err)
	}
	m, err := outbox.JSON(topic, "go-1", map[string]string{"from": "go"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, nil, m); err != nil {
		t.Fatalf("go writer: %v", err)
	}

	// The Python writer, as the printed line runs it.
	msgs := filepath.Join(dir, "messages.json")
	writeFile(t, msgs, `[{"topic": "`+topic+`", "key": "py-1", "value": {"from": "python"}}]`)
	py := exec.CommandContext(ctx, testenv.Python(t), "-m", "outbox_writer", "--messages-table", env["OUTBOX_MESSAGES_TABLE"],
		"--control-table", env["OUTBOX_CONTROL_TABLE"], "--json-messages", msgs)
	py.Env = shell
	if out, err := py.CombinedOutput(); err != nil || !bytes.Contains(out, []byte(`"ok": true`)) {
		t.Fatalf("python writer: %v\n%s", err, out)
	}

	// The CLI: the settings alone, then another access key and region.
	run := func(env []string, args ...string) string {
		t.Helper()
		c := exec.CommandContext(ctx, cli, args...)
		c.Env = env
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("outbox %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := run(shell, "status"); !strings.Contains(out, "svc-outbox-control") || !strings.Contains(out, "BucketCount 4") {
		t.Errorf("outbox status does not show the outbox:\n%s", out)
	}
	other := append(slices.Clone(shell), "AWS_ACCESS_KEY_ID=someoneelse", "AWS_SECRET_ACCESS_KEY=theirs", "AWS_REGION=eu-west-1")
	if out := run(other, "status", "--json"); !strings.Contains(out, `"messages_table": "svc-outbox"`) {
		t.Errorf("outbox status with another key and region:\n%s", out)
	}

	// A request through the enqueue function's handler: two messages of one
	// key, in one transaction.
	req := filepath.Join(dir, "request.json")
	writeFile(t, req, `{"idempotencyKey": "local-test-1", "messages": [
		{"topic": "`+topic+`", "key": "enq-1", "value": {"n": 1}},
		{"topic": "`+topic+`", "key": "enq-1", "value": {"n": 2}}]}`)
	var answer struct {
		Messages []struct{ ID, Topic string }
	}
	if err := json.Unmarshal([]byte(run(shell, "enqueue", req)), &answer); err != nil || len(answer.Messages) != 2 {
		t.Fatalf("outbox enqueue answered %+v (%v)", answer, err)
	}

	// What the relay published.
	want := []string{"go-1/" + `{"from":"go"}`, "py-1/" + `{"from":"python"}`, "enq-1/" + `{"n":1}`, "enq-1/" + `{"n":2}`}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(env["KAFKA_BOOTSTRAP_SERVERS"], ",")...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]bool{} // by message id: duplicates are allowed
	var got []string
	for len(seen) < len(want) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %v, want %v\noutbox local:\n%s", got, want, logs())
		}
		fs.EachRecord(func(r *kgo.Record) {
			var id string
			for _, h := range r.Headers {
				if h.Key == "x-outbox-message-id" {
					id = string(h.Value)
				}
			}
			if id == "" || seen[id] {
				return
			}
			seen[id] = true
			got = append(got, string(r.Key)+"/"+string(r.Value))
		})
	}
	if slices.Sort(got); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("consumed %v, want %v", got, want)
	}

	// Ctrl-C stops it, and it takes its settings file with it.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited:
	case <-time.After(5 * time.Minute):
		t.Fatalf("outbox local still running 5 minutes after Ctrl-C:\n%s", logs())
	}
	stopped = true
	if p.Err != nil || !strings.Contains(logs(), "stopping") {
		t.Errorf("outbox local after Ctrl-C: %v\n%s", p.Err, logs())
	}
	if _, err := os.Stat(envFile); !os.IsNotExist(err) {
		t.Errorf("--env-file still there after exit (%v)", err)
	}
	if !t.Failed() {
		fmt.Printf("local: up_s=%.1f go_writer=ok python_writer=ok cli=ok enqueue=ok consumed=%d\n", up.Seconds(), len(seen))
	}
}

// makeCLI builds the CLI the documented way, make cli, into bin and returns
// its path.
func makeCLI(t *testing.T, root, bin string) string {
	t.Helper()
	mk := exec.Command("make", "-s", "BIN="+bin, "cli")
	mk.Dir = root
	for _, kv := range os.Environ() { // not the jobserver of a make test that runs this
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			mk.Env = append(mk.Env, kv)
		}
	}
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make cli: %v\n%s", err, out)
	}
	path := filepath.Join(bin, "outbox")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("make cli built no %s: %v", path, err)
	}
	return path
}
