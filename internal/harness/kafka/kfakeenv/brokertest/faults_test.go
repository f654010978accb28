package brokertest

import (
	"context"
	"errors"
	"github.com/dynakafka/outbox/internal/harness/kafka/kfakeenv"
	"github.com/dynakafka/outbox/kafka"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// byPartition groups the ids of a topic's records by partition.
func byPartition(t *testing.T, k *testenv.KafkaCluster, topic string) map[int32][]string {
	t.Helper()
	out := make(map[int32][]string)
	for _, r := range consumeAll(t, k, topic) {
		out[r.Partition] = append(out[r.Partition], recordID(t, r, outbox.DefaultMessageIDHeader))
	}
	return out
}

func TestPublishPartialFailure(t *testing.T) {
	// Messages 1..5 pinned to partitions 0, 0, 1, 0, 2; faults hit partition 1
	// (message 3) or 0 (message 1).
	pins := []int32{0, 0, 1, 0, 2}
	tests := []struct {
		name      string
		fault     kfake.Fault
		opts      []kafka.Option
		wantAcked int
		wantErr   error // errors.Is target for the first error
		retriable bool
		// which messages (1-based) each partition holds afterwards
		want map[int32][]int
	}{
		{
			name:      "non-retriable error on one partition",
			fault:     kfake.Fault{Partitions: []int32{1}, Err: kerr.InvalidRecord, Count: -1},
			wantAcked: 2, wantErr: kerr.InvalidRecord,
			// Kafka judges each partition's batch on its own: messages 4
			// and 5 are written although message 3 failed.
			want: map[int32][]int{0: {1, 2, 4}, 2: {5}},
		},
		{
			name:      "first message rejected",
			fault:     kfake.Fault{Partitions: []int32{0}, Err: kerr.PolicyViolation, Count: -1},
			wantAcked: 0, wantErr: kerr.PolicyViolation,
			want: map[int32][]int{1: {3}, 2: {5}},
		},
		{
			name:      "retriable error once",
			fault:     kfake.Fault{Partitions: []int32{1}, Err: kerr.NotEnoughReplicas, Count: 1},
			wantAcked: 5,
			want:      map[int32][]int{0: {1, 2, 4}, 1: {3}, 2: {5}},
		},
		{
			name:      "leader moved once",
			fault:     kfake.Fault{Partitions: []int32{1}, Err: kerr.NotLeaderForPartition, Count: 1},
			wantAcked: 5,
			want:      map[int32][]int{0: {1, 2, 4}, 1: {3}, 2: {5}},
		},
		{
			name:      "retriable error past the delivery timeout",
			fault:     kfake.Fault{Partitions: []int32{1}, Err: kerr.NotEnoughReplicas, Count: -1},
			opts:      []kafka.Option{kafka.LeaseDuration(3 * time.Second), kafka.DeliveryTimeout(time.Second)},
			wantAcked: 2, wantErr: kgo.ErrRecordTimeout, retriable: true,
			want: map[int32][]int{0: {1, 2, 4}, 2: {5}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := kfakeenv.Kafka(t)
			kfakeenv.RequireKfake(t, k)
			topic := newTopic(t, k.KafkaCluster, 3, nil)
			p := newPublisher(t, k.KafkaCluster, append([]kafka.Option{kafka.Topics(topic)}, tt.opts...)...)
			msgs := messages(topic, len(pins), sameKey("k"))
			for i, pin := range pins {
				msgs[i].Partition = outbox.PartitionOf(pin)
			}
			f := tt.fault
			f.Keys, f.Topic = []kmsg.Key{kmsg.Produce}, topic
			faults := k.Cluster.Fault(f)

			acked, err := p.Publish(testCtx(t), msgs)
			faults.Remove()
			if acked != tt.wantAcked {
				t.Fatalf("acked %d, want %d (err %v)", acked, tt.wantAcked, err)
			}
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("err %v, want nil", err)
				}
			} else {
				publishErr(t, err, msgs[acked])
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want one matching %v", err, tt.wantErr)
				}
				pe, ok := errors.AsType[*kafka.ProduceError](err)
				if !ok || pe.Topic != topic || pe.Partition != pins[acked] {
					t.Fatalf("err %v: want a *kafka.ProduceError for %s partition %d", err, topic, pins[acked])
				}
				if kafka.IsRetriable(err) != tt.retriable {
					t.Errorf("IsRetriable(%v) = %v, want %v", err, !tt.retriable, tt.retriable)
				}
			}
			got := byPartition(t, k.KafkaCluster, topic)
			for part := range int32(3) {
				var want []string
				for _, n := range tt.want[part] {
					want = append(want, msgs[n-1].ID)
				}
				if !slices.Equal(got[part], want) {
					t.Errorf("partition %d holds %v, want %v", part, got[part], want)
				}
			}
		})
	}
}

// holdFirst makes the cluster hold the first request with key until release
// is closed, and closes the returned channel when it holds it.
func holdFirst(c *kfake.Cluster, key kmsg.Key, release <-chan struct{}) <-chan struct{} {
	held := make(chan struct{})
	var once atomic.Bool
	c.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
		if once.CompareAndSwap(false, true) {
			close(held)
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false // then handle it normally
	})
	return held
}

// heldProducerID returns a topic and a Publisher whose first InitProducerID
// request the cluster holds until the test ends, so that its records wait in
// the client; held is closed once the request is held.
func heldProducerID(t *testing.T) (topic string, p *kafka.Publisher, held <-chan struct{}) {
	t.Helper()
	k := kfakeenv.Kafka(t)
	kfakeenv.RequireKfake(t, k)
	topic = newTopic(t, k.KafkaCluster, 1, nil)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	held = holdFirst(k.Cluster, kmsg.InitProducerID, release)
	return topic, newPublisher(t, k.KafkaCluster, kafka.Topics(topic)), held
}

// publishMarker publishes one message after the others and returns its id:
// anything a cancelled Publish left in the client would be written before it.
func publishMarker(t *testing.T, p *kafka.Publisher, topic string) string {
	t.Helper()
	m := messages(topic, 1, sameKey("k"))
	if acked, err := p.Publish(testCtx(t), m); acked != 1 || err != nil {
		t.Fatalf("marker Publish = %d, %v", acked, err)
	}
	return m[0].ID
}

// While the broker keeps answering with a retriable error, records wait in the
// client; cancelling the Publish fails them at the next retry, long before the
// delivery timeout, and none of them is written later.
func TestPublishCancelWhileRetrying(t *testing.T) {
	k := kfakeenv.Kafka(t)
	kfakeenv.RequireKfake(t, k)
	topic := newTopic(t, k.KafkaCluster, 1, nil)
	p := newPublisher(t, k.KafkaCluster, kafka.Topics(topic)) // kafka.DeliveryTimeout 20s
	faults := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: -1})

	ctx, cancel := context.WithCancel(testCtx(t))
	msgs := messages(topic, 5, sameKey("k"))
	result := publishAsync(ctx, p, msgs)
	if err := faults.Wait(testCtx(t), 2); err != nil { // the records were sent and retried
		t.Fatal(err)
	}
	cancel()
	r := await(t, result)
	if r.Acked != 0 || !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("Publish = %d, %v; want 0 and context.Canceled", r.Acked, r.Err)
	}
	publishErr(t, r.Err, msgs[0])
	if !kafka.IsRetriable(r.Err) {
		t.Errorf("IsRetriable(%v) = false", r.Err)
	}

	faults.Remove()
	marker := publishMarker(t, p, topic)
	if got := ids(t, consumeAll(t, k.KafkaCluster, topic)); !slices.Equal(got, []string{marker}) {
		t.Fatalf("topic holds %v, want only the marker %s", got, marker)
	}
}

// Records waiting for the producer id fail as soon as the Publish is
// cancelled: kgo loads the id with the context of the first waiting record.
func TestPublishCancelBeforeSending(t *testing.T) {
	topic, p, held := heldProducerID(t)

	ctx, cancel := context.WithCancel(testCtx(t))
	msgs := messages(topic, 5, sameKey("k"))
	result := publishAsync(ctx, p, msgs)
	<-held
	cancel()
	r := await(t, result) // without releasing the held request
	if r.Acked != 0 || !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("Publish = %d, %v; want 0 and context.Canceled", r.Acked, r.Err)
	}
	publishErr(t, r.Err, msgs[0])
}

func TestPublishCancelledBeforeStart(t *testing.T) {
	k := kfakeenv.Kafka(t)
	topic := newTopic(t, k.KafkaCluster, 1, nil)
	p := newPublisher(t, k.KafkaCluster, kafka.Topics(topic))
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	msgs := messages(topic, 3, sameKey("k"))
	acked, err := p.Publish(ctx, msgs)
	if acked != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Publish = %d, %v; want 0 and context.Canceled", acked, err)
	}
	publishErr(t, err, msgs[0])
	marker := publishMarker(t, p, topic)
	if got := ids(t, consumeAll(t, k.KafkaCluster, topic)); !slices.Equal(got, []string{marker}) {
		t.Fatalf("topic holds %v, want only the marker", got)
	}
}

// kgo consults only the first record's context in a partition's batch: when
// one Publish is cancelled, a concurrent Publish whose records share the batch
// sees them fail too, with ErrSharedBatchCancelled.
func TestPublishSharedBatchCancelled(t *testing.T) {
	topic, p, held := heldProducerID(t)

	ctxA, cancelA := context.WithCancel(testCtx(t))
	a := messages(topic, 2, sameKey("a"))
	resultA := publishAsync(ctxA, p, a)
	<-held
	awaitBuffered(t, p, int64(len(a)))
	b := messages(topic, 2, sameKey("b"))
	for i := range b {
		b[i].Bucket = 5
	}
	resultB := publishAsync(testCtx(t), p, b)
	awaitBuffered(t, p, int64(len(a)+len(b)))
	cancelA()

	ra, rb := await(t, resultA), await(t, resultB)
	if ra.Acked != 0 || !errors.Is(ra.Err, context.Canceled) {
		t.Fatalf("cancelled Publish = %d, %v; want 0, context.Canceled", ra.Acked, ra.Err)
	}
	if rb.Acked != 0 || !errors.Is(rb.Err, kafka.ErrSharedBatchCancelled) || errors.Is(rb.Err, context.Canceled) {
		t.Fatalf("other Publish = %d, %v; want 0, kafka.ErrSharedBatchCancelled (not context.Canceled)", rb.Acked, rb.Err)
	}
	publishErr(t, rb.Err, b[0])
	if !kafka.IsRetriable(rb.Err) {
		t.Errorf("IsRetriable(%v) = false", rb.Err)
	}
}
