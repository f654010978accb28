package esm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/dynakafka/outbox"
)

// rieBinary returns the pinned emulator, installing it with
// scripts/install-rie.sh (idempotent, and it checks the installed version)
// if needed. It skips the test only if the script cannot install it.
func rieBinary(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "install-rie.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Skipf("the Lambda Runtime Interface Emulator is not installed and scripts/install-rie.sh could not install it "+
			"(go install needs the module proxy or a module cache): %v\n%s", err, stderr.String())
	}
	bin := string(bytes.TrimSpace(stdout.Bytes()))
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("install-rie.sh printed %q: %v", bin, err)
	}
	return bin
}

// buildEcho builds testdata/echo as a bootstrap binary in dir.
func buildEcho(t testing.TB, dir string) string {
	t.Helper()
	bootstrap := filepath.Join(dir, "bootstrap")
	cmd := exec.Command("go", "build", "-o", bootstrap, "./testdata/echo")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build testdata/echo: %v\n%s", err, out)
	}
	return bootstrap
}

// echoSeen mirrors testdata/echo's Seen.
type echoSeen struct {
	RequestID  string   `json:"requestId"`
	Sequences  []string `json:"sequences"`
	Mark       string   `json:"mark"`
	HostOnly   string   `json:"hostOnly"`
	DeadlineMs int64    `json:"deadlineMs"`
}

func readSeen(t *testing.T, path string) []echoSeen {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var all []echoSeen
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s echoSeen
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("echo log line %q: %v", sc.Text(), err)
		}
		all = append(all, s)
	}
	return all
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// echoRecord is a stream record whose keys steer testdata/echo.
func echoRecord(i int, extraKey string) types.Record {
	keys := messageKeys("5", "1")
	if extraKey != "" {
		keys[extraKey] = avBool(true)
	}
	return streamRecord("event", types.OperationTypeInsert, types.StreamViewTypeKeysOnly, float64(time.Now().Unix()), seqOf(i), 12, keys, nil, nil)
}

// startEcho runs testdata/echo under the emulator until the test ends, with
// a 1s timeout, and returns it with the file it logs its invocations to.
func startEcho(t testing.TB) (p *RIEProcess, seenLog string) {
	t.Helper()
	rie := rieBinary(t)
	dir := t.TempDir()
	bootstrap := buildEcho(t, dir)
	seenLog = filepath.Join(dir, "seen.jsonl")
	var output syncBuffer
	p, err := StartRIE(context.Background(), RIEOptions{
		RIEPath:       rie,
		BootstrapPath: bootstrap,
		Env:           map[string]string{"ECHO_LOG": seenLog, "ECHO_MARK": "from-env"},
		Timeout:       time.Second,
		Output:        &output,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("emulator output:\n%s", output.String())
		}
	})
	return p, seenLog
}

func TestRIE(t *testing.T) {
	t.Setenv("ESM_TEST_HOST_ONLY", "leaked")
	p, seenLog := startEcho(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("item failures come back", func(t *testing.T) {
		ev, err := BuildEvent(outboxStream, echoRecord(1, ""), echoRecord(2, "fail"), echoRecord(3, ""))
		if err != nil {
			t.Fatal(err)
		}
		lc := &lambdacontext.LambdaContext{AwsRequestID: "req-item-failures"}
		start := time.Now()
		resp, err := p.Invoke(lambdacontext.NewContext(ctx, lc), ev)
		t.Logf("first (cold) invocation through the emulator took %v", time.Since(start).Round(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		want := []events.DynamoDBBatchItemFailure{{ItemIdentifier: seqOf(2)}}
		if !reflect.DeepEqual(resp.BatchItemFailures, want) {
			t.Errorf("batchItemFailures %+v, want %+v", resp.BatchItemFailures, want)
		}
		seen := readSeen(t, seenLog)
		if len(seen) != 1 {
			t.Fatalf("the function saw %d invocations, want 1: %+v", len(seen), seen)
		}
		s := seen[0]
		if !reflect.DeepEqual(s.Sequences, []string{seqOf(1), seqOf(2), seqOf(3)}) {
			t.Errorf("the function saw records %v", s.Sequences)
		}
		if s.RequestID != lc.AwsRequestID {
			t.Errorf("request id %q, want the mapping's %q", s.RequestID, lc.AwsRequestID)
		}
		if s.Mark != "from-env" || s.HostOnly != "" {
			t.Errorf("function env: ECHO_MARK=%q (want from-env), ESM_TEST_HOST_ONLY=%q (want it not inherited)", s.Mark, s.HostOnly)
		}
		if s.DeadlineMs <= 0 || s.DeadlineMs > 1000 {
			t.Errorf("deadline %dms ahead, want within the 1s timeout", s.DeadlineMs)
		}
		start = time.Now()
		if _, err := p.Invoke(ctx, ev); err != nil {
			t.Fatal(err)
		}
		t.Logf("warm invocation through the emulator took %v", time.Since(start).Round(time.Millisecond))
	})

	t.Run("function error", func(t *testing.T) {
		ev, err := BuildEvent(outboxStream, echoRecord(1, "error"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Invoke(ctx, ev)
		var fe *FunctionError
		if !errors.As(err, &fe) || fe.Message != "asked to fail" || fe.Type == "" {
			t.Fatalf("Invoke = %v, want a *FunctionError with the handler's message", err)
		}
	})

	t.Run("RIE reaches a running emulator by URL", func(t *testing.T) {
		ev, err := BuildEvent(outboxStream, echoRecord(7, "fail"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := RIE(p.URL).Invoke(ctx, ev)
		if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != seqOf(7) {
			t.Fatalf("Invoke = %+v, %v; want record 7 reported failed", resp, err)
		}
	})

	t.Run("as a mapping target", func(t *testing.T) {
		before := len(readSeen(t, seenLog))
		f := newFakeStreams("s")
		f.inserts("s", 3)
		f.mu.Lock()
		f.shard("s").records[1].Dynamodb.Keys["fail"] = avBool(true)
		f.mu.Unlock()
		f.close("s")
		var dropped []FailureRecord
		m, err := New(f, fakeARN, p, fast(MaximumRetryAttempts(1), OnFailure(func(_ context.Context, fr FailureRecord) {
			dropped = append(dropped, fr)
		}))...)
		if err != nil {
			t.Fatal(err)
		}
		stop := run(t, m)
		waitFor(t, "the shard", func() bool { return m.Stats().ShardsExhausted == 1 })
		stop()
		var got [][]string
		for _, s := range readSeen(t, seenLog)[before:] {
			got = append(got, s.Sequences)
		}
		// Record 1 fails every time: after one retry from it, it and the
		// rest of the batch are dropped.
		want := [][]string{{seqOf(0), seqOf(1), seqOf(2)}, {seqOf(1), seqOf(2)}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("invocations %v, want %v", got, want)
		}
		if len(dropped) != 1 || dropped[0].BatchInfo.StartSequenceNumber != seqOf(1) || dropped[0].BatchInfo.BatchSize != 2 {
			t.Errorf("dropped %+v, want records 1..2", dropped)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		ev, err := BuildEvent(outboxStream, echoRecord(1, "sleep"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Invoke(ctx, ev); !errors.Is(err, ErrTimeout) {
			t.Fatalf("Invoke = %v, want ErrTimeout", err)
		}
		// The emulator starts a new environment for the next invocation.
		ev, err = BuildEvent(outboxStream, echoRecord(2, "fail"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := p.Invoke(ctx, ev)
		if err != nil || len(resp.BatchItemFailures) != 1 {
			t.Fatalf("invocation after a timeout: %+v, %v", resp, err)
		}
	})
}

func TestStartRIEValidates(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "exe")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		opts  RIEOptions
		field string
	}{
		{"no emulator", RIEOptions{BootstrapPath: exe}, "esm.RIEOptions.RIEPath"},
		{"missing emulator", RIEOptions{RIEPath: filepath.Join(dir, "nope"), BootstrapPath: exe}, "esm.RIEOptions.RIEPath"},
		{"no bootstrap", RIEOptions{RIEPath: exe}, "esm.RIEOptions.BootstrapPath"},
		{"missing bootstrap", RIEOptions{RIEPath: exe, BootstrapPath: filepath.Join(dir, "nope")}, "esm.RIEOptions.BootstrapPath"},
		{"fractional timeout", RIEOptions{RIEPath: exe, BootstrapPath: exe, Timeout: 1500 * time.Millisecond}, "esm.RIEOptions.Timeout"},
		{"timeout over 15 minutes", RIEOptions{RIEPath: exe, BootstrapPath: exe, Timeout: 901 * time.Second}, "esm.RIEOptions.Timeout"},
		{"bad port", RIEOptions{RIEPath: exe, BootstrapPath: exe, Port: 70000}, "esm.RIEOptions.Port"},
		{"bad log level", RIEOptions{RIEPath: exe, BootstrapPath: exe, LogLevel: "loud"}, "esm.RIEOptions.LogLevel"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := StartRIE(context.Background(), tc.opts)
			var oe *outbox.OptionError
			if !errors.As(err, &oe) || oe.Option != tc.field {
				t.Fatalf("StartRIE = %v, want an *outbox.OptionError for %s", err, tc.field)
			}
		})
	}
	t.Run("emulator that exits at once", func(t *testing.T) {
		_, err := StartRIE(context.Background(), RIEOptions{RIEPath: exe, BootstrapPath: exe})
		if err == nil {
			t.Fatal("StartRIE succeeded with an emulator that never listens")
		}
	})
}

func TestDecodeResponse(t *testing.T) {
	cases := []struct {
		name     string
		status   int
		body     string
		want     events.DynamoDBEventResponse
		wantErr  error // matched with errors.Is, or by type below
		funcErr  bool
		respErr  bool
		otherErr bool
	}{
		{name: "empty", status: 200, body: ""},
		{name: "null", status: 200, body: "null"},
		{name: "empty object", status: 200, body: "{}"},
		{name: "failures", status: 200, body: `{"batchItemFailures":[{"itemIdentifier":"7"}]}`,
			want: events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: "7"}}}},
		{name: "function error", status: 200, body: `{"errorMessage":"boom","errorType":"errorString"}`, funcErr: true},
		{name: "crash during init", status: 502, body: `{"errorMessage":"exit status 2","errorType":"Runtime.ExitError"}`, funcErr: true},
		{name: "timeout", status: 200, body: "Task timed out after 1.00 seconds", wantErr: ErrTimeout},
		{name: "not JSON", status: 200, body: "ok", respErr: true},
		{name: "wrong shape", status: 200, body: `{"batchItemFailures":"7"}`, respErr: true},
		{name: "emulator error", status: 500, body: "", otherErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeResponse(tc.status, []byte(tc.body))
			var fe *FunctionError
			var re *ResponseError
			switch {
			case tc.funcErr:
				if !errors.As(err, &fe) {
					t.Errorf("err = %v, want a *FunctionError", err)
				}
			case tc.respErr:
				if !errors.As(err, &re) {
					t.Errorf("err = %v, want a *ResponseError", err)
				}
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("err = %v, want %v", err, tc.wantErr)
				}
			case tc.otherErr:
				if err == nil || errors.As(err, &fe) || errors.As(err, &re) {
					t.Errorf("err = %v, want a plain error", err)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("got %+v, want %+v", got, tc.want)
				}
			}
		})
	}
}

// FuzzDecodeResponse checks that no emulator answer makes the decoder panic,
// and that a body it accepts decodes to exactly what it says.
func FuzzDecodeResponse(f *testing.F) {
	for _, body := range []string{"", "null", "{}", `{"batchItemFailures":[{"itemIdentifier":"7"}]}`,
		`{"errorMessage":"boom","errorType":"errorString"}`, "Task timed out after 3.00 seconds", "ok", `{"batchItemFailures":"7"}`} {
		f.Add(200, []byte(body))
	}
	f.Add(502, []byte(`{"errorType":"Runtime.ExitError"}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		resp, err := decodeResponse(status, body)
		if err != nil {
			return
		}
		if status/100 != 2 {
			t.Fatalf("status %d decoded as success", status)
		}
		var direct events.DynamoDBEventResponse
		if len(bytes.TrimSpace(body)) > 0 {
			if err := json.Unmarshal(body, &direct); err != nil {
				t.Fatalf("accepted %q, which is not a DynamoDBEventResponse: %v", body, err)
			}
		}
		if !reflect.DeepEqual(direct, resp) {
			t.Fatalf("decoded %q as %+v, want %+v", body, resp, direct)
		}
	})
}
