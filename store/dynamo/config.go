package dynamo

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
)

// BucketCountChangeError is SetBucketCount refusing to change the outbox's
// BucketCount because a bucket still holds messages: after the change their
// keys would map to other buckets, and newer messages of a key could be
// published before its older ones.
type BucketCountChangeError struct {
	Stored, Requested int
	Bucket            int // the lowest bucket found holding messages
	Pending           int // messages seen in it (a lower bound)
}

func (e *BucketCountChangeError) Error() string {
	return fmt.Sprintf("dynamo: BucketCount cannot change from %d to %d while messages are pending (bucket %d holds at least %d): "+
		"stop the writers, let the relays drain every bucket (outbox status shows none pending), then change it; or keep BucketCount=%d",
		e.Stored, e.Requested, e.Bucket, e.Pending, e.Stored)
}

// SetBucketCount makes the outbox's config item say bucketCount. It is for
// deployment tools (the stack's custom resource, outbox init) on tables that
// already exist:
//
//   - no config item yet: it is written, with the current FormatVersion;
//   - the same count: nothing is written;
//   - another count: it is changed only if the outbox is empty, that is no
//     message is pending in any bucket below OutOfRangeProbe of the larger
//     count — each bucket is probed with Store.ReadLease and Store.Peek after
//     its cleaned mark, never by subtracting a head from a counter, since
//     fences and published messages can lie between the two — and only if the
//     stored count has not changed meanwhile (a conditional write).
//     Otherwise it fails with a *BucketCountChangeError.
//
// It returns the count stored before, 0 when there was none. The emptiness
// check cannot stop a writer that commits after it: stop the writers before
// changing the count, and start them again with the new one (writers without
// the BucketCount option read it from the config item).
func SetBucketCount(ctx context.Context, client StoreAPI, tables Tables, bucketCount int) (previous int, err error) {
	if bucketCount < 1 || bucketCount > outbox.MaxBucketCount {
		return 0, &outbox.OptionError{Option: "BucketCount", Value: bucketCount, Reason: fmt.Sprintf("must be 1..%d", outbox.MaxBucketCount)}
	}
	if err := tables.validate(); err != nil {
		return 0, err
	}
	if client == nil {
		return 0, &outbox.OptionError{Option: "client", Value: nil, Reason: "a DynamoDB client is required"}
	}
	stored, err := readConfig(ctx, client, tables.Control)
	var missing *types.ResourceNotFoundException
	switch {
	case errors.As(err, &missing):
		return 0, fmt.Errorf("dynamo: the control table %s does not exist (create the tables first): %w", tables.Control, missing)
	case errors.Is(err, ErrNoConfig):
		err = writeNewConfig(ctx, client, tables.Control, bucketCount)
		if !isConditionFailed(err) {
			return 0, err
		}
		// Another writer created it first: compare with what it wrote.
		if stored, err = readConfig(ctx, client, tables.Control); err != nil {
			return 0, err
		}
	case err != nil:
		return 0, err
	}
	if stored.BucketCount == bucketCount {
		return stored.BucketCount, nil
	}
	s := &Store{client: client, tables: tables, cfg: defaultSettings()}
	if err := s.checkEmpty(ctx, stored.BucketCount, bucketCount); err != nil {
		return stored.BucketCount, err
	}
	_, err = client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                str(tables.Control),
		Key:                      controlKey(configPK, configSK),
		UpdateExpression:         str("SET #bc = :new"),
		ConditionExpression:      str("#bc = :old"),
		ExpressionAttributeNames: names(attrBuckets),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":new": numAttr(int64(bucketCount)), ":old": numAttr(int64(stored.BucketCount)),
		},
	})
	switch {
	case err == nil:
		return stored.BucketCount, nil
	case isConditionFailed(err):
		return stored.BucketCount, fmt.Errorf("dynamo: the config item in %s changed while BucketCount was being changed from %d to %d; read it (outbox status) and try again",
			tables.Control, stored.BucketCount, bucketCount)
	default:
		return stored.BucketCount, fmt.Errorf("dynamo: change BucketCount in %s from %d to %d: %w", tables.Control, stored.BucketCount, bucketCount, err)
	}
}

// writeNewConfig puts the config item unless one exists. A constant
// condition (expr.go): never overwrite a stored config.
func writeNewConfig(ctx context.Context, client putItemAPI, table string, bucketCount int) error {
	item := controlKey(configPK, configSK)
	item[attrBuckets] = numAttr(int64(bucketCount))
	item[attrVersion] = numAttr(outbox.FormatVersion)
	_, err := client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                str(table),
		Item:                     item,
		ConditionExpression:      str("attribute_not_exists(#pk)"),
		ExpressionAttributeNames: names(attrPK),
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("dynamo: write the config item to %s: %w", table, err)
	}
	return err
}

// emptyProbeConcurrency bounds the bucket probes checkEmpty runs at once.
const emptyProbeConcurrency = 16

// checkEmpty returns a *BucketCountChangeError naming the lowest bucket that
// holds a message, among the buckets a relay or a sweeper of either count
// would look at.
func (s *Store) checkEmpty(ctx context.Context, stored, requested int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	upper := outbox.OutOfRangeProbe(max(stored, requested))
	type found struct{ bucket, pending int }
	var (
		mu       sync.Mutex
		first    *found
		firstErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, emptyProbeConcurrency)
	)
	for b := range upper {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			n, err := s.pendingIn(ctx, b)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && firstErr == nil && ctx.Err() == nil:
				firstErr = err
				cancel()
			case err == nil && n > 0 && (first == nil || b < first.bucket):
				first = &found{b, n}
			}
		})
	}
	wg.Wait()
	switch {
	case firstErr != nil:
		return firstErr
	case first != nil:
		return &BucketCountChangeError{Stored: stored, Requested: requested, Bucket: first.bucket, Pending: first.pending}
	}
	return ctx.Err()
}

// pendingIn counts the messages of bucket b after its cleaned mark: first
// with a short probe, which settles any bucket with a message near its
// start, then, when that found only fences or nothing, with a long one that
// reads the rest of the bucket (up to maxQueryLimit items).
func (s *Store) pendingIn(ctx context.Context, b int) (int, error) {
	l, err := s.ReadLease(ctx, b)
	if err != nil {
		return 0, err
	}
	for _, limit := range []int{100, maxQueryLimit} {
		n, _, err := s.Peek(ctx, b, l.Cleaned, limit)
		if err != nil || n > 0 {
			return n, err
		}
	}
	return 0, nil
}
