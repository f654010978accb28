package kafka

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The topic's max.message.bytes once lowered, and the two messages: a healthy
// one well within it and one that the topic rejects even alone. Values are
// random (incompressible) and the tests produce without compression.
const (
	loweredLimit = 2000
	healthyBytes = 100
	culpritBytes = 4000
)

// lowerTopicLimit sets the topic's max.message.bytes below the Publisher's
// MaxMessageBytes, as an operator might after the relay started.
func lowerTopicLimit(t *testing.T, k *testenv.KafkaCluster, topic string) {
	t.Helper()
	testenv.AlterTopicConfig(t, k, topic, "max.message.bytes", strconv.Itoa(loweredLimit))
}

// sharedBatchSetup returns a one-partition topic whose limit was lowered after
// the Publisher checked it, a Publisher whose shared client lingers (its
// records wait in their partition's batch for a minute unless the client is
// flushed, so the test decides which records share a batch), a healthy
// message of bucket 1 and a culprit of bucket 2.
func sharedBatchSetup(t *testing.T) (k *testenv.KafkaCluster, topic string, p *Publisher, healthy, culprit outbox.Message) {
	t.Helper()
	k = testenv.Kafka(t)
	testenv.RequireKfake(t, k)
	topic = newTopic(t, k, 1, nil)
	p = newPublisher(t, k, Topics(topic), Compression(kgo.NoCompression()), ClientOptions(kgo.ProducerLinger(time.Minute)))
	lowerTopicLimit(t, k, topic)
	msgs := messages(topic, 2, func(i int) []byte { return []byte("key-" + strconv.Itoa(i)) })
	healthy, culprit = msgs[0], msgs[1]
	healthy.Bucket, culprit.Bucket = 1, 2
	healthy.Value, culprit.Value = make([]byte, healthyBytes), make([]byte, culpritBytes)
	rand.Read(healthy.Value)
	rand.Read(culprit.Value)
	return k, topic, p, healthy, culprit
}

// awaitBuffered waits until the shared client holds n records.
func awaitBuffered(t *testing.T, p *Publisher, n int64) {
	t.Helper()
	ctx := testCtx(t)
	for p.cl.BufferedProduceRecords() < n {
		if ctx.Err() != nil {
			t.Fatalf("the client holds %d records, want %d", p.cl.BufferedProduceRecords(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func publishAloneAsync(ctx context.Context, p *Publisher, m outbox.Message) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- p.PublishAlone(ctx, m) }()
	return ch
}

func TestPublishAloneIsAlone(t *testing.T) {
	// What PublishAlone is for: through the shared client, a healthy record
	// that shares its partition's batch with a record the topic rejects is
	// rejected with it.
	t.Run("Publish fails a healthy batch mate", func(t *testing.T) {
		k, topic, p, healthy, culprit := sharedBatchSetup(t)
		rc := publishAsync(testCtx(t), p, []outbox.Message{culprit})
		awaitBuffered(t, p, 1)
		rh := publishAsync(testCtx(t), p, []outbox.Message{healthy})
		awaitBuffered(t, p, 2)
		if err := p.cl.Flush(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		for _, r := range []publishResult{await(t, rc), await(t, rh)} {
			if r.Acked != 0 || !errors.Is(r.Err, kerr.MessageTooLarge) || Class(r.Err) != outbox.RecordPermanent {
				t.Fatalf("Publish = %d, %v; want both rejected with MESSAGE_TOO_LARGE", r.Acked, r.Err)
			}
		}
		if got := consumeAll(t, k, topic); len(got) != 0 {
			t.Fatalf("topic holds %v, want nothing", ids(t, got))
		}
	})
	// PublishAlone's record shares no batch: the healthy record is
	// acknowledged while the culprit still waits in the shared client, and
	// the culprit alone is rejected as its own fault.
	t.Run("PublishAlone", func(t *testing.T) {
		k, topic, p, healthy, culprit := sharedBatchSetup(t)
		rc := publishAsync(testCtx(t), p, []outbox.Message{culprit})
		awaitBuffered(t, p, 1)
		if err := <-publishAloneAsync(testCtx(t), p, healthy); err != nil {
			t.Fatalf("PublishAlone(healthy) = %v", err)
		}
		if err := p.cl.Flush(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if r := await(t, rc); r.Acked != 0 || !errors.Is(r.Err, kerr.MessageTooLarge) {
			t.Fatalf("Publish(culprit) = %d, %v; want MESSAGE_TOO_LARGE", r.Acked, r.Err)
		}
		err := p.PublishAlone(testCtx(t), culprit)
		if !errors.Is(err, kerr.MessageTooLarge) || Class(err) != outbox.RecordPermanent {
			t.Fatalf("PublishAlone(culprit) = %v; want MESSAGE_TOO_LARGE, record-permanent", err)
		}
		publishErr(t, err, culprit)
		if got := ids(t, consumeAll(t, k, topic)); !slices.Equal(got, []string{healthy.ID}) {
			t.Fatalf("topic holds %v, want only the healthy record %s", got, healthy.ID)
		}
	})
}

// flushWhenPaired flushes the lingering shared client whenever it holds two
// records, or one that has waited patience, until ctx is done: concurrent
// publishes of two buckets then share a batch, as they do under load.
func flushWhenPaired(ctx context.Context, p *Publisher, patience time.Duration) {
	var since time.Time
	for ctx.Err() == nil {
		switch n := p.cl.BufferedProduceRecords(); {
		case n == 0:
			since = time.Time{}
		case n >= 2 || !since.IsZero() && time.Since(since) > patience:
			_ = p.cl.Flush(ctx)
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// batchErrs records the buckets whose publish failed with a record-permanent
// error.
type batchErrs struct {
	mu     sync.Mutex
	failed map[int]int
}

func (b *batchErrs) Batch(s relay.BatchStats) {
	if s.Err != nil && s.Class == outbox.RecordPermanent && s.Parked == 0 {
		b.mu.Lock()
		b.failed[s.Bucket]++
		b.mu.Unlock()
	}
}

func (b *batchErrs) Drain(relay.DrainStats) {}

// End to end (relay engine, memory store, this publisher, kfake): two buckets
// drained at once put their records in one batch of one partition; the topic
// rejects the batch because one record is too large. The relay republishes
// each record alone before it judges it, so the healthy record is published
// and only the culprit is parked.
func TestRelayParksOnlyTheCulpritOfASharedBatch(t *testing.T) {
	k, topic, p, healthy, culprit := sharedBatchSetup(t)
	store := memory.New(4)
	healthy.Sequence, culprit.Sequence = 1, 1
	if err := store.Put(healthy, culprit); err != nil {
		t.Fatal(err)
	}
	fctx, stop := context.WithCancel(testCtx(t))
	flushed := make(chan struct{})
	go func() { defer close(flushed); flushWhenPaired(fctx, p, 10*time.Second) }()
	defer func() { stop(); <-flushed }()

	metrics := &batchErrs{failed: map[int]int{}}
	r, err := relay.New(testCtx(t), store, p, relay.RelayID("relay"), relay.WithMetrics(metrics),
		relay.RetryBackoff(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if errs := r.DrainBuckets(testCtx(t), []int{healthy.Bucket, culprit.Bucket}); len(errs) != 0 {
		t.Fatalf("DrainBuckets: %v", errs)
	}

	metrics.mu.Lock()
	sharedFailure := metrics.failed[healthy.Bucket]
	metrics.mu.Unlock()
	if sharedFailure == 0 {
		t.Fatal("the healthy record was never rejected: the two buckets' records did not share a batch, so the test proved nothing")
	}
	if parked := store.Parked(healthy.Bucket); len(parked) != 0 {
		t.Fatalf("the healthy record %s was parked: %s", healthy.ID, parked[0].Reason)
	}
	if parked := store.Parked(culprit.Bucket); len(parked) != 1 || parked[0].Message.ID != culprit.ID {
		t.Fatalf("bucket %d parked %d records; want the culprit %s alone", culprit.Bucket, len(parked), culprit.ID)
	}
	if got := ids(t, consumeAll(t, k, topic)); !slices.Equal(got, []string{healthy.ID}) {
		t.Fatalf("topic holds %v, want only the healthy record %s", got, healthy.ID)
	}
}
