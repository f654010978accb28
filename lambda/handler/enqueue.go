package handler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

// EnqueueWriter is the part of *dynamo.Writer the enqueue function uses.
type EnqueueWriter interface {
	WriteWithToken(ctx context.Context, token string, items []types.TransactWriteItem, msgs ...outbox.Message) (dynamo.Result, error)
	BucketCount() int
}

// EnqueueAPI is the DynamoDB call the enqueue function makes besides the
// Writer's: reading an idempotency record after a replay.
type EnqueueAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// Idempotency records: one item per committed request in the outbox's
// control table, written in the request's own transaction with the
// condition that none exists for its key, so at most one transaction per key
// ever commits, whatever DynamoDB's token window. Attribute x (the control
// table's TTL) expires it.
const (
	recordPKPrefix = "enqueue#"
	recordSK       = "enqueue"
	attrRecordHash = "rh"
	attrRecordIDs  = "ids"
	attrRecordAt   = "c"
	attrRecordTTL  = "x"
	// DefaultRecordTTL is how long an idempotency record is kept: longer
	// than any retry of the invokers (SQS keeps a message 14 days at most,
	// EventBridge retries for 24 hours, a Step Functions Retry is bounded by
	// its state machine).
	DefaultRecordTTL = 14 * 24 * time.Hour
	// MinRecordTTL is the shortest: DynamoDB's token window.
	MinRecordTTL = 10 * time.Minute
)

// tokenSpace is the UUID v5 name space of client request tokens derived
// from idempotency keys.
var tokenSpace = uuid.MustParse("6f1c3a5e-8d2b-4b7e-9a41-0c5d7e2f9b13")

// Token is the ClientRequestToken of a request with this idempotency key: a
// UUID v5 of the key (DynamoDB takes at most 36 characters).
func Token(idempotencyKey string) string {
	return uuid.NewSHA1(tokenSpace, []byte(idempotencyKey)).String()
}

// idSpace is the UUID v5 name space of the message ids MessageID derives.
var idSpace = uuid.MustParse("3b0f6a9e-52c4-4d8a-b7e1-9f2c6d4a8e05")

// MessageID is the id the enqueue function gives the message at position
// (0-based, in messages) of a request that leaves it empty: a UUID v5 of the
// request's idempotency key, its body hash (without the key, as the
// idempotency record keeps it) and the position. The same request gets the
// same ids on every delivery; the same key with another body (a key reused
// after its record expired) gets other ids, which the inbox does not take
// for duplicates.
func MessageID(idempotencyKey, bodyHash string, position int) string {
	return uuid.NewSHA1(idSpace, []byte(idempotencyKey+"\x00"+bodyHash+"\x00"+strconv.Itoa(position))).String()
}

// RecordKey is the control-table key of the idempotency record of a key.
func RecordKey(idempotencyKey string) map[string]types.AttributeValue {
	sum := sha256.Sum256([]byte(idempotencyKey))
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: recordPKPrefix + hex.EncodeToString(sum[:])},
		"sk": &types.AttributeValueMemberS{Value: recordSK},
	}
}

// Enqueue is the enqueue function's handler: it commits requests (the
// caller's items and outbox messages) through a dynamo.Writer, once per
// idempotency key.
type Enqueue struct {
	writer  EnqueueWriter
	client  EnqueueAPI
	control string
	tables  dynamo.Tables
	ttl     time.Duration
	now     func() time.Time
	logger  *slog.Logger
}

// NewEnqueue returns the handler for the outbox in tables (its control
// table keeps the idempotency records; callers' items may write neither
// table); recordTTL is how long records are kept (0 for DefaultRecordTTL;
// at least MinRecordTTL).
func NewEnqueue(writer EnqueueWriter, client EnqueueAPI, tables dynamo.Tables, recordTTL time.Duration, logger *slog.Logger) (*Enqueue, error) {
	control := tables.Control
	switch {
	case writer == nil:
		return nil, &outbox.OptionError{Option: "writer", Reason: "a *dynamo.Writer is required"}
	case client == nil:
		return nil, &outbox.OptionError{Option: "client", Reason: "a DynamoDB client is required"}
	case control == "" || tables.Messages == "":
		return nil, &outbox.OptionError{Option: "tables", Value: tables, Reason: "the outbox's messages and control tables are required"}
	case recordTTL != 0 && recordTTL < MinRecordTTL:
		return nil, &outbox.OptionError{Option: "recordTTL", Value: recordTTL, Reason: fmt.Sprintf(
			"at least %v, DynamoDB's client request token window", MinRecordTTL)}
	}
	if recordTTL == 0 {
		recordTTL = DefaultRecordTTL
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Enqueue{writer: writer, client: client, control: control, tables: tables, ttl: recordTTL, now: time.Now, logger: logger}, nil
}

// EnqueueResponse is the answer to a request that committed
// (schema/enqueue-response.schema.json).
type EnqueueResponse struct {
	IdempotencyKey string `json:"idempotencyKey"`
	// Duplicate is true when an earlier invocation with this key and body
	// committed; nothing was written by this one.
	Duplicate bool              `json:"duplicate"`
	Messages  []EnqueuedMessage `json:"messages"`
}

// EnqueuedMessage is one committed message.
type EnqueuedMessage struct {
	ID     string `json:"id"`
	Topic  string `json:"topic"`
	Bucket int    `json:"bucket"`
	// Sequence is its position in the bucket; absent in a duplicate's
	// answer (the record keeps only the ids).
	Sequence int64 `json:"sequence,omitempty"`
}

// commit runs one request: decode, then one transaction with its
// idempotency record. The error is an *EnqueueError.
func (h *Enqueue) commit(ctx context.Context, raw []byte, defaultKey string) (*EnqueueResponse, error) {
	req, err := decodeRequest(raw, defaultKey)
	if err != nil {
		return nil, toEnqueueError(err, 0)
	}
	if err := h.checkTables(req.items); err != nil {
		return nil, toEnqueueError(err, 0)
	}
	// Ids are fixed before the transaction so the record can keep them,
	// and derived from the request so that the same request delivered
	// again commits under the same ids even where its record cannot stop
	// it (another region before replication, an expired record): the
	// inbox then drops the second copy.
	for i := range req.msgs {
		if req.msgs[i].ID == "" {
			req.msgs[i].ID = MessageID(req.key, req.hash, i)
		}
	}
	items := append(req.items[:len(req.items):len(req.items)], h.record(req))
	res, err := h.writer.WriteWithToken(ctx, Token(req.key), items, req.msgs...)
	if err == nil {
		return h.committed(req, res.Messages), nil
	}
	var mismatch *types.IdempotentParameterMismatchException
	var te *dynamo.TransactionError
	switch {
	case errors.As(err, &mismatch):
		// The token was used within DynamoDB's window by a transaction
		// with other parameters: an earlier invocation with this key,
		// which reserved other sequence numbers. Its record says whether
		// it committed and what it carried.
		if resp, err := h.replayed(ctx, req, nil, "token"); resp != nil || err != nil {
			return resp, err
		}
		// No record: that transaction did not commit (it failed, or the
		// key's record expired). The record's condition still lets one
		// transaction per key commit; send this one under a new token.
		res, err = h.writer.WriteWithToken(ctx, uuid.NewString(), items, req.msgs...)
		if err == nil {
			return h.committed(req, res.Messages), nil
		}
		if errors.As(err, &te) && recordFailed(te, len(req.items)) {
			return h.recorded(ctx, req, te)
		}
	case errors.As(err, &te) && recordFailed(te, len(req.items)):
		return h.recorded(ctx, req, te)
	}
	return nil, toEnqueueError(err, len(req.items))
}

// recorded answers a transaction cancelled on the key's record: the record
// exists (its old image is in the cancellation reason, or read).
func (h *Enqueue) recorded(ctx context.Context, req *decodedRequest, te *dynamo.TransactionError) (*EnqueueResponse, error) {
	resp, err := h.replayed(ctx, req, te.Reasons[len(req.items)].Item, "record")
	if resp == nil && err == nil {
		// Expired between the cancellation and the read.
		return nil, &EnqueueError{Type: ErrorRetryable, Message: "the idempotency record that cancelled the transaction is gone; nothing was written: retry with the same key"}
	}
	return resp, err
}

// checkTables refuses a caller's item on the outbox's own tables (by name
// or ARN): the function's role may write them, but only the Writer may
// (a forged message, counter or config item would break the outbox).
func (h *Enqueue) checkTables(items []types.TransactWriteItem) error {
	for i, it := range items {
		kind, table := "Put", ""
		switch {
		case it.Put != nil:
			table = aws.ToString(it.Put.TableName)
		case it.Update != nil:
			kind, table = "Update", aws.ToString(it.Update.TableName)
		case it.Delete != nil:
			kind, table = "Delete", aws.ToString(it.Delete.TableName)
		case it.ConditionCheck != nil:
			kind, table = "ConditionCheck", aws.ToString(it.ConditionCheck.TableName)
		}
		if _, name, ok := strings.Cut(table, ":table/"); ok && strings.HasPrefix(table, "arn:") {
			table = name
		}
		if table == h.tables.Messages || table == h.tables.Control {
			return badField(fmt.Sprintf("transactItems[%d].%s.TableName", i, kind),
				"%q is one of the outbox's own tables, which only the outbox writes: name your own table", table)
		}
	}
	return nil
}

// record is the idempotency record's put, the last of the caller's items.
func (h *Enqueue) record(req *decodedRequest) types.TransactWriteItem {
	now := h.now()
	item := RecordKey(req.key)
	ids := make([]types.AttributeValue, len(req.msgs))
	for i, m := range req.msgs {
		ids[i] = &types.AttributeValueMemberS{Value: m.ID}
	}
	item[attrRecordHash] = &types.AttributeValueMemberS{Value: req.hash}
	item[attrRecordIDs] = &types.AttributeValueMemberL{Value: ids}
	item[attrRecordAt] = &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)}
	item[attrRecordTTL] = &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(h.ttl).Unix(), 10)}
	return types.TransactWriteItem{Put: &types.Put{
		TableName:                           aws.String(h.control),
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
}

// recordFailed reports whether the transaction was cancelled because the
// key's record exists (the record is the caller item after the request's
// own items).
func recordFailed(te *dynamo.TransactionError, callerItems int) bool {
	return errors.Is(te, outbox.ErrConditionFailed) && len(te.Reasons) > callerItems &&
		aws.ToString(te.Reasons[callerItems].Code) == "ConditionalCheckFailed"
}

// replayed answers a request whose key has a record (old, from a
// cancellation; read when nil): the earlier invocation's answer when the
// bodies match, an Outbox.Validation naming the key when they differ. It
// returns nil, nil when no record exists. by says what noticed the replay
// (DynamoDB's token check, or the record's condition), for the log.
func (h *Enqueue) replayed(ctx context.Context, req *decodedRequest, old map[string]types.AttributeValue, by string) (*EnqueueResponse, error) {
	if len(old) == 0 {
		out, err := h.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(h.control), Key: RecordKey(req.key), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, &EnqueueError{Type: ErrorOutcomeUnknown, Message: fmt.Sprintf(
				"an earlier invocation used this idempotency key and its record could not be read (%v); retry with the same key", err)}
		}
		if len(out.Item) == 0 {
			return nil, nil
		}
		old = out.Item
	}
	hash, _ := old[attrRecordHash].(*types.AttributeValueMemberS)
	if hash == nil || hash.Value != req.hash {
		at := ""
		if c, ok := old[attrRecordAt].(*types.AttributeValueMemberN); ok {
			if ms, err := strconv.ParseInt(c.Value, 10, 64); err == nil {
				at = " at " + time.UnixMilli(ms).UTC().Format(time.RFC3339)
			}
		}
		h.logger.WarnContext(ctx, "outbox enqueue: idempotency key reused with another body", "idempotency_key", req.key, "detected_by", by)
		return nil, &EnqueueError{Type: ErrorValidation, Field: "idempotencyKey", Message: fmt.Sprintf(
			"idempotencyKey %q was committed%s by a request with another body; nothing was written: give a new request a new key, "+
				"and a retry the same key and the same body", req.key, at)}
	}
	resp := &EnqueueResponse{IdempotencyKey: req.key, Duplicate: true, Messages: []EnqueuedMessage{}}
	ids, _ := old[attrRecordIDs].(*types.AttributeValueMemberL)
	for i, m := range req.msgs {
		id := m.ID
		if ids != nil && i < len(ids.Value) {
			if s, ok := ids.Value[i].(*types.AttributeValueMemberS); ok {
				id = s.Value
			}
		}
		b, _ := outbox.BucketFor(m, h.writer.BucketCount()) // validated when it committed
		if bw, ok := h.writer.(interface {
			Bucket(outbox.Message) (int, error)
		}); ok {
			b, _ = bw.Bucket(m) // region mode: the region's slice
		}
		resp.Messages = append(resp.Messages, EnqueuedMessage{ID: id, Topic: m.Topic, Bucket: b})
	}
	h.logger.InfoContext(ctx, "outbox enqueue: duplicate of a committed request", "idempotency_key", req.key, "messages", len(req.msgs), "detected_by", by)
	return resp, nil
}

func (h *Enqueue) committed(req *decodedRequest, msgs []outbox.Message) *EnqueueResponse {
	resp := &EnqueueResponse{IdempotencyKey: req.key, Messages: make([]EnqueuedMessage, len(msgs))}
	for i, m := range msgs {
		resp.Messages[i] = EnqueuedMessage{ID: m.ID, Topic: m.Topic, Bucket: m.Bucket, Sequence: m.Sequence}
	}
	return resp
}
