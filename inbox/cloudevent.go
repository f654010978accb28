package inbox

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/cloudevent"
)

// CloudEventOf returns the CloudEvent r carries in the binary content mode
// of the CloudEvents Kafka protocol binding (as cloudevent.New writes
// it): cloudevent.Parse of r's headers and value. A record without a
// ce_specversion header is cloudevent.ErrNotEvent; a malformed one an
// *cloudevent.Error, which a callback should return wrapped in
// Permanent (it stays malformed). Data is r.Value (not copied): decode it
// with Event.DecodeData.
func CloudEventOf(r *kgo.Record) (cloudevent.Event, error) {
	headers := make([]outbox.Header, len(r.Headers))
	for i, h := range r.Headers {
		headers[i] = outbox.Header{Key: h.Key, Value: h.Value}
	}
	return cloudevent.Parse(headers, r.Value)
}

// CloudEvent is CloudEventOf(tx.Record()): the CloudEvent the record being
// processed carries.
func (tx *Tx) CloudEvent() (cloudevent.Event, error) { return CloudEventOf(tx.rec) }
