package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/dynakafka/outbox/internal/kfakeenv"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/local/esm"
)

// rieTimeouts are the functions' timeouts in the deadline tests: a few
// seconds, enough for a drain to start (the relay claims buckets until
// DeadlineMargin, 5 s, before the handler's deadline, which is
// handler.ResponseMargin before this one; the sweeper's sweep ends
// handler.ProgressReserve earlier still).
var rieTimeouts = map[string]time.Duration{"relay": 8 * time.Second, "sweeper": 8*time.Second + handler.ProgressReserve}

// buildBootstraps builds the relay and sweeper functions (lambda/relay,
// lambda/sweeper) into dir, before anything is timed.
func buildBootstraps(t *testing.T, root, dir string) map[string]string {
	t.Helper()
	bins := map[string]string{}
	for _, fn := range []string{"relay", "sweeper"} {
		bins[fn] = buildBootstrap(t, root, dir, fn)
	}
	return bins
}

// buildBootstrap builds the function lambda/<fn> into dir/<fn>/bootstrap.
func buildBootstrap(t *testing.T, root, dir, fn string) string {
	t.Helper()
	out := filepath.Join(dir, fn, "bootstrap")
	build := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", out, "./"+fn)
	build.Dir = filepath.Join(root, "lambda") // the Lambda functions' module
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", fn, err, b)
	}
	return out
}

// stallingProxy stands between a function and DynamoDB. It forwards every
// request until stall is called; from then on it holds the requests of the
// stalled operations (X-Amz-Target without its prefix; "*" for all) without
// answering, until the client gives up on them: a DynamoDB endpoint that
// accepts connections and stops answering. With stallAllFrom, the first
// request of the named operation stalls everything.
type stallingProxy struct {
	URL  string
	mu   sync.Mutex
	ops  map[string]bool
	from string
	held atomic.Int64
}

func newStallingProxy(t *testing.T, endpoint string) *stallingProxy {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &stallingProxy{}
	fwd := httputil.NewSingleHostReverseProxy(target)
	quit := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
		p.mu.Lock()
		if p.from != "" && op == p.from {
			p.ops = map[string]bool{"*": true}
		}
		stall := p.ops["*"] || p.ops[op]
		p.mu.Unlock()
		if !stall {
			fwd.ServeHTTP(w, r)
			return
		}
		p.held.Add(1)
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(quit) }) // before srv.Close, which waits for the held requests
	p.URL = srv.URL
	return p
}

func (p *stallingProxy) stallAllFrom(op string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.from = op
}

func (p *stallingProxy) stall(ops ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ops = map[string]bool{}
	for _, op := range ops {
		p.ops[op] = true
	}
}

// silenceProduce makes the kfake cluster accept every produce request and
// never answer it: a broker that takes connections, serves metadata and
// producer ids, and stalls on writes.
func silenceProduce(t *testing.T, k *kfakeenv.Cluster) *atomic.Int64 {
	t.Helper()
	if k == nil {
		t.Fatal("silenceProduce: the env was not made by newEnv (kfakeenv.Kafka)")
	}
	kfakeenv.RequireKfake(t, k)
	var held atomic.Int64
	k.Cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		held.Add(1)
		return nil, nil, true // handled, no response: the connection stays open and silent
	})
	return &held
}

// invokeRaw posts payload to the emulator and returns the body of its answer
// (a response, an error document, or "Task timed out after ...").
func invokeRaw(ctx context.Context, proc *esm.RIEProcess, payload any) ([]byte, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, proc.URL, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	return io.ReadAll(res.Body)
}

func hint(bucket int, seq int64, streamSeq string) events.DynamoDBEvent {
	return events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{{
		EventID: "deadline-1", EventName: "INSERT", EventSource: "aws:dynamodb",
		Change: events.DynamoDBStreamRecord{
			Keys: map[string]events.DynamoDBAttributeValue{
				"b": events.NewNumberAttribute(strconv.Itoa(bucket)),
				"s": events.NewNumberAttribute(strconv.FormatInt(seq, 10)),
			},
			SequenceNumber: streamSeq, StreamViewType: "KEYS_ONLY",
		},
	}}}
}

// The real bootstraps, under the Lambda Runtime Interface Emulator with a
// function timeout of a few seconds, answer before the deadline however
// Kafka or DynamoDB stall: the relay reports the hinted record for
// redelivery, the sweeper its summary or its error, and a lease taken is
// handed back (released, wake-ups kept) when DynamoDB still takes writes.
// Without that, Lambda answers "Task timed out", the response is lost and
// the lease stays held until it expires.
func TestBootstrapsAnswerBeforeTheDeadlineUnderRIE(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the bootstraps and the emulator")
	}
	root := repoRoot(t)
	rie := installRIE(t, root)
	bins := buildBootstraps(t, root, t.TempDir())

	const (
		kafkaSilent   = "kafka accepts produce requests and never answers"
		dynamoQueries = "dynamodb stops answering queries"
		dynamoAll     = "dynamodb stops answering"
		dynamoMidway  = "dynamodb stops answering once the lease is taken"
	)
	// What becomes of the bucket's lease.
	const (
		handedBack = "the drain takes the lease and gives it back (released)"
		untouched  = "the drain never gets to take the lease"
		expires    = "the drain takes the lease and cannot write it again: it expires after LeaseDuration"
	)
	tests := []struct {
		function, fault, lease string
	}{
		{function: "relay", fault: kafkaSilent, lease: handedBack},
		{function: "relay", fault: dynamoQueries, lease: handedBack},
		{function: "relay", fault: dynamoAll, lease: untouched},
		{function: "relay", fault: dynamoMidway, lease: expires},
		{function: "sweeper", fault: kafkaSilent, lease: handedBack},
		{function: "sweeper", fault: dynamoAll, lease: untouched},
	}
	for _, tt := range tests {
		t.Run(tt.function+"/"+tt.fault, func(t *testing.T) {
			// Each case has its own tables, Kafka and emulator, and mostly
			// waits on its stalls: they run side by side (go test's
			// -parallel bounds how many).
			t.Parallel()
			e := newEnv(t, 4)
			if e.dynamo.Endpoint == "" {
				t.Skip("needs a DynamoDB endpoint the bootstrap can reach")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			proxy := newStallingProxy(t, e.dynamo.Endpoint)
			var logs bytes.Buffer
			var logsMu sync.Mutex
			defer func() {
				if t.Failed() {
					logsMu.Lock()
					t.Logf("function output:\n%s", logs.String())
					logsMu.Unlock()
				}
			}()
			env := e.functionEnv(proxy.URL, "deadline")
			env["OUTBOX_SWEEP_MIN_AGE"] = "0s" // sweep the message at once
			rieTimeout := rieTimeouts[tt.function]
			proc, err := esm.StartRIE(ctx, esm.RIEOptions{
				RIEPath: rie, BootstrapPath: bins[tt.function], Timeout: rieTimeout,
				Output: writerFunc(func(p []byte) (int, error) { logsMu.Lock(); defer logsMu.Unlock(); return logs.Write(p) }),
				Env:    env,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer proc.Close()

			// Warm up: the init (clients, the config item, topic checks)
			// happens before anything stalls, as on a warm container.
			var warm any = events.DynamoDBEvent{}
			if tt.function == "sweeper" {
				warm = events.CloudWatchEvent{DetailType: "Scheduled Event", Source: "aws.events"}
			}
			if body, err := invokeRaw(ctx, proc, warm); err != nil || bytes.HasPrefix(body, []byte("Task timed out")) || bytes.Contains(body, []byte("errorType")) {
				t.Fatalf("warm-up invocation: %v %s", err, body)
			}

			res, err := e.writer.Write(ctx, nil, outbox.Message{ID: outbox.NewID(), Topic: e.topic, Key: []byte("deadline"), Value: []byte("v")})
			if err != nil {
				t.Fatal(err)
			}
			msg := res.Messages[0]
			var stalled *atomic.Int64
			switch tt.fault {
			case kafkaSilent:
				stalled = silenceProduce(t, e.kfake)
			case dynamoQueries:
				proxy.stall("Query")
				stalled = &proxy.held
			case dynamoAll:
				proxy.stall("*")
				stalled = &proxy.held
			case dynamoMidway:
				proxy.stallAllFrom("Query") // the drain's first read, after the acquisition
				stalled = &proxy.held
			}

			start := time.Now()
			var body []byte
			if tt.function == "relay" {
				resp, err := proc.Invoke(ctx, hint(msg.Bucket, msg.Sequence, "100"))
				elapsed := time.Since(start)
				t.Logf("%s, %s: answered after %v of its %v (stalled requests: %d)", tt.function, tt.fault, elapsed.Round(time.Millisecond), rieTimeout, stalled.Load())
				if errors.Is(err, esm.ErrTimeout) {
					t.Fatalf("the relay did not answer before its deadline: %v", err)
				}
				if err != nil {
					t.Fatalf("relay invocation: %v", err)
				}
				if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "100" {
					t.Fatalf("response %+v; want the hinted record reported for redelivery", resp)
				}
			} else {
				body, err = invokeRaw(ctx, proc, events.CloudWatchEvent{DetailType: "Scheduled Event", Source: "aws.events"})
				elapsed := time.Since(start)
				t.Logf("%s, %s: answered after %v of its %v (stalled requests: %d): %s", tt.function, tt.fault, elapsed.Round(time.Millisecond), rieTimeout, stalled.Load(), body)
				if err != nil {
					t.Fatalf("sweeper invocation: %v", err)
				}
				if bytes.HasPrefix(body, []byte("Task timed out")) {
					t.Fatalf("the sweeper did not answer before its deadline: %s", body)
				}
				var sum handler.Summary
				if tt.lease == handedBack {
					if err := json.Unmarshal(body, &sum); err != nil || fmt.Sprint(sum.Failed) != fmt.Sprint([]int{msg.Bucket}) {
						t.Fatalf("summary %s (%v); want bucket %d failed", body, err, msg.Bucket)
					}
				} else if !bytes.Contains(body, []byte("errorMessage")) && json.Unmarshal(body, &sum) != nil {
					t.Fatalf("answer %s is neither a summary nor a function error", body)
				}
			}
			if stalled.Load() == 0 {
				t.Fatal("nothing stalled: the fault was not exercised")
			}

			l, err := e.store.ReadLease(ctx, msg.Bucket)
			if err != nil {
				t.Fatal(err)
			}
			switch held := l.HeldAt(time.Now()); {
			case tt.lease == handedBack && !l.Released(),
				tt.lease == untouched && (held || l.Owner != ""),
				tt.lease == expires && !held:
				t.Fatalf("lease of bucket %d: %+v; want: %s", msg.Bucket, l, tt.lease)
			}
			if l.Head >= msg.Sequence {
				t.Fatalf("head %d passed the unpublished message %d", l.Head, msg.Sequence)
			}
		})
	}
}
