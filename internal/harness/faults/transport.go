package faults

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// TimeoutError is the innermost error of an injected Timeout or
// ResponseLost fault, behind *smithyhttp.RequestSendError and *url.Error as
// an HTTP client timeout is. errors.As finds it, so tests can tell injected
// timeouts from real ones.
type TimeoutError struct {
	Kind      Kind // Timeout or ResponseLost
	Operation string
}

func (e *TimeoutError) Error() string {
	if e.Kind == ResponseLost {
		return fmt.Sprintf("i/o timeout awaiting the %s response (injected by faults: the request was executed, its response lost)", e.Operation)
	}
	return fmt.Sprintf("i/o timeout sending the %s request (injected by faults: the request was not sent)", e.Operation)
}

// Timeout reports true: this is a timeout, as net.Error defines it.
func (e *TimeoutError) Timeout() bool { return true }

// Temporary reports true, as net timeouts do.
func (e *TimeoutError) Temporary() bool { return true }

// DynamoDB's wire errors (awsJson1_0): the __type the service sends.
var wireErrors = map[Kind]struct {
	status  int
	typ     string
	message string
}{
	Throttle: {400, "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
		"The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API."},
	Throttling: {400, "com.amazon.coral.availability#ThrottlingException",
		"Throughput exceeds the current capacity of your table or index. DynamoDB is automatically scaling your table or index so please try again shortly."},
	ServerError: {500, "com.amazonaws.dynamodb.v20120810#InternalServerError",
		"Internal server error"},
}

var requestIDs atomic.Int64

// errorResponse fabricates the HTTP response DynamoDB sends for kind.
func errorResponse(k Kind) *smithyhttp.Response {
	w := wireErrors[k]
	body := fmt.Appendf(nil, `{"__type":%q,"message":%q}`, w.typ, w.message+" (injected by faults)")
	h := http.Header{}
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("X-Amzn-Requestid", fmt.Sprintf("FAULTS%026d", requestIDs.Add(1)))
	h.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return &smithyhttp.Response{Response: &http.Response{
		Status:        fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
	}}
}

// timeout is the error an HTTP client gives for a timed-out request: the
// smithy ClientHandler wraps it in a RequestSendError.
func timeout(in middleware.DeserializeInput, k Kind, op string) (middleware.DeserializeOutput, error) {
	u := ""
	if req, ok := in.Request.(*smithyhttp.Request); ok && req.URL != nil {
		u = req.URL.String()
	}
	out := middleware.DeserializeOutput{RawResponse: &smithyhttp.Response{Response: &http.Response{Header: http.Header{}, Body: http.NoBody}}}
	return out, &smithyhttp.RequestSendError{Err: &url.Error{Op: "Post", URL: u, Err: &TimeoutError{Kind: k, Operation: op}}}
}

// transport is the per-attempt middleware: the innermost deserialize step,
// wrapped around the HTTP round trip.
func (i *Injector) transport(ctx context.Context, op string, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	middleware.DeserializeOutput, middleware.Metadata, error,
) {
	k, ok := i.draw(op, attemptKinds...)
	if !ok {
		return next.HandleDeserialize(ctx, in)
	}
	input := middleware.GetStackValue(ctx, inputKey{})
	switch k {
	case Timeout:
		i.report(Fault{Kind: k, Operation: op, Input: input})
		out, err := timeout(in, k, op)
		return out, middleware.Metadata{}, err
	case ResponseLost:
		out, md, err := next.HandleDeserialize(ctx, in)
		status := 0
		if resp, ok := out.RawResponse.(*smithyhttp.Response); ok && resp.Response != nil {
			status = resp.StatusCode
			if resp.Body != nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		}
		i.report(Fault{Kind: k, Operation: op, Status: status, Input: input})
		if err != nil {
			// The request failed on its own (a real transport error): it
			// was lost anyway.
			return out, md, err
		}
		out, err = timeout(in, k, op)
		return out, middleware.Metadata{}, err
	default:
		i.report(Fault{Kind: k, Operation: op, Input: input})
		return middleware.DeserializeOutput{RawResponse: errorResponse(k)}, middleware.Metadata{}, nil
	}
}

// unprocessed is the per-call BatchWriteItem middleware: it sends a random
// non-empty proper subset of the requests and returns the others as
// UnprocessedItems.
func (i *Injector) unprocessed(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	middleware.InitializeOutput, middleware.Metadata, error,
) {
	params, ok := in.Parameters.(*dynamodb.BatchWriteItemInput)
	if !ok {
		return next.HandleInitialize(ctx, in)
	}
	type ref struct {
		table string
		req   types.WriteRequest
	}
	var all []ref
	tables := sortedKeys(params.RequestItems)
	for _, t := range tables {
		for _, r := range params.RequestItems[t] {
			all = append(all, ref{t, r})
		}
	}
	if len(all) < 2 {
		return next.HandleInitialize(ctx, in)
	}
	if _, ok := i.draw("BatchWriteItem", Unprocessed); !ok {
		return next.HandleInitialize(ctx, in)
	}
	// Hold back a random proper subset: each request with probability
	// 1/2, then make sure at least one is sent and one held back.
	held := make([]bool, len(all))
	n := 0
	for j := range all {
		if i.randN(2) == 1 {
			held[j] = true
			n++
		}
	}
	switch n {
	case 0:
		held[i.randN(len(all))] = true
		n = 1
	case len(all):
		held[i.randN(len(all))] = false
		n--
	}
	sent := map[string][]types.WriteRequest{}
	back := map[string][]types.WriteRequest{}
	for j, r := range all {
		if held[j] {
			back[r.table] = append(back[r.table], r.req)
		} else {
			sent[r.table] = append(sent[r.table], r.req)
		}
	}
	i.report(Fault{Kind: Unprocessed, Operation: "BatchWriteItem", Unprocessed: n, Requests: len(all), Input: params})

	cp := *params // the caller's input is not modified
	cp.RequestItems = sent
	in.Parameters = &cp
	out, md, err := next.HandleInitialize(ctx, in)
	if err != nil {
		return out, md, err
	}
	res, ok := out.Result.(*dynamodb.BatchWriteItemOutput)
	if !ok {
		return out, md, fmt.Errorf("faults: BatchWriteItem result is %T", out.Result)
	}
	if res.UnprocessedItems == nil {
		res.UnprocessedItems = map[string][]types.WriteRequest{}
	}
	for t, reqs := range back {
		res.UnprocessedItems[t] = append(res.UnprocessedItems[t], reqs...)
	}
	return out, md, nil
}
