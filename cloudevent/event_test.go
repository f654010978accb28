package cloudevent_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/cloudevent"
)

func header(m outbox.Message, key string) (string, bool) {
	v, ok := "", false
	for _, h := range m.Headers {
		if h.Key == key {
			v, ok = string(h.Value), true
		}
	}
	return v, ok
}

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

func TestCloudEventBinaryModeHeaders(t *testing.T) {
	at := time.Date(2026, 12, 1, 21, 30, 0, 123000000, time.FixedZone("CET", 3600))
	id := outbox.NewID()
	m, err := cloudevent.New("orders", "o-1", cloudevent.Event{ID: id, Source: "/orders", Type: "com.example.order.placed",
		Subject: "o-1", Time: at, DataSchema: "https://example.com/placed.json", Extensions: map[string]string{"tenant": "acme"},
		Data: orderPlaced{"o-1", 1250}})
	if err != nil {
		t.Fatal(err)
	}
	want := []outbox.Header{
		{Key: "ce_specversion", Value: []byte("1.0")},
		{Key: "ce_id", Value: []byte(id)},
		{Key: "ce_source", Value: []byte("/orders")},
		{Key: "ce_type", Value: []byte("com.example.order.placed")},
		{Key: "ce_time", Value: []byte("2026-12-01T20:30:00.123Z")},
		{Key: "ce_subject", Value: []byte("o-1")},
		{Key: "ce_dataschema", Value: []byte("https://example.com/placed.json")},
		{Key: "ce_tenant", Value: []byte("acme")},
		{Key: "content-type", Value: []byte("application/json")},
	}
	if !reflect.DeepEqual(m.Headers, want) {
		t.Fatalf("headers\n got %q\nwant %q", m.Headers, want)
	}
	if m.ID != id || string(m.Key) != "o-1" || string(m.Value) != `{"order_id":"o-1","cents":1250}` {
		t.Fatalf("message %+v", m)
	}
	if err := (outbox.HeaderNames{}).ValidateNew(m, 0, outbox.DefaultMaxMessageBytes); err != nil {
		t.Fatalf("a built message is not writer-ready: %v", err)
	}

	e, err := cloudevent.Parse(m.Headers, m.Value)
	if err != nil {
		t.Fatal(err)
	}
	if e.ID != id || e.Source != "/orders" || e.Type != "com.example.order.placed" || e.Subject != "o-1" ||
		!e.Time.Equal(at) || e.DataContentType != "application/json" || e.DataSchema != "https://example.com/placed.json" ||
		!reflect.DeepEqual(e.Extensions, map[string]string{"tenant": "acme"}) {
		t.Fatalf("parsed %+v", e)
	}
	var got orderPlaced
	if err := e.DecodeData(&got); err != nil || got != (orderPlaced{"o-1", 1250}) {
		t.Fatalf("data %+v, %v", got, err)
	}
}

func TestCloudEventDefaults(t *testing.T) {
	before := time.Now()
	m, err := cloudevent.New("orders", "", cloudevent.Event{Source: "/s", Type: "t", Data: []byte{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := header(m, "ce_id")
	if m.ID == "" || id != m.ID {
		t.Fatalf("a new event id must be the message id: ce_id %q, ID %q", id, m.ID)
	}
	if _, ok := header(m, "content-type"); ok {
		t.Fatal("raw bytes without DataContentType got a content-type")
	}
	if m.Key != nil || string(m.Value) != "\x00\x01" {
		t.Fatalf("key %v value %v", m.Key, m.Value)
	}
	e, err := cloudevent.Parse(m.Headers, m.Value)
	if err != nil {
		t.Fatal(err)
	}
	if e.Time.Before(before.Truncate(time.Second)) || e.Time.After(time.Now()) {
		t.Fatalf("time %v not the wall clock", e.Time)
	}
	// An event id that is not a UUID stays the event's; the writer gives
	// the message its own id.
	m, err = cloudevent.New("orders", "k", cloudevent.Event{ID: "evt-7", Source: "/s", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := header(m, "ce_id"); m.ID != "" || id != "evt-7" || m.Value == nil || len(m.Value) != 0 {
		t.Fatalf("ID %q ce_id %q value %v", m.ID, id, m.Value)
	}
}

func TestCloudEventRefusesBadEvents(t *testing.T) {
	ok := cloudevent.Event{Source: "/s", Type: "t"}
	for _, c := range []struct {
		name  string
		edit  func(*cloudevent.Event)
		field string
	}{
		{"no source", func(e *cloudevent.Event) { e.Source = "" }, "Event.Source"},
		{"no type", func(e *cloudevent.Event) { e.Type = "" }, "Event.Type"},
		{"upper-case extension", func(e *cloudevent.Event) { e.Extensions = map[string]string{"Tenant": "x"} }, `Event.Extensions["Tenant"]`},
		{"long extension", func(e *cloudevent.Event) { e.Extensions = map[string]string{strings.Repeat("a", 21): "x"} }, `Event.Extensions["aaaaaaaaaaaaaaaaaaaaa"]`},
		{"core attribute", func(e *cloudevent.Event) { e.Extensions = map[string]string{"time": "x"} }, `Event.Extensions["time"]`},
		{"partitionkey", func(e *cloudevent.Event) { e.Extensions = map[string]string{"partitionkey": "x"} }, `Event.Extensions["partitionkey"]`},
		{"data", func(e *cloudevent.Event) { e.Data = func() {} }, "Event.Data"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := ok
			c.edit(&e)
			_, err := cloudevent.New("orders", "k", e)
			wantValidation(t, err, c.field)
		})
	}
	_, err := cloudevent.New("", "k", ok)
	wantValidation(t, err, "Topic")
}

func TestParseCloudEventErrors(t *testing.T) {
	h := func(kv ...string) []outbox.Header {
		var out []outbox.Header
		for i := 0; i < len(kv); i += 2 {
			out = append(out, outbox.Header{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return out
	}
	full := []string{"ce_specversion", "1.0", "ce_id", "1", "ce_source", "/s", "ce_type", "t"}
	if _, err := cloudevent.Parse(h("content-type", "application/json"), nil); !errors.Is(err, cloudevent.ErrNotEvent) {
		t.Fatalf("no ce_specversion: %v", err)
	}
	for _, c := range []struct {
		name    string
		headers []outbox.Header
		header  string
	}{
		{"other version", h("ce_specversion", "0.3", "ce_id", "1", "ce_source", "/s", "ce_type", "t"), "ce_specversion"},
		{"no id", h("ce_specversion", "1.0", "ce_source", "/s", "ce_type", "t"), "ce_id"},
		{"empty source", h("ce_specversion", "1.0", "ce_id", "1", "ce_source", "", "ce_type", "t"), "ce_source"},
		{"no type", h("ce_specversion", "1.0", "ce_id", "1", "ce_source", "/s"), "ce_type"},
		{"bad time", h(append(full, "ce_time", "yesterday")...), "ce_time"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := cloudevent.Parse(c.headers, nil)
			var ce *cloudevent.Error
			if !errors.As(err, &ce) || ce.Header != c.header {
				t.Fatalf("error %v, want a *cloudevent.Error on %s", err, c.header)
			}
			if outbox.Classify(err) != outbox.RecordPermanent {
				t.Fatalf("class %v, want RecordPermanent", outbox.Classify(err))
			}
		})
	}
	// Header names match without regard to case; the last of a repeated
	// header wins.
	e, err := cloudevent.Parse(h("CE_SpecVersion", "1.0", "ce_id", "1", "ce_id", "2", "Ce_Source", "/s", "ce_type", "t", "Content-Type", "text/plain"), []byte("hi"))
	if err != nil || e.ID != "2" || e.Source != "/s" || e.DataContentType != "text/plain" {
		t.Fatalf("parsed %+v, %v", e, err)
	}
	var v any
	if err := e.DecodeData(&v); err == nil {
		t.Fatal("DecodeData of text/plain data succeeded")
	}
	e.DataContentType = "application/cloudevents+json"
	e.Data = json.RawMessage(`{"a":1}`)
	if err := e.DecodeData(&v); err != nil {
		t.Fatalf("+json data: %v", err)
	}
}

// A CloudEvent in the binary content mode of the CloudEvents Kafka binding:
// the data is the value, the attributes are ce_ headers.
func ExampleNew() {
	m, err := cloudevent.New("orders", "order-42", cloudevent.Event{
		ID:     "0193b6a4-5f2e-7c3a-9a1b-2c3d4e5f6a7b",
		Source: "/orders-service",
		Type:   "com.example.order.placed",
		Time:   time.Date(2026, 12, 1, 21, 30, 0, 0, time.UTC),
		Data:   orderPlaced{OrderID: "order-42", Cents: 1250},
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("id=%s value=%s\n", m.ID, m.Value)
	for _, h := range m.Headers {
		fmt.Printf("%s: %s\n", h.Key, h.Value)
	}
	// Output:
	// id=0193b6a4-5f2e-7c3a-9a1b-2c3d4e5f6a7b value={"order_id":"order-42","cents":1250}
	// ce_specversion: 1.0
	// ce_id: 0193b6a4-5f2e-7c3a-9a1b-2c3d4e5f6a7b
	// ce_source: /orders-service
	// ce_type: com.example.order.placed
	// ce_time: 2026-12-01T21:30:00Z
	// content-type: application/json
}

// A consumer reads the event back from the record's headers and value
// (inbox.CloudEventOf does this for a *kgo.Record).
func ExampleParse() {
	m, _ := cloudevent.New("orders", "order-42", cloudevent.Event{Source: "/orders-service", Type: "com.example.order.placed",
		Data: orderPlaced{OrderID: "order-42", Cents: 1250}})
	e, err := cloudevent.Parse(m.Headers, m.Value)
	if err != nil {
		panic(err)
	}
	var placed orderPlaced
	if err := e.DecodeData(&placed); err != nil {
		panic(err)
	}
	fmt.Println(e.Type, placed.OrderID, placed.Cents)
	// Output: com.example.order.placed order-42 1250
}
