package dynamo

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/fanout"
	"github.com/dynakafka/outbox/sequence"
)

// maxQueryLimit bounds Pending's limit (the relay reads at most two batches
// of at most 10,000).
const maxQueryLimit = 100_000

// Pending implements outbox.Store: a consistent Query of b = bucket AND
// s > after, ascending, paginated until limit entries or the end of the
// bucket. It reads one item more than limit to tell whether the bucket
// ends there. Undecodable items come back as entries with Err set.
func (s *Store) Pending(ctx context.Context, bucket int, after int64, limit int) ([]outbox.Entry, bool, error) {
	if bucket < 0 {
		return nil, false, fmt.Errorf("dynamo: pending of bucket %d: bucket is negative", bucket)
	}
	if limit < 1 || limit > maxQueryLimit {
		return nil, false, fmt.Errorf("dynamo: pending of bucket %d: limit %d is outside 1..%d", bucket, limit, maxQueryLimit)
	}
	e, err := buildExpr("pending", expression.NewBuilder().WithKeyCondition(bucketAfter(bucket, after)))
	if err != nil {
		return nil, false, err
	}
	want := limit + 1
	entries := make([]outbox.Entry, 0, min(want, 1024))
	var start map[string]types.AttributeValue
	for {
		out, err := s.client.Query(ctx, &dynamodb.QueryInput{
			TableName:                 str(s.tables.Messages),
			KeyConditionExpression:    e.KeyCondition(),
			ExpressionAttributeNames:  e.Names(),
			ExpressionAttributeValues: e.Values(),
			ConsistentRead:            new(true),
			ScanIndexForward:          new(true),
			Limit:                     new(int32(want - len(entries))),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, false, fmt.Errorf("dynamo: read bucket %d after %d: %w", bucket, after, err)
		}
		for _, item := range out.Items {
			entries = append(entries, decodeItem(item))
		}
		if len(entries) >= want {
			return entries[:limit], false, nil
		}
		if len(out.LastEvaluatedKey) == 0 {
			return entries, true, nil
		}
		start = out.LastEvaluatedKey
	}
}

// MarkPublished implements outbox.Store with BatchWriteItem, the puts
// spread evenly over DeleteConcurrency calls at once (at most 25 per call):
// each published message is replaced by a tombstone (a few dozen bytes,
// expiring after TombstoneTTL). Replacing costs what deleting would (write units are counted on the larger of the old
// and new item, as a delete is on the deleted one), and the tombstone keeps
// the sequence number marked decided, so the bucket's head may lag behind it
// (docs/design.md, "resuming"). Unprocessed items are retried with jittered
// exponential backoff while ctx allows, at most markAttempts times per call.
//
// The puts are unconditional (BatchWriteItem has no conditions). The engine
// passes only sequence numbers it read as messages and Kafka acknowledged,
// or found at or below its head; nobody writes those numbers again.
func (s *Store) MarkPublished(ctx context.Context, bucket int, seqs []int64, now time.Time) error {
	if bucket < 0 {
		return fmt.Errorf("dynamo: mark bucket %d: bucket is negative", bucket)
	}
	if len(seqs) == 0 {
		return nil
	}
	// BatchWriteItem refuses duplicate keys in one request.
	seqs = slices.Clone(seqs)
	slices.Sort(seqs)
	seqs = slices.Compact(seqs)
	expires := expiresAt(now, s.cfg.tombstoneTTL)

	// The marking takes as long as its slowest call, so the puts are spread
	// evenly over the DeleteConcurrency calls (25 at most each): 20
	// tombstones go out as 4 calls of 5, not one of 20. On DynamoDB Local a
	// call's time grows with its puts (at 200 msgs/s in the bench a call
	// of ~19 took 582 ms, calls of ~6 at once 262 ms); DynamoDB charges the
	// same units either way (per item).
	per := min(batchWriteMax, (len(seqs)+s.cfg.deleteConcurrency-1)/s.cfg.deleteConcurrency)
	chunks := slices.Collect(slices.Chunk(seqs, per))
	err := fanout.Each(ctx, len(chunks), s.cfg.deleteConcurrency, func(ctx context.Context, i int) error {
		return s.markChunk(ctx, bucket, chunks[i], now, expires)
	})
	if err != nil && err == ctx.Err() {
		// The context ended before every chunk was sent.
		return fmt.Errorf("dynamo: mark published in bucket %d: %w", bucket, err)
	}
	return err
}

const (
	batchWriteMax = 25
	markAttempts  = 10
)

func (s *Store) markChunk(ctx context.Context, bucket int, seqs []int64, now, expires time.Time) error {
	reqs := make([]types.WriteRequest, len(seqs))
	for i, seq := range seqs {
		reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: publishedItem(bucket, seq, now, expires)}}
	}
	table := s.tables.Messages
	for attempt := 0; ; attempt++ {
		out, err := s.client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
			RequestItems: map[string][]types.WriteRequest{table: reqs},
		})
		if err != nil {
			return fmt.Errorf("dynamo: mark %d messages of bucket %d published (%d..%d): %w", len(seqs), bucket, seqs[0], seqs[len(seqs)-1], err)
		}
		reqs = out.UnprocessedItems[table]
		if len(reqs) == 0 {
			return nil
		}
		if attempt+1 == markAttempts {
			return fmt.Errorf("dynamo: mark published in bucket %d: %d puts still unprocessed after %d attempts: %w",
				bucket, len(reqs), markAttempts, outbox.ErrThrottled)
		}
		if err := sleep(ctx, backoff(attempt, 50*time.Millisecond, 2*time.Second)); err != nil {
			return fmt.Errorf("dynamo: mark published in bucket %d: %d puts unprocessed: %w", bucket, len(reqs), err)
		}
	}
}

// Fence implements outbox.Store: a PutItem of a fence tombstone conditional
// on attribute_not_exists(s). The tombstone expires (table TTL on x) FenceTTL
// after now or the wall clock, whichever is later.
func (s *Store) Fence(ctx context.Context, bucket int, seq int64, now time.Time) error {
	return putFence(ctx, s.client, s.tables.Messages, bucket, seq, now, s.cfg.fenceTTL)
}

// putFence is the one fence writer, used by Store.Fence (a relay giving up
// on a gap) and by the Writer (releasing sequence numbers it reserved but
// did not commit).
func putFence(ctx context.Context, client putItemAPI, table string, bucket int, seq int64, now time.Time, ttl time.Duration) error {
	if bucket < 0 || seq < 1 {
		return fmt.Errorf("dynamo: fence bucket %d sequence %d: bucket must be >= 0 and sequence >= 1", bucket, seq)
	}
	// A constant condition (expr.go): only if the position is free.
	_, err := client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                str(table),
		Item:                     fenceItem(bucket, seq, now, expiresAt(now, ttl)),
		ConditionExpression:      str("attribute_not_exists(#s)"),
		ExpressionAttributeNames: names(attrSeq),
	})
	switch {
	case err == nil:
		return nil
	case isConditionFailed(err):
		return fmt.Errorf("dynamo: fence bucket %d sequence %d: %w", bucket, seq, outbox.ErrAlreadyWritten)
	default:
		return fmt.Errorf("dynamo: fence bucket %d sequence %d: %w", bucket, seq, err)
	}
}

// peekMaxPage caps the items one Peek Query evaluates once fences were
// seen: about 40 KB of fences (~10 consistent RCU) per call.
const peekMaxPage = 1000

// Peek implements outbox.BucketProbe: consistent, ascending Queries of
// b = bucket AND s > after (projecting s and c) with a filter that drops
// every item whose fence flag is true, paged on LastEvaluatedKey until limit
// messages are counted or the bucket ends. Fences therefore never use up
// the limit, however many come before the first message. An item with a
// malformed fence flag is not a fence (the relay parks it), so it counts.
//
// How the reads stay bounded: a Query's Limit caps the items it evaluates,
// fences included, and DynamoDB caps each page at 1 MB. The first page
// evaluates limit items; after a page that held fences the next one
// evaluates twice as many (up to peekMaxPage, and never fewer than the
// messages still wanted). So F fences ahead of the
// messages cost about log2(peekMaxPage/limit) + F/peekMaxPage calls, and at
// most peekMaxPage messages are read beyond limit (they are not counted).
// F itself is bounded: fences above the cleaned mark are only those no relay
// has drained since they were written (a drain moves head and the cleaned
// mark over fences), and every fence expires after FenceTTL. The context
// bounds the time.
func (s *Store) Peek(ctx context.Context, bucket int, after int64, limit int) (int, time.Time, error) {
	if bucket < 0 {
		return 0, time.Time{}, fmt.Errorf("dynamo: peek bucket %d: bucket is negative", bucket)
	}
	if limit < 1 || limit > maxQueryLimit {
		return 0, time.Time{}, fmt.Errorf("dynamo: peek bucket %d: limit %d is outside 1..%d", bucket, limit, maxQueryLimit)
	}
	var (
		pending int
		oldest  time.Time
		start   map[string]types.AttributeValue
		page    = limit
	)
	for {
		out, err := s.client.Query(ctx, &dynamodb.QueryInput{
			TableName:                str(s.tables.Messages),
			KeyConditionExpression:   str("#b = :b AND #s > :after"),
			FilterExpression:         str("attribute_not_exists(#f) OR #f <> :fence"),
			ProjectionExpression:     str("#s, #c"),
			ExpressionAttributeNames: names(attrBucket, attrSeq, attrFence, attrCreated),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":b": numAttr(int64(bucket)), ":after": numAttr(after), ":fence": &types.AttributeValueMemberBOOL{Value: true},
			},
			ConsistentRead:    new(true),
			ScanIndexForward:  new(true),
			Limit:             new(int32(page)),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("dynamo: peek bucket %d after %d: %w", bucket, after, err)
		}
		if pending == 0 && len(out.Items) > 0 {
			// An undecodable creation time leaves oldest zero; the
			// message still counts.
			if c, err := intAttr(out.Items[0], attrCreated, true); err == nil {
				oldest = time.UnixMilli(c)
			}
		}
		pending += len(out.Items)
		if pending >= limit {
			return limit, oldest, nil
		}
		if len(out.LastEvaluatedKey) == 0 {
			return pending, oldest, nil
		}
		start = out.LastEvaluatedKey
		prev := page
		page = limit - pending
		if out.ScannedCount > out.Count {
			page = max(page, min(2*prev, peekMaxPage))
		}
	}
}

// ReadLease implements outbox.Store: a consistent GetItem of the
// bucket's lease item.
func (s *Store) ReadLease(ctx context.Context, bucket int) (outbox.Lease, error) {
	if bucket < 0 {
		return outbox.Lease{}, fmt.Errorf("dynamo: read lease of bucket %d: bucket is negative", bucket)
	}
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      str(s.tables.Control),
		Key:            leaseKey(bucket),
		ConsistentRead: new(true),
	})
	if err != nil {
		return outbox.Lease{}, fmt.Errorf("dynamo: read lease of bucket %d: %w", bucket, err)
	}
	return decodeLease(bucket, out.Item)
}

// LastSequence implements outbox.CounterProbe: a consistent read of the
// bucket's sequence counter (0 when nothing was ever reserved).
func (s *Store) LastSequence(ctx context.Context, bucket int) (int64, error) {
	return sequence.Last(ctx, s.client, s.tables.Control, bucket)
}

// retainedMaxItems bounds the keys Retained evaluates: fences and the
// tombstones of messages published before a switch to WatermarkMode can lie
// below the first retained message.
const retainedMaxItems = 10_000

// Retained finds the lowest message still stored in bucket at or below
// head: in WatermarkMode published messages stay, with their payload, until
// their TTL removes them, so [first, head] is the range a replay can still
// publish (it may hold fences, and numbers whose message was parked). It
// returns first = 0 when no message at or below head is stored, and
// first = -1 when the first retainedMaxItems keys were all fences or
// tombstones (unknown, not none). oldest is the first message's created-at
// (zero when undecodable).
//
// It reads like Peek — eventually consistent Queries of b = bucket AND s
// BETWEEN 1 AND head projecting s and c, fences filtered out, in pages that
// grow while they hold only fences — and stops at the first message.
func (s *Store) Retained(ctx context.Context, bucket int, head int64) (first int64, oldest time.Time, err error) {
	if bucket < 0 {
		return 0, time.Time{}, fmt.Errorf("dynamo: retained range of bucket %d: bucket is negative", bucket)
	}
	if head < 1 {
		return 0, time.Time{}, nil
	}
	var (
		start     map[string]types.AttributeValue
		page      = 1
		evaluated = 0
	)
	for evaluated < retainedMaxItems {
		out, err := s.client.Query(ctx, &dynamodb.QueryInput{
			TableName:                str(s.tables.Messages),
			KeyConditionExpression:   str("#b = :b AND #s BETWEEN :one AND :head"),
			FilterExpression:         str("attribute_not_exists(#f) OR #f <> :fence"),
			ProjectionExpression:     str("#s, #c"),
			ExpressionAttributeNames: names(attrBucket, attrSeq, attrFence, attrCreated),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":b": numAttr(int64(bucket)), ":one": numAttr(1), ":head": numAttr(head), ":fence": &types.AttributeValueMemberBOOL{Value: true},
			},
			ScanIndexForward:  new(true),
			Limit:             new(int32(page)),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("dynamo: retained range of bucket %d: %w", bucket, err)
		}
		if len(out.Items) > 0 {
			seq, err := intAttr(out.Items[0], attrSeq, true)
			if err != nil {
				return 0, time.Time{}, fmt.Errorf("dynamo: retained range of bucket %d: %w", bucket, err)
			}
			if c, err := intAttr(out.Items[0], attrCreated, true); err == nil {
				oldest = time.UnixMilli(c)
			}
			return seq, oldest, nil
		}
		if len(out.LastEvaluatedKey) == 0 {
			return 0, time.Time{}, nil
		}
		evaluated += int(out.ScannedCount)
		start = out.LastEvaluatedKey
		page = min(2*page+8, peekMaxPage)
	}
	return -1, time.Time{}, nil
}
