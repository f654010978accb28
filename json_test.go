package outbox_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dynakafka/outbox"
)

func wantValidation(t *testing.T, err error, field string) {
	t.Helper()
	var ve *outbox.ValidationError
	if !errors.As(err, &ve) || ve.Field != field {
		t.Fatalf("error %v, want a *ValidationError on %s", err, field)
	}
}

type orderPlaced struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

func TestJSON(t *testing.T) {
	m, err := outbox.JSON("orders", "o-1", map[string]any{"order_id": "o-1", "cents": 1250})
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Value) != `{"cents":1250,"order_id":"o-1"}` || string(m.Key) != "o-1" || m.Topic != "orders" {
		t.Fatalf("message %+v", m)
	}
	if len(m.Headers) != 1 || m.Headers[0].Key != "content-type" || string(m.Headers[0].Value) != "application/json" {
		t.Fatalf("headers %q, want one content-type: application/json", m.Headers)
	}
	if err := (outbox.HeaderNames{}).ValidateNew(m, 0, outbox.DefaultMaxMessageBytes); err != nil {
		t.Fatalf("a built message is not writer-ready: %v", err)
	}
	keyless, err := outbox.JSON("orders", "", 1)
	if err != nil || keyless.Key != nil {
		t.Fatalf("keyless: key %v, %v", keyless.Key, err)
	}
	_, err = outbox.JSON("orders", "k", make(chan int))
	wantValidation(t, err, "Value")
	_, err = outbox.JSON("bad topic", "k", 1)
	wantValidation(t, err, "Topic")
}

func TestValidateNewRefusesAssignedFields(t *testing.T) {
	m := outbox.Message{Topic: "orders", Key: []byte("k")}
	if err := (outbox.HeaderNames{}).ValidateNew(m, 3, outbox.DefaultMaxMessageBytes); err != nil {
		t.Fatal(err)
	}
	b := m
	b.Bucket = 7
	err := outbox.HeaderNames{}.ValidateNew(b, 3, outbox.DefaultMaxMessageBytes)
	wantValidation(t, err, "Bucket")
	if ve := (*outbox.ValidationError)(nil); errors.As(err, &ve) && ve.Index != 3 {
		t.Fatalf("index %d", ve.Index)
	}
	s := m
	s.Sequence = 12
	wantValidation(t, outbox.HeaderNames{}.ValidateNew(s, 0, outbox.DefaultMaxMessageBytes), "Sequence")
	// The publisher's and replay's check of stored messages accepts both.
	if err := (outbox.HeaderNames{}).Validate(b, 0, outbox.DefaultMaxMessageBytes); err != nil {
		t.Fatal(err)
	}
}

// A JSON event with a content-type header, ready for a writer.
func ExampleJSON() {
	m, err := outbox.JSON("orders", "order-42", orderPlaced{OrderID: "order-42", Cents: 1250})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s key=%s value=%s %s=%s\n", m.Topic, m.Key, m.Value, m.Headers[0].Key, m.Headers[0].Value)
	// Output: orders key=order-42 value={"order_id":"order-42","cents":1250} content-type=application/json
}
