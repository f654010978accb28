package dynamo

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
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

// MarkPublished implements outbox.Store with BatchWriteItem: each published
// message is replaced by a tombstone (a few dozen bytes, expiring after
// TombstoneTTL). Replacing costs what deleting would (write units are
// counted on the larger of the old and new item, as a delete is on the
// deleted one), and the tombstone keeps the sequence number marked decided,
// so the bucket's head may lag behind it (docs/design.md, "resuming").
//
// Concurrent calls, of any buckets, share their BatchWriteItem calls
// (combine.go): a MarkPublished that finds calls free goes at once, its
// puts (and any queued) cut evenly over up to 4 of them; puts queued
// while all DeleteConcurrency calls are in flight go in as few calls of at
// most 25 as that limit allows. A put asked twice while queued is sent
// once.
// Unprocessed puts are retried with jittered exponential backoff, at most
// markAttempts calls each. MarkPublished returns when every one of its puts
// has landed, at the first error of a call that carried one of them, or
// with ctx's error when ctx ends first (its puts not yet sent are then never
// sent; those sent may still land, as a single call's would).
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
	expires := expiresAt(now, s.cfg.tombstoneTTL)
	puts := make([]ask[markKey, map[string]types.AttributeValue], len(seqs))
	for i, seq := range seqs {
		puts[i] = ask[markKey, map[string]types.AttributeValue]{markKey{bucket, seq}, publishedItem(bucket, seq, now, expires)}
	}
	if _, err := s.combined().marks.do(ctx, puts); err != nil {
		return fmt.Errorf("dynamo: mark %d messages of bucket %d published: %w", len(seqs), bucket, err)
	}
	return nil
}

const (
	batchWriteMax = 25
	batchGetMax   = 100
	markAttempts  = 10
	// markSpread: tombstones sent while calls are free are cut evenly
	// over up to 4 calls (combine.go), as each drain's were before they
	// were combined: a call takes as long as its slowest put, and on
	// DynamoDB Local its time grows with its puts (with a busy loop
	// beside it, 2026-12-07: 25 puts in one call p50 35-40 ms, in four
	// 29-32 ms). Small markings too: make demo's p50 was 490-575 ms (5
	// runs) with only one call per 8 puts, 230-350 ms (5 runs) with every
	// marking cut over 4. DynamoDB charges per item either way.
	markSpread = 4
	// lookCalls bounds the combined lease reads in flight, as
	// DeleteConcurrency bounds the tombstone calls: enough that an idle
	// or moderately busy process's looks do not wait in line, and that a
	// call backing off over unprocessed keys (a throttled control table)
	// holds few looks behind it; a burst of N looks still costs at most
	// 32 + ceil((N-32)/100) calls. make demo on DynamoDB Local with a
	// busy loop beside it (2026-12-07): with 8 looks and 16 tombstone
	// calls in flight p99 1.3-2.8 s (6 runs), with 32 and 32 0.9-1.7 s (5
	// runs), before combining 0.8-1.4 s (9 runs). The two limits were
	// raised together: which of them mattered was not measured.
	lookCalls = 32
)

// markKey names one tombstone put.
type markKey struct {
	bucket int
	seq    int64
}

// combiners are the Store's request combiners (combine.go), made on first
// use: a Store is built in several places.
type combiners struct {
	looks *combiner[int, struct{}, map[string]types.AttributeValue]
	marks *combiner[markKey, map[string]types.AttributeValue, struct{}]
}

func (s *Store) combined() *combiners {
	s.combineOnce.Do(func() {
		s.combine = &combiners{
			looks: newCombiner("read leases", batchGetMax, lookCalls, 1, markAttempts, s.readLeases),
			marks: newCombiner("mark published", batchWriteMax, s.cfg.deleteConcurrency, markSpread, markAttempts, s.markBatch),
		}
	})
	return s.combine
}

// markBatch is one BatchWriteItem of puts; the puts it left unprocessed
// have no answer.
func (s *Store) markBatch(ctx context.Context, puts []ask[markKey, map[string]types.AttributeValue]) (map[markKey]struct{}, error) {
	reqs := make([]types.WriteRequest, len(puts))
	for i, p := range puts {
		reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: p.val}}
	}
	table := s.tables.Messages
	out, err := s.client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
		RequestItems: map[string][]types.WriteRequest{table: reqs},
	})
	if err != nil {
		return nil, fmt.Errorf("%d tombstones (%s): %w", len(puts), markRange(puts), err)
	}
	left := map[markKey]bool{}
	for _, r := range out.UnprocessedItems[table] {
		if r.PutRequest == nil {
			continue
		}
		b, errB := intAttr(r.PutRequest.Item, attrBucket, true)
		seq, errS := intAttr(r.PutRequest.Item, attrSeq, true)
		if errB != nil || errS != nil {
			return nil, fmt.Errorf("%d tombstones: an unprocessed put without its key: %v", len(puts), r.PutRequest.Item)
		}
		left[markKey{int(b), seq}] = true
	}
	done := make(map[markKey]struct{}, len(puts))
	for _, p := range puts {
		if !left[p.key] {
			done[p.key] = struct{}{}
		}
	}
	return done, nil
}

// markRange names the buckets and sequence numbers of puts for an error.
func markRange(puts []ask[markKey, map[string]types.AttributeValue]) string {
	first, last := puts[0].key, puts[0].key
	for _, p := range puts[1:] {
		if p.key.bucket < first.bucket || p.key.bucket == first.bucket && p.key.seq < first.seq {
			first = p.key
		}
		if p.key.bucket > last.bucket || p.key.bucket == last.bucket && p.key.seq > last.seq {
			last = p.key
		}
	}
	return fmt.Sprintf("bucket %d sequence %d .. bucket %d sequence %d", first.bucket, first.seq, last.bucket, last.seq)
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

// ReadLease implements outbox.Store: a consistent read of the bucket's
// lease item. Concurrent calls share a consistent BatchGetItem on the
// control table (combine.go; at most 100 keys a call, at most lookCalls
// calls in flight): a call that finds a slot free is sent at once, others
// queue and go together. A combined read is sent after each of its callers
// called ReadLease, so the lease is read at some instant between the call
// and its return, as a GetItem would be (the look bound of
// docs/design.md §4.3.2 relies on it). Unprocessed keys are retried with
// jittered backoff; ReadLease returns with ctx's error when ctx ends first.
func (s *Store) ReadLease(ctx context.Context, bucket int) (outbox.Lease, error) {
	if bucket < 0 {
		return outbox.Lease{}, fmt.Errorf("dynamo: read lease of bucket %d: bucket is negative", bucket)
	}
	got, err := s.combined().looks.do(ctx, []ask[int, struct{}]{{key: bucket}})
	if err != nil {
		return outbox.Lease{}, fmt.Errorf("dynamo: read lease of bucket %d: %w", bucket, err)
	}
	return decodeLease(bucket, got[bucket])
}

// readLeases is one consistent BatchGetItem of the buckets' lease items: a
// bucket whose item is missing is answered with nil, one left unprocessed
// is not answered.
func (s *Store) readLeases(ctx context.Context, buckets []ask[int, struct{}]) (map[int]map[string]types.AttributeValue, error) {
	keys := make([]map[string]types.AttributeValue, len(buckets))
	byPK := make(map[string]int, len(buckets))
	for i, b := range buckets {
		keys[i] = leaseKey(b.key)
		byPK[sequence.PartitionKey(b.key)] = b.key
	}
	table := s.tables.Control
	out, err := s.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
		RequestItems: map[string]types.KeysAndAttributes{table: {Keys: keys, ConsistentRead: new(true)}},
	})
	if err != nil {
		return nil, fmt.Errorf("%d lease items: %w", len(buckets), err)
	}
	got := make(map[int]map[string]types.AttributeValue, len(buckets))
	for _, b := range buckets {
		got[b.key] = nil
	}
	for _, k := range out.UnprocessedKeys[table].Keys {
		if b, ok := byPK[strField(k, attrPK)]; ok {
			delete(got, b)
		}
	}
	for _, item := range out.Responses[table] {
		if b, ok := byPK[strField(item, attrPK)]; ok {
			got[b] = item
		}
	}
	return got, nil
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
