package handler

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/dynamojson"
)

// EnqueueRequest is one request to the enqueue function: the caller's own
// items and the outbox messages, committed in one TransactWriteItems
// (schema/enqueue-request.schema.json).
type EnqueueRequest struct {
	// IdempotencyKey names the request: a retried invocation with the same
	// key and the same body commits once; the same key with another body is
	// refused. Required for a direct invocation; in a batch event it
	// defaults to the record's id (SQS messageId, Kinesis eventID,
	// EventBridge event id).
	IdempotencyKey string `json:"idempotencyKey"`
	// TransactItems are TransactWriteItem objects in DynamoDB JSON, the
	// API's own shape (Put, Update, Delete or ConditionCheck).
	TransactItems []json.RawMessage `json:"transactItems"`
	Messages      []EnqueueMessage  `json:"messages"`
}

// EnqueueMessage is one outbox message of a request.
type EnqueueMessage struct {
	// ID is the message id (a UUID); empty for MessageID(key, body hash,
	// position), the same on every delivery of the request.
	ID    string `json:"id,omitempty"`
	Topic string `json:"topic"`
	// Key is the record key as text; KeyBase64 the same as bytes. Neither
	// is a keyless message.
	Key       *string `json:"key,omitempty"`
	KeyBase64 *string `json:"keyBase64,omitempty"`
	// Value is the record value as JSON (stored as its compact text);
	// ValueBase64 the value as bytes. Neither (or null) is a tombstone.
	Value       json.RawMessage `json:"value,omitempty"`
	ValueBase64 *string         `json:"valueBase64,omitempty"`
	Headers     []EnqueueHeader `json:"headers,omitempty"`
	// Partition pins the record to a Kafka partition (and buckets the
	// message by it instead of by key).
	Partition *int32 `json:"partition,omitempty"`
}

// EnqueueHeader is one Kafka record header.
type EnqueueHeader struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// MaxIdempotencyKeyBytes bounds an idempotency key (a Step Functions
// execution ARN with a state name fits several times over).
const MaxIdempotencyKeyBytes = 1024

// MaxEnqueueItems is how many items and messages one request holds: a
// DynamoDB transaction's 100 minus the idempotency record.
const MaxEnqueueItems = 99

// RequestError is bad input: the field (a JSON path into the request) and
// what to fix. The function answers it as Outbox.Validation.
type RequestError struct {
	Field  string
	Reason string
}

func (e *RequestError) Error() string { return e.Field + ": " + e.Reason }

func badField(field, format string, args ...any) *RequestError {
	return &RequestError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// decodedRequest is a request turned into the Writer's arguments.
type decodedRequest struct {
	key   string
	hash  string // of the body without the key: a replay must match it
	items []types.TransactWriteItem
	msgs  []outbox.Message
}

// decodeRequest parses raw; defaultKey is the envelope's record id, used when
// the body has no idempotencyKey ("" for a direct invocation, which must
// carry one).
func decodeRequest(raw []byte, defaultKey string) (*decodedRequest, error) {
	var req EnqueueRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, jsonError("request", err)
	}
	if dec.More() {
		return nil, badField("request", "trailing data after the JSON object")
	}
	hash, err := bodyHash(raw)
	if err != nil {
		return nil, err
	}
	d := &decodedRequest{key: req.IdempotencyKey, hash: hash}
	if d.key == "" {
		d.key = defaultKey
	}
	switch {
	case d.key == "":
		return nil, badField("idempotencyKey", "required: a key that names this request and is the same when the request is retried "+
			"(a Step Functions execution id and state name, an SQS message id, an EventBridge event id)")
	case len(d.key) > MaxIdempotencyKeyBytes:
		return nil, badField("idempotencyKey", "%d bytes; at most %d", len(d.key), MaxIdempotencyKeyBytes)
	}
	n := len(req.TransactItems) + len(req.Messages)
	switch {
	case n == 0:
		return nil, badField("messages", "nothing to write: no transactItems and no messages")
	case n > MaxEnqueueItems:
		return nil, badField("messages", "%d transactItems + %d messages = %d; one DynamoDB transaction holds 100 and the function uses one "+
			"for the idempotency record, so at most %d: split the request", len(req.TransactItems), len(req.Messages), n, MaxEnqueueItems)
	}
	for i, rawItem := range req.TransactItems {
		it, err := decodeTransactItem(fmt.Sprintf("transactItems[%d]", i), rawItem)
		if err != nil {
			return nil, err
		}
		d.items = append(d.items, it)
	}
	for i, m := range req.Messages {
		msg, err := m.message(fmt.Sprintf("messages[%d]", i))
		if err != nil {
			return nil, err
		}
		d.msgs = append(d.msgs, msg)
	}
	return d, nil
}

func (m EnqueueMessage) message(path string) (outbox.Message, error) {
	msg := outbox.Message{ID: m.ID, Topic: m.Topic, Partition: m.Partition}
	if m.Topic == "" {
		return msg, badField(path+".topic", "required: the Kafka topic of the message")
	}
	switch {
	case m.Key != nil && m.KeyBase64 != nil:
		return msg, badField(path+".key", "give key or keyBase64, not both")
	case m.Key != nil:
		msg.Key = []byte(*m.Key)
	case m.KeyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*m.KeyBase64)
		if err != nil {
			return msg, badField(path+".keyBase64", "not standard base64: %v", err)
		}
		msg.Key = b
	}
	hasValue := len(m.Value) > 0 && !bytes.Equal(bytes.TrimSpace(m.Value), []byte("null"))
	switch {
	case hasValue && m.ValueBase64 != nil:
		return msg, badField(path+".value", "give value or valueBase64, not both")
	case hasValue:
		var b bytes.Buffer
		if err := json.Compact(&b, m.Value); err != nil {
			return msg, badField(path+".value", "not JSON: %v", err)
		}
		msg.Value = b.Bytes()
	case m.ValueBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*m.ValueBase64)
		if err != nil {
			return msg, badField(path+".valueBase64", "not standard base64: %v", err)
		}
		msg.Value = b
	}
	for _, h := range m.Headers {
		msg.Headers = append(msg.Headers, outbox.Header{Key: h.Key, Value: []byte(h.Value)})
	}
	return msg, nil
}

// bodyHash is the SHA-256 of the request without its idempotencyKey, in a
// canonical form (object keys sorted, numbers as written), so that a replay
// is recognised whatever the key order of the JSON the caller sent.
func bodyHash(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var body map[string]any
	if err := dec.Decode(&body); err != nil {
		return "", jsonError("request", err)
	}
	delete(body, "idempotencyKey")
	b, err := json.Marshal(body)
	if err != nil {
		return "", badField("request", "%v", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func jsonError(field string, err error) *RequestError {
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) && ute.Field != "" {
		return badField(field+"."+ute.Field, "is JSON %s; want %s", ute.Value, ute.Type)
	}
	return badField(field, "%s", strings.TrimPrefix(err.Error(), "json: "))
}

// op is the union of the four TransactWriteItem operations' fields; which
// are allowed depends on the operation.
type op struct {
	TableName                           string                     `json:"TableName"`
	Key                                 map[string]json.RawMessage `json:"Key"`
	Item                                map[string]json.RawMessage `json:"Item"`
	UpdateExpression                    *string                    `json:"UpdateExpression"`
	ConditionExpression                 *string                    `json:"ConditionExpression"`
	ExpressionAttributeNames            map[string]string          `json:"ExpressionAttributeNames"`
	ExpressionAttributeValues           map[string]json.RawMessage `json:"ExpressionAttributeValues"`
	ReturnValuesOnConditionCheckFailure string                     `json:"ReturnValuesOnConditionCheckFailure"`
}

// decodeTransactItem parses one TransactWriteItem in DynamoDB JSON.
func decodeTransactItem(path string, raw json.RawMessage) (types.TransactWriteItem, error) {
	var it types.TransactWriteItem
	kind, o, err := parseOp(path, raw)
	if err != nil {
		return it, err
	}
	p := path + "." + kind
	var rv types.ReturnValuesOnConditionCheckFailure
	switch o.ReturnValuesOnConditionCheckFailure {
	case "", "NONE", "ALL_OLD":
		rv = types.ReturnValuesOnConditionCheckFailure(o.ReturnValuesOnConditionCheckFailure)
	default:
		return it, badField(p+".ReturnValuesOnConditionCheckFailure", "%q; want NONE or ALL_OLD", o.ReturnValuesOnConditionCheckFailure)
	}
	key, err := decodeItem(p+".Key", o.Key)
	if err != nil {
		return it, err
	}
	item, err := decodeItem(p+".Item", o.Item)
	if err != nil {
		return it, err
	}
	values, err := decodeItem(p+".ExpressionAttributeValues", o.ExpressionAttributeValues)
	if err != nil {
		return it, err
	}
	table := &o.TableName
	names := o.ExpressionAttributeNames
	switch kind {
	case "Put":
		it.Put = &types.Put{TableName: table, Item: item, ConditionExpression: o.ConditionExpression,
			ExpressionAttributeNames: names, ExpressionAttributeValues: values, ReturnValuesOnConditionCheckFailure: rv}
	case "Update":
		it.Update = &types.Update{TableName: table, Key: key, UpdateExpression: o.UpdateExpression, ConditionExpression: o.ConditionExpression,
			ExpressionAttributeNames: names, ExpressionAttributeValues: values, ReturnValuesOnConditionCheckFailure: rv}
	case "Delete":
		it.Delete = &types.Delete{TableName: table, Key: key, ConditionExpression: o.ConditionExpression,
			ExpressionAttributeNames: names, ExpressionAttributeValues: values, ReturnValuesOnConditionCheckFailure: rv}
	case "ConditionCheck":
		it.ConditionCheck = &types.ConditionCheck{TableName: table, Key: key, ConditionExpression: o.ConditionExpression,
			ExpressionAttributeNames: names, ExpressionAttributeValues: values, ReturnValuesOnConditionCheckFailure: rv}
	}
	return it, nil
}

// parseOp parses a TransactWriteItem's one operation (Put, Update, Delete
// or ConditionCheck) and checks that it has the members its kind requires
// and none that only another kind has.
func parseOp(path string, raw json.RawMessage) (kind string, o op, err error) {
	var ops map[string]json.RawMessage
	if err := json.Unmarshal(raw, &ops); err != nil {
		return "", o, jsonError(path, err)
	}
	if len(ops) != 1 {
		return "", o, badField(path, "has %d members (%s); want exactly one of Put, Update, Delete, ConditionCheck", len(ops), strings.Join(sortedKeys(ops), ", "))
	}
	for k := range ops {
		kind = k
	}
	p := path + "." + kind
	switch kind {
	case "Put", "Update", "Delete", "ConditionCheck":
	default:
		return "", o, badField(path, "unknown operation %q; want Put, Update, Delete or ConditionCheck", kind)
	}
	dec := json.NewDecoder(bytes.NewReader(ops[kind]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return "", o, jsonError(p, err)
	}
	if o.TableName == "" {
		return "", o, badField(p+".TableName", "required")
	}
	if kind == "Put" {
		if o.Key != nil {
			return "", o, badField(p+".Key", "a Put has Item, not Key")
		}
		if len(o.Item) == 0 {
			return "", o, badField(p+".Item", "required: the item to put, in DynamoDB JSON")
		}
	} else {
		if o.Item != nil {
			return "", o, badField(p+".Item", "only a Put has Item; a %s has Key", kind)
		}
		if len(o.Key) == 0 {
			return "", o, badField(p+".Key", "required: the item's primary key, in DynamoDB JSON")
		}
	}
	if (kind == "Update") != (o.UpdateExpression != nil) {
		if kind == "Update" {
			return "", o, badField(p+".UpdateExpression", "required for an Update")
		}
		return "", o, badField(p+".UpdateExpression", "only an Update has one")
	}
	if kind == "ConditionCheck" && o.ConditionExpression == nil {
		return "", o, badField(p+".ConditionExpression", "required for a ConditionCheck")
	}
	return kind, o, nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// decodeItem parses a map of attribute values in DynamoDB JSON; nil for none.
func decodeItem(path string, raw map[string]json.RawMessage) (map[string]types.AttributeValue, error) {
	if raw == nil {
		return nil, nil
	}
	out := make(map[string]types.AttributeValue, len(raw))
	for _, name := range sortedKeys(raw) {
		av, err := DecodeAttributeValue(fmt.Sprintf("%s[%q]", path, name), raw[name])
		if err != nil {
			return nil, err
		}
		out[name] = av
	}
	return out, nil
}

// number is DynamoDB's number syntax (up to 38 digits of precision; the
// range DynamoDB checks itself).
var number = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

// DecodeAttributeValue parses one attribute value in DynamoDB JSON
// ({"S": "x"}, {"N": "1"}, {"M": {...}}, ...); path names it in errors.
func DecodeAttributeValue(path string, raw json.RawMessage) (types.AttributeValue, error) {
	var v map[string]json.RawMessage
	if err := json.Unmarshal(raw, &v); err != nil || v == nil {
		return nil, badField(path, "%s is not an attribute value: want an object with one type member, such as {\"S\": \"text\"} or {\"N\": \"1\"}", abbreviate(raw))
	}
	if len(v) != 1 {
		return nil, badField(path, "has %d members (%s); an attribute value has exactly one of S, N, B, SS, NS, BS, M, L, NULL, BOOL", len(v), strings.Join(sortedKeys(v), ", "))
	}
	for typ, body := range v {
		p := path + "." + typ
		switch typ {
		case "S", "N", "B", "NULL", "BOOL":
			return decodeScalar(p, typ, body)
		case "SS", "NS", "BS":
			return decodeSet(p, typ, body)
		case "M":
			var m map[string]json.RawMessage
			if err := json.Unmarshal(body, &m); err != nil || m == nil {
				return nil, badField(p, "%s; want an object of attribute values", abbreviate(body))
			}
			item, err := decodeItem(p, m)
			return &types.AttributeValueMemberM{Value: item}, err
		case "L":
			var l []json.RawMessage
			if err := json.Unmarshal(body, &l); err != nil || l == nil {
				return nil, badField(p, "%s; want an array of attribute values", abbreviate(body))
			}
			out := make([]types.AttributeValue, len(l))
			for i, e := range l {
				av, err := DecodeAttributeValue(fmt.Sprintf("%s[%d]", p, i), e)
				if err != nil {
					return nil, err
				}
				out[i] = av
			}
			return &types.AttributeValueMemberL{Value: out}, nil
		default:
			return nil, badField(path, "unknown attribute type %q; want one of S, N, B, SS, NS, BS, M, L, NULL, BOOL", typ)
		}
	}
	panic("unreachable")
}

// decodeScalar parses the body of an S, N, B, NULL or BOOL value; p names
// it in errors.
func decodeScalar(p, typ string, body json.RawMessage) (types.AttributeValue, error) {
	str := func() (string, error) {
		var s string
		if err := json.Unmarshal(body, &s); err != nil {
			return "", badField(p, "%s; want a JSON string", abbreviate(body))
		}
		return s, nil
	}
	switch typ {
	case "S":
		s, err := str()
		return &types.AttributeValueMemberS{Value: s}, err
	case "N":
		s, err := str()
		if err == nil && !number.MatchString(s) {
			err = badField(p, "%q is not a number", s)
		}
		return &types.AttributeValueMemberN{Value: s}, err
	case "B":
		s, err := str()
		if err != nil {
			return nil, err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, badField(p, "not standard base64: %v", err)
		}
		return &types.AttributeValueMemberB{Value: b}, nil
	case "NULL":
		var b bool
		if err := json.Unmarshal(body, &b); err != nil || !b {
			return nil, badField(p, "%s; want true", abbreviate(body))
		}
		return &types.AttributeValueMemberNULL{Value: true}, nil
	default: // BOOL
		var b bool
		if err := json.Unmarshal(body, &b); err != nil {
			return nil, badField(p, "%s; want true or false", abbreviate(body))
		}
		return &types.AttributeValueMemberBOOL{Value: b}, nil
	}
}

// decodeSet parses the body of an SS, NS or BS value: a non-empty array of
// strings (numbers, base64); p names it in errors.
func decodeSet(p, typ string, body json.RawMessage) (types.AttributeValue, error) {
	var ss []string
	if err := json.Unmarshal(body, &ss); err != nil {
		return nil, badField(p, "%s; want an array of strings", abbreviate(body))
	}
	if len(ss) == 0 {
		return nil, badField(p, "an empty set; DynamoDB sets have at least one element")
	}
	switch typ {
	case "SS":
		return &types.AttributeValueMemberSS{Value: ss}, nil
	case "NS":
		for i, s := range ss {
			if !number.MatchString(s) {
				return nil, badField(fmt.Sprintf("%s[%d]", p, i), "%q is not a number", s)
			}
		}
		return &types.AttributeValueMemberNS{Value: ss}, nil
	default: // BS
		bs := make([][]byte, len(ss))
		for i, s := range ss {
			var err error
			if bs[i], err = base64.StdEncoding.DecodeString(s); err != nil {
				return nil, badField(fmt.Sprintf("%s[%d]", p, i), "not standard base64: %v", err)
			}
		}
		return &types.AttributeValueMemberBS{Value: bs}, nil
	}
}

// EncodeAttributeValue is the inverse of DecodeAttributeValue, for the old
// images in cancellation reasons; nil for a type the SDK does not define.
func EncodeAttributeValue(av types.AttributeValue) any { return dynamojson.Value(av) }

// EncodeItem is an item in DynamoDB JSON; nil for none.
func EncodeItem(item map[string]types.AttributeValue) map[string]any { return dynamojson.Item(item) }

func abbreviate(raw []byte) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	if s == "" {
		s = "nothing"
	}
	return s
}
