package brokertest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynakafka/outbox/internal/harness/kafka/kafkatest"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	testCtx      = kafkatest.Ctx
	newTopic     = kafkatest.NewTopic
	messages     = kafkatest.Messages
	sameKey      = kafkatest.SameKey
	consumeAll   = kafkatest.ConsumeAll
	ids          = kafkatest.IDs
	msgIDs       = kafkatest.MsgIDs
	publishErr   = kafkatest.PublishErr
	publishAsync = kafkatest.PublishAsync
	await        = kafkatest.Await
	recordID     = kafkatest.RecordID
)

// newPublisher is a Publisher on k with opts, closed when the test ends,
// whose client counts the records it buffers (awaitBuffered).
func newPublisher(t *testing.T, k *testenv.KafkaCluster, opts ...kafka.Option) *kafka.Publisher {
	t.Helper()
	c := &bufferedCounter{}
	p, err := kafka.NewPublisher(testCtx(t), k.Brokers, append(opts, kafka.ClientOptions(kgo.WithHooks(c)))...)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	buffered.Store(p, c)
	t.Cleanup(func() { p.Close(); buffered.Delete(p) })
	return p
}

// buffered maps each Publisher newPublisher made to its bufferedCounter.
var buffered sync.Map

// bufferedCounter counts the records a Publisher's client buffered (kgo's
// HookProduceRecordBuffered), which package kafka's own tests read from the
// client itself.
type bufferedCounter struct{ n atomic.Int64 }

func (c *bufferedCounter) OnProduceRecordBuffered(*kgo.Record) { c.n.Add(1) }

// awaitBuffered waits until p's client has buffered n records.
func awaitBuffered(t *testing.T, p *kafka.Publisher, n int64) {
	t.Helper()
	v, ok := buffered.Load(p)
	if !ok {
		t.Fatal("awaitBuffered: not a Publisher of newPublisher")
	}
	c := v.(*bufferedCounter)
	ctx := testCtx(t)
	for c.n.Load() < n {
		if ctx.Err() != nil {
			t.Fatalf("the client buffered %d records, want %d", c.n.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// newAdmin is a kadm client on k (this module may require kadm; the
// library's go.mod may not).
func newAdmin(t *testing.T, k *testenv.KafkaCluster) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

const testTimeout = kafkatest.Timeout

type publishResult = kafkatest.PublishResult
