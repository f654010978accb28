package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox/lambda/wiring"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/local/esm"
)

// The modelled stage runs the handler under test — the relay Lambda's
// (lambda/wiring.SetupRelay: its configuration from the environment, its
// real SDK client on the model's HTTP API, its Kafka publisher) or the
// floor — in a process of its own, as Lambda runs a function in its own
// execution environment, so that its CPU time (getrusage of that process,
// garbage collection included) and peak RSS are its alone, not the
// model's, the writers', kfake's or the bench's. The process is this
// executable started again with childEnv naming the handler; the bench
// invokes it over HTTP with the event as JSON, which the child decodes as
// the Lambda Go runtime would.

const (
	childEnv        = "OUTBOX_BENCH_CHILD"         // "relay" or "floor"
	childProfileEnv = "OUTBOX_BENCH_CHILD_CPUPROF" // a path: the child writes a CPU profile there when stopped
)

// childMain runs the child when this process is one, and reports whether
// it was (main and TestMain return then).
func childMain() bool {
	kind := os.Getenv(childEnv)
	if kind == "" {
		return false
	}
	if err := runChild(kind); err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

func runChild(kind string) error {
	var (
		handle    func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error)
		published func() int64
	)
	switch kind {
	case handlerRelay:
		// Its logs and metric lines to stderr (a file the bench reads on
		// failure), each a write as Lambda's stdout would take.
		h, ok := wiring.SetupRelay(os.Getenv, os.Stderr)
		if !ok {
			return errors.New("relay init failed")
		}
		handle, published = h.Handle, h.Counters().Published.Load
	case handlerFloor:
		f, err := floorFromEnv()
		if err != nil {
			return err
		}
		defer f.close()
		handle, published = f.Handle, f.published.Load
	default:
		return fmt.Errorf("%s=%q: want %q or %q", childEnv, kind, handlerRelay, handlerFloor)
	}
	if path := os.Getenv(childProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /invoke", func(w http.ResponseWriter, r *http.Request) {
		var ev events.DynamoDBEvent
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx := lambdacontext.NewContext(r.Context(), &lambdacontext.LambdaContext{AwsRequestID: r.Header.Get("X-Request-Id")})
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		resp, err := handle(ctx, ev)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(resp)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(childStats{Published: published()})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Minute}
	fmt.Printf("listening http://%s\n", ln.Addr())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-stop
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type childStats struct {
	Published int64 `json:"published"`
}

// floorFromEnv builds the floor from the relay's variables (its table,
// topic, brokers and DynamoDB endpoint).
func floorFromEnv() (*floor, error) {
	endpoint := os.Getenv("OUTBOX_DYNAMODB_ENDPOINT")
	cfg, err := dynamolocal.NewConfig(context.Background(), endpoint, os.Getenv("AWS_REGION"))
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(producerOptions(brokerList(os.Getenv("KAFKA_BOOTSTRAP_SERVERS")))...)
	if err != nil {
		return nil, err
	}
	return &floor{db: dynamolocal.NewClient(cfg, endpoint), table: os.Getenv("OUTBOX_MESSAGES_TABLE"), topic: os.Getenv("OUTBOX_TOPICS"), producer: cl}, nil
}

// childProc is a running child: the handler's invocations, its published
// count and its resource use.
type childProc struct {
	cmd    *exec.Cmd
	url    string
	client *http.Client
	stderr *os.File // the child's stderr, a temporary file
	done   chan struct{}
	cpu0   time.Duration
}

// startChild starts the handler of kind in its own process on the stage's
// model and brokers; profile, if set, is where it writes a CPU profile.
func startChild(ctx context.Context, st *stage, kind, profile string) (*childProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(),
		childEnv+"="+kind,
		"OUTBOX_MESSAGES_TABLE="+st.tables.Messages,
		"OUTBOX_CONTROL_TABLE="+st.tables.Control,
		"OUTBOX_TOPICS="+st.topic,
		"OUTBOX_DYNAMODB_ENDPOINT="+st.endpoint,
		"KAFKA_BOOTSTRAP_SERVERS="+strings.Join(st.brokers, ","),
		"KAFKA_AUTH=none",
		"AWS_REGION="+st.awsCfg.Region,
		"AWS_ACCESS_KEY_ID="+dynamolocal.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY="+dynamolocal.SecretAccessKey,
		"AWS_LAMBDA_LOG_STREAM_NAME=bench/[$LATEST]model",
	)
	if profile != "" {
		cmd.Env = append(cmd.Env, childProfileEnv+"="+profile)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logs, err := os.CreateTemp("", "outbox-bench-child-")
	if err != nil {
		return nil, err
	}
	c := &childProc{cmd: cmd, stderr: logs, done: make(chan struct{}),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}}}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		c.removeLogs()
		return nil, err
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	select {
	case l := <-lines:
		c.url = strings.TrimPrefix(l, "listening ")
	case <-c.done:
		defer c.removeLogs()
		return nil, fmt.Errorf("the %s process exited at init:\n%s", kind, c.logs())
	case <-time.After(2 * time.Minute):
		defer c.close()
		return nil, fmt.Errorf("the %s process did not start in 2 minutes:\n%s", kind, c.logs())
	case <-ctx.Done():
		c.close()
		return nil, ctx.Err()
	}
	return c, nil
}

// handle invokes the handler with ev, as Lambda would: the event as JSON,
// an error for a function error.
func (c *childProc) handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	var resp events.DynamoDBEventResponse
	body, err := json.Marshal(ev)
	if err != nil {
		return resp, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/invoke", bytes.NewReader(body))
	if err != nil {
		return resp, err
	}
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		req.Header.Set("X-Request-Id", lc.AwsRequestID)
	}
	r, err := c.client.Do(req)
	if err != nil {
		return resp, err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return resp, err
	}
	if r.StatusCode != http.StatusOK {
		return resp, fmt.Errorf("function error: %s", strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		return resp, &esm.ResponseError{Body: b, Err: err}
	}
	return resp, nil
}

// published is the handler's count of messages published since it
// started (0 when it cannot be read).
func (c *childProc) published() int64 {
	r, err := c.client.Get(c.url + "/stats")
	if err != nil {
		return 0
	}
	defer r.Body.Close()
	var s childStats
	_ = json.NewDecoder(r.Body).Decode(&s)
	return s.Published
}

// mark starts the CPU count.
func (c *childProc) mark() { c.cpu0 = c.cpu() }

// cpuSinceMark is the process's CPU time (user and system) since mark.
func (c *childProc) cpuSinceMark() time.Duration { return c.cpu() - c.cpu0 }

// cpu is the process's CPU time so far, from /proc/<pid>/stat (clock
// ticks of 10 ms).
func (c *childProc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing one (utime and stime are fields 14 and 15).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	var ut, stm int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &stm)
	return time.Duration(ut+stm) * (time.Second / 100)
}

// peakRSS is the process's peak resident set (VmHWM).
func (c *childProc) peakRSS() int64 {
	hwm, _, err := memoryOf(c.cmd.Process.Pid)
	if err != nil {
		return 0
	}
	return hwm
}

// close stops the process (SIGTERM: the child writes its profile and
// exits; killed after 10 s).
func (c *childProc) close() {
	if c.cmd.Process == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	c.client.CloseIdleConnections()
	c.removeLogs()
}

// logs is the end of what the child wrote to stderr.
func (c *childProc) logs() string {
	b, _ := os.ReadFile(c.stderr.Name())
	return tail(string(b), 4000)
}

func (c *childProc) removeLogs() {
	c.stderr.Close()
	os.Remove(c.stderr.Name())
}

// invokerFunc is an esm.Invoker that calls a handler as it is (the child
// decodes the event itself).
type invokerFunc esm.Handler

func (f invokerFunc) Invoke(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	return f(ctx, ev)
}
