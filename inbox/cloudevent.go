package inbox

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
)

// CloudEventOf returns the CloudEvent r carries in the binary content mode
// of the CloudEvents Kafka protocol binding (as outbox.CloudEvent writes
// it): outbox.ParseCloudEvent of r's headers and value. A record without a
// ce_specversion header is outbox.ErrNotCloudEvent; a malformed one an
// *outbox.CloudEventError, which a callback should return wrapped in
// Permanent (it stays malformed). Data is r.Value (not copied): decode it
// with Event.DecodeData.
func CloudEventOf(r *kgo.Record) (outbox.Event, error) {
	headers := make([]outbox.Header, len(r.Headers))
	for i, h := range r.Headers {
		headers[i] = outbox.Header{Key: h.Key, Value: h.Value}
	}
	return outbox.ParseCloudEvent(headers, r.Value)
}

// CloudEvent is CloudEventOf(tx.Record()): the CloudEvent the record being
// processed carries.
func (tx *Tx) CloudEvent() (outbox.Event, error) { return CloudEventOf(tx.rec) }
