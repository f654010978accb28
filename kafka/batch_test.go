package kafka

import (
	"bytes"
	"crypto/rand"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// These tests drive a bare kgo client built with the Publisher's enforced
// options (enforcedOpts), because Publish itself never hands kgo a message
// above MaxMessageBytes: they show what the derived ProducerBatchMaxBytes does
// on its own.

const limitBytes = 8192 // the topic's max.message.bytes and MaxMessageBytes

// oneRecordBatch is the size Kafka measures for a batch holding only a
// keyless, headerless record with a value of n bytes (8000 <= n < 8180), no
// compression: the 61-byte batch header plus the record (length varint 2,
// attributes 1, timestamp and offset deltas 1 each, key length 1, value
// length varint 2, value n, header count 1).
func oneRecordBatch(n int) int { return 61 + 2 + 1 + 1 + 1 + 1 + 2 + n + 1 }

func enforcedClient(t *testing.T, k *testenv.KafkaCluster, batchBytes int32) *kgo.Client {
	t.Helper()
	c := defaultCfg()
	c.maxMessageBytes = limitBytes
	c.compression = []kgo.CompressionCodec{kgo.NoCompression()}
	opts := append([]kgo.Opt{kgo.SeedBrokers(k.Brokers...)}, enforcedOpts(&c)...)
	if batchBytes != 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(batchBytes)) // a naive setting, for contrast
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceAll starts every record before waiting, as Publish does, and returns
// each record's error.
func produceAll(t *testing.T, cl *kgo.Client, recs []*kgo.Record) []error {
	t.Helper()
	errs := make([]error, len(recs))
	var wg sync.WaitGroup
	for i, r := range recs {
		wg.Add(1)
		cl.Produce(testCtx(t), r, func(_ *kgo.Record, err error) { errs[i] = err; wg.Done() })
	}
	wg.Wait()
	return errs
}

func valueRecord(topic string, id, n int) *kgo.Record {
	v := make([]byte, n)
	rand.Read(v) // incompressible, so sizes are what they seem
	return &kgo.Record{Topic: topic, Value: v, Partition: noPartition,
		Headers: []kgo.RecordHeader{{Key: "i", Value: []byte(strconv.Itoa(id))}}}
}

func bare(topic string, n int) *kgo.Record {
	return &kgo.Record{Topic: topic, Value: bytes.Repeat([]byte{'v'}, n), Partition: noPartition}
}

func TestBatchMaxBytesBoundary(t *testing.T) {
	if got := oneRecordBatch(limitBytes - 70); got != limitBytes {
		t.Fatalf("test arithmetic: oneRecordBatch = %d", got)
	}
	tests := []struct {
		name       string
		batchBytes int32 // 0: the Publisher's derivation
		value      int   // of record 2 of 3
		wantErrs   [3]error
	}{
		// A record exactly at the topic limit is sent and accepted.
		{"exactly the limit", 0, limitBytes - 70, [3]error{nil, nil, nil}},
		// One byte more fails locally, alone: its neighbours are written.
		{"one byte over fails alone", 0, limitBytes - 69, [3]error{nil, kerr.MessageTooLarge, nil}},
		// With a batch limit above the topic's, kgo puts the record in a
		// batch that the broker rejects, with its neighbours.
		{"naive batch limit fails the neighbours", limitBytes + 100, limitBytes - 69,
			[3]error{kerr.MessageTooLarge, kerr.MessageTooLarge, kerr.MessageTooLarge}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := testenv.Kafka(t)
			topic := newTopic(t, k, 1, map[string]string{"max.message.bytes": strconv.Itoa(limitBytes)})
			cl := enforcedClient(t, k, tt.batchBytes)
			recs := []*kgo.Record{bare(topic, 10), bare(topic, tt.value), bare(topic, 10)}
			errs := produceAll(t, cl, recs)
			var wantOnTopic int
			for i, want := range tt.wantErrs {
				if !errors.Is(errs[i], want) || (want == nil) != (errs[i] == nil) {
					t.Errorf("record %d: error %v, want %v", i+1, errs[i], want)
				}
				if want == nil {
					wantOnTopic++
				}
			}
			if got := len(consumeAll(t, k, topic)); got != wantOnTopic {
				t.Errorf("topic holds %d records, want %d", got, wantOnTopic)
			}
		})
	}
}

// Many records that fit one by one fill batches up to the derived limit, and
// the broker accepts every batch; a batch limit above the topic's gets whole
// batches rejected.
func TestBatchesFitTopicLimit(t *testing.T) {
	tests := []struct {
		name       string
		batchBytes int32
		wantReject bool
	}{
		{"derived limit", 0, false},
		{"naive limit", limitBytes + 1000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := testenv.Kafka(t)
			topic := newTopic(t, k, 1, map[string]string{"max.message.bytes": strconv.Itoa(limitBytes)})
			cl := enforcedClient(t, k, tt.batchBytes)
			recs := make([]*kgo.Record, 120)
			for i := range recs {
				recs[i] = valueRecord(topic, i, 300)
			}
			var rejected int
			for i, err := range produceAll(t, cl, recs) {
				switch {
				case errors.Is(err, kerr.MessageTooLarge):
					rejected++
				case err != nil:
					t.Fatalf("record %d: %v", i, err)
				}
			}
			if tt.wantReject != (rejected > 0) {
				t.Fatalf("%d records rejected as too large; want rejections: %v", rejected, tt.wantReject)
			}
		})
	}
}
