package inbox_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/cloudevent"
	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/inboxtest"
)

// published is the record a relay makes of m at bucket 3, sequence seq:
// the message's headers, then the stamped ones.
func published(m outbox.Message, seq int64) *kgo.Record {
	r := &kgo.Record{Topic: m.Topic, Partition: 1, Offset: seq, Key: m.Key, Value: m.Value}
	for _, h := range m.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	id := m.ID
	if id == "" {
		id = outbox.NewID()
	}
	r.Headers = append(r.Headers,
		kgo.RecordHeader{Key: outbox.DefaultMessageIDHeader, Value: []byte(id)},
		kgo.RecordHeader{Key: outbox.DefaultBucketHeader, Value: []byte("3")},
		kgo.RecordHeader{Key: outbox.DefaultSequenceHeader, Value: []byte(strconv.FormatInt(seq, 10))})
	return r
}

type paid struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

func TestCloudEventOf(t *testing.T) {
	m, err := cloudevent.New("orders", "o-1", cloudevent.Event{Source: "/orders", Type: "com.example.order.paid", Subject: "o-1",
		Data: paid{"o-1", 990}})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := inboxtest.NewTx(published(m, 4))
	if err != nil {
		t.Fatal(err)
	}
	e, err := tx.CloudEvent()
	if err != nil {
		t.Fatal(err)
	}
	if e.Type != "com.example.order.paid" || e.Source != "/orders" || e.Subject != "o-1" || e.ID != tx.Message().ID {
		t.Fatalf("event %+v, message %+v", e, tx.Message())
	}
	var p paid
	if err := e.DecodeData(&p); err != nil || p != (paid{"o-1", 990}) {
		t.Fatalf("data %+v, %v", p, err)
	}

	plain, err := outbox.JSON("orders", "o-1", paid{"o-1", 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.CloudEventOf(published(plain, 5)); !errors.Is(err, cloudevent.ErrNotEvent) {
		t.Fatalf("a plain JSON record: %v, want cloudevent.ErrNotEvent", err)
	}
	broken := published(m, 6)
	for i, h := range broken.Headers {
		if h.Key == "ce_time" {
			broken.Headers[i].Value = []byte("noon")
		}
	}
	var ce *cloudevent.Error
	if _, err := inbox.CloudEventOf(broken); !errors.As(err, &ce) || ce.Header != "ce_time" {
		t.Fatalf("a bad ce_time: %v, want a *cloudevent.Error", err)
	}
}

// A consumer callback reads the CloudEvent the record carries.
func ExampleTx_CloudEvent() {
	m, _ := cloudevent.New("orders", "o-1", cloudevent.Event{Source: "/orders", Type: "com.example.order.paid",
		Data: paid{OrderID: "o-1", Cents: 990}})
	tx, _ := inboxtest.NewTx(published(m, 1)) // in a consumer, Process or NewConsumer gives the Tx
	callback := func(tx *inbox.Tx) error {
		e, err := tx.CloudEvent()
		if err != nil {
			return inbox.Permanent(err) // malformed stays malformed
		}
		var p paid
		if err := e.DecodeData(&p); err != nil {
			return inbox.Permanent(err)
		}
		fmt.Println(e.Type, p.OrderID, p.Cents)
		return nil
	}
	fmt.Println(callback(tx))
	// Output:
	// com.example.order.paid o-1 990
	// <nil>
}
