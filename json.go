package outbox

import (
	"encoding/json"
	"fmt"
)

// ContentTypeHeader is the record header that carries the media type of the
// value: set by JSON and CloudEvent (the CloudEvents Kafka binding maps the
// datacontenttype attribute to it).
const ContentTypeHeader = "content-type"

// ContentTypeJSON is the media type JSON and CloudEvent stamp on a
// JSON-encoded value.
const ContentTypeJSON = "application/json"

// JSON returns a message for topic whose value is v encoded with
// encoding/json, with a content-type: application/json header. key is the
// record key ("" gives a keyless message: no order is promised). The
// message is ready for a writer: ID, Bucket, Sequence and CreatedAt are
// left to it. A bad topic or a v that cannot be encoded is a
// *ValidationError (Index -1).
func JSON(topic, key string, v any) (Message, error) {
	if err := ValidateTopic(topic); err != nil {
		return Message{}, &ValidationError{Index: -1, Field: "Topic", Reason: err.Error()}
	}
	value, err := json.Marshal(v)
	if err != nil {
		return Message{}, &ValidationError{Index: -1, Field: "Value", Reason: fmt.Sprintf("cannot be encoded as JSON: %v", err)}
	}
	return Message{Topic: topic, Key: keyBytes(key), Value: value,
		Headers: []Header{{Key: ContentTypeHeader, Value: []byte(ContentTypeJSON)}}}, nil
}

func keyBytes(key string) []byte {
	if key == "" {
		return nil
	}
	return []byte(key)
}
