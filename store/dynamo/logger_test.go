package dynamo

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox/internal/dynamoerr"
)

// updateFailing answers the first fails counter updates with a server error,
// without sending them.
type updateFailing struct {
	WriterAPI
	mu    sync.Mutex
	fails int
}

func (u *updateFailing) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	u.mu.Lock()
	fail := u.fails > 0
	u.fails--
	u.mu.Unlock()
	if fail {
		return nil, &types.InternalServerError{Message: str("injected")}
	}
	return u.WriterAPI.UpdateItem(ctx, in, opts...)
}

// Every retried attempt is logged with its call, attempt and cause: a
// conflict at DEBUG, throttling and server errors at WARN. The default
// writer logs nothing (TestWriteRetriesTransientFailures runs without a
// logger).
func TestWriterLogsRetries(t *testing.T) {
	w := newWriterEnv(t, 1)
	ctx := ctxT(t)
	w.client.fault = func(call int, in *dynamodb.TransactWriteItemsInput) (bool, error) {
		switch call {
		case 1:
			return false, cancelledBy(dynamoerr.CodeConflict, len(in.TransactItems))
		case 2:
			return false, cancelledBy(dynamoerr.CodeThrottling, len(in.TransactItems))
		}
		return true, nil
	}
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	writer, err := NewWriter(ctx, &updateFailing{WriterAPI: w.client, fails: 1}, w.tables, WithLogger(logger), MaxAttempts(4))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Write(ctx, []types.TransactWriteItem{w.bump("agg", 0)}, keyed("a")); err != nil {
		t.Fatal(err)
	}
	type record struct {
		Level, Call, Cause string
		Attempt            int
		MaxAttempts        int `json:"max_attempts"`
		Error              string
	}
	var got []record
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		got = append(got, r)
	}
	want := []struct{ level, call, cause string }{
		{"WARN", "UpdateItem", "ambiguous"},
		{"DEBUG", "TransactWriteItems", "conflict"},
		{"WARN", "TransactWriteItems", "throttled"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d log records, want %d:\n%s", len(got), len(want), buf.String())
	}
	for i, wr := range want {
		r := got[i]
		if r.Level != wr.level || r.Call != wr.call || r.Cause != wr.cause || r.MaxAttempts != 4 || r.Error == "" {
			t.Errorf("record %d = %+v, want %s %s %s", i, r, wr.level, wr.call, wr.cause)
		}
	}
	if got[0].Attempt != 1 || got[1].Attempt != 1 || got[2].Attempt != 2 {
		t.Errorf("attempts %d %d %d, want 1 1 2", got[0].Attempt, got[1].Attempt, got[2].Attempt)
	}
}
