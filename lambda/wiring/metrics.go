package wiring

import (
	"io"
	"os"
	"strings"
	"sync"

	"github.com/dynakafka/outbox/lambda/emf"
	"github.com/dynakafka/outbox/lambda/handler"
)

// stdout is the functions' standard output, which Lambda sends to
// CloudWatch Logs. The logger and the EMF emitter share it so that each
// line reaches it in one piece: a line written by two goroutines at once
// could otherwise interleave past the pipe's atomic write size.
var stdout io.Writer = &syncWriter{w: os.Stdout}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Stdout is the functions' standard output, shared by Logger and Emitter.
func Stdout() io.Writer { return stdout }

// Emitter returns the functions' EMF emitter on stdout: namespace Outbox,
// dimension Outbox = messagesTable, each line at the level MetricsLevel
// gives for AWS_LAMBDA_LOG_LEVEL.
func Emitter(messagesTable string) (*emf.Emitter, error) {
	return NewEmitter(stdout, messagesTable, os.Getenv("AWS_LAMBDA_LOG_LEVEL"))
}

// NewEmitter is Emitter writing to w, for the application log level
// logLevel.
func NewEmitter(w io.Writer, messagesTable, logLevel string) (*emf.Emitter, error) {
	return handler.NewEmitter(w, messagesTable, emf.Level(MetricsLevel(logLevel)))
}

// MetricsLevel is the "level" of the functions' EMF lines for the
// application log level Lambda gives them (LoggingConfig's
// ApplicationLogLevel, as AWS_LAMBDA_LOG_LEVEL): INFO, or the configured
// level when it is higher. Lambda filters a JSON line by its level and
// takes a line without one for INFO, so metric lines must carry a level
// the filter lets through, or a function at WARN would lose its metrics.
func MetricsLevel(logLevel string) string {
	switch l := strings.ToUpper(strings.TrimSpace(logLevel)); l {
	case "WARN", "ERROR", "FATAL":
		return l
	default:
		return "INFO"
	}
}
