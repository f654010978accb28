package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"testing"

	"github.com/dynakafka/outbox"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestIsRetriable(t *testing.T) {
	wrap := func(err error) error {
		return &outbox.PublishError{Bucket: 1, Sequence: 2, MessageID: "id", Err: &ProduceError{Topic: "t", Partition: 0, Err: err}}
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"cancelled", wrap(context.Canceled), true},
		{"deadline", wrap(context.DeadlineExceeded), true},
		{"delivery timeout", wrap(fmt.Errorf("%w: after 20s (%w)", kgo.ErrRecordTimeout, context.DeadlineExceeded)), true},
		{"shared batch cancelled", wrap(ErrSharedBatchCancelled), true},
		{"closed", wrap(ErrClosed), true},
		{"client closed", wrap(kgo.ErrClientClosed), true},
		{"not enough replicas", wrap(kerr.NotEnoughReplicas), true},
		{"not leader", wrap(kerr.NotLeaderForPartition), true},
		{"request timed out", wrap(kerr.RequestTimedOut), true},
		{"network", wrap(&net.OpError{Op: "dial", Err: errors.New("connection refused")}), true},
		{"message too large from the broker", wrap(fmt.Errorf("%w (uncompressed_bytes=9)", kerr.MessageTooLarge)), false},
		{"invalid record", wrap(kerr.InvalidRecord), false},
		{"topic authorization", wrap(kerr.TopicAuthorizationFailed), false},
		{"record too large", &outbox.PublishError{Err: &RecordTooLargeError{Size: 10, MaxMessageBytes: 5}}, false},
		{"invalid message", &outbox.PublishError{Err: &outbox.ValidationError{Field: "ID"}}, false},
		{"missing topic", &outbox.PublishError{Err: &TopicError{Topic: "t", Err: kerr.UnknownTopicOrPartition}}, false},
		{"topic limit", &outbox.PublishError{Err: &TopicLimitError{Topic: "t"}}, false},
		{"topic missing per the check", &outbox.PublishError{Err: topicError("t", kerr.UnknownTopicOrPartition)}, false},
		{"topic leader not elected yet", &outbox.PublishError{Err: topicError("t", kerr.LeaderNotAvailable)}, true},
		{"topic not authorized", &outbox.PublishError{Err: topicError("t", kerr.TopicAuthorizationFailed)}, false},
		{"topic check failed on the network", &outbox.PublishError{Err: fmt.Errorf("checking: %w", &net.OpError{Op: "read", Err: errors.New("reset")})}, true},
		{"downgrade", &DowngradeError{Option: "kgo.DisableIdempotentWrite"}, false},
		{"unknown", wrap(errors.New("invalid record partitioning choice of 7 from 3 available")), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsRetriable(tt.err); got != tt.want {
				t.Errorf("IsRetriable(%v) = %v, want %v", tt.err, got, tt.want)
			}
			if IsRetriable(tt.err) && Class(tt.err) != outbox.Retriable {
				t.Errorf("IsRetriable(%v) but Class = %v", tt.err, Class(tt.err))
			}
		})
	}
}

// Over every broker error code, IsRetriable is Class's verdict, which is
// Kafka's own retriable flag except where Class knows better: the codes
// that condemn the record (RecordPermanent). Of those, Kafka marks only
// CORRUPT_MESSAGE retriable; IsRetriable said so too before it was derived
// from Class, while the relay parked the record.
func TestIsRetriableByErrorCode(t *testing.T) {
	condemned := map[*kerr.Error]bool{kerr.CorruptMessage: true}
	seen := 0
	for code := math.MinInt16; code <= math.MaxInt16; code++ {
		ke, ok := errors.AsType[*kerr.Error](kerr.ErrorForCode(int16(code)))
		if !ok || (ke == kerr.UnknownServerError && code != -1) {
			continue // not a code Kafka defines
		}
		seen++
		err := &outbox.PublishError{Bucket: 1, Sequence: 2, Err: &ProduceError{Topic: "t", Partition: 0, Err: fmt.Errorf("produce: %w", ke)}}
		got, class := IsRetriable(err), Class(err)
		if got != (class == outbox.Retriable) {
			t.Errorf("%s: IsRetriable = %v, Class = %v", ke.Message, got, class)
		}
		if want := ke.Retriable && !condemned[ke]; got != want {
			t.Errorf("%s: IsRetriable = %v, want %v (Kafka's retriable flag: %v)", ke.Message, got, want, ke.Retriable)
		}
	}
	if seen < 100 {
		t.Fatalf("only %d broker error codes", seen)
	}
}

func TestErrorMessages(t *testing.T) {
	tests := []struct {
		err  error
		want []string
	}{
		{&TopicError{Topic: "orders", Err: kerr.UnknownTopicOrPartition}, []string{`"orders"`, "does not exist"}},
		{&TopicLimitError{Topic: "orders", TopicMaxMessageBytes: 1000, Source: "max.message.bytes (DYNAMIC_TOPIC_CONFIG)", MaxMessageBytes: 2000},
			[]string{`"orders"`, "1000", "2000", "DYNAMIC_TOPIC_CONFIG"}},
		{&RecordTooLargeError{Size: 3000, MaxMessageBytes: 2000}, []string{"3000", "MaxMessageBytes=2000"}},
		{&ProduceError{Topic: "orders", Partition: 3, Err: kerr.MessageTooLarge}, []string{`"orders" partition 3`, "MESSAGE_TOO_LARGE", "max.message.bytes"}},
		{&ProduceError{Topic: "orders", Partition: -1, Err: kerr.ClusterAuthorizationFailed}, []string{`"orders":`, "IdempotentWrite"}},
		{&DowngradeError{Option: "kgo.RequiredAcks", Value: "acks=1", Reason: "remove it"}, []string{"kgo.RequiredAcks", "acks=1", "remove it"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%T", tt.err), func(t *testing.T) {
			msg := tt.err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not contain %q", msg, w)
				}
			}
		})
	}
	if !errors.Is(&RecordTooLargeError{}, kerr.MessageTooLarge) {
		t.Error("RecordTooLargeError does not match kerr.MessageTooLarge")
	}
}

func TestKgoLogger(t *testing.T) {
	var buf bytes.Buffer
	l := kgoLogger{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if got := l.Level(); got != kgo.LogLevelWarn {
		t.Errorf("Level() = %v, want warn (the handler's level)", got)
	}
	l.Log(kgo.LogLevelInfo, "hidden")
	l.Log(kgo.LogLevelError, "shown", "broker", 3)
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, "level=ERROR msg=shown broker=3") {
		t.Errorf("log output %q", out)
	}
	if got := (kgoLogger{slog.New(slog.DiscardHandler)}).Level(); got != kgo.LogLevelNone {
		t.Errorf("discarding logger: Level() = %v, want none", got)
	}
}
