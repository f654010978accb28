package outboxtest_test

import (
	"context"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox/cloudevent"
	"github.com/dynakafka/outbox/inboxtest"
	"github.com/dynakafka/outbox/outboxtest"
)

// Record is the record the relay publishes: the same key, value and
// headers as the one a memory outbox's relay put on the topic, and one
// inboxtest.NewTx reads the message's place from.
func TestRecordIsWhatTheRelayPublishes(t *testing.T) {
	o := outboxtest.New(t, outboxtest.Memory(), outboxtest.Topics("orders"))
	m, err := cloudevent.New("orders", "o-7", cloudevent.Event{Source: "/orders", Type: "order.placed", Data: map[string]int{"cents": 5}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Writer.Write(context.Background(), nil, m); err != nil {
		t.Fatal(err)
	}
	got := o.WaitForRecords(t, "orders", 1)[0]
	want := outboxtest.Record(o.Writer.(*outboxtest.FakeWriter).Messages()[0])
	header := func(h kgo.RecordHeader) string { return h.Key + "=" + string(h.Value) }
	gh, wh := make([]string, 0, len(got.Headers)), make([]string, 0, len(want.Headers))
	for _, h := range got.Headers {
		gh = append(gh, header(h))
	}
	for _, h := range want.Headers {
		wh = append(wh, header(h))
	}
	if string(got.Key) != string(want.Key) || string(got.Value) != string(want.Value) || !slices.Equal(gh, wh) || !got.Timestamp.Equal(want.Timestamp) {
		t.Fatalf("published %s=%s %v at %v;\nRecord gives %s=%s %v at %v", got.Key, got.Value, gh, got.Timestamp, want.Key, want.Value, wh, want.Timestamp)
	}
	tx, err := inboxtest.NewTx(want)
	if err != nil {
		t.Fatal(err)
	}
	sent := o.Writer.(*outboxtest.FakeWriter).Messages()[0]
	if msg := tx.Message(); msg.ID != sent.ID || msg.Bucket != sent.Bucket || msg.Sequence != sent.Sequence || !msg.Sequenced {
		t.Errorf("inboxtest.NewTx read %+v, want id %s bucket %d sequence %d", msg, sent.ID, sent.Bucket, sent.Sequence)
	}
}
