package handler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/dynakafka/outbox/relay"
)

// invocation is an invocation context whose deadline never fires by itself,
// as if Lambda's clock stood still: only a deadline the handler derives from
// it can end the work, so a handler that waited for the invocation's own
// deadline would never return.
type invocation struct {
	context.Context
	deadline time.Time
}

func (c invocation) Deadline() (time.Time, bool) { return c.deadline, true }

// stuck stands for a relay whose broker or store never answers: each call
// blocks until its context is done and returns the context's error. It
// records the deadlines it was given.
type stuck struct {
	mu        sync.Mutex
	deadlines []time.Time
	hasNone   bool
}

func (s *stuck) block(ctx context.Context) error {
	s.mu.Lock()
	if dl, ok := ctx.Deadline(); ok {
		s.deadlines = append(s.deadlines, dl)
	} else {
		s.hasNone = true
	}
	s.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

func (s *stuck) BucketCount() int { return 8 }

func (s *stuck) RefreshConfig(context.Context) (int, error) { return 8, nil }

func (s *stuck) DrainBucketTo(ctx context.Context, b int, seq int64) (relay.DrainStats, error) {
	return relay.DrainStats{Bucket: b}, s.block(ctx)
}

func (s *stuck) Sweep(ctx context.Context) (relay.SweepReport, error) {
	return relay.SweepReport{}, s.block(ctx)
}

// The handlers work on the invocation's deadline minus ResponseMargin (the
// sweeper's sweep, minus ProgressReserve too), so a drain that never
// finishes on its own still ends in time for the response, which reports
// the bucket for redelivery.
func TestHandlersEndTheirWorkResponseMarginBeforeTheDeadline(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name string
		// left: the invocation's time left when it starts; the work gets
		// left-ResponseMargin (nothing when that is negative).
		left time.Duration
		// margin: how long before the invocation's deadline the work's
		// ends (0: ResponseMargin).
		margin time.Duration
		handle func(context.Context, *stuck) error
	}{
		{name: "relay", left: ResponseMargin + 20*time.Millisecond, handle: func(ctx context.Context, s *stuck) error {
			resp, err := NewRelay(s, 4, quiet).Handle(ctx, loadEvent(t, "insert.json"))
			if err != nil {
				return err
			}
			// Buckets 3, 1, 7 failed; bucket 3's first record has the lowest sequence.
			if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "4421584500000000000000000100" {
				return errors.New("the response does not report the lowest failed record")
			}
			return nil
		}},
		{name: "relay, deadline within the margin", left: ResponseMargin / 2, handle: func(ctx context.Context, s *stuck) error {
			resp, err := NewRelay(s, 4, quiet).Handle(ctx, loadEvent(t, "insert.json"))
			if err == nil && len(resp.BatchItemFailures) != 1 {
				err = errors.New("the response does not report a failed record")
			}
			return err
		}},
		{name: "sweeper", left: ResponseMargin + ProgressReserve + 20*time.Millisecond, margin: ResponseMargin + ProgressReserve, handle: func(ctx context.Context, s *stuck) error {
			h, err := NewSweeper(s, quiet)
			if err != nil {
				return err
			}
			_, err = h.Handle(ctx, events.CloudWatchEvent{})
			if !errors.Is(err, context.DeadlineExceeded) {
				return errors.New("the sweep's error is not the work deadline's")
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deadline := time.Now().Add(tt.left)
			s := &stuck{}
			done := make(chan error, 1)
			go func() { done <- tt.handle(invocation{context.Background(), deadline}, s) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the handler did not return: its work is not bounded by the invocation's deadline")
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.hasNone || len(s.deadlines) == 0 {
				t.Fatalf("the work got no deadline")
			}
			margin := tt.margin
			if margin == 0 {
				margin = ResponseMargin
			}
			for _, dl := range s.deadlines {
				if want := deadline.Add(-margin); !dl.Equal(want) {
					t.Fatalf("the work's deadline is %v before the invocation's, want %v", deadline.Sub(dl), margin)
				}
			}
		})
	}
}

// Without a deadline (a local run), the handlers add none.
func TestHandlersAddNoDeadlineWithoutOne(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &stuck{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = NewRelay(s, 4, slog.New(slog.DiscardHandler)).Handle(ctx, loadEvent(t, "insert.json"))
	}()
	for {
		s.mu.Lock()
		n := len(s.deadlines)
		none := s.hasNone
		s.mu.Unlock()
		if n > 0 {
			cancel()
			t.Fatal("the handler added a deadline to a context that had none")
		}
		if none {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
}
