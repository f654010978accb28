package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// countingPublisher counts what it acknowledged; a sweep publishes
// buckets at once.
type countingPublisher struct{ n atomic.Int64 }

func (p *countingPublisher) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	p.n.Add(int64(len(msgs)))
	return len(msgs), nil
}

func scheduled(t *testing.T) events.CloudWatchEvent {
	b, err := os.ReadFile("testdata/scheduled.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev events.CloudWatchEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.DetailType != "Scheduled Event" || ev.Source != "aws.events" {
		t.Fatalf("fixture decoded as %+v", ev)
	}
	return ev
}

func put(t *testing.T, s *memory.Store, bucket int, n int, created time.Time) {
	for i := 0; i < n; i++ {
		m := outbox.Message{ID: outbox.NewID(), Bucket: bucket, Sequence: s.Reserve(bucket, 1), Topic: "t", Value: []byte("v"), CreatedAt: created}
		if err := s.Put(m); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSweeperDrainsAndSummarises(t *testing.T) {
	s := memory.New(4)
	now := time.Now()
	put(t, s, 1, 3, now.Add(-90*time.Second))
	put(t, s, 3, 2, now.Add(-10*time.Second))
	p := &countingPublisher{}
	r, err := relay.New(context.Background(), s, p, relay.DeadlineMargin(0))
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewSweeper(r, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h.now = func() time.Time { return now }
	sum, err := h.Handle(context.Background(), scheduled(t))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Pending != 5 || fmt.Sprint(sum.Drained) != "[1 3]" || sum.OldestAgeSeconds < 89 || sum.OldestAgeSeconds > 91 || p.n.Load() != 5 {
		t.Fatalf("summary %+v, published %d", sum, p.n.Load())
	}
	b, _ := json.Marshal(sum)
	if !json.Valid(b) {
		t.Fatal("summary does not marshal")
	}
}

func TestSweeperFailsLoudlyOnOutOfRangeBuckets(t *testing.T) {
	s := memory.New(4)
	put(t, s, 9, 1, time.Now())
	put(t, s, 0, 1, time.Now())
	p := &countingPublisher{}
	r, err := relay.New(context.Background(), s, p, relay.DeadlineMargin(0))
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewSweeper(r, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := h.Handle(context.Background(), scheduled(t))
	var re *outbox.BucketRangeError
	if !errors.As(err, &re) || fmt.Sprint(sum.OutOfRange) != "[9]" {
		t.Fatalf("err = %v, summary %+v; want the invocation to fail naming bucket 9", err, sum)
	}
	if p.n.Load() != 1 {
		t.Fatalf("published %d; the in-range bucket must still be drained", p.n.Load())
	}
}
