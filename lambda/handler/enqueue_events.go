package handler

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"

	"github.com/aws/aws-lambda-go/events"
)

// Handle is the enqueue function's entry point. It takes every shape its
// invokers send:
//   - a request (EnqueueRequest): a direct invocation, a Step Functions
//     task's payload, an EventBridge target's input (transformed);
//   - an EventBridge event: its detail is the request, its id the default
//     idempotency key;
//   - an SQS batch (Records with eventSource aws:sqs): each body is a
//     request, its messageId the default key;
//   - a Kinesis batch (aws:kinesis): each record's data is a request, its
//     eventID the default key;
//   - an EventBridge Pipes batch (a JSON array): each element an SQS or
//     Kinesis record as above, or a request (after an input template).
//
// A request answers an EnqueueResponse or a typed error (*EnqueueError as
// the runtime's error, errorType Outbox.*). A batch commits each record in
// its own transaction and answers events.SQSEventResponse listing the
// records that did not commit (their errors are logged); in an ordered
// batch (Kinesis, an SQS FIFO queue) the records after the first failure
// are not tried and are reported too, so the source retries them in order.
func (h *Enqueue) Handle(ctx context.Context, raw json.RawMessage) (any, error) {
	ctx, cancel := workContext(ctx)
	defer cancel()
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, (&EnqueueError{Type: ErrorValidation, Field: "event", Message: "an array that is not a Pipes batch: " + err.Error()}).Lambda()
		}
		return h.batch(ctx, elems), nil
	}
	var probe struct {
		Records    []json.RawMessage `json:"Records"`
		DetailType *string           `json:"detail-type"`
		Detail     json.RawMessage   `json:"detail"`
		ID         string            `json:"id"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, toEnqueueError(jsonError("request", err), 0).Lambda()
	}
	switch {
	case probe.Records != nil:
		return h.batch(ctx, probe.Records), nil
	case probe.DetailType != nil && probe.Detail != nil:
		return h.single(ctx, probe.Detail, eventKey(probe.ID))
	}
	return h.single(ctx, raw, "")
}

func (h *Enqueue) single(ctx context.Context, raw []byte, defaultKey string) (any, error) {
	resp, err := h.commit(ctx, raw, defaultKey)
	if err != nil {
		ee := toEnqueueError(err, 0)
		h.logger.WarnContext(ctx, "outbox enqueue: request failed", "error_type", ee.Type, "field", ee.Field, "err", ee.Message)
		return nil, ee.Lambda()
	}
	return resp, nil
}

func eventKey(id string) string {
	if id == "" {
		return ""
	}
	return "events:" + id
}

// record is one element of a batch, understood.
type batchRecord struct {
	id      string // batchItemFailures itemIdentifier
	key     string // default idempotency key
	body    []byte
	ordered bool
	err     *EnqueueError // the record itself is malformed
}

func parseRecord(raw json.RawMessage) batchRecord {
	var r struct {
		EventSource    string            `json:"eventSource"`
		MessageID      string            `json:"messageId"`
		Body           *string           `json:"body"`
		Attributes     map[string]string `json:"attributes"`
		EventID        string            `json:"eventID"`
		Kinesis        *kinesisData      `json:"kinesis"`
		Data           string            `json:"data"`
		SequenceNumber string            `json:"sequenceNumber"`
		IdempotencyKey string            `json:"idempotencyKey"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return batchRecord{err: toEnqueueError(jsonError("record", err), 0)}
	}
	switch {
	case r.EventSource == "aws:sqs" || (r.MessageID != "" && r.Body != nil):
		b := batchRecord{id: r.MessageID, key: "sqs:" + r.MessageID, ordered: r.Attributes["MessageGroupId"] != ""}
		if r.Body == nil {
			b.err = &EnqueueError{Type: ErrorValidation, Field: "body", Message: "an SQS record without a body"}
		} else {
			b.body = []byte(*r.Body)
		}
		return b
	case r.EventSource == "aws:kinesis":
		// Lambda nests the record under "kinesis"; Pipes sends it flat.
		k := kinesisData{Data: r.Data, SequenceNumber: r.SequenceNumber}
		if r.Kinesis != nil {
			k = *r.Kinesis
		}
		b := batchRecord{id: k.SequenceNumber, key: "kinesis:" + r.EventID, ordered: true}
		if r.EventID == "" {
			b.key = "kinesis:" + k.SequenceNumber
		}
		data, err := base64.StdEncoding.DecodeString(k.Data)
		if err != nil {
			b.err = &EnqueueError{Type: ErrorValidation, Field: "kinesis.data", Message: "not base64: " + err.Error()}
		}
		b.body = data
		return b
	}
	// A request, as a Pipes input template made it: its key identifies it.
	return batchRecord{id: r.IdempotencyKey, body: raw}
}

type kinesisData struct {
	Data           string `json:"data"`
	SequenceNumber string `json:"sequenceNumber"`
}

// batch commits each record in its own transaction, in order.
func (h *Enqueue) batch(ctx context.Context, raws []json.RawMessage) events.SQSEventResponse {
	resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
	stopped := false
	for i, raw := range raws {
		rec := parseRecord(raw)
		if stopped {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.id})
			continue
		}
		err := error(rec.err)
		if rec.err == nil {
			if ctx.Err() != nil {
				err = &EnqueueError{Type: ErrorRetryable, Message: "the invocation's deadline came before this record was tried"}
			} else {
				_, err = h.commit(ctx, rec.body, rec.key)
			}
		}
		if err == nil {
			continue
		}
		ee := toEnqueueError(err, 0)
		h.logger.WarnContext(ctx, "outbox enqueue: record failed", "record", i, "item_identifier", rec.id,
			"error_type", ee.Type, "field", ee.Field, "err", ee.Message)
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.id})
		stopped = rec.ordered
	}
	return resp
}
