package wiring

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Logger returns the functions' logger: slog JSON on stdout (CloudWatch
// Logs), one object per line, carrying the invocation's requestId whenever
// the log call is given the handler's context. The level comes from
// AWS_LAMBDA_LOG_LEVEL (Lambda's advanced logging controls), default INFO.
//
// Each line carries "level" (one of Lambda's level names) and "timestamp"
// (RFC 3339, UTC) in place of slog's "time": Lambda's log-level filtering
// assigns INFO to a line without a valid level and RFC 3339 timestamp, so
// with the function's LogLevel at WARN or ERROR an ERROR line keyed "time"
// could be dropped (internal/lambdalog models the rule).
func Logger() *slog.Logger { return NewLogger(stdout, os.Getenv("AWS_LAMBDA_LOG_LEVEL")) }

// NewLogger is Logger writing to w at the given level name.
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	switch strings.ToUpper(level) {
	case "TRACE", "DEBUG":
		l = slog.LevelDebug
	case "WARN":
		l = slog.LevelWarn
	case "ERROR":
		l = slog.LevelError
	case "FATAL":
		l = LevelFatal
	default:
		l = slog.LevelInfo
	}
	return slog.New(requestIDHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l, ReplaceAttr: lambdaAttr})})
}

// LevelFatal is the level of the lines a function logs before it exits
// (an init that failed): Lambda's FATAL, so that they reach CloudWatch
// Logs at every LogLevel.
const LevelFatal = slog.LevelError + 4

// lambdaAttr renames slog's time to "timestamp" and names every level as
// Lambda does (slog would write "ERROR+2" for a level between its own).
func lambdaAttr(groups []string, a slog.Attr) slog.Attr {
	if len(groups) > 0 {
		return a
	}
	switch a.Key {
	case slog.TimeKey:
		if t, ok := a.Value.Any().(time.Time); ok {
			return slog.String("timestamp", t.UTC().Format(time.RFC3339Nano))
		}
	case slog.LevelKey:
		if l, ok := a.Value.Any().(slog.Level); ok {
			return slog.String(slog.LevelKey, lambdaLevel(l))
		}
	}
	return a
}

func lambdaLevel(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "DEBUG"
	case l < slog.LevelWarn:
		return "INFO"
	case l < slog.LevelError:
		return "WARN"
	case l < LevelFatal:
		return "ERROR"
	default:
		return "FATAL"
	}
}

type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		r = r.Clone()
		r.AddAttrs(slog.String("requestId", lc.AwsRequestID))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(as)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
