package relay_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// Notifications coalesce into one wake-up and one set of buckets; buckets
// outside the range are ignored, and nothing is pending after Take.
func TestNotifierCoalesces(t *testing.T) {
	n := relay.NewNotifier()
	select {
	case <-n.Ready():
		t.Fatal("a new Notifier is ready")
	default:
	}
	n.Notify(3)
	n.Notify(3, 1)
	n.Notify(-1, outbox.MaxBucketCount, outbox.MaxBucketCount-1)
	select {
	case <-n.Ready():
	default:
		t.Fatal("not ready after Notify")
	}
	select {
	case <-n.Ready():
		t.Fatal("ready twice for coalesced notifications")
	default:
	}
	if got, want := n.Take(), []int{1, 3, outbox.MaxBucketCount - 1}; !slices.Equal(got, want) {
		t.Fatalf("Take = %v, want %v", got, want)
	}
	if got := n.Take(); got != nil {
		t.Fatalf("second Take = %v, want nil", got)
	}
	n.Notify(-1, outbox.MaxBucketCount)
	select {
	case <-n.Ready():
		t.Fatal("ready after notifying only buckets out of range")
	default:
	}
	// A notification after Take makes it ready again (none is lost to the
	// relay going idle between Take and its next wait).
	n.Notify(0)
	select {
	case <-n.Ready():
	default:
		t.Fatal("not ready after a Notify following Take")
	}
	if got := n.Take(); !slices.Equal(got, []int{0}) {
		t.Fatalf("Take = %v, want [0]", got)
	}
}

// published is a Publisher that sends every acknowledged message on a
// channel.
type published chan outbox.Message

func (p published) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	for _, m := range msgs {
		select {
		case p <- m:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return len(msgs), nil
}

// next returns the next published message; it fails the test if none comes
// within a minute (a bound for failing, never a measure of speed: Run polls
// once an hour in these tests, so only a notification publishes sooner).
func (p published) next(t *testing.T) outbox.Message {
	t.Helper()
	select {
	case m := <-p:
		return m
	case <-time.After(time.Minute):
		t.Fatal("nothing published within a minute")
		return outbox.Message{}
	}
}

// runNotified starts Run on s with n and a one-hour PollInterval, and stops
// it when the test ends. Its first sweep publishes the message of bucket 0
// already stored, which the test waits for: from then on only notifications
// publish.
func runNotified(t *testing.T, s *memory.Store, n *relay.Notifier, opts ...relay.Option) published {
	t.Helper()
	fill(t, s, 0, 1)
	pub := make(published, 16)
	r := newRelay(t, s, pub, append([]relay.Option{relay.PollInterval(time.Hour), relay.WithNotifier(n)}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	})
	if m := pub.next(t); m.Bucket != 0 || m.Sequence != 1 {
		t.Fatalf("first sweep published %d/%d, want 0/1", m.Bucket, m.Sequence)
	}
	return pub
}

// A notification wakes Run between polls: the message committed after the
// first sweep is published although the next poll is an hour away.
func TestRunDrainsNotifiedBucket(t *testing.T) {
	s := memory.New(4)
	n := relay.NewNotifier()
	pub := runNotified(t, s, n)
	for seq := int64(1); seq <= 3; seq++ {
		fill(t, s, 2, seq)
		n.Notify(2)
		if m := pub.next(t); m.Bucket != 2 || m.Sequence != seq {
			t.Fatalf("published %d/%d, want 2/%d", m.Bucket, m.Sequence, seq)
		}
	}
}

// Run drains only the notified buckets in its fair share: with another
// relay alive, a bucket of that relay's range is left to its polls.
func TestRunLeavesNotifiedBucketsOfOthers(t *testing.T) {
	s := memory.New(4)
	// "b" sorts after "a": relay "a" has rank 0 and buckets 0 and 1.
	if err := s.Heartbeat(context.Background(), "b", time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	n := relay.NewNotifier()
	pub := runNotified(t, s, n, relay.RelayID("a"), relay.LeaseDuration(time.Hour))
	fill(t, s, 3, 1) // relay b's
	fill(t, s, 1, 1) // a's
	n.Notify(3, 1)   // one Take: bucket 3 is left out before bucket 1 drains
	if m := pub.next(t); m.Bucket != 1 || m.Sequence != 1 {
		t.Fatalf("published %d/%d, want 1/1", m.Bucket, m.Sequence)
	}
	select {
	case m := <-pub:
		t.Fatalf("published %d/%d of another relay's range", m.Bucket, m.Sequence)
	default:
	}
}

func TestWithNotifierRefusesNil(t *testing.T) {
	_, err := relay.New(context.Background(), memory.New(1), published(nil), relay.WithNotifier(nil))
	var oe *outbox.OptionError
	if !errors.As(err, &oe) || oe.Option != "WithNotifier" {
		t.Fatalf("err = %v, want an *OptionError on WithNotifier", err)
	}
}
