// Package kafkatest holds the helpers of the Kafka publisher's tests, shared
// by the suite in package kafka and by
// internal/harness/kafka/kfakeenv/brokertest (the tests that need kfake in
// process or kadm, in kfakeenv's module so that the library's go.mod
// requires neither). It speaks to the brokers with kmsg, which the
// library already requires through franz-go, and imports no package kafka
// so that package kafka's own tests can use it.
package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Timeout bounds every broker interaction in these tests; it only turns a
// hang into a failure.
const Timeout = 30 * time.Second

// Ctx is a context that ends after Timeout or with the test.
func Ctx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// NewTopic creates a uniquely named topic with configs (nil for the
// broker's defaults), waits until every broker lists it, and returns its
// name.
func NewTopic(t testing.TB, k *testenv.KafkaCluster, partitions int32, configs map[string]string) string {
	t.Helper()
	topic := testenv.Name(t, "outbox")
	testenv.CreateTopicConfigs(t, k, topic, partitions, configs)
	return topic
}

// EndOffsets returns the end offset of each partition of topic.
func EndOffsets(t testing.TB, k *testenv.KafkaCluster, topic string) map[int32]int64 {
	t.Helper()
	return listOffsets(t, k, topic, -1)
}

// StartOffsets returns the log start offset of each partition of topic
// (above 0 once retention or a deletion removed its first records).
func StartOffsets(t testing.TB, k *testenv.KafkaCluster, topic string) map[int32]int64 {
	t.Helper()
	return listOffsets(t, k, topic, -2)
}

// listOffsets lists each partition's offset at ts: -1 the end, -2 the start.
func listOffsets(t testing.TB, k *testenv.KafkaCluster, topic string, ts int64) map[int32]int64 {
	t.Helper()
	cl := client(t, k)
	ctx := Ctx(t)
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	if len(mresp.Topics) != 1 {
		t.Fatalf("metadata of %s: %d topics in the answer", topic, len(mresp.Topics))
	}
	if err := kerr.ErrorForCode(mresp.Topics[0].ErrorCode); err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range mresp.Topics[0].Partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p.Partition
		rp.Timestamp = ts
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl) // kgo sends each partition to its leader
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	ends := make(map[int32]int64)
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				t.Fatalf("end offset of %s/%d: %v", rt.Topic, p.Partition, err)
			}
			ends[p.Partition] = p.Offset
		}
	}
	if len(ends) != len(mresp.Topics[0].Partitions) {
		t.Fatalf("end offsets of %s: %d of %d partitions answered", topic, len(ends), len(mresp.Topics[0].Partitions))
	}
	return ends
}

func client(t testing.TB, k *testenv.KafkaCluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Messages returns n messages of one bucket for topic, sequences 1..n, each
// with the key key(i) (i from 0) and a value naming its sequence. They were
// created a minute ago, a millisecond apart: the publisher stamps records
// with CreatedAt, and a real broker's retention check (30 s after it
// starts, then every 5 minutes) deletes records older than retention.ms
// (7 days), and with them the start of a topic's log. With a fixed 2023
// time, make test's real-broker lane lost the first records of a topic
// whenever that check came before the test consumed them ("consumed 1 of
// 6 records ... at [0/5]; end offsets map[0:6]").
func Messages(topic string, n int, key func(i int) []byte) []outbox.Message {
	msgs := make([]outbox.Message, n)
	created := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
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

// SameKey keys every message with key.
func SameKey(key string) func(int) []byte { return func(int) []byte { return []byte(key) } }

// ConsumeAll reads every record of topic, up to the end offsets at the time
// of the call, sorted by partition then offset.
func ConsumeAll(t testing.TB, k *testenv.KafkaCluster, topic string) []*kgo.Record {
	t.Helper()
	var want int64
	for _, o := range EndOffsets(t, k, topic) {
		want += o
	}
	if want == 0 {
		return nil
	}
	recs := ConsumeN(t, k, topic, int(want))
	slices.SortStableFunc(recs, func(a, b *kgo.Record) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	return recs
}

// ConsumeN reads n records of topic from its start with a client of its own
// (opts added). A fetch error or the end of Timeout fails the test with the
// offsets read and each partition's start and end offsets: a start above 0
// says the log lost its first records (a retention check deleted records
// with old timestamps: see Messages).
func ConsumeN(t testing.TB, k *testenv.KafkaCluster, topic string, n int, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	recs, err := consumeN(Ctx(t), k, topic, n, opts)
	if err != nil {
		var got []string
		for _, r := range recs {
			got = append(got, fmt.Sprintf("%d/%d", r.Partition, r.Offset))
		}
		t.Fatalf("consumed %d of %d records of %s: %v (read at partition/offset %v; start offsets now %v, end offsets %v)",
			len(recs), n, topic, err, got, StartOffsets(t, k, topic), EndOffsets(t, k, topic))
	}
	return recs
}

func consumeN(ctx context.Context, k *testenv.KafkaCluster, topic string, n int, opts []kgo.Opt) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(k.Brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return recs, err
		}
		var ferr error
		fs.EachError(func(tp string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("fetch %s/%d: %w", tp, p, err)
			}
		})
		if ferr != nil {
			return recs, ferr
		}
		recs = append(recs, fs.Records()...)
	}
	return recs, nil
}

// RecordID returns the message id a record carries in its id header, the
// first of the three stamped headers that end every record.
func RecordID(t testing.TB, r *kgo.Record, idHeader string) string {
	t.Helper()
	if len(r.Headers) < 3 || r.Headers[len(r.Headers)-3].Key != idHeader {
		t.Fatalf("record %s/%d@%d: third header from the end is not %q: %v", r.Topic, r.Partition, r.Offset, idHeader, r.Headers)
	}
	return string(r.Headers[len(r.Headers)-3].Value)
}

// IDs returns the message ids of records, in order.
func IDs(t testing.TB, recs []*kgo.Record) []string {
	t.Helper()
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = RecordID(t, r, outbox.DefaultMessageIDHeader)
	}
	return out
}

// MsgIDs returns the ids of msgs, in order.
func MsgIDs(msgs []outbox.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// PublishErr asserts err is an *outbox.PublishError for m and returns it.
func PublishErr(t testing.TB, err error, m outbox.Message) *outbox.PublishError {
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

// Publisher is what PublishAsync calls: a kafka.Publisher or TxnPublisher
// (this package may not import package kafka, whose tests use it).
type Publisher interface {
	Publish(ctx context.Context, msgs []outbox.Message) (int, error)
}

// PublishResult is what a Publish returned.
type PublishResult struct {
	Acked int
	Err   error
}

// PublishAsync runs p.Publish(ctx, msgs) in a goroutine and sends its
// result on the returned channel.
func PublishAsync(ctx context.Context, p Publisher, msgs []outbox.Message) <-chan PublishResult {
	ch := make(chan PublishResult, 1)
	go func() {
		acked, err := p.Publish(ctx, msgs)
		ch <- PublishResult{acked, err}
	}()
	return ch
}

// Await returns what the Publish behind ch returned, or fails the test
// after Timeout.
func Await(t testing.TB, ch <-chan PublishResult) PublishResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(Timeout):
		t.Fatal("Publish did not return")
		return PublishResult{}
	}
}
