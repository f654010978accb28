package integration_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/store/dynamo"
)

// loseFirstAnswers forwards everything to DynamoDB, but the first n
// TransactWriteItems answers are replaced by an InternalServerError, sent
// delay after DynamoDB answered (it ran the transaction). The delay puts the
// writer's resend in a later second than its first attempt, so that a TTL
// taken from the clock again would differ.
func loseFirstAnswers(t *testing.T, endpoint string, n int64, delay time.Duration) (string, *atomic.Int64) {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	fwd := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amz-Target") != "DynamoDB_20120810.TransactWriteItems" || seen.Add(1) > n {
			fwd.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		fwd.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			t.Errorf("the transaction whose answer is to be lost failed: %d %s", rec.Code, rec.Body)
		}
		time.Sleep(delay)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"answer lost by the test"}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &seen
}

// TestPythonWriterResendsByteForByte drives the Python writer's command
// line on DynamoDB Local, in watermark mode, through a proxy that loses the
// answer of its first, committed transaction. The writer resends the
// request it built (same items, same TTL, same token), so DynamoDB answers
// success: one message stored, exit 0. A later run with the same token
// (a caller retrying under its key) reserves new numbers, DynamoDB refuses
// it with IdempotentParameterMismatch, and the writer must say the outcome
// is unknown (exit 6), not that nothing was written (exit 5), after which a
// caller would write the message again under a new id. It prints
//
//	python-writer: resend attempts=2 stored=1 retry_error=Outbox.OutcomeUnknown retry_exit=6 fenced=1
func TestPythonWriterResendsByteForByte(t *testing.T) {
	t.Parallel()
	const buckets = 4
	e := newEnv(t, buckets, dynamo.WithMode(outbox.WatermarkMode), dynamo.Retention(2*time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	proxied := *e.dynamo
	endpoint, seen := loseFirstAnswers(t, e.dynamo.Endpoint, 1, 1100*time.Millisecond)
	proxied.Endpoint = endpoint
	token := "resend-" + outbox.NewID()[:20]
	msg := pyKeys[0].message("py-resend", 0, "")
	msg["topic"] = e.topic

	res, code := testenv.RunPythonWriter(ctx, t, &proxied, e.tables.Messages, e.tables.Control, []testenv.PythonTx{{Messages: []any{msg}, Token: token}})
	if code != 0 || len(res) != 1 || !res[0].OK {
		t.Fatalf("a lost answer, resent: exit %d, %+v; want committed (the resend must be the request DynamoDB ran)", code, res)
	}
	if res[0].Attempts != 2 || seen.Load() != 2 {
		t.Fatalf("attempts %d, TransactWriteItems calls %d; want 2 (the first's answer lost)", res[0].Attempts, seen.Load())
	}
	stored := messageItems(ctx, t, e)
	if len(stored) != 1 || stored[0]["x"] == nil {
		t.Fatalf("stored %v; want the one message, with its TTL", stored)
	}

	// The same token again, as a caller's retry of the committed write.
	again, code := testenv.RunPythonWriter(ctx, t, e.dynamo, e.tables.Messages, e.tables.Control, []testenv.PythonTx{{Messages: []any{msg}, Token: token}})
	if len(again) != 1 || code != 6 || again[0].Error != "Outbox.OutcomeUnknown" || strings.Contains(again[0].Message, "nothing was written") ||
		!strings.Contains(again[0].Message, "may have committed") || len(again[0].Released) != 1 {
		t.Fatalf("the token of a committed write again: exit %d, %+v; want Outbox.OutcomeUnknown (exit 6) with its own number fenced", code, again)
	}
	fenced := 0
	for _, it := range scanItems(ctx, t, e.dynamo.Client, e.tables.Messages) {
		if it["f"] != nil {
			fenced++
		}
	}
	if n := len(messageItems(ctx, t, e)); n != 1 || fenced != 1 {
		t.Fatalf("after the retry: %d messages, %d fences; want the first write's message and the retry's fence", n, fenced)
	}
	fmt.Printf("python-writer: resend attempts=%d stored=%d retry_error=%s retry_exit=%d fenced=%d\n",
		res[0].Attempts, len(stored), again[0].Error, code, fenced)
}

// messageItems are e's stored messages (not fences, not tombstones).
func messageItems(ctx context.Context, t *testing.T, e *env) []map[string]types.AttributeValue {
	t.Helper()
	var out []map[string]types.AttributeValue
	for _, it := range scanItems(ctx, t, e.dynamo.Client, e.tables.Messages) {
		if it["id"] != nil {
			out = append(out, it)
		}
	}
	return out
}

// TestPythonWriterSharedLimits: an outbox whose config item sets
// MaxMessageBytes 2048 and renames the message-id header. The Python writer
// refuses a 5,000-byte value and a header under the stamped id name, as the
// Go writer on the same outbox does (the same fields), reserving and writing
// nothing; a header under the default name the outbox replaced is an
// ordinary one and commits, in both writers. It prints
//
//	python-writer: shared-limits refused_too_large=1 refused_stamped_header=1 go_agrees=2 reserved_by_refused=0 committed=1
func TestPythonWriterSharedLimits(t *testing.T) {
	t.Parallel()
	const buckets = 4
	e := newEnv(t, buckets, dynamo.MaxMessageBytes(2048), dynamo.MessageIDHeader("x-msg-id"))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	big := pyKeys[0].message("py-big", 0, "")
	big["value"] = strings.Repeat("v", 5000)
	forged := pyKeys[0].message("py-forged", 0, "")
	forged["headers"] = []map[string]any{{"key": "x-msg-id", "value": outbox.NewID()}}
	renamed := pyKeys[0].message("py-renamed", 0, "")
	renamed["headers"] = []map[string]any{{"key": outbox.DefaultMessageIDHeader, "value": "mine"}}
	for _, m := range []map[string]any{big, forged, renamed} {
		m["topic"] = e.topic
	}

	res, code := testenv.RunPythonWriter(ctx, t, e.dynamo, e.tables.Messages, e.tables.Control,
		[]testenv.PythonTx{{Messages: []any{big}}, {Messages: []any{forged}}})
	if code != 8 || len(res) != 2 {
		t.Fatalf("python writer: exit %d, %+v; want two refusals (exit 8)", code, res)
	}
	refused := map[string]int{}
	for i, want := range []struct{ name, text string }{
		{"too_large", "above MaxMessageBytes=2048"},
		{"stamped_header", "is the message-id header the relay stamps"},
	} {
		if res[i].Error != "Outbox.Validation" || !strings.Contains(res[i].Message, want.text) {
			t.Errorf("transaction %d: %+v; want Outbox.Validation saying %q", i, res[i], want.text)
			continue
		}
		refused[want.name]++
	}
	reserved := 0
	for _, it := range scanItems(ctx, t, e.dynamo.Client, e.tables.Control) {
		if sk, _ := it["sk"].(*types.AttributeValueMemberS); sk != nil && sk.Value == "seq" {
			reserved++
		}
	}
	if n := len(scanItems(ctx, t, e.dynamo.Client, e.tables.Messages)); n != 0 || reserved != 0 {
		t.Fatalf("the refusals left %d items in the messages table and %d counters", n, reserved)
	}

	// The Go writer on the same outbox refuses the same messages on the
	// same fields.
	goAgrees := 0
	for _, c := range []struct {
		m     outbox.Message
		field string
	}{
		{outbox.Message{Topic: e.topic, Key: []byte("order-1"), Value: []byte(strings.Repeat("v", 5000))}, "Value"},
		{outbox.Message{Topic: e.topic, Key: []byte("order-1"), Headers: []outbox.Header{{Key: "x-msg-id", Value: []byte(outbox.NewID())}}}, "Headers[0].Key"},
	} {
		_, err := e.writer.Write(ctx, nil, c.m)
		var ve *outbox.ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("Go writer: %v; want a ValidationError on %s", err, c.field)
			continue
		}
		goAgrees++
	}

	res, code = testenv.RunPythonWriter(ctx, t, e.dynamo, e.tables.Messages, e.tables.Control, []testenv.PythonTx{{Messages: []any{renamed}}})
	if code != 0 || len(res) != 1 || !res[0].OK {
		t.Fatalf("a header under the default id name the outbox replaced: exit %d, %+v; want committed", code, res)
	}
	if _, err := e.writer.Write(ctx, nil, outbox.Message{Topic: e.topic, Key: []byte("order-1"),
		Headers: []outbox.Header{{Key: outbox.DefaultMessageIDHeader, Value: []byte("mine")}}}); err != nil {
		t.Fatalf("Go writer, the same header: %v", err)
	}
	fmt.Printf("python-writer: shared-limits refused_too_large=%d refused_stamped_header=%d go_agrees=%d reserved_by_refused=%d committed=%d\n",
		refused["too_large"], refused["stamped_header"], goAgrees, reserved, len(res))
}
