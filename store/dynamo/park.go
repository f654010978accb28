package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
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

	// The lease holder at head p.Sequence-1 advances it past the parked item.
	advance, err := buildExpr("park", expression.NewBuilder().
		WithCondition(expression.And(
			expression.Name(attrOwner).Equal(expression.Value(l.Owner)),
			expression.Name(attrExpires).GreaterThan(expression.Value(millis(now))),
			expression.Name(attrHead).Equal(expression.Value(p.Sequence-1)),
			holdToken(l))).
		WithUpdate(expression.Set(expression.Name(attrHead), expression.Value(p.Sequence))))
	if err != nil {
		return outbox.Lease{}, err
	}
	_, err = s.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		ClientRequestToken: str(uuid.NewString()),
		TransactItems: []types.TransactWriteItem{
			{Update: &types.Update{
				TableName:                 str(s.tables.Control),
				Key:                       leaseKey(p.Bucket),
				ConditionExpression:       advance.Condition(),
				UpdateExpression:          advance.Update(),
				ExpressionAttributeNames:  advance.Names(),
				ExpressionAttributeValues: advance.Values(),
			}},
			// Constant conditions (expr.go): a message, not a fence; a
			// dead-letter position not yet taken.
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
	e, err := buildExpr("list parked", expression.NewBuilder().
		WithKeyCondition(expression.Key(attrPK).Equal(expression.Value(parkedPK(bucket)))))
	if err != nil {
		return nil, err
	}
	var (
		out   []ParkedItem
		start map[string]types.AttributeValue
	)
	for {
		q := &dynamodb.QueryInput{
			TableName:                 str(s.tables.Control),
			KeyConditionExpression:    e.KeyCondition(),
			ExpressionAttributeNames:  e.Names(),
			ExpressionAttributeValues: e.Values(),
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

// GetParked returns the dead-letter record at bucket/seq (a consistent
// GetItem), or an error matching ErrNotParked when there is none.
func (s *Store) GetParked(ctx context.Context, bucket int, seq int64) (ParkedItem, error) {
	pi, _, err := s.getParked(ctx, bucket, seq)
	return pi, err
}

// getParked is GetParked that also returns the record as stored.
func (s *Store) getParked(ctx context.Context, bucket int, seq int64) (ParkedItem, map[string]types.AttributeValue, error) {
	got, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: str(s.tables.Control), Key: controlKey(parkedPK(bucket), parkedSK(seq)), ConsistentRead: new(true),
	})
	if err != nil {
		return ParkedItem{}, nil, fmt.Errorf("dynamo: read parked bucket %d sequence %d: %w", bucket, seq, err)
	}
	if got.Item == nil {
		return ParkedItem{}, nil, fmt.Errorf("read parked bucket %d sequence %d: %w", bucket, seq, ErrNotParked)
	}
	return decodeParked(bucket, got.Item), got.Item, nil
}

// CountParked returns how many dead-letter records bucket has: a consistent
// Query of the bucket's dead-letter partition with Select COUNT, so nothing
// but the count crosses the wire (the read capacity is that of the records).
func (s *Store) CountParked(ctx context.Context, bucket int) (int, error) {
	var (
		n     int
		start map[string]types.AttributeValue
	)
	for {
		res, err := s.client.Query(ctx, &dynamodb.QueryInput{
			TableName:                 str(s.tables.Control),
			KeyConditionExpression:    str("#pk = :pk"),
			ExpressionAttributeNames:  names(attrPK),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": strAttr(parkedPK(bucket))},
			Select:                    types.SelectCount,
			ConsistentRead:            new(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return 0, fmt.Errorf("dynamo: count parked of bucket %d: %w", bucket, err)
		}
		n += int(res.Count)
		if len(res.LastEvaluatedKey) == 0 {
			return n, nil
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
// dead-letter record, in one transaction. It returns the message as
// re-enqueued.
//
// replacement, when not nil, replaces the stored message (a repaired
// payload). A replay repairs the message, it does not make a new one, so
// the replacement keeps the parked message's identity:
//   - ID: empty takes the parked message's id; another id is refused
//     (consumers deduplicate by it). When the parked item is undecodable
//     and its id cannot be read as a UUID, the replacement must carry one
//     (the id consumers know the message by, or outbox.NewID()).
//   - Topic: empty takes the parked message's topic; another topic is
//     refused (the message's consumers and its key's order are on its
//     topic; to publish elsewhere, write a new message). When the parked
//     item's topic cannot be read, the replacement must name one.
//   - Key or partition: must put it in the parked message's key's bucket
//     (when the parked item's key, partition and id cannot be read, the
//     replacement's are taken as given).
//   - CreatedAt: zero takes the parked message's (now, when unreadable).
//
// The replacement is then validated like a write. Every refusal is a
// *outbox.ValidationError naming the field, and nothing is written.
//
// The message goes to its key's bucket under the outbox's current
// BucketCount: bucket itself, unless an online BucketCount change
// (ChangeBucketCount) moved the key to another bucket, or removed bucket,
// since it was parked. Either way it keeps the key's order: the replay
// reserves at the current epoch and stamps it, so the relays publish it
// only after the old buckets that could hold its key's older messages are
// drained (outbox.EpochGate); it never waits for a change in progress.
// Replaying moves the message behind everything enqueued since in that
// bucket; consumers see it after them (docs/failures.md).
//
// In region mode a replay reserves a sequence number in the destination
// bucket's counter, which only that bucket's region writes: it needs a
// Store opened with Region of that region, over a client of that region (its
// replica). Otherwise it is refused before anything is written: no region,
// a *outbox.MisconfigurationError; a client of another region, or a bucket
// of another region's slice (a dead letter replicated here, or parked here
// by a region that took the slice over), a *sequence.RegionError.
func (s *Store) ReplayParked(ctx context.Context, bucket int, seq int64, replacement *outbox.Message) (outbox.Message, error) {
	pi, raw, err := s.getParked(ctx, bucket, seq)
	if err != nil {
		return outbox.Message{}, fmt.Errorf("replay: %w", err)
	}
	m := pi.Message
	if replacement != nil {
		if m, err = s.replacing(pi, raw, *replacement); err != nil {
			return outbox.Message{}, err
		}
	} else if pi.Err != nil {
		return outbox.Message{}, fmt.Errorf("dynamo: replay bucket %d sequence %d: the parked item cannot be decoded (%v); give a replacement message", bucket, seq, pi.Err)
	}
	to, first, epoch, err := s.replayReserve(ctx, bucket, seq, pi, raw, m)
	if err != nil {
		return outbox.Message{}, err
	}
	m.Bucket, m.Sequence = to, first
	// Defence in depth: a message at or below head would be taken for a
	// leftover and deleted unpublished.
	aboveHead, err := buildExpr("replay", expression.NewBuilder().WithCondition(expression.Or(
		expression.AttributeNotExists(expression.Name(attrHead)),
		expression.Name(attrHead).LessThan(expression.Value(first)))))
	if err == nil {
		_, err = s.client.TransactWriteItems(ctx, s.replayInput(m, epoch, bucket, seq, aboveHead))
	}
	if err != nil {
		// The reserved number is abandoned; fence it so no relay waits.
		_ = putFence(ctx, s.client, s.tables.Messages, to, first, time.Now(), s.cfg.fenceTTL)
		return outbox.Message{}, fmt.Errorf("dynamo: replay bucket %d sequence %d: %w", bucket, seq, err)
	}
	return m, nil
}

// replayReserve reserves the replayed message m's position: its bucket
// under the current BucketCount (replayBucket) and a sequence number there
// at the current epoch, which it returns. A counter an online change has
// not cut yet is cut (sequence.Cut) and a counter at a later epoch makes
// it read the config item again: like a writer, it does not wait for a
// change (docs/design.md §13).
func (s *Store) replayReserve(ctx context.Context, bucket int, seq int64, pi ParkedItem, raw map[string]types.AttributeValue, m outbox.Message) (to int, first, epoch int64, err error) {
	for range maxEpochMeetings {
		cfg, err := readConfig(ctx, s.client, s.tables.Control)
		if err != nil {
			return 0, 0, 0, err
		}
		if to, err = replayBucket(cfg, bucket, pi, raw, m); err != nil {
			return 0, 0, 0, err
		}
		if err := s.cfg.headers.Validate(m, -1, s.cfg.maxMessageBytes); err != nil {
			return 0, 0, 0, err
		}
		// Region mode: only the bucket's own region reserves in its
		// counter, through its own replica (design.md §14.1, R1); the
		// Counter refuses the rest, a process without a region first.
		counter, err := sequence.NewCounter(s.client, s.tables.Control, cfg, s.cfg.region)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("dynamo: replay bucket %d sequence %d: %w", bucket, seq, err)
		}
		first, err = counter.ReserveAt(ctx, to, 1, cfg.BucketEpoch)
		var ee *sequence.EpochError
		switch {
		case err == nil:
			return to, first, cfg.BucketEpoch, nil
		case !errors.As(err, &ee):
			return 0, 0, 0, fmt.Errorf("dynamo: replay bucket %d sequence %d: reserve in bucket %d: %w", bucket, seq, to, err)
		case ee.Later():
			// The count changed since the read: read it again.
		default:
			_, err := sequence.Cut(ctx, s.client, s.tables.Control, to, cfg.BucketEpoch)
			var later *sequence.EpochError
			switch {
			case errors.As(err, &later) && later.Later():
				// A later change cut the counter first: read the config again.
			case err != nil:
				return 0, 0, 0, fmt.Errorf("dynamo: replay bucket %d sequence %d: cut bucket %d's counter into BucketCount epoch %d: %w", bucket, seq, to, cfg.BucketEpoch, err)
			}
		}
	}
	return 0, 0, 0, fmt.Errorf("dynamo: replay bucket %d sequence %d: the BucketCount epoch kept changing while reserving; nothing was written, replay it again", bucket, seq)
}

// replayBucket is the bucket a replay of the parked message pi (raw as
// stored; from bucket) appends m, pi's message or its replacement, to: m's
// bucket under cfg's BucketCount (in region mode, within the slice of the
// region whose writers wrote pi). A replacement must stay in the bucket of
// pi's key, partition or id, as far as they can be read.
func replayBucket(cfg outbox.Config, bucket int, pi ParkedItem, raw map[string]types.AttributeValue, m outbox.Message) (int, error) {
	lo, n := 0, cfg.BucketCount
	if cfg.RegionMode() {
		hi, ok := 0, false
		if lo, hi, ok = cfg.RegionBuckets(cfg.RegionOf(bucket)); !ok {
			return 0, &outbox.BucketRangeError{Bucket: bucket, BucketCount: cfg.BucketCount}
		}
		n = hi - lo
	}
	to, err := outbox.BucketFor(m, n)
	if err != nil {
		return 0, err
	}
	to += lo
	origin, ok := placement(pi, raw)
	if !ok {
		return to, nil
	}
	if was, err := outbox.BucketFor(origin, n); err == nil && was+lo != to {
		return 0, &outbox.ValidationError{Index: -1, Field: "Key", Reason: fmt.Sprintf(
			"the replacement belongs to bucket %d, the parked message's key to bucket %d (BucketCount %d); a replay keeps the message in its key's order", to, was+lo, cfg.BucketCount)}
	}
	return to, nil
}

// placement is what decides the parked message's bucket (its id, key and
// partition), read from an undecodable item's attributes as far as they
// can be; ok is false when they cannot.
func placement(pi ParkedItem, raw map[string]types.AttributeValue) (m outbox.Message, ok bool) {
	if pi.Err == nil {
		return pi.Message, true
	}
	if id := stringOf(raw[attrID]); canonicalUUID(id) {
		m.ID = id
	}
	if av, found := raw[attrKey]; found {
		k, isB := av.(*types.AttributeValueMemberB)
		if !isB {
			return m, false
		}
		m.Key = k.Value
	}
	p, err := intAttr(raw, attrPartition, false)
	switch {
	case errors.Is(err, errMissing):
	case err != nil || p < 0 || p > math.MaxInt32:
		return m, false
	default:
		m.Partition = outbox.PartitionOf(int32(p))
	}
	return m, m.Partition != nil || m.Key != nil || m.ID != ""
}

// replacing checks replacement r against the parked item pi (raw as
// stored) and fills its empty ID, Topic and CreatedAt from it (see
// ReplayParked).
func (s *Store) replacing(pi ParkedItem, raw map[string]types.AttributeValue, r outbox.Message) (outbox.Message, error) {
	refuse := func(field, format string, args ...any) (outbox.Message, error) {
		return outbox.Message{}, &outbox.ValidationError{Index: -1, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	// The parked message's identity, as far as it can be read: an
	// undecodable item may still hold a well-formed id and topic.
	id, topic, created := pi.Message.ID, pi.Message.Topic, pi.Message.CreatedAt
	if pi.Err != nil {
		id, topic = stringOf(raw[attrID]), stringOf(raw[attrTopic])
		if !canonicalUUID(id) {
			id = ""
		}
		if outbox.ValidateTopic(topic) != nil {
			topic = ""
		}
	}
	switch {
	case r.ID == "" && id == "":
		return refuse("ID", "the parked item's message id cannot be read (%v); give the replacement the id consumers know the message by, or a new one from outbox.NewID()", pi.Err)
	case r.ID == "":
		r.ID = id
	case id != "" && r.ID != id:
		return refuse("ID", "the replacement has id %s, the parked message %s; a replay must keep the message id, which consumers deduplicate by", r.ID, id)
	case id == "" && !canonicalUUID(r.ID):
		return refuse("ID", "%q is not a UUID in canonical form (36 characters); use outbox.NewID()", r.ID)
	}
	switch {
	case r.Topic == "" && topic == "":
		return refuse("Topic", "the parked item's topic cannot be read (%v); give the replacement its topic", pi.Err)
	case r.Topic == "":
		r.Topic = topic
	case topic != "" && r.Topic != topic:
		return refuse("Topic", "the replacement is for topic %q, the parked message for %q; a replay repairs the message on its own topic, "+
			"where its consumers and its key's order are (to publish to another topic, write a new message)", r.Topic, topic)
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = created
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = s.cfg.clock.Now()
	}
	if r.CreatedAt.UnixMilli() < 0 {
		return refuse("CreatedAt", "%v is before 1970; Kafka timestamps cannot be negative (leave it zero to keep the parked message's)", r.CreatedAt)
	}
	r.CreatedAt = time.UnixMilli(r.CreatedAt.UnixMilli())
	return r, nil
}

// replayInput moves the parked message at bucket/seq to m's position,
// stamped with the BucketCount epoch its number was reserved at, if
// aboveHead holds on m's bucket's lease.
func (s *Store) replayInput(m outbox.Message, epoch int64, bucket int, seq int64, aboveHead expression.Expression) *dynamodb.TransactWriteItemsInput {
	return &dynamodb.TransactWriteItemsInput{
		ClientRequestToken: str(uuid.NewString()),
		TransactItems: []types.TransactWriteItem{
			// Constant conditions (expr.go): the new position is free, the
			// dead letter is still there.
			{Put: &types.Put{
				TableName: str(s.tables.Messages), Item: withRetention(messageItem(m, epoch), m.CreatedAt, s.retention()),
				ConditionExpression: str("attribute_not_exists(#s)"), ExpressionAttributeNames: names(attrSeq),
			}},
			{Delete: &types.Delete{
				TableName: str(s.tables.Control), Key: controlKey(parkedPK(bucket), parkedSK(seq)),
				ConditionExpression: str("attribute_exists(#pk)"), ExpressionAttributeNames: names(attrPK),
			}},
			{ConditionCheck: &types.ConditionCheck{
				TableName: str(s.tables.Control), Key: leaseKey(m.Bucket),
				ConditionExpression:       aboveHead.Condition(),
				ExpressionAttributeNames:  aboveHead.Names(),
				ExpressionAttributeValues: aboveHead.Values(),
			}},
		},
	}
}

// DropParked deletes the dead-letter record at bucket/seq for good (an
// operator's decision; the relay never drops anything).
func (s *Store) DropParked(ctx context.Context, bucket int, seq int64) error {
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: str(s.tables.Control), Key: controlKey(parkedPK(bucket), parkedSK(seq)),
		// A constant condition (expr.go): tells a missing record apart.
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

// holdToken is the condition that the lease is still l's acquisition (always
// true for a lease without a token, written before version 0.3).
func holdToken(l outbox.Lease) expression.ConditionBuilder {
	if l.Token == "" {
		return expression.Name(attrOwner).AttributeExists()
	}
	return expression.Name(attrToken).Equal(expression.Value(l.Token))
}
