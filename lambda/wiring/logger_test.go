package wiring

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/dynakafka/outbox/internal/lambdalog"
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

// TestLoggerLevelFromLambda: with LoggingConfig's ApplicationLogLevel,
// Lambda sets AWS_LAMBDA_LOG_LEVEL to one of these names; the logger drops
// what is below it (a custom runtime filters its own lines).
func TestLoggerLevelFromLambda(t *testing.T) {
	cases := []struct {
		level string
		want  []string // the messages that get through, of debug, info, warn, error
	}{
		{"", []string{"info", "warn", "error", "fatal"}},
		{"TRACE", []string{"debug", "info", "warn", "error", "fatal"}},
		{"DEBUG", []string{"debug", "info", "warn", "error", "fatal"}},
		{"INFO", []string{"info", "warn", "error", "fatal"}},
		{"WARN", []string{"warn", "error", "fatal"}},
		{"ERROR", []string{"error", "fatal"}},
		{"FATAL", []string{"fatal"}},
		{"debug", []string{"debug", "info", "warn", "error", "fatal"}},
	}
	for _, c := range cases {
		t.Run("level "+c.level, func(t *testing.T) {
			var buf bytes.Buffer
			log := NewLogger(&buf, c.level)
			log.Debug("debug")
			log.Info("info")
			log.Warn("warn")
			log.Error("error")
			log.Log(context.Background(), LevelFatal, "fatal")
			var got []string
			for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
				var m map[string]any
				if err := json.Unmarshal(line, &m); err != nil {
					t.Fatalf("line %q: %v", line, err)
				}
				got = append(got, m["msg"].(string))
				// Lambda's filter (AWS's documented rule, modelled by
				// internal/lambdalog) reads the level the line was logged
				// at: an ERROR line survives LogLevel=ERROR.
				if a := lambdalog.Assigned(line); a != strings.ToUpper(m["msg"].(string)) {
					t.Fatalf("Lambda assigns %s to %s", a, line)
				}
				if c.level != "" && !lambdalog.Kept(strings.ToUpper(c.level), line) {
					t.Fatalf("Lambda at %s drops %s", c.level, line)
				}
			}
			if strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Fatalf("AWS_LAMBDA_LOG_LEVEL=%q let through %v, want %v", c.level, got, c.want)
			}
		})
	}
}
