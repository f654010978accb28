package esm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/dynakafka/outbox"
)

// RIEOptions configure StartRIE.
type RIEOptions struct {
	// RIEPath is the aws-lambda-rie binary; scripts/install-rie.sh installs
	// the pinned version as .cache/bin/aws-lambda-rie. Required.
	RIEPath string
	// BootstrapPath is the function: an executable for the provided.al2023
	// runtime (a Go main package calling lambda.Start). Required. It runs in
	// its own directory.
	BootstrapPath string
	// Env is the function's environment. The emulator hands its own
	// environment to the function, and this process's environment is not
	// passed on (a Lambda function sees only its configuration): the
	// function gets PATH, Env, and the variables the emulator adds
	// (AWS_LAMBDA_FUNCTION_NAME "test_function", AWS_LAMBDA_RUNTIME_API, ...).
	Env map[string]string
	// Port is the emulator's invocation port on 127.0.0.1. Default 0: a free
	// port.
	Port int
	// Timeout is the function timeout, in whole seconds
	// (AWS_LAMBDA_FUNCTION_TIMEOUT). Default 3s, Lambda's default; 1s..900s.
	Timeout time.Duration
	// LogLevel is the emulator's own log level (--log-level): debug, info,
	// warn or error. Default "warn".
	LogLevel string
	// Output receives the emulator's and the function's stdout and stderr
	// (the START/END/REPORT lines and the function's logs). Default:
	// discarded.
	Output io.Writer
}

// RIEProcess is a function running under the Lambda Runtime Interface
// Emulator. It is an Invoker: Invoke POSTs the event to the emulator, one
// invocation at a time (the emulator is one execution environment), and
// decodes the response. The function starts (its "init") on the first
// invocation, as a cold start does.
type RIEProcess struct {
	// URL is the emulator's invocation endpoint.
	URL string

	inv    *rieInvoker
	cmd    *exec.Cmd
	cancel context.CancelFunc
	done   chan struct{}
	err    error // from Wait, valid after done is closed

	closeOnce sync.Once
}

// StartRIE starts `aws-lambda-rie <bootstrap>` listening on 127.0.0.1 and
// waits until it accepts connections. The emulator's runtime API (which the
// function polls) also gets a free port instead of its fixed default 9001, so
// several emulators can run at once. The emulator stops when ctx is done or
// Close is called.
func StartRIE(ctx context.Context, o RIEOptions) (*RIEProcess, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	port, err := freePortOr(o.Port)
	if err != nil {
		return nil, err
	}
	apiPort, err := freePortOr(0)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	ctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(ctx, o.RIEPath,
		"--log-level", o.LogLevel,
		"--runtime-interface-emulator-address", addr,
		"--runtime-api-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(apiPort)),
		o.BootstrapPath)
	cmd.Dir = filepath.Dir(o.BootstrapPath)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(int(o.Timeout/time.Second))}
	for _, k := range slices.Sorted(maps.Keys(o.Env)) {
		cmd.Env = append(cmd.Env, k+"="+o.Env[k])
	}
	cmd.Stdout, cmd.Stderr = o.Output, o.Output
	// The emulator shuts the function down on SIGTERM; WaitDelay bounds it.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 3 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("esm: start %s: %w", o.RIEPath, err)
	}
	p := &RIEProcess{
		URL:    "http://" + addr + "/2015-03-31/functions/function/invocations",
		inv:    &rieInvoker{client: &http.Client{}},
		cmd:    cmd,
		cancel: cancel,
		done:   make(chan struct{}),
	}
	p.inv.url = p.URL
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := p.awaitListening(ctx, addr, 10*time.Second); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (o *RIEOptions) validate() error {
	var errs []error
	bad := func(field string, value any, reason string) {
		errs = append(errs, &outbox.OptionError{Option: "esm.RIEOptions." + field, Value: value, Reason: reason})
	}
	if o.RIEPath == "" {
		bad("RIEPath", `""`, "run scripts/install-rie.sh and pass .cache/bin/aws-lambda-rie")
	} else if _, err := os.Stat(o.RIEPath); err != nil {
		bad("RIEPath", o.RIEPath, "not found; run scripts/install-rie.sh")
	}
	if o.BootstrapPath == "" {
		bad("BootstrapPath", `""`, "pass the function's executable (go build -o bootstrap ./lambda/...)")
	} else if abs, err := filepath.Abs(o.BootstrapPath); err != nil {
		bad("BootstrapPath", o.BootstrapPath, err.Error())
	} else if _, err := os.Stat(abs); err != nil {
		bad("BootstrapPath", o.BootstrapPath, "not found; build the function first")
	} else {
		o.BootstrapPath = abs
	}
	if o.Port < 0 || o.Port > 65535 {
		bad("Port", o.Port, "must be 0 (a free port) or 1..65535")
	}
	switch {
	case o.Timeout == 0:
		o.Timeout = 3 * time.Second
	case o.Timeout < time.Second || o.Timeout > 900*time.Second || o.Timeout%time.Second != 0:
		bad("Timeout", o.Timeout, "must be whole seconds, 1s..900s (the emulator reads AWS_LAMBDA_FUNCTION_TIMEOUT in seconds)")
	}
	switch o.LogLevel {
	case "":
		o.LogLevel = "warn"
	case "debug", "info", "warn", "error":
	default:
		bad("LogLevel", o.LogLevel, "must be debug, info, warn or error")
	}
	return errors.Join(errs...)
}

func (p *RIEProcess) awaitListening(ctx context.Context, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("esm: aws-lambda-rie exited before listening on %s: %v", addr, p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("esm: aws-lambda-rie not listening on %s after %v", addr, limit)
		}
	}
}

// Invoke runs the function once with event.
func (p *RIEProcess) Invoke(ctx context.Context, event events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	return p.inv.Invoke(ctx, event)
}

// Close stops the emulator (SIGTERM, which shuts the function down; killed
// after 3s) and waits for it. It returns an error if the emulator had exited
// on its own before.
func (p *RIEProcess) Close() error {
	var early error
	p.closeOnce.Do(func() {
		select {
		case <-p.done:
			early = fmt.Errorf("esm: aws-lambda-rie had exited: %v", p.err)
		default:
		}
		p.cancel()
		<-p.done
	})
	return early
}

// RIE returns an Invoker for an emulator that is already running (for example
// a Lambda base image started with docker), given its invocation URL, such as
// http://127.0.0.1:9000/2015-03-31/functions/function/invocations.
// Invocations through one Invoker are serialised.
func RIE(invokeURL string) Invoker {
	return &rieInvoker{url: invokeURL, client: &http.Client{}}
}

type rieInvoker struct {
	url    string
	client *http.Client
	mu     sync.Mutex
}

func (r *rieInvoker) Invoke(ctx context.Context, event events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	var resp events.DynamoDBEventResponse
	err := r.invoke(ctx, event, &resp)
	var re *ResponseError
	if errors.As(err, &re) {
		resp = events.DynamoDBEventResponse{}
	}
	return resp, err
}

// InvokeJSON runs the function once with any event (a Kafka event, say) and
// decodes its response into resp, with Invoke's errors: a *FunctionError,
// ErrTimeout, a *ResponseError.
func (p *RIEProcess) InvokeJSON(ctx context.Context, event, resp any) error {
	return p.inv.invoke(ctx, event, resp)
}

func (r *rieInvoker) invoke(ctx context.Context, event, resp any) error {
	payload, err := json.Marshal(event)
	if err != nil {
		return fmt.Errorf("esm: marshal event: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		req.Header.Set("X-Amzn-RequestId", lc.AwsRequestID)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	res, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("esm: invoke %s: %w", r.url, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("esm: read response: %w", err)
	}
	return decodeInto(res.StatusCode, body, resp)
}

var timedOut = []byte("Task timed out after")

// decodeResponse maps the emulator's answer onto a stream response or an
// error (see decodeInto).
func decodeResponse(status int, body []byte) (events.DynamoDBEventResponse, error) {
	var resp events.DynamoDBEventResponse
	if err := decodeInto(status, body, &resp); err != nil {
		var re *ResponseError
		if errors.As(err, &re) {
			resp = events.DynamoDBEventResponse{}
		}
		return resp, err
	}
	return resp, nil
}

// decodeInto maps the emulator's answer onto a response (decoded into
// resp) or an error. The emulator drops the X-Amz-Function-Error header
// Lambda would set, so a function error is recognised by its body,
// {"errorMessage":..,"errorType":..}.
func decodeInto(status int, body []byte, resp any) error {
	var probe struct {
		Type    *string `json:"errorType"`
		Message *string `json:"errorMessage"`
	}
	isError := json.Unmarshal(body, &probe) == nil && (probe.Type != nil || probe.Message != nil)
	switch {
	case isError:
		return &FunctionError{Type: deref(probe.Type), Message: deref(probe.Message)}
	case status/100 != 2:
		return fmt.Errorf("esm: emulator answered %d: %.500s", status, body)
	case bytes.HasPrefix(body, timedOut):
		return fmt.Errorf("%w: %s", ErrTimeout, body)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, resp); err != nil {
		return &ResponseError{Body: body, Err: err}
	}
	return nil
}

// freePortOr returns port, or a port that was free a moment ago if it is 0.
func freePortOr(port int) (int, error) {
	if port != 0 {
		return port, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("esm: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
