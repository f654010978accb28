package dynamo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/local/dynamolocal"
)

// answer is what the wire does with one request.
type answer int

const (
	forward            answer = iota // to DynamoDB Local, and its response back
	serverError                      // HTTP 500 InternalServerError; DynamoDB Local never sees it
	throttled                        // HTTP 400 ThrottlingException; DynamoDB Local never sees it
	lostAfterCommit                  // forwarded (it takes effect), then answered HTTP 500
	droppedAfterCommit               // forwarded (it takes effect), then the connection fails
)

// wireCall is one HTTP request as the wire saw it.
type wireCall struct {
	at    time.Time
	token string // ClientRequestToken of a TransactWriteItems
}

// wire is an http.RoundTripper between an SDK client and DynamoDB Local: it
// counts the HTTP requests of each operation and can answer in DynamoDB's
// stead. What it counts is what went on the wire, after every retry layer.
type wire struct {
	next http.RoundTripper
	// answer decides, for the nth (1-based) request of op.
	answer func(op string, n int) answer

	mu    sync.Mutex
	calls map[string][]wireCall
}

func (w *wire) RoundTrip(req *http.Request) (*http.Response, error) {
	op := strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	var in struct{ ClientRequestToken string }
	_ = json.Unmarshal(body, &in)
	w.mu.Lock()
	w.calls[op] = append(w.calls[op], wireCall{at: time.Now(), token: in.ClientRequestToken})
	n := len(w.calls[op])
	w.mu.Unlock()

	a := forward
	if w.answer != nil {
		a = w.answer(op, n)
	}
	switch a {
	case serverError:
		return errorResponse(req, http.StatusInternalServerError, "InternalServerError"), nil
	case throttled:
		return errorResponse(req, http.StatusBadRequest, "ThrottlingException"), nil
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := w.next.RoundTrip(out)
	if err != nil || a == forward {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if a == droppedAfterCommit {
		return nil, io.ErrUnexpectedEOF
	}
	return errorResponse(req, http.StatusInternalServerError, "InternalServerError"), nil
}

func errorResponse(req *http.Request, status int, code string) *http.Response {
	body := fmt.Sprintf(`{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":"injected by the test wire"}`, code)
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

func (w *wire) count(op string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.calls[op])
}

func (w *wire) log(op string) []wireCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wireCall(nil), w.calls[op]...)
}

// clientRetries is how many attempts the test client's own retryer makes:
// an eager retryer, as a service might configure, which the writer must not
// multiply.
const clientRetries = 5

// newWireWriter returns a writer over a fresh outbox whose client sends
// every request through a wire, and the wire. The wire forwards everything
// until the test sets its answer.
func newWireWriter(t *testing.T, bucketCount int, opts ...WriterOption) (*env, *Writer, *wire) {
	t.Helper()
	e := newEnv(t, bucketCount)
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	w := &wire{next: transport, calls: map[string][]wireCall{}}
	client := dynamolocal.NewClient(e.d.Config, e.d.Endpoint, func(o *dynamodb.Options) {
		o.HTTPClient = &http.Client{Transport: w}
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = clientRetries
			so.MaxBackoff = 5 * time.Millisecond
			so.RateLimiter = ratelimit.None
		})
	})
	writer, err := NewWriter(ctxT(t), client, e.tables, append([]WriterOption{WithClock(fixedClock{t0})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	w.calls = map[string][]wireCall{} // NewWriter's reads are not the subject
	w.mu.Unlock()
	return e, writer, w
}

// One retry layer: MaxAttempts is the number of HTTP requests of each kind a
// Write sends, whatever the client's own retryer would do.
func TestWriterCallsOnTheWire(t *testing.T) {
	const attempts = 3
	cases := []struct {
		name   string
		answer func(op string, n int) answer
		// want: error matched with errors.Is (nil: success), and HTTP
		// requests per operation.
		want                    error
		transact, update, puts  int
		released                bool // the reserved numbers were fenced
		releaseFailed           bool
		stored                  int // messages stored
		sameToken, throttleWait bool
	}{
		{
			name: "transaction answered 500 every time",
			answer: func(op string, _ int) answer {
				if op == "TransactWriteItems" {
					return serverError
				}
				return forward
			},
			want: outbox.ErrOutcomeUnknown, transact: attempts, update: 1, sameToken: true,
		},
		{
			name: "transaction throttled every time",
			answer: func(op string, _ int) answer {
				if op == "TransactWriteItems" {
					return throttled
				}
				return forward
			},
			want: outbox.ErrThrottled, transact: attempts, update: 1, puts: 2, released: true, sameToken: true, throttleWait: true,
		},
		{
			name: "transaction throttled twice, then committed",
			answer: func(op string, n int) answer {
				if op == "TransactWriteItems" && n <= 2 {
					return throttled
				}
				return forward
			},
			transact: 3, update: 1, stored: 2, sameToken: true, throttleWait: true,
		},
		{
			name: "response lost after the commit, twice",
			answer: func(op string, n int) answer {
				if op == "TransactWriteItems" && n <= 2 {
					return lostAfterCommit
				}
				return forward
			},
			transact: 3, update: 1, stored: 2, sameToken: true,
		},
		{
			name: "connection dropped after the commit, every time",
			answer: func(op string, _ int) answer {
				if op == "TransactWriteItems" {
					return droppedAfterCommit
				}
				return forward
			},
			want: outbox.ErrOutcomeUnknown, transact: attempts, update: 1, stored: 2, sameToken: true,
		},
		{
			name: "counter update answered 500 every time",
			answer: func(op string, _ int) answer {
				if op == "UpdateItem" {
					return serverError
				}
				return forward
			},
			want: errAny, update: attempts,
		},
		{
			name: "counter update throttled twice",
			answer: func(op string, n int) answer {
				if op == "UpdateItem" && n <= 2 {
					return throttled
				}
				return forward
			},
			transact: 1, update: 3, stored: 2,
		},
		{
			name: "fence puts answered 500 every time",
			answer: func(op string, _ int) answer {
				switch op {
				case "TransactWriteItems":
					return throttled
				case "PutItem":
					return serverError
				}
				return forward
			},
			want: outbox.ErrThrottled, transact: attempts, update: 1, puts: 2 * attempts, releaseFailed: true, sameToken: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, writer, w := newWireWriter(t, 1, MaxAttempts(attempts))
			writer.cfg.jitter = func(d time.Duration) time.Duration { return d } // the full ceiling
			w.answer = c.answer
			_, err := writer.Write(ctxT(t), nil, keyed("a"), keyed("b"))
			switch {
			case c.want == nil && err != nil:
				t.Fatalf("Write: %v", err)
			case c.want == errAny && err == nil, c.want != nil && c.want != errAny && !errors.Is(err, c.want):
				t.Fatalf("Write: %v, want %v", err, c.want)
			}
			got := [3]int{w.count("TransactWriteItems"), w.count("UpdateItem"), w.count("PutItem")}
			if want := [3]int{c.transact, c.update, c.puts}; got != want {
				t.Errorf("HTTP requests TransactWriteItems/UpdateItem/PutItem = %v, want %v (the client's retryer would make up to %d of each)",
					got, want, clientRetries)
			}
			var te *TransactionError
			if errors.As(err, &te) {
				if te.Attempts != c.transact {
					t.Errorf("TransactionError.Attempts = %d, want %d", te.Attempts, c.transact)
				}
				if (te.ReleaseErr != nil) != c.releaseFailed {
					t.Errorf("ReleaseErr = %v, want failed=%v", te.ReleaseErr, c.releaseFailed)
				}
			}
			calls := w.log("TransactWriteItems")
			if c.sameToken {
				for i, call := range calls {
					if call.token == "" || call.token != calls[0].token {
						t.Fatalf("request %d token %q, request 1 token %q: every retry of one transaction must carry its token", i+1, call.token, calls[0].token)
					}
				}
			}
			if c.throttleWait {
				for i := 1; i < len(calls); i++ {
					// Lower bounds only: a busy machine can add, never remove.
					want := ceiling(i-1, throttleBase, throttleMax)
					if gap := calls[i].at.Sub(calls[i-1].at); gap < want {
						t.Errorf("request %d came %v after a throttled one, want at least %v", i+1, gap, want)
					}
				}
			}
			entries, _, perr := e.store.Pending(ctxT(t), 0, 0, 10)
			if perr != nil {
				t.Fatal(perr)
			}
			fences, msgs := 0, 0
			for _, en := range entries {
				if en.Fence {
					fences++
				} else {
					msgs++
				}
			}
			if msgs != c.stored || (fences == 2) != c.released {
				t.Errorf("stored %d messages and %d fences, want %d messages, released=%v", msgs, fences, c.stored, c.released)
			}
		})
	}
}

// errAny stands for "some error" in a test table.
var errAny = errors.New("any error")

// A retry after a server error waits the transient backoff (not the longer
// throttling one), and the waits grow.
func TestWriterBackoffAfterServerErrors(t *testing.T) {
	_, writer, w := newWireWriter(t, 1, MaxAttempts(4))
	writer.cfg.jitter = func(d time.Duration) time.Duration { return d }
	w.answer = func(op string, _ int) answer {
		if op == "TransactWriteItems" {
			return serverError
		}
		return forward
	}
	if _, err := writer.Write(ctxT(t), nil, keyed("a")); !errors.Is(err, outbox.ErrOutcomeUnknown) {
		t.Fatalf("Write: %v, want ErrOutcomeUnknown", err)
	}
	calls := w.log("TransactWriteItems")
	if len(calls) != 4 {
		t.Fatalf("%d requests, want 4", len(calls))
	}
	for i := 1; i < len(calls); i++ {
		want := ceiling(i-1, retryBase, retryMax)
		if gap := calls[i].at.Sub(calls[i-1].at); gap < want {
			t.Errorf("request %d came %v after the previous, want at least %v", i+1, gap, want)
		}
	}
}
