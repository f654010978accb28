package esm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/google/uuid"

	"github.com/dynakafka/outbox"
)

// Invoker runs the function once for one event, synchronously, as Lambda's
// RequestResponse invocation does. A non-nil error is a failed invocation (a
// function error, a crash or a timeout); the mapping retries it.
type Invoker interface {
	Invoke(ctx context.Context, event events.DynamoDBEvent) (events.DynamoDBEventResponse, error)
}

// Handler is a DynamoDB Streams Lambda handler, as passed to lambda.Start.
type Handler func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error)

// ErrTimeout is returned (wrapped) by an Invoker when the function ran past
// its timeout. Lambda counts a timeout as a function error.
var ErrTimeout = errors.New("esm: function timed out")

// FunctionError is an error the function reported, as the Lambda runtime
// serialises it (errorType, errorMessage).
type FunctionError struct {
	Type    string `json:"errorType"`
	Message string `json:"errorMessage"`
}

func (e *FunctionError) Error() string {
	return fmt.Sprintf("esm: function error %s: %s", e.Type, e.Message)
}

// ResponseError reports a function response that is not a valid
// DynamoDBEventResponse (not JSON, or the wrong shape). With
// ReportBatchItemFailures on, Lambda treats it as a complete failure of the
// batch; with it off, the response is ignored and the batch succeeds.
type ResponseError struct {
	Body []byte
	Err  error
}

func (e *ResponseError) Error() string {
	return fmt.Sprintf("esm: invalid function response %.200q: %v", e.Body, e.Err)
}

func (e *ResponseError) Unwrap() error { return e.Err }

// InProcessOpt configures InProcess.
type InProcessOpt func(*inProcess)

// Timeout is the function timeout: the handler's context is cancelled at this
// deadline and a late return is reported as ErrTimeout. Default 3s (Lambda's
// default function timeout); positive, at most 900s.
func Timeout(d time.Duration) InProcessOpt {
	return func(p *inProcess) {
		if d <= 0 || d > 900*time.Second {
			p.err = &outbox.OptionError{Option: "esm.Timeout", Value: d, Reason: "must be positive and at most 900s (Lambda's limit is 15 minutes)"}
			return
		}
		p.timeout = d
	}
}

type inProcess struct {
	h       Handler
	timeout time.Duration
	err     error
}

// InProcess invokes h in this process the way the Lambda Go runtime would: the
// event goes through JSON (so h sees exactly what lambda.Start would decode,
// and cannot alias the mapping's records), ctx carries a Lambda context
// (request id, function ARN) and a deadline of Timeout, a panic becomes a
// function error, and the response goes through JSON too.
//
// Go cannot kill a goroutine: a handler that ignores ctx past its deadline
// delays the timeout error until it returns, so invocations of one shard never
// overlap. An invalid option makes New (and every Invoke) return an
// *outbox.OptionError.
func InProcess(h Handler, opts ...InProcessOpt) Invoker {
	p := &inProcess{h: h, timeout: 3 * time.Second}
	for _, o := range opts {
		o(p)
	}
	if h == nil && p.err == nil {
		p.err = &outbox.OptionError{Option: "esm.InProcess", Value: "nil", Reason: "pass the function's handler"}
	}
	return p
}

func (p *inProcess) validate() error { return p.err }

func (p *inProcess) Invoke(ctx context.Context, event events.DynamoDBEvent) (resp events.DynamoDBEventResponse, err error) {
	if p.err != nil {
		return resp, p.err
	}
	payload, err := json.Marshal(event)
	if err != nil {
		return resp, fmt.Errorf("esm: marshal event: %w", err)
	}
	var in events.DynamoDBEvent
	if err := json.Unmarshal(payload, &in); err != nil {
		return resp, fmt.Errorf("esm: unmarshal event: %w", err)
	}
	if _, ok := lambdacontext.FromContext(ctx); !ok {
		ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: uuid.NewString()})
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.timeout, ErrTimeout)
	defer cancel()

	out, err := p.call(ctx, in)
	if errors.Is(context.Cause(ctx), ErrTimeout) {
		return resp, fmt.Errorf("%w after %v", ErrTimeout, p.timeout)
	}
	if err != nil {
		return resp, err
	}
	body, err := json.Marshal(out)
	if err != nil {
		return resp, &ResponseError{Err: err}
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return resp, &ResponseError{Body: body, Err: err}
	}
	return resp, nil
}

func (p *inProcess) call(ctx context.Context, ev events.DynamoDBEvent) (resp events.DynamoDBEventResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &FunctionError{Type: "Runtime.Panic", Message: fmt.Sprint(r)}
		}
	}()
	return p.h(ctx, ev)
}
