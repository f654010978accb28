package handler

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"

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
// batch (Kinesis, an SQS FIFO queue) the records after the first retryable
// failure are not tried and are reported too, so the source retries them in
// order. An unusable record (Outbox.Validation: it fails on every delivery)
// is reported alone and the records after it are tried: holding them back
// would fail them with it on every redelivery until the source gives up.
//
// An element of an array that is a request, not an SQS or Kinesis record,
// cannot be told from a direct invocation's payload (a Step Functions state
// that passed an array): when one fails, the answer is its error, not a
// batch response, so a state machine's Retry and Catch see it (a Pipe then
// retries the whole batch, which commits each request once). Such elements
// keep their order whatever the Pipe's source: after a retryable failure
// the elements after it are not tried, so the retry commits them after it
// (a Kinesis, DynamoDB stream or FIFO source's later message of a key never
// lands ahead of an earlier one); after an unusable element (Outbox.Validation)
// the rest are tried, and the retry answers them as duplicates. An array
// whose elements all commit answers the batch shape (no failures), not each
// request's EnqueueResponse: a caller that needs the ids sends one request.
//
// Kinesis takes a reported record as a checkpoint: it redelivers that record
// and every one after it. An unusable record therefore re-runs the
// transactions of all the records after it on each redelivery, until the
// event source's MaximumRetryAttempts are spent; each is cancelled by its
// idempotency record (nothing is written twice) but still consumes write
// capacity. BisectBatchOnFunctionError, a small MaximumRetryAttempts and an
// on-failure destination bound that cost (docs/enqueue-recipes.yaml). On a
// FIFO queue an unusable message heads its group again on each redelivery,
// holding the group's newer messages back for maxReceiveCount x the
// visibility timeout (forever without a redrive policy, which the recipes
// require); resent from the dead-letter queue, it arrives out of order.
func (h *Enqueue) Handle(ctx context.Context, raw json.RawMessage) (any, error) {
	ctx, cancel := workContext(ctx)
	defer cancel()
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, (&EnqueueError{Type: ErrorValidation, Field: "event", Message: "an array that is not a Pipes batch: " + err.Error()}).Lambda()
		}
		if len(elems) == 0 {
			return nil, (&EnqueueError{Type: ErrorValidation, Field: "event", Message: "an empty array; nothing was written: " +
				"invoke with one request object (an array is an EventBridge Pipes batch, which is never empty)"}).Lambda()
		}
		return h.answerBatch(ctx, elems)
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
		return h.answerBatch(ctx, probe.Records)
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
	source  bool          // an SQS or Kinesis record, which id names to its source
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
		b := batchRecord{id: r.MessageID, key: "sqs:" + r.MessageID, ordered: r.Attributes["MessageGroupId"] != "", source: true}
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
		b := batchRecord{id: k.SequenceNumber, key: "kinesis:" + r.EventID, ordered: true, source: true}
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

// answerBatch is batch's answer: the batch response, or the error of the
// first element that failed and is not a source's record.
func (h *Enqueue) answerBatch(ctx context.Context, raws []json.RawMessage) (any, error) {
	resp, unreported := h.batch(ctx, raws)
	if unreported != nil {
		return nil, unreported.Lambda()
	}
	return resp, nil
}

// batch commits each record in its own transaction, in order. unreported
// is the first failure of an element that is not an SQS or Kinesis record
// (its itemIdentifier would name nothing the source knows), as the
// invocation's error: the element's own, its field prefixed with its index.
func (h *Enqueue) batch(ctx context.Context, raws []json.RawMessage) (resp events.SQSEventResponse, unreported *EnqueueError) {
	resp = events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
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
		if !rec.source && unreported == nil {
			unreported = elementError(i, ee)
		}
		// An unusable record fails again on every delivery: the records
		// after it are tried now, not held back behind it (Kinesis
		// redelivers from the reported record, and those that committed
		// answer duplicates; a FIFO queue redelivers only the reported one).
		// A request element (a Pipe's input template, a direct array) is
		// ordered too: its failure fails the whole invocation, which the
		// Pipe retries whole, so a later element that committed now would
		// land ahead of it.
		stopped = (rec.ordered || !rec.source) && ee.Type != ErrorValidation
	}
	return resp, unreported
}

// elementError is ee, the failure of element i of an array that is not a
// source's record, as the invocation's error.
func elementError(i int, ee *EnqueueError) *EnqueueError {
	out := *ee
	out.Field = fmt.Sprintf("[%d]", i)
	if ee.Field != "" {
		out.Field += "." + ee.Field
	}
	out.Message = fmt.Sprintf("element %d of the array: %s (a direct invocation takes one request object; an array is an EventBridge Pipes batch, "+
		"whose other elements committed or not as their own transactions: a retry with the same keys commits each once)", i, ee.Message)
	return &out
}
