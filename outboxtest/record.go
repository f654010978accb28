package outboxtest

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
)

// Record returns the record the relay publishes for m, with the default
// header names: m's headers, then the message id, bucket and sequence
// headers the relay stamps, and CreatedAt as the timestamp. With a
// FakeWriter's messages it feeds a consumer callback in a unit test:
//
//	tx, err := inboxtest.NewTx(outboxtest.Record(w.Messages()[0]))
//
// Partition and offset are those m names (0 when it names none).
func Record(m outbox.Message) *kgo.Record {
	r := &kgo.Record{Topic: m.Topic, Key: m.Key, Value: m.Value, Timestamp: m.CreatedAt}
	if m.Partition != nil {
		r.Partition = *m.Partition
	}
	for _, h := range m.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	r.Headers = append(r.Headers,
		kgo.RecordHeader{Key: outbox.DefaultMessageIDHeader, Value: []byte(m.ID)},
		kgo.RecordHeader{Key: outbox.DefaultBucketHeader, Value: strconv.AppendInt(nil, int64(m.Bucket), 10)},
		kgo.RecordHeader{Key: outbox.DefaultSequenceHeader, Value: strconv.AppendInt(nil, m.Sequence, 10)})
	return r
}
