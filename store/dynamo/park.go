package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/sequence"
)

// Dead letters live in the control table (no stream: parking and replaying
// never wake a relay by themselves), one partition per bucket:
//
//	pk = "parked#<b>", sk = the original sequence, zero-padded to 20 digits
//
// holding the parked item's own attributes as they were stored (so an item
// that could not be decoded is kept byte for byte) plus:
//
//	pr reason, pa attempts, pf/pl first/last failure (ms), pt parked at (ms)
const (
	parkedPrefix  = "parked#"
	attrReason    = "pr"
	attrAttempts  = "pa"
	attrFirstFail = "pf"
	attrLastFail  = "pl"
	attrParkedAt  = "pt"
)

func parkedPK(bucket int) string { return parkedPrefix + strconv.Itoa(bucket) }
func parkedSK(seq int64) string  { return fmt.Sprintf("%020d", seq) }

// Park implements outbox.Store: one TransactWriteItems that advances the
// lease's head to p.Sequence (conditional on owning the unexpired lease with
// head = p.Sequence-1: the ConditionCheck on the lease), deletes the item
// from the messages table (conditional on it being a message, not a fence)
// and puts the dead-letter record. The item is first read as stored, so an
// undecodable item is kept exactly.
func (s *Store) Park(ctx context.Context, l outbox.Lease, p outbox.Parked, now time.Time) (outbox.Lease, error) {
	if p.Bucket != l.Bucket || p.Sequence < 1 {
		return outbox.Lease{}, fmt.Errorf("dynamo: park bucket %d sequence %d under the lease of bucket %d", p.Bucket, p.Sequence, l.Bucket)
	}
	got, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: str(s.tables.Messages), Key: messageKey(p.Bucket, p.Sequence), ConsistentRead: new(true),
	})
	if err != nil {
		return outbox.Lease{}, fmt.Errorf("dynamo: park bucket %d sequence %d: read the item: %w", p.Bucket, p.Sequence, err)
	}
	if got.Item == nil {
		return outbox.Lease{}, fmt.Errorf("dynamo: park bucket %d sequence %d: no item there", p.Bucket, p.Sequence)
	}
	dead := make(map[string]types.AttributeValue, len(got.Item)+8)
	for k, v := range got.Item {
		dead[k] = v
	}
	dead[attrPK] = strAttr(parkedPK(p.Bucket))
	dead[attrSK] = strAttr(parkedSK(p.Sequence))
	dead[attrReason] = strAttr(truncate(p.Reason, 4096))
	dead[attrAttempts] = numAttr(int64(max(p.Attempts, 1)))
	dead[attrFirstFail] = numAttr(millis(p.FirstFailure))
	dead[attrLastFail] = numAttr(millis(p.LastFailure))
	dead[attrParkedAt] = numAttr(millis(now))
	delete(dead, attrTTL)

	_, err = s.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		ClientRequestToken: str(uuid.NewString()),
		TransactItems: []types.TransactWriteItem{
			{Update: &types.Update{
				TableName:                str(s.tables.Control),
				Key:                      leaseKey(p.Bucket),
				ConditionExpression:      str("#o = :me AND #e > :now AND #hd = :prev"),
				UpdateExpression:         str("SET #hd = :seq"),
				ExpressionAttributeNames: names(attrOwner, attrExpires, attrHead),
				ExpressionAttributeValues: map[string]types.AttributeValue{
					":me": strAttr(l.Owner), ":now": numAttr(millis(now)), ":prev": numAttr(p.Sequence - 1), ":seq": numAttr(p.Sequence),
				},
			}},
			{Delete: &types.Delete{
				TableName:                str(s.tables.Messages),
				Key:                      messageKey(p.Bucket, p.Sequence),
				ConditionExpression:      str("attribute_exists(#s) AND attribute_not_exists(#f)"),
				ExpressionAttributeNames: names(attrSeq, attrFence),
			}},
			{Put: &types.Put{
				TableName:                str(s.tables.Control),
				Item:                     dead,
				ConditionExpression:      str("attribute_not_exists(#pk)"),
				ExpressionAttributeNames: names(attrPK),
			}},
		},
	})
	if err != nil {
		var tce *types.TransactionCanceledException
		if errors.As(err, &tce) && len(tce.CancellationReasons) == 3 && code(tce.CancellationReasons[0]) == "ConditionalCheckFailed" {
			return outbox.Lease{}, fmt.Errorf("dynamo: park bucket %d sequence %d: not the lease holder at head %d: %w", p.Bucket, p.Sequence, p.Sequence-1, outbox.ErrLeaseLost)
		}
		return outbox.Lease{}, fmt.Errorf("dynamo: park bucket %d sequence %d: %w", p.Bucket, p.Sequence, err)
	}
	nl := l
	nl.Head = p.Sequence
	return nl, nil
}

func code(r types.CancellationReason) string {
	if r.Code == nil {
		return ""
	}
	return *r.Code
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// ParkedItem is one dead-letter record as read back.
type ParkedItem struct {
	outbox.Parked
	// Err is set when the parked item itself cannot be decoded into a
	// message (Parked.Message then has only Bucket and Sequence); Replay
	// then needs a replacement.
	Err error
}

// ListParked returns bucket's dead-letter records, oldest sequence first
// (at most limit; 0 means all).
func (s *Store) ListParked(ctx context.Context, bucket int, limit int) ([]ParkedItem, error) {
	var (
		out   []ParkedItem
		start map[string]types.AttributeValue
	)
	for {
		q := &dynamodb.QueryInput{
			TableName:                 str(s.tables.Control),
			KeyConditionExpression:    str("#pk = :pk"),
			ExpressionAttributeNames:  names(attrPK),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": strAttr(parkedPK(bucket))},
			ConsistentRead:            new(true),
			ExclusiveStartKey:         start,
		}
		if limit > 0 {
			q.Limit = new(int32(limit - len(out)))
		}
		res, err := s.client.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("dynamo: list parked of bucket %d: %w", bucket, err)
		}
		for _, item := range res.Items {
			out = append(out, decodeParked(bucket, item))
		}
		if len(res.LastEvaluatedKey) == 0 || limit > 0 && len(out) >= limit {
			return out, nil
		}
		start = res.LastEvaluatedKey
	}
}

func decodeParked(bucket int, item map[string]types.AttributeValue) ParkedItem {
	msgItem := make(map[string]types.AttributeValue, len(item))
	for k, v := range item {
		switch k {
		case attrPK, attrSK, attrReason, attrAttempts, attrFirstFail, attrLastFail, attrParkedAt:
		default:
			msgItem[k] = v
		}
	}
	e := decodeItem(msgItem)
	pi := ParkedItem{Parked: outbox.Parked{Bucket: bucket, Sequence: e.Sequence, Message: e.Message, Class: outbox.RecordPermanent}, Err: e.Err}
	if sk, ok := item[attrSK].(*types.AttributeValueMemberS); ok && pi.Sequence == 0 {
		pi.Sequence, _ = strconv.ParseInt(sk.Value, 10, 64)
	}
	if r, ok := item[attrReason].(*types.AttributeValueMemberS); ok {
		pi.Reason = r.Value
	}
	n := func(name string) int64 { v, _ := intAttr(item, name, false); return v }
	pi.Attempts = int(n(attrAttempts))
	pi.FirstFailure, pi.LastFailure, pi.ParkedAt = fromMillis(n(attrFirstFail)), fromMillis(n(attrLastFail)), fromMillis(n(attrParkedAt))
	return pi
}

// ErrNotParked: there is no dead-letter record at that bucket and sequence.
var ErrNotParked = errors.New("dynamo: no parked message at that bucket and sequence")

// ReplayParked re-enqueues the parked message at bucket/seq at the bucket's
// tail — a fresh sequence number, its original message id — and removes the
// dead-letter record, in one transaction. replacement, when not nil,
// replaces the stored message (a repaired payload); it must carry the same
// ID, topic and bucket-determining key or partition, and is validated like a
// write. It returns the message as re-enqueued.
//
// Replaying moves the message behind everything enqueued since; consumers
// see it after them (docs/failures.md).
func (s *Store) ReplayParked(ctx context.Context, bucket int, seq int64, replacement *outbox.Message) (outbox.Message, error) {
	got, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: str(s.tables.Control), Key: controlKey(parkedPK(bucket), parkedSK(seq)), ConsistentRead: new(true),
	})
	if err != nil {
		return outbox.Message{}, fmt.Errorf("dynamo: replay bucket %d sequence %d: %w", bucket, seq, err)
	}
	if got.Item == nil {
		return outbox.Message{}, fmt.Errorf("replay bucket %d sequence %d: %w", bucket, seq, ErrNotParked)
	}
	pi := decodeParked(bucket, got.Item)
	m := pi.Message
	if replacement != nil {
		r := *replacement
		if pi.Err == nil && r.ID != m.ID {
			return outbox.Message{}, &outbox.ValidationError{Index: -1, Field: "ID", Reason: fmt.Sprintf("a replacement must keep the message id %s", m.ID)}
		}
		m = r
		if m.CreatedAt.IsZero() {
			m.CreatedAt = pi.Message.CreatedAt
		}
	} else if pi.Err != nil {
		return outbox.Message{}, fmt.Errorf("dynamo: replay bucket %d sequence %d: the parked item cannot be decoded (%v); give a replacement message", bucket, seq, pi.Err)
	}
	cfg, err := readConfig(ctx, s.client, s.tables.Control)
	if err != nil {
		return outbox.Message{}, err
	}
	b, err := outbox.BucketFor(m, cfg.BucketCount)
	if err != nil {
		return outbox.Message{}, err
	}
	if b != bucket {
		return outbox.Message{}, &outbox.ValidationError{Index: -1, Field: "Key", Reason: fmt.Sprintf("the replacement belongs to bucket %d, the parked message to %d", b, bucket)}
	}
	if err := s.cfg.headers.Validate(m, -1, s.cfg.maxMessageBytes); err != nil {
		return outbox.Message{}, err
	}
	counter, err := sequence.NewCounter(s.client, s.tables.Control)
	if err != nil {
		return outbox.Message{}, err
	}
	first, err := counter.Reserve(ctx, bucket, 1)
	if err != nil {
		return outbox.Message{}, fmt.Errorf("dynamo: replay bucket %d sequence %d: reserve: %w", bucket, seq, err)
	}
	m.Bucket, m.Sequence = bucket, first
	_, err = s.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		ClientRequestToken: str(uuid.NewString()),
		TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{
				TableName: str(s.tables.Messages), Item: messageItem(m),
				ConditionExpression: str("attribute_not_exists(#s)"), ExpressionAttributeNames: names(attrSeq),
			}},
			{Delete: &types.Delete{
				TableName: str(s.tables.Control), Key: controlKey(parkedPK(bucket), parkedSK(seq)),
				ConditionExpression: str("attribute_exists(#pk)"), ExpressionAttributeNames: names(attrPK),
			}},
			// Defence in depth: a message at or below head would be taken
			// for a leftover and deleted unpublished.
			{ConditionCheck: &types.ConditionCheck{
				TableName: str(s.tables.Control), Key: leaseKey(bucket),
				ConditionExpression:       str("attribute_not_exists(#hd) OR #hd < :seq"),
				ExpressionAttributeNames:  names(attrHead),
				ExpressionAttributeValues: map[string]types.AttributeValue{":seq": numAttr(first)},
			}},
		},
	})
	if err != nil {
		// The reserved number is abandoned; fence it so no relay waits.
		_ = putFence(ctx, s.client, s.tables.Messages, bucket, first, time.Now(), s.cfg.fenceTTL)
		return outbox.Message{}, fmt.Errorf("dynamo: replay bucket %d sequence %d: %w", bucket, seq, err)
	}
	return m, nil
}

// DropParked deletes the dead-letter record at bucket/seq for good (an
// operator's decision; the relay never drops anything).
func (s *Store) DropParked(ctx context.Context, bucket int, seq int64) error {
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: str(s.tables.Control), Key: controlKey(parkedPK(bucket), parkedSK(seq)),
		ConditionExpression: str("attribute_exists(#pk)"), ExpressionAttributeNames: names(attrPK),
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("drop bucket %d sequence %d: %w", bucket, seq, ErrNotParked)
	}
	if err != nil {
		return fmt.Errorf("dynamo: drop bucket %d sequence %d: %w", bucket, seq, err)
	}
	return nil
}
