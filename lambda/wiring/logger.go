package wiring

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Logger returns the functions' logger: slog JSON on stdout (CloudWatch
// Logs), one object per line, carrying the invocation's requestId whenever
// the log call is given the handler's context. The level comes from
// AWS_LAMBDA_LOG_LEVEL (Lambda's advanced logging controls), default INFO.
func Logger() *slog.Logger { return NewLogger(stdout, os.Getenv("AWS_LAMBDA_LOG_LEVEL")) }

// NewLogger is Logger writing to w at the given level name.
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	switch strings.ToUpper(level) {
	case "TRACE", "DEBUG":
		l = slog.LevelDebug
	case "WARN":
		l = slog.LevelWarn
	case "ERROR", "FATAL":
		l = slog.LevelError
	default:
		l = slog.LevelInfo
	}
	return slog.New(requestIDHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})})
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
