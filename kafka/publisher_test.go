package kafka

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestPublishKeepsOrderWithinPartition(t *testing.T) {
	k := testenv.Kafka(t)
	const partitions = 4
	topic := newTopic(t, k, partitions, nil)
	p := newPublisher(t, k, Topics(topic))

	msgs := messages(topic, 500, sameKey("order-42"))
	acked, err := p.Publish(testCtx(t), msgs)
	if err != nil || acked != len(msgs) {
		t.Fatalf("Publish = %d, %v; want %d, nil", acked, err, len(msgs))
	}

	recs := consumeAll(t, k, topic)
	if len(recs) != len(msgs) {
		t.Fatalf("topic has %d records, want %d", len(recs), len(msgs))
	}
	wantPartition := int32(outbox.BucketForKey([]byte("order-42"), partitions))
	for i, r := range recs {
		if r.Partition != wantPartition {
			t.Fatalf("record %d on partition %d, want %d (murmur2 placement)", i, r.Partition, wantPartition)
		}
		if r.Offset != int64(i) {
			t.Fatalf("record %d at offset %d, want %d", i, r.Offset, i)
		}
	}
	if got, want := ids(t, recs), msgIDs(msgs); !slices.Equal(got, want) {
		t.Fatalf("records are not in sequence order:\n got %v\nwant %v", got[:10], want[:10])
	}
}

func TestPublishExplicitPartition(t *testing.T) {
	k := testenv.Kafka(t)
	const partitions = 5
	topic := newTopic(t, k, partitions, nil)
	p := newPublisher(t, k, Topics(topic))

	key := []byte("pinned")
	keyPartition := int32(outbox.BucketForKey(key, partitions))
	other := (keyPartition + 2) % partitions
	msgs := messages(topic, 6, func(int) []byte { return key })
	msgs[1].Partition = outbox.PartitionOf(other)                   // keyed, pinned elsewhere
	msgs[3].Partition = outbox.PartitionOf(0)                       // keyed, pinned to 0
	msgs[4].Key, msgs[4].Partition = nil, outbox.PartitionOf(other) // keyless, pinned

	acked, err := p.Publish(testCtx(t), msgs)
	if err != nil || acked != len(msgs) {
		t.Fatalf("Publish = %d, %v; want %d, nil", acked, err, len(msgs))
	}
	byID := make(map[string]int32)
	for _, r := range consumeAll(t, k, topic) {
		byID[recordID(t, r, outbox.DefaultMessageIDHeader)] = r.Partition
	}
	for i, m := range msgs {
		want := keyPartition
		if m.Partition != nil {
			want = *m.Partition
		}
		if got, ok := byID[m.ID]; !ok || got != want {
			t.Errorf("message %d on partition %d (found %v), want %d", i, got, ok, want)
		}
	}

	t.Run("partition the topic does not have", func(t *testing.T) {
		msgs := messages(topic, 3, sameKey("k"))
		msgs[1].Partition = outbox.PartitionOf(partitions + 3)
		acked, err := p.Publish(testCtx(t), msgs)
		if acked != 1 || err == nil {
			t.Fatalf("Publish = %d, %v; want 1 and an error for the second message", acked, err)
		}
		publishErr(t, err, msgs[1])
		if pe, ok := errors.AsType[*ProduceError](err); !ok || pe.Partition != partitions+3 {
			t.Fatalf("error %v: want a *ProduceError for partition %d", err, partitions+3)
		}
		if IsRetriable(err) {
			t.Errorf("IsRetriable(%v) = true, want false", err)
		}
	})
}

func TestPublishKeyPlacement(t *testing.T) {
	k := testenv.Kafka(t)
	const partitions = 7
	topic := newTopic(t, k, partitions, nil)
	p := newPublisher(t, k, Topics(topic))

	rng := rand.New(rand.NewPCG(1, 2))
	const random = 1000
	msgs := messages(topic, random+4, func(i int) []byte {
		n := rng.IntN(40) // includes some 0-length keys
		key := make([]byte, n)
		for j := range key {
			key[j] = byte(rng.UintN(256))
		}
		return key
	})
	msgs[random].Key = []byte{}   // empty key: hashed like any key
	msgs[random+1].Key = []byte{} // ... always to the same partition
	msgs[random+2].Key = nil      // keyless
	msgs[random+3].Key = nil      // keyless

	acked, err := p.Publish(testCtx(t), msgs)
	if err != nil || acked != len(msgs) {
		t.Fatalf("Publish = %d, %v; want %d, nil", acked, err, len(msgs))
	}
	recs := make(map[string]*kgo.Record)
	for _, r := range consumeAll(t, k, topic) {
		recs[recordID(t, r, outbox.DefaultMessageIDHeader)] = r
	}
	for i, m := range msgs {
		r, ok := recs[m.ID]
		if !ok {
			t.Fatalf("message %d not on the topic", i)
		}
		if m.Key == nil {
			if r.Key != nil {
				t.Errorf("message %d: nil key came back as %q (non-nil)", i, r.Key)
			}
			continue
		}
		if r.Key == nil || !bytes.Equal(r.Key, m.Key) {
			t.Errorf("message %d: key %x (nil %v) came back as %x (nil %v)", i, m.Key, m.Key == nil, r.Key, r.Key == nil)
		}
		if want := int32(outbox.BucketForKey(m.Key, partitions)); r.Partition != want {
			t.Errorf("message %d with key %x on partition %d; outbox.BucketForKey says %d", i, m.Key, r.Partition, want)
		}
	}
	empty := int32(outbox.BucketForKey([]byte{}, partitions))
	for _, m := range msgs[random : random+2] {
		if got := recs[m.ID].Partition; got != empty {
			t.Errorf("empty key on partition %d, want %d (murmur2 of the empty key)", got, empty)
		}
	}
}

func TestPublishHeadersAndTimestamp(t *testing.T) {
	k := testenv.Kafka(t)
	topic := newTopic(t, k, 1, nil)
	const idHeader, bucketHeader, seqHeader = "x-msg-id", "x-b", "x-s"
	p := newPublisher(t, k, Topics(topic), OutboxConfig(outbox.Config{Headers: outbox.HeaderNames{MessageID: idHeader, Bucket: bucketHeader, Sequence: seqHeader}}))

	// Recent (a real broker's retention check deletes records older than
	// 7 days), with milliseconds.
	created := time.Now().UTC().Add(-time.Hour).Truncate(time.Second).Add(123 * time.Millisecond)
	msgs := messages(topic, 2, sameKey("k"))
	msgs[0].Headers = []outbox.Header{
		{Key: "trace", Value: []byte("a")},
		{Key: "dup", Value: []byte{0x00, 0xff, 0x10, 0x00}},
		{Key: "dup", Value: []byte("second")},
		{Key: "empty", Value: []byte{}},
		{Key: "null", Value: nil},
		{Key: "ünïcode", Value: []byte{0xc3, 0x28}}, // invalid UTF-8 is fine in a value
	}
	msgs[0].CreatedAt = created
	msgs[1].Value = nil // tombstone
	msgs[1].Bucket, msgs[1].Sequence = 4095, 1<<62

	acked, err := p.Publish(testCtx(t), msgs)
	if err != nil || acked != 2 {
		t.Fatalf("Publish = %d, %v; want 2, nil", acked, err)
	}
	recs := consumeAll(t, k, topic)
	if len(recs) != 2 {
		t.Fatalf("got %d records, want 2", len(recs))
	}
	r := recs[0]
	want := append(slices.Clone(msgs[0].Headers), outbox.Header{Key: idHeader, Value: []byte(msgs[0].ID)},
		outbox.Header{Key: bucketHeader, Value: []byte("3")}, outbox.Header{Key: seqHeader, Value: []byte("1")})
	if len(r.Headers) != len(want) {
		t.Fatalf("headers %v, want %v", r.Headers, want)
	}
	for i, h := range r.Headers {
		if h.Key != want[i].Key || !bytes.Equal(h.Value, want[i].Value) || (h.Value == nil) != (want[i].Value == nil) {
			t.Errorf("header %d = %q:%x (nil %v), want %q:%x (nil %v)", i, h.Key, h.Value, h.Value == nil, want[i].Key, want[i].Value, want[i].Value == nil)
		}
	}
	if !r.Timestamp.Equal(created) {
		t.Errorf("timestamp %v, want the message's CreatedAt %v", r.Timestamp, created)
	}
	if r.Attrs.TimestampType() != 0 {
		t.Errorf("timestamp type %d, want 0 (create time)", r.Attrs.TimestampType())
	}
	if recs[1].Value != nil {
		t.Errorf("tombstone came back with value %q", recs[1].Value)
	}
	if got := recordID(t, recs[1], idHeader); got != msgs[1].ID {
		t.Errorf("id header %q, want %q", got, msgs[1].ID)
	}
	// The longest bucket and a 19-digit sequence, as decimal strings.
	if got := fmt.Sprintf("%s=%s %s=%s", recs[1].Headers[1].Key, recs[1].Headers[1].Value, recs[1].Headers[2].Key, recs[1].Headers[2].Value); got != "x-b=4095 x-s=4611686018427387904" {
		t.Errorf("stamped headers of the second record: %s", got)
	}
}

func TestPublishEmptyRun(t *testing.T) {
	k := testenv.Kafka(t)
	p := newPublisher(t, k)
	if acked, err := p.Publish(testCtx(t), nil); acked != 0 || err != nil {
		t.Fatalf("Publish(nil) = %d, %v; want 0, nil", acked, err)
	}
}

// A message too large for MaxMessageBytes is not produced, and neither is any
// message after it: a later message of the same key must not overtake it.
func TestPublishRecordTooLarge(t *testing.T) {
	k := testenv.Kafka(t)
	topic := newTopic(t, k, 1, nil)
	const max = 4096
	p := newPublisher(t, k, Topics(topic), OutboxConfig(outbox.Config{MaxMessageBytes: max}))

	msgs := messages(topic, 3, sameKey("k"))
	msgs[1].Value = bytes.Repeat([]byte("x"), max)
	acked, err := p.Publish(testCtx(t), msgs)
	if acked != 1 {
		t.Fatalf("acked %d, want 1 (err %v)", acked, err)
	}
	publishErr(t, err, msgs[1])
	if !errors.Is(err, kerr.MessageTooLarge) {
		t.Errorf("errors.Is(%v, kerr.MessageTooLarge) = false", err)
	}
	tl, ok := errors.AsType[*RecordTooLargeError](err)
	if !ok || tl.MaxMessageBytes != max || tl.Size != outbox.RecordSize(msgs[1], outbox.DefaultMessageIDHeader) {
		t.Errorf("error %v: want a *RecordTooLargeError with the record's size and %d", err, max)
	}
	if IsRetriable(err) {
		t.Errorf("IsRetriable(%v) = true", err)
	}
	if got, want := ids(t, consumeAll(t, k, topic)), msgIDs(msgs[:1]); !slices.Equal(got, want) {
		t.Fatalf("topic holds %v, want only the first message %v", got, want)
	}
}

// A message exactly at MaxMessageBytes, as writers measure it, is published:
// the size bound counts the stamped headers at their longest (the longest
// bucket, a 19-digit sequence) under their configured names, and the topic's
// max.message.bytes equal to MaxMessageBytes admits the record alone in its
// batch. (With the default names the bound's slack would hide an uncounted
// header; long names do not fit in it.)
func TestPublishRecordAtTheLimit(t *testing.T) {
	k := testenv.Kafka(t)
	const max = 1024
	names := outbox.HeaderNames{Bucket: "x-outbox-" + strings.Repeat("b", 60), Sequence: "x-outbox-" + strings.Repeat("s", 60)}
	topic := newTopic(t, k, 1, map[string]string{"max.message.bytes": fmt.Sprint(max)})
	p := newPublisher(t, k, Topics(topic), OutboxConfig(outbox.Config{MaxMessageBytes: max, Headers: names}), Compression(kgo.NoCompression()))

	msgs := messages(topic, 1, sameKey("k"))
	msgs[0].Headers = []outbox.Header{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}}
	msgs[0].Bucket, msgs[0].Sequence = outbox.MaxBucketCount-1, math.MaxInt64
	msgs[0].Value = nil
	msgs[0].Value = bytes.Repeat([]byte("v"), max-names.RecordSize(msgs[0]))
	if err := names.Validate(msgs[0], 0, max); err != nil {
		t.Fatalf("a writer would refuse the message: %v", err)
	}
	if acked, err := p.Publish(testCtx(t), msgs); acked != 1 || err != nil {
		t.Fatalf("Publish = %d, %v; want the message at the limit published", acked, err)
	}
}

func TestPublishInvalidMessage(t *testing.T) {
	k := testenv.Kafka(t)
	topic := newTopic(t, k, 1, nil)
	p := newPublisher(t, k, Topics(topic))

	tests := []struct {
		name   string
		break_ func(*outbox.Message)
		field  string
	}{
		{"empty id", func(m *outbox.Message) { m.ID = "" }, "ID"},
		{"id header in headers", func(m *outbox.Message) {
			m.Headers = []outbox.Header{{Key: outbox.DefaultMessageIDHeader, Value: []byte("forged")}}
		}, "Headers[0].Key"},
		{"header key not UTF-8", func(m *outbox.Message) { m.Headers = []outbox.Header{{Key: "\xff"}} }, "Headers[0].Key"},
		{"bad topic", func(m *outbox.Message) { m.Topic = "no spaces" }, "Topic"},
		{"negative partition", func(m *outbox.Message) { m.Partition = outbox.PartitionOf(-2) }, "Partition"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := messages(topic, 3, sameKey("k"))
			tt.break_(&msgs[2])
			acked, err := p.Publish(testCtx(t), msgs)
			if acked != 2 {
				t.Fatalf("acked %d, want 2 (err %v)", acked, err)
			}
			publishErr(t, err, msgs[2])
			ve, ok := errors.AsType[*outbox.ValidationError](err)
			if !ok || ve.Field != tt.field || ve.Index != 2 {
				t.Fatalf("error %v: want a *outbox.ValidationError for field %s of message 2", err, tt.field)
			}
			if IsRetriable(err) {
				t.Errorf("IsRetriable(%v) = true", err)
			}
		})
	}
}

func TestPublishAfterClose(t *testing.T) {
	k := testenv.Kafka(t)
	topic := newTopic(t, k, 1, nil)
	p := newPublisher(t, k, Topics(topic))
	p.Close()
	p.Close() // idempotent
	msgs := messages(topic, 1, sameKey("k"))
	acked, err := p.Publish(testCtx(t), msgs)
	if acked != 0 || !errors.Is(err, ErrClosed) {
		t.Fatalf("Publish after Close = %d, %v; want 0, ErrClosed", acked, err)
	}
	publishErr(t, err, msgs[0])
	if !IsRetriable(err) {
		t.Errorf("IsRetriable(ErrClosed) = false")
	}
}

// The relay drains several buckets at once through one Publisher.
func TestPublishConcurrentBuckets(t *testing.T) {
	k := testenv.Kafka(t)
	const partitions = 3
	topic := newTopic(t, k, partitions, nil)
	p := newPublisher(t, k, Topics(topic))

	const buckets, perBucket = 6, 60
	runs := make([][]outbox.Message, buckets)
	errs := make(chan error, buckets)
	for b := range runs {
		runs[b] = messages(topic, perBucket, func(i int) []byte { return fmt.Appendf(nil, "bucket-%d-key-%d", b, i%4) })
		for i := range runs[b] {
			runs[b][i].Bucket = b
		}
		go func() {
			acked, err := p.Publish(testCtx(t), runs[b])
			if err == nil && acked != perBucket {
				err = fmt.Errorf("bucket %d: acked %d of %d", b, acked, perBucket)
			}
			errs <- err
		}()
	}
	for range runs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	// Per key, the records are in sequence order.
	pos := make(map[string]int)
	for _, r := range consumeAll(t, k, topic) {
		pos[recordID(t, r, outbox.DefaultMessageIDHeader)] = int(r.Partition)<<20 | int(r.Offset)
	}
	for b, run := range runs {
		last := make(map[string]int)
		for _, m := range run {
			at, ok := pos[m.ID]
			if !ok {
				t.Fatalf("bucket %d sequence %d is not on the topic", b, m.Sequence)
			}
			if prev, seen := last[string(m.Key)]; seen && at <= prev {
				t.Fatalf("bucket %d key %s: sequence %d is before an earlier message", b, m.Key, m.Sequence)
			}
			last[string(m.Key)] = at
		}
	}
	if len(pos) != buckets*perBucket {
		t.Fatalf("topic holds %d records, want %d", len(pos), buckets*perBucket)
	}
}
