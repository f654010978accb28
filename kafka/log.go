package kafka

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kgoLogger adapts a *slog.Logger to kgo.Logger. kgo asks for its level before
// building a log line, so the handler's enabled level is what gates kgo's
// (sometimes chatty) debug output.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel {
	ctx := context.Background()
	switch {
	case k.l.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelDebug
	case k.l.Enabled(ctx, slog.LevelInfo):
		return kgo.LogLevelInfo
	case k.l.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	case k.l.Enabled(ctx, slog.LevelError):
		return kgo.LogLevelError
	}
	return kgo.LogLevelNone
}

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	var l slog.Level
	switch level {
	case kgo.LogLevelError:
		l = slog.LevelError
	case kgo.LogLevelWarn:
		l = slog.LevelWarn
	case kgo.LogLevelInfo:
		l = slog.LevelInfo
	case kgo.LogLevelDebug:
		l = slog.LevelDebug
	default:
		return
	}
	k.l.Log(context.Background(), l, msg, keyvals...)
}

// KgoLogger returns l as a kgo.Logger (at the levels l's handler enables),
// for other franz-go clients of a service, such as the inbox's consumer.
func KgoLogger(l *slog.Logger) kgo.Logger { return kgoLogger{l} }
