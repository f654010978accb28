package brokertest

import (
	"context"
	"errors"
	"github.com/dynakafka/outbox/internal/kfakeenv"
	"github.com/dynakafka/outbox/kafka"
	"slices"
	"sync"
	"testing"

	"github.com/dynakafka/outbox"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// releaseOnce returns a channel for holdFirst and a function that closes it
// once; the test's cleanup closes it too, so a held request never outlives the
// test.
func releaseOnce(t *testing.T) (<-chan struct{}, func()) {
	t.Helper()
	ch := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	return ch, release
}

// heldProduce returns a kfake cluster, a one-partition topic and a Publisher
// (Topics(topic) and opts) whose first produce request the cluster holds
// until release is called or the test ends; held is closed once it holds it.
func heldProduce(t *testing.T, opts ...kafka.Option) (k *kfakeenv.Cluster, topic string, p *kafka.Publisher, held <-chan struct{}, release func()) {
	t.Helper()
	k = kfakeenv.Kafka(t)
	kfakeenv.RequireKfake(t, k)
	topic = newTopic(t, k.KafkaCluster, 1, nil)
	p = newPublisher(t, k.KafkaCluster, append([]kafka.Option{kafka.Topics(topic)}, opts...)...)
	ch, release := releaseOnce(t)
	return k, topic, p, holdFirst(k.Cluster, kmsg.Produce, ch), release
}

func awaitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	ctx := testCtx(t)
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("%s: %v", what, ctx.Err())
	}
}

// A Publish whose context ends while its record is in flight (written to a
// broker that does not answer) returns without the answer: the record is
// abandoned, reported as not acknowledged, and Kafka may still write it. The
// client keeps working: the relay's next Publish of the same run queues
// behind the unanswered request and is acknowledged once the broker answers,
// after the abandoned copy (first deliveries stay in order).
func TestPublishAbandonsUnansweredRecords(t *testing.T) {
	tests := []struct {
		name string
		opts []kafka.Option
		// careful: make the bucket go one record at a time first (Strict
		// mode after a failed publish).
		careful bool
	}{
		{name: "default"},
		{name: "strict, one record at a time", opts: []kafka.Option{kafka.Strict()}, careful: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, topic, p, held, releaseNow := heldProduce(t, tt.opts...)
			msgs := messages(topic, 2, sameKey("k"))
			if tt.careful {
				ctx, cancel := context.WithCancel(testCtx(t))
				cancel()
				if _, err := p.Publish(ctx, msgs); err == nil {
					t.Fatal("a cancelled Publish succeeded")
				}
			}

			ctx, cancel := context.WithCancel(testCtx(t))
			result := publishAsync(ctx, p, msgs[:1])
			awaitClosed(t, held, "the produce request was never sent")
			cancel()
			r := await(t, result) // while the request is still held
			if r.Acked != 0 || !errors.Is(r.Err, kafka.ErrAbandoned) || !errors.Is(r.Err, context.Canceled) {
				t.Fatalf("Publish = %d, %v; want 0 and kafka.ErrAbandoned with context.Canceled", r.Acked, r.Err)
			}
			publishErr(t, r.Err, msgs[0])
			if !kafka.IsRetriable(r.Err) || kafka.Class(r.Err) != outbox.Retriable {
				t.Errorf("IsRetriable = %v, kafka.Class = %v for %v; want a retriable error", kafka.IsRetriable(r.Err), kafka.Class(r.Err), r.Err)
			}

			again := publishAsync(testCtx(t), p, msgs)
			releaseNow()
			if r := await(t, again); r.Acked != len(msgs) || r.Err != nil {
				t.Fatalf("Publish after the abandoned one = %d, %v; want %d acknowledged", r.Acked, r.Err, len(msgs))
			}
			want := append([]string{msgs[0].ID}, msgIDs(msgs)...)
			if got := ids(t, consumeAll(t, k.KafkaCluster, topic)); !slices.Equal(got, want) {
				t.Fatalf("topic holds %v, want the abandoned copy then the run %v", got, want)
			}
		})
	}
}

// PublishAlone abandons an unanswered record like Publish, and the next
// PublishAlone does not queue behind it: it gets a client of its own, so its
// record is alone in its request and is acknowledged while the abandoned
// request is still held.
func TestPublishAloneAfterAnAbandonedRecord(t *testing.T) {
	k, topic, p, held, _ := heldProduce(t)
	msgs := messages(topic, 2, sameKey("k"))

	ctx, cancel := context.WithCancel(testCtx(t))
	first := make(chan error, 1)
	go func() { first <- p.PublishAlone(ctx, msgs[0]) }()
	awaitClosed(t, held, "the produce request was never sent")
	cancel()
	var err error
	select {
	case err = <-first:
	case <-testCtx(t).Done():
		t.Fatal("PublishAlone did not return after its context was cancelled")
	}
	if !errors.Is(err, kafka.ErrAbandoned) || !errors.Is(err, context.Canceled) {
		t.Fatalf("PublishAlone = %v; want kafka.ErrAbandoned with context.Canceled", err)
	}
	publishErr(t, err, msgs[0])

	if err := p.PublishAlone(testCtx(t), msgs[1]); err != nil {
		t.Fatalf("PublishAlone after an abandoned record = %v", err)
	}
	got := ids(t, consumeAll(t, k.KafkaCluster, topic))
	if !slices.Contains(got, msgs[1].ID) || slices.ContainsFunc(got, func(id string) bool { return id != msgs[0].ID && id != msgs[1].ID }) {
		t.Fatalf("topic holds %v; want %s (and perhaps the abandoned %s)", got, msgs[1].ID, msgs[0].ID)
	}
}

// What docs/design.md §7.4 must not promise: a cancelled Publish does not
// abort every record it has not sent. kgo consults only the context of the
// first record of a partition's oldest batch, so a record queued behind
// another bucket's live record in its batch is written when that batch goes,
// after its own Publish was cancelled and returned.
func TestCancelledRecordBehindAnotherBucketIsStillWritten(t *testing.T) {
	k, topic, p, held, releaseNow := heldProduce(t)
	y := messages(topic, 2, sameKey("y")) // bucket 3, live
	x := messages(topic, 1, sameKey("x"))
	x[0].Bucket = 5

	y1 := publishAsync(testCtx(t), p, y[:1])
	awaitClosed(t, held, "the produce request was never sent")
	y2 := publishAsync(testCtx(t), p, y[1:]) // queued: a new batch behind the held one
	awaitBuffered(t, p, 2)
	xctx, cancelX := context.WithCancel(testCtx(t))
	rx := publishAsync(xctx, p, x) // appended to y2's batch
	awaitBuffered(t, p, 3)
	cancelX()
	if r := await(t, rx); r.Acked != 0 || !errors.Is(r.Err, kafka.ErrAbandoned) {
		t.Fatalf("cancelled Publish = %d, %v; want 0, kafka.ErrAbandoned", r.Acked, r.Err)
	}
	releaseNow()
	for _, r := range []publishResult{await(t, y1), await(t, y2)} {
		if r.Acked != 1 || r.Err != nil {
			t.Fatalf("live Publish = %d, %v", r.Acked, r.Err)
		}
	}
	want := []string{y[0].ID, y[1].ID, x[0].ID}
	if got := ids(t, consumeAll(t, k.KafkaCluster, topic)); !slices.Equal(got, want) {
		t.Fatalf("topic holds %v, want %v: the cancelled record written behind its batch mate", got, want)
	}
}
