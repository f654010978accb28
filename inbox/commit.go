package inbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/dynamoerr"
)

// Items of the processed-ids table, key pk (S), TTL on x:
//
//	pk "m#<message id>"                          x TTL (epoch s), at processed (ms), tok, t, p, o, v
//	pk "q#<topic>#<partition>#<bucket>" (in-order) s highest applied sequence, id, at, tok, v
//
// tok is the client request token of the transaction that wrote the item, so
// that a retry can recognize its own earlier commit in a cancellation's old
// image. Positions never expire.
const (
	attrPK      = "pk"
	attrTTL     = "x"
	attrAt      = "at"
	attrToken   = "tok"
	attrTopic   = "t"
	attrPart    = "p"
	attrOffset  = "o"
	attrSeq     = "s"
	attrID      = "id"
	attrVersion = "v"

	formatVersion = 1
	probeKey      = "probe#never-stored"
)

func idKey(id string) string { return "m#" + id }

func positionKey(m Message) string {
	return "q#" + m.Topic + "#" + strconv.Itoa(int(m.Partition)) + "#" + strconv.Itoa(m.Bucket)
}

func key(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: &types.AttributeValueMemberS{Value: pk}}
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// maxTransactionItems is DynamoDB's limit on one TransactWriteItems.
const maxTransactionItems = 100

// input builds the transaction: the inbox's items first (the id put, then in
// in-order mode the position update), then the caller's, with a new token.
// It returns how many items are the inbox's.
func (ib *Inbox) input(tx *Tx) (*dynamodb.TransactWriteItemsInput, int, error) {
	m := tx.msg
	now := ib.cfg.clock.Now()
	token := uuid.NewString()
	table := aws.String(ib.table)
	item := key(idKey(m.ID))
	item[attrTTL] = num(now.Add(ib.cfg.retention).Unix())
	item[attrAt] = num(now.UnixMilli())
	item[attrToken] = str(token)
	item[attrTopic] = str(m.Topic)
	item[attrPart] = num(int64(m.Partition))
	item[attrOffset] = num(m.Offset)
	item[attrVersion] = num(formatVersion)
	ours := []types.TransactWriteItem{{Put: &types.Put{
		TableName: table,
		Item:      item,
		// An id older than Retention counts as not processed, whether or
		// not DynamoDB's TTL has deleted it yet (it may take days).
		ConditionExpression:                 aws.String("attribute_not_exists(#pk) OR #x < :now"),
		ExpressionAttributeNames:            map[string]string{"#pk": attrPK, "#x": attrTTL},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": num(now.Unix())},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}}
	if ib.cfg.inOrder && m.Sequenced {
		ours = append(ours, types.TransactWriteItem{Update: &types.Update{
			TableName:           table,
			Key:                 key(positionKey(m)),
			UpdateExpression:    aws.String("SET #s = :s, #id = :id, #at = :at, #tok = :tok, #v = :v"),
			ConditionExpression: aws.String("attribute_not_exists(#s) OR #s < :s"),
			ExpressionAttributeNames: map[string]string{"#s": attrSeq, "#id": attrID, "#at": attrAt,
				"#tok": attrToken, "#v": attrVersion},
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": num(m.Sequence), ":id": str(m.ID),
				":at": num(now.UnixMilli()), ":tok": str(token), ":v": num(formatVersion)},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}})
	}
	if n := len(ours) + len(tx.items); n > maxTransactionItems {
		return nil, 0, &outbox.ValidationError{Index: -1, Field: "Transaction", Reason: fmt.Sprintf(
			"%d items (%d yours + %d the inbox's); DynamoDB allows at most %d in one transaction",
			n, len(tx.items), len(ours), maxTransactionItems)}
	}
	return &dynamodb.TransactWriteItemsInput{
		TransactItems:      append(ours, tx.items...),
		ClientRequestToken: aws.String(token),
	}, len(ours), nil
}

// outcome of one failed TransactWriteItems call.
type outcome int

const (
	outApplied      outcome = iota // an earlier call with our token committed
	outDuplicate                   // the id put's condition failed
	outStale                       // the position's condition failed
	outCallerFailed                // a condition on a caller's item failed
	outConflict                    // cancelled by a conflicting transaction
	outThrottled                   // throttled
	outAmbiguous                   // may have committed
	outRejected                    // DynamoDB refused the request
)

type classification struct {
	outcome   outcome
	cancelled bool // DynamoDB evaluated and cancelled this call
	reasons   []types.CancellationReason
	old       int64 // the stored position, for outStale
	detail    string
}

// Process is the one layer that retries its TransactWriteItems: each call
// is sent with the client's retryer switched off (two layers would multiply
// the requests on the wire), and sent again after a full-jitter exponential
// backoff, longer for throttling so a table out of capacity can recover
// (dynamoerr.TxCeiling, the Writer's ceilings too).

// commit runs the transaction, retrying within MaxAttempts, and returns the
// status, the attempts made and, for Stale, the stored position.
func (ib *Inbox) commit(ctx context.Context, in *dynamodb.TransactWriteItemsInput, ours int, m Message) (Status, int, int64, error) {
	token := aws.ToString(in.ClientRequestToken)
	// maybeCommitted: an attempt may have committed and no later attempt
	// proved otherwise.
	maybeCommitted := false
	for attempt := 1; ; attempt++ {
		_, err := ib.client.TransactWriteItems(ctx, in, dynamoerr.WithoutClientRetries)
		if err == nil {
			return Applied, attempt, 0, nil
		}
		c := classify(err, ours, len(in.TransactItems)-ours, token)
		switch c.outcome {
		case outApplied:
			return Applied, attempt, 0, nil
		case outDuplicate:
			return Duplicate, attempt, 0, nil
		case outStale:
			return Stale, attempt, c.old, nil
		case outCallerFailed:
			// DynamoDB need not evaluate every condition once one failed:
			// the caller's condition may fail because this message was
			// applied already. Our items say.
			st, old, lerr := ib.lookup(ctx, m, token)
			switch {
			case lerr != nil:
				return Failed, attempt, 0, &TransactionError{Op: opProcess, Cause: errors.Join(err, lerr), Attempts: attempt, Reasons: c.reasons,
					CallerFrom: ours, CallerItems: len(in.TransactItems) - ours,
					Fix: "a condition on your items failed and reading the inbox's items to tell a duplicate apart failed too; process the record again"}
			case st != Failed:
				return st, attempt, old, nil
			}
		}
		if c.cancelled {
			maybeCommitted = false
		} else if c.outcome == outAmbiguous {
			maybeCommitted = true
		}
		switch c.outcome {
		case outConflict, outThrottled, outAmbiguous:
			if attempt < ib.cfg.maxAttempts && ctx.Err() == nil && dynamoerr.Sleep(ctx, dynamoerr.FullJitter(dynamoerr.TxCeiling(attempt-1, c.outcome == outThrottled))) == nil {
				continue
			}
		}
		return Failed, attempt, 0, failure(ctx, c, err, attempt, ours, len(in.TransactItems)-ours, maybeCommitted)
	}
}

func failure(ctx context.Context, c classification, err error, attempts, ours, theirs int, maybeCommitted bool) error {
	o := c.outcome
	if maybeCommitted {
		o = outAmbiguous
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		err = errors.Join(err, ctxErr)
	}
	te := &TransactionError{Op: opProcess, Cause: err, Attempts: attempts, Reasons: c.reasons, CallerFrom: ours, CallerItems: theirs}
	switch o {
	case outCallerFailed:
		te.Err, te.Fix = outbox.ErrConditionFailed, c.detail+"; nothing was written: your item's condition decides what to do with this record"
	case outConflict:
		te.Err, te.Fix = outbox.ErrConflict, "another transaction was writing the same items; nothing was written, process the record again"
	case outThrottled:
		te.Err, te.Fix = outbox.ErrThrottled, "nothing was written; process the record again later, or raise the tables' capacity"
	case outAmbiguous:
		te.Err, te.Fix = outbox.ErrOutcomeUnknown, "the transaction may have committed; process the record again: the inbox recognizes it if it did"
	default:
		te.Fix = "DynamoDB refused the transaction (" + c.detail + "); nothing was written. Check your items (tables, keys, expressions, sizes) and the inbox table"
	}
	return te
}

// lookup reads the inbox's items after a cancellation on a caller's
// condition: Applied when our own token wrote them, Duplicate or Stale when
// another transaction did, Failed when the record was not processed.
func (ib *Inbox) lookup(ctx context.Context, m Message, token string) (Status, int64, error) {
	item, err := ib.get(ctx, idKey(m.ID))
	if err != nil {
		return Failed, 0, err
	}
	if item != nil && intOf(item[attrTTL]) >= ib.cfg.clock.Now().Unix() {
		if stringOf(item[attrToken]) == token {
			return Applied, 0, nil
		}
		return Duplicate, 0, nil
	}
	if !ib.cfg.inOrder || !m.Sequenced {
		return Failed, 0, nil
	}
	pos, err := ib.get(ctx, positionKey(m))
	if err != nil {
		return Failed, 0, err
	}
	if s := intOf(pos[attrSeq]); s >= m.Sequence {
		if stringOf(pos[attrToken]) == token {
			return Applied, 0, nil
		}
		return Stale, s, nil
	}
	return Failed, 0, nil
}

func (ib *Inbox) get(ctx context.Context, pk string) (map[string]types.AttributeValue, error) {
	out, err := ib.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(ib.table), Key: key(pk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("inbox: read %s: %w", pk, err)
	}
	return out.Item, nil
}

// kindOutcome is the outcome of each dynamoerr.Kind.
var kindOutcome = [...]outcome{
	dynamoerr.Ambiguous: outAmbiguous, dynamoerr.Throttled: outThrottled,
	dynamoerr.Conflict: outConflict, dynamoerr.Rejected: outRejected,
}

// classify sorts a TransactWriteItems error; ours is how many of the items
// are the inbox's (the first ones), theirs how many the caller's (the
// rest), token the call's client request token.
func classify(err error, ours, theirs int, token string) classification {
	t := dynamoerr.ClassifyTx(err, dynamoerr.TxLayout{Own: "inbox item", CallerFrom: ours, CallerItems: theirs})
	c := classification{outcome: kindOutcome[t.Kind], cancelled: t.Cancelled, reasons: t.Reasons, detail: t.Detail}
	var duplicate, stale, own bool
	callerFailed := -1
	for _, i := range t.Conditions {
		r := t.Reasons[i]
		switch {
		case i >= ours:
			if callerFailed < 0 {
				callerFailed = i
			}
		default:
			own = own || stringOf(r.Item[attrToken]) == token
			if i == 0 {
				duplicate = true
			} else {
				stale, c.old = true, intOf(r.Item[attrSeq])
			}
		}
	}
	// A refused item decides after the inbox's own conditions, before the
	// caller's.
	switch {
	case own:
		c.outcome, c.detail = outApplied, ""
	case duplicate:
		c.outcome, c.detail = outDuplicate, ""
	case stale:
		c.outcome, c.detail = outStale, ""
	case t.Kind != dynamoerr.Rejected && callerFailed >= 0:
		c.outcome, c.detail = outCallerFailed, t.Describe(callerFailed)
	}
	return c
}

// TransactionError is a Process whose transaction did not commit, or may not
// have. It is store/dynamo's TransactionError too (one type, so errors.As
// with either package's name matches both). errors.Is matches it against
// Err (outbox.ErrConditionFailed, ErrConflict, ErrThrottled or
// ErrOutcomeUnknown; nil when DynamoDB refused the request) and errors.As
// reaches the SDK's error through Cause.
//
// Process's Op is "inbox: transaction"; its Reasons hold the inbox's own
// items first (CallerFrom of them), then your CallerItems items, so
// CallerReasons()[i] is the reason for the i-th item you added. Fix says
// what to do.
type TransactionError = dynamoerr.TransactionError

// opProcess is Process's TransactionError.Op.
const opProcess = "inbox: transaction"

func stringOf(av types.AttributeValue) string {
	if s, ok := av.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func intOf(av types.AttributeValue) int64 {
	if n, ok := av.(*types.AttributeValueMemberN); ok {
		v, _ := strconv.ParseInt(n.Value, 10, 64)
		return v
	}
	return 0
}
