package cloudevent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"slices"
	"strings"
	"time"

	"github.com/dynakafka/outbox"
)

// SpecVersion is the CloudEvents version New writes and
// Parse reads.
const SpecVersion = "1.0"

// HeaderPrefix prefixes every CloudEvents attribute header but
// content-type, in the binary content mode of the CloudEvents Kafka
// protocol binding: ce_id, ce_source, ce_specversion, ce_type, ce_time, ...
const HeaderPrefix = "ce_"

// ErrNotEvent is returned by Parse for a record without a
// ce_specversion header: it was not written in the binary content mode of
// the CloudEvents Kafka binding.
var ErrNotEvent = errors.New("outbox: not a CloudEvent (no ce_specversion header)")

// Event is a CloudEvent (CloudEvents 1.0) as New writes it and
// Parse reads it.
type Event struct {
	// ID identifies the event (ce_id). New uses a new id
	// (NewID) when it is empty; when ID is a UUID in canonical form it is
	// also the message id, so consumers deduplicate on it.
	ID string
	// Source is the context the event happened in, a URI-reference
	// (ce_source), for example "/orders-service". Required.
	Source string
	// Type is the kind of event (ce_type), for example
	// "com.example.order.placed". Required.
	Type string
	// Subject is the event's subject within Source (ce_subject), for
	// example the order id. Optional.
	Subject string
	// Time is when the event happened (ce_time, RFC 3339). New
	// uses the wall clock when it is zero.
	Time time.Time
	// DataContentType is the media type of the data (the content-type
	// header). New defaults it to application/json when it
	// encodes Data as JSON; for raw bytes it is sent only when set.
	DataContentType string
	// DataSchema is the URI of the data's schema (ce_dataschema).
	// Optional.
	DataSchema string
	// Extensions are extension attributes (ce_<name>): names of 1..20
	// characters a-z 0-9, none of the core attributes'. Optional.
	Extensions map[string]string
	// Data is the event's payload, the record value. New sends a
	// []byte or json.RawMessage as is and encodes anything else with
	// encoding/json; nil gives an empty value (not a tombstone).
	// Parse sets it to the record value, a []byte: decode it
	// with DecodeData.
	Data any
}

// Core attribute names: an extension must not reuse them.
var coreAttributes = []string{"id", "source", "specversion", "type", "datacontenttype", "dataschema", "subject", "time", "data"}

// New returns a message for topic that carries e in the binary
// content mode of the CloudEvents Kafka protocol binding: the data is the
// record value, the datacontenttype attribute the content-type header, and
// every other attribute a ce_ header (ce_id, ce_source, ce_specversion
// "1.0", ce_type, ce_time, and ce_subject, ce_dataschema and extensions
// when set). key is the record key ("" gives a keyless message); the
// binding's partitionkey extension is the record key, so it is not
// accepted as an extension. A missing Source or Type, a bad extension name,
// a bad topic or data that cannot be encoded is a *ValidationError (Index
// -1, Field "Event.Source" and so on).
func New(topic, key string, e Event) (outbox.Message, error) {
	bad := func(field, reason string) (outbox.Message, error) {
		return outbox.Message{}, &outbox.ValidationError{Index: -1, Field: field, Reason: reason}
	}
	if err := outbox.ValidateTopic(topic); err != nil {
		return bad("Topic", err.Error())
	}
	switch {
	case e.Source == "":
		return bad("Event.Source", "is required: the URI-reference of the context the event happened in, such as /orders-service")
	case e.Type == "":
		return bad("Event.Type", "is required: the kind of event, such as com.example.order.placed")
	}
	for _, name := range slices.Sorted(maps.Keys(e.Extensions)) {
		if reason := extensionNameProblem(name); reason != "" {
			return bad(fmt.Sprintf("Event.Extensions[%q]", name), reason)
		}
	}
	var value []byte
	contentType := e.DataContentType
	switch d := e.Data.(type) {
	case nil:
		value = []byte{}
	case []byte:
		value = bytes.Clone(d)
	case json.RawMessage:
		value = bytes.Clone(d)
		if contentType == "" {
			contentType = outbox.ContentTypeJSON
		}
	default:
		v, err := json.Marshal(d)
		if err != nil {
			return bad("Event.Data", fmt.Sprintf("cannot be encoded as JSON: %v", err))
		}
		value = v
		if contentType == "" {
			contentType = outbox.ContentTypeJSON
		}
	}
	m := outbox.Message{Topic: topic, Key: keyBytes(key), Value: value}
	if e.ID == "" {
		e.ID = outbox.NewID()
	}
	if canonicalID(e.ID) {
		m.ID = e.ID
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	add := func(attr, v string) {
		m.Headers = append(m.Headers, outbox.Header{Key: HeaderPrefix + attr, Value: []byte(v)})
	}
	add("specversion", SpecVersion)
	add("id", e.ID)
	add("source", e.Source)
	add("type", e.Type)
	add("time", e.Time.UTC().Format(time.RFC3339Nano))
	if e.Subject != "" {
		add("subject", e.Subject)
	}
	if e.DataSchema != "" {
		add("dataschema", e.DataSchema)
	}
	for _, name := range slices.Sorted(maps.Keys(e.Extensions)) {
		add(name, e.Extensions[name])
	}
	if contentType != "" {
		m.Headers = append(m.Headers, outbox.Header{Key: outbox.ContentTypeHeader, Value: []byte(contentType)})
	}
	return m, nil
}

// canonicalID reports whether id has the shape of a canonical UUID
// (8-4-4-4-12 hex digits), the only message id form writers accept.
func canonicalID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

func extensionNameProblem(name string) string {
	if name == "" || len(name) > 20 {
		return "an extension name must be 1..20 characters"
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return fmt.Sprintf("an extension name may hold only a-z and 0-9, not %q", c)
		}
	}
	if slices.Contains(coreAttributes, name) {
		return "is a core attribute; set the Event field instead"
	}
	if name == "partitionkey" {
		return "the Kafka binding maps partitionkey to the record key; pass it as the key"
	}
	return ""
}

// Error is a record in the CloudEvents binary content mode (it has
// a ce_specversion header) whose attributes are missing or malformed.
type Error struct {
	// Header is the offending header, such as ce_time.
	Header string
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("outbox: CloudEvent header %s: %s", e.Header, e.Reason)
}

// OutboxErrorClass: a malformed event stays malformed.
func (e *Error) OutboxErrorClass() outbox.ErrorClass { return outbox.RecordPermanent }

// Parse reads the CloudEvent a record carries in the binary
// content mode of the CloudEvents Kafka protocol binding: its ce_ headers
// (names matched without regard to case), its content-type header and its
// value, which becomes Data (a []byte, not copied). A record without a
// ce_specversion header is ErrNotEvent; another specversion than
// "1.0", a missing ce_id, ce_source or ce_type, or a ce_time that is not
// RFC 3339 is a *Error. Unknown ce_ headers are Extensions. When
// a header repeats, the last one wins.
func Parse(headers []outbox.Header, value []byte) (Event, error) {
	var e Event
	attrs := map[string]string{}
	for _, h := range headers {
		k := strings.ToLower(h.Key)
		switch {
		case k == outbox.ContentTypeHeader:
			e.DataContentType = string(h.Value)
		case strings.HasPrefix(k, HeaderPrefix) && len(k) > len(HeaderPrefix):
			attrs[k[len(HeaderPrefix):]] = string(h.Value)
		}
	}
	spec, ok := attrs["specversion"]
	if !ok {
		return Event{}, ErrNotEvent
	}
	bad := func(attr, reason string) (Event, error) {
		return Event{}, &Error{Header: HeaderPrefix + attr, Reason: reason}
	}
	if spec != SpecVersion {
		return bad("specversion", fmt.Sprintf("%q is not a version this reader knows (%s)", spec, SpecVersion))
	}
	for _, required := range []string{"id", "source", "type"} {
		if attrs[required] == "" {
			return bad(required, "missing or empty; CloudEvents requires it")
		}
	}
	e.ID, e.Source, e.Type = attrs["id"], attrs["source"], attrs["type"]
	e.Subject, e.DataSchema = attrs["subject"], attrs["dataschema"]
	if t, ok := attrs["time"]; ok {
		parsed, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return bad("time", fmt.Sprintf("%q is not an RFC 3339 timestamp", t))
		}
		e.Time = parsed
	}
	for name, v := range attrs {
		if !slices.Contains(coreAttributes, name) {
			if e.Extensions == nil {
				e.Extensions = map[string]string{}
			}
			e.Extensions[name] = v
		}
	}
	e.Data = value
	return e, nil
}

// DecodeData decodes the event's data (a []byte or json.RawMessage, as
// Parse sets it) into v with encoding/json. Data whose content
// type is set and is not JSON (application/json or a +json type) is an
// error, and so is data that is not JSON.
func (e Event) DecodeData(v any) error {
	if e.DataContentType != "" {
		mt, _, err := mime.ParseMediaType(e.DataContentType)
		if err != nil || mt != outbox.ContentTypeJSON && !strings.HasSuffix(mt, "+json") {
			return fmt.Errorf("outbox: event %s: data of content type %q is not JSON", e.ID, e.DataContentType)
		}
	}
	var data []byte
	switch d := e.Data.(type) {
	case []byte:
		data = d
	case json.RawMessage:
		data = d
	default:
		return fmt.Errorf("outbox: event %s: Data is a %T, not encoded bytes", e.ID, e.Data)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("outbox: event %s: decode data: %w", e.ID, err)
	}
	return nil
}

func keyBytes(key string) []byte {
	if key == "" {
		return nil
	}
	return []byte(key)
}
