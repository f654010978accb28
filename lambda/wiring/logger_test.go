package wiring

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

func TestLoggerIsJSONWithRequestID(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, "")
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
	log.InfoContext(ctx, "hello", "bucket", 3)
	log.Info("no context")
	log.Debug("hidden at the default level")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	var first, second map[string]any
	if err := json.Unmarshal(lines[0], &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(lines[1], &second); err != nil {
		t.Fatal(err)
	}
	if first["requestId"] != "req-1" || first["msg"] != "hello" || first["bucket"] != float64(3) {
		t.Fatalf("first line %v", first)
	}
	if _, ok := second["requestId"]; ok {
		t.Fatalf("request id without a Lambda context: %v", second)
	}
}
