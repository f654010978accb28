package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// testTimeout bounds every broker interaction in these tests; it only turns a
// hang into a failure.
const testTimeout = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newTopic creates a uniquely named topic with configs (nil for the broker's
// defaults) and returns its name.
func newTopic(t *testing.T, k *testenv.KafkaCluster, partitions int32, configs map[string]string) string {
	t.Helper()
	topic := testenv.Name(t, "outbox")
	adm := newAdmin(t, k)
	var cfgs map[string]*string
	for key, v := range configs {
		if cfgs == nil {
			cfgs = make(map[string]*string)
		}
		cfgs[key] = kadm.StringPtr(v)
	}
	if _, err := adm.CreateTopic(testCtx(t), partitions, -1, cfgs, topic); err != nil {
		t.Fatalf("create topic %q: %v", topic, err)
	}
	testenv.WaitTopic(t, k, topic, partitions)
	return topic
}

func newAdmin(t *testing.T, k *testenv.KafkaCluster) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func newPublisher(t *testing.T, k *testenv.KafkaCluster, opts ...Option) *Publisher {
	t.Helper()
	p, err := NewPublisher(testCtx(t), k.Brokers, opts...)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// messages returns n messages of one bucket for topic, sequences 1..n, each
// with the key key(i) (i from 0) and a value naming its sequence.
func messages(topic string, n int, key func(i int) []byte) []outbox.Message {
	msgs := make([]outbox.Message, n)
	created := time.UnixMilli(1_700_000_000_000)
	for i := range msgs {
		msgs[i] = outbox.Message{
			ID:        outbox.NewID(),
			Bucket:    3,
			Sequence:  int64(i + 1),
			Topic:     topic,
			Key:       key(i),
			Value:     fmt.Appendf(nil, "value-%d", i+1),
			CreatedAt: created.Add(time.Duration(i) * time.Millisecond),
		}
	}
	return msgs
}

func sameKey(key string) func(int) []byte { return func(int) []byte { return []byte(key) } }

// consumeAll reads every record of topic, up to the end offsets at the time
// of the call, sorted by partition then offset.
func consumeAll(t *testing.T, k *testenv.KafkaCluster, topic string) []*kgo.Record {
	t.Helper()
	ctx := testCtx(t)
	ends, err := newAdmin(t, k).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list end offsets: %v", err)
	}
	var want int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		want += o.Offset
	})
	if want == 0 {
		return nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(k.Brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for int64(len(recs)) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records of %s: %v", len(recs), want, topic, err)
		}
		fs.EachError(func(tp string, p int32, err error) {
			t.Fatalf("fetch %s/%d: %v", tp, p, err)
		})
		recs = append(recs, fs.Records()...)
	}
	slices.SortStableFunc(recs, func(a, b *kgo.Record) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	return recs
}

// recordID returns the message id a record carries in its id header, the
// first of the three stamped headers that end every record.
func recordID(t *testing.T, r *kgo.Record, idHeader string) string {
	t.Helper()
	if len(r.Headers) < 3 || r.Headers[len(r.Headers)-3].Key != idHeader {
		t.Fatalf("record %s/%d@%d: third header from the end is not %q: %v", r.Topic, r.Partition, r.Offset, idHeader, r.Headers)
	}
	return string(r.Headers[len(r.Headers)-3].Value)
}

// ids returns the message ids of records, in order.
func ids(t *testing.T, recs []*kgo.Record) []string {
	t.Helper()
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = recordID(t, r, outbox.DefaultMessageIDHeader)
	}
	return out
}

func msgIDs(msgs []outbox.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// publishErr asserts err is an *outbox.PublishError for m and returns it.
func publishErr(t *testing.T, err error, m outbox.Message) *outbox.PublishError {
	t.Helper()
	pe, ok := errors.AsType[*outbox.PublishError](err)
	if !ok {
		t.Fatalf("error %v (%T) is not an *outbox.PublishError", err, err)
	}
	if pe.Sequence != m.Sequence || pe.MessageID != m.ID || pe.Bucket != m.Bucket {
		t.Fatalf("PublishError names bucket %d sequence %d message %s, want bucket %d sequence %d message %s",
			pe.Bucket, pe.Sequence, pe.MessageID, m.Bucket, m.Sequence, m.ID)
	}
	return pe
}
