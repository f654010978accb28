package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
)

// StoreAPI is the part of the DynamoDB client a Store uses: GetItem,
// PutItem, UpdateItem, DeleteItem, Query, BatchWriteItem and
// TransactWriteItems (parking and replaying). *dynamodb.Client has them.
type StoreAPI interface {
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
}

// Store is the DynamoDB outbox.Store and outbox.BucketProbe. It is safe for
// concurrent use.
type Store struct {
	client StoreAPI
	tables Tables
	cfg    settings
}

var (
	_ outbox.Store       = (*Store)(nil)
	_ outbox.BucketProbe = (*Store)(nil)
)

// NewStore returns a Store over tables. It reads the config item, so the
// outbox must exist (see CreateTables); with the BucketCount option it also
// checks that the stored bucket count is the expected one. Options:
// BucketCount, FenceTTL, DeleteConcurrency.
func NewStore(ctx context.Context, client StoreAPI, tables Tables, opts ...StoreOption) (*Store, error) {
	s := defaultSettings()
	for _, o := range opts {
		o.applyStore(&s)
	}
	if _, err := openOutbox(ctx, client, tables, &s); err != nil {
		return nil, err
	}
	return &Store{client: client, tables: tables, cfg: s}, nil
}

// Config implements outbox.Store: it reads the config item consistently.
func (s *Store) Config(ctx context.Context) (outbox.Config, error) {
	return readConfig(ctx, s.client, s.tables.Control)
}

// acquireAttempts bounds how often Acquire starts over when the lease
// changes between its conditional writes.
const acquireAttempts = 4

// errChanged: a conditional lease write failed; the old image says why.
var errChanged = errors.New("lease changed")

// Acquire implements outbox.Store.
//
// The common case is one conditional UpdateItem. Because a new owner
// increments the epoch and a returning owner does not, the write is split by
// who holds the lease: the takeover write (condition: no owner, or expired and
// not ours; ADD ep 1) is tried first; if its condition fails, DynamoDB returns
// the lease as it was (ReturnValuesOnConditionCheckFailure ALL_OLD), and
// Acquire either extends its own lease (condition: o = owner) or leaves a
// wake-up for the live holder (ADD w 1, condition: o and e unchanged). When
// that second write's condition fails too, the lease changed hands in between
// and Acquire starts over, at most acquireAttempts times.
func (s *Store) Acquire(ctx context.Context, bucket int, owner string, now time.Time, d time.Duration) (outbox.Lease, error) {
	if err := checkLeaseArgs(bucket, owner, d); err != nil {
		return outbox.Lease{}, err
	}
	exp := millis(now.Add(d))
	for range acquireAttempts {
		l, old, err := s.updateLease(ctx, bucket, &dynamodb.UpdateItemInput{
			ConditionExpression: str("attribute_not_exists(#o) OR (#e <= :now AND #o <> :me)"),
			UpdateExpression: str("SET #o = :me, #e = :exp, #v = :v, #hd = if_not_exists(#hd, :zero), " +
				"#cl = if_not_exists(#cl, :zero), #w = if_not_exists(#w, :zero) ADD #ep :one"),
			ExpressionAttributeNames: names(attrOwner, attrExpires, attrVersion, attrHead, attrCleaned, attrWake, attrEpoch),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":now": numAttr(millis(now)), ":me": strAttr(owner), ":exp": numAttr(exp),
				":v": numAttr(outbox.FormatVersion), ":zero": numAttr(0), ":one": numAttr(1),
			},
		})
		if !errors.Is(err, errChanged) {
			return l, wrapLease("acquire", bucket, err)
		}
		holder, _ := decodeLease(bucket, old)
		if holder.Owner == owner {
			l, _, err = s.updateLease(ctx, bucket, &dynamodb.UpdateItemInput{
				ConditionExpression:       str("#o = :me"),
				UpdateExpression:          str("SET #e = :exp"),
				ExpressionAttributeNames:  names(attrOwner, attrExpires),
				ExpressionAttributeValues: map[string]types.AttributeValue{":me": strAttr(owner), ":exp": numAttr(exp)},
			})
			if !errors.Is(err, errChanged) {
				return l, wrapLease("acquire", bucket, err)
			}
			continue
		}
		if holder.Owner == "" {
			continue // released between our read and our write
		}
		_, _, err = s.updateLease(ctx, bucket, &dynamodb.UpdateItemInput{
			ConditionExpression:      str("#o = :holder AND #e = :holderExp"),
			UpdateExpression:         str("ADD #w :one"),
			ExpressionAttributeNames: names(attrOwner, attrExpires, attrWake),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":holder": strAttr(holder.Owner), ":holderExp": numAttr(millis(holder.Expires)), ":one": numAttr(1),
			},
		})
		switch {
		case err == nil:
			return outbox.Lease{}, fmt.Errorf("dynamo: acquire bucket %d: held by %s until %s: %w",
				bucket, holder.Owner, holder.Expires.UTC().Format(time.RFC3339Nano), outbox.ErrLeaseHeld)
		case !errors.Is(err, errChanged):
			return outbox.Lease{}, wrapLease("wake holder of", bucket, err)
		}
	}
	return outbox.Lease{}, fmt.Errorf("dynamo: acquire bucket %d: the lease changed hands %d times while Acquire tried to take it or leave a wake-up; someone else is active on it: %w",
		bucket, acquireAttempts, outbox.ErrLeaseHeld)
}

// Renew implements outbox.Store.
func (s *Store) Renew(ctx context.Context, l outbox.Lease, now time.Time, d time.Duration) (outbox.Lease, error) {
	if err := checkLeaseArgs(l.Bucket, l.Owner, d); err != nil {
		return outbox.Lease{}, err
	}
	nl, _, err := s.updateLease(ctx, l.Bucket, &dynamodb.UpdateItemInput{
		ConditionExpression:      str("#o = :me AND #e > :now"),
		UpdateExpression:         str("SET #e = :exp"),
		ExpressionAttributeNames: names(attrOwner, attrExpires),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":me": strAttr(l.Owner), ":now": numAttr(millis(now)), ":exp": numAttr(millis(now.Add(d))),
		},
	})
	if errors.Is(err, errChanged) {
		return outbox.Lease{}, fmt.Errorf("dynamo: renew bucket %d for %s: %w", l.Bucket, l.Owner, outbox.ErrLeaseLost)
	}
	return nl, wrapLease("renew", l.Bucket, err)
}

// Update implements outbox.Store. The head never moves backwards: the write
// is also conditional on the stored head being <= u.Head, and a lower u.Head
// is refused with ErrLeaseLost (as if the lease were lost: the caller's view
// of the bucket is stale).
func (s *Store) Update(ctx context.Context, l outbox.Lease, u outbox.LeaseUpdate, now time.Time) (outbox.Lease, error) {
	if err := checkLeaseArgs(l.Bucket, l.Owner, time.Second); err != nil {
		return outbox.Lease{}, err
	}
	if u.Head < 0 || u.Cleaned < 0 || u.Gap < 0 {
		return outbox.Lease{}, fmt.Errorf("dynamo: update bucket %d: negative head %d, cleaned %d or gap %d", l.Bucket, u.Head, u.Cleaned, u.Gap)
	}
	update := "SET #hd = :hd, #cl = :cl, #g = :g, #gs = :gs"
	values := map[string]types.AttributeValue{
		":me": strAttr(l.Owner), ":now": numAttr(millis(now)),
		":hd": numAttr(u.Head), ":cl": numAttr(u.Cleaned), ":g": numAttr(u.Gap), ":gs": numAttr(millis(u.GapSince)),
	}
	if !u.Expires.IsZero() {
		update += ", #e = :exp"
		values[":exp"] = numAttr(millis(u.Expires))
	}
	nl, old, err := s.updateLease(ctx, l.Bucket, &dynamodb.UpdateItemInput{
		ConditionExpression:       str("#o = :me AND #e > :now AND #hd <= :hd"),
		UpdateExpression:          str(update),
		ExpressionAttributeNames:  names(attrOwner, attrExpires, attrHead, attrCleaned, attrGap, attrGapSince),
		ExpressionAttributeValues: values,
	})
	if errors.Is(err, errChanged) {
		cur, _ := decodeLease(l.Bucket, old)
		if cur.Owner == l.Owner && cur.Expires.After(now) && cur.Head > u.Head {
			return outbox.Lease{}, fmt.Errorf("dynamo: update bucket %d: the head would move backwards from %d to %d: %w",
				l.Bucket, cur.Head, u.Head, outbox.ErrLeaseLost)
		}
		return outbox.Lease{}, fmt.Errorf("dynamo: update bucket %d for %s: %w", l.Bucket, l.Owner, outbox.ErrLeaseLost)
	}
	return nl, wrapLease("update", l.Bucket, err)
}

// Release implements outbox.Store. Cleaned never moves backwards: a lower
// cleaned than the stored one leaves the stored one.
func (s *Store) Release(ctx context.Context, l outbox.Lease, cleaned int64) (outbox.Lease, error) {
	if err := checkLeaseArgs(l.Bucket, l.Owner, time.Second); err != nil {
		return outbox.Lease{}, err
	}
	keepCleaned := false
	for range 2 {
		cond := "#o = :me AND #w = :w AND (attribute_not_exists(#cl) OR #cl <= :cl)"
		update := "REMOVE #o SET #e = :zero, #cl = :cl"
		values := map[string]types.AttributeValue{":me": strAttr(l.Owner), ":w": numAttr(l.Wake), ":zero": numAttr(0), ":cl": numAttr(cleaned)}
		attrNames := names(attrOwner, attrWake, attrExpires, attrCleaned)
		if keepCleaned {
			cond, update = "#o = :me AND #w = :w", "REMOVE #o SET #e = :zero"
			delete(values, ":cl")
			delete(attrNames, "#cl")
		}
		nl, old, err := s.updateLease(ctx, l.Bucket, &dynamodb.UpdateItemInput{
			ConditionExpression:       str(cond),
			UpdateExpression:          str(update),
			ExpressionAttributeNames:  attrNames,
			ExpressionAttributeValues: values,
		})
		if !errors.Is(err, errChanged) {
			return nl, wrapLease("release", l.Bucket, err)
		}
		cur, _ := decodeLease(l.Bucket, old)
		switch {
		case cur.Owner != l.Owner:
			return outbox.Lease{}, fmt.Errorf("dynamo: release bucket %d for %s: now held by %q: %w", l.Bucket, l.Owner, cur.Owner, outbox.ErrLeaseLost)
		case cur.Wake != l.Wake:
			return cur, fmt.Errorf("dynamo: release bucket %d: wake %d, last seen %d: %w", l.Bucket, cur.Wake, l.Wake, outbox.ErrWoken)
		}
		// Ours and not woken: the stored cleaned is ahead of ours; keep it.
		keepCleaned = true
	}
	return outbox.Lease{}, fmt.Errorf("dynamo: release bucket %d: the lease kept changing", l.Bucket)
}

// updateLease runs one conditional UpdateItem on bucket's lease and returns
// the new lease. When the condition fails it returns errChanged and the item
// as it was (from ReturnValuesOnConditionCheckFailure, or a consistent read
// if the engine returned none).
func (s *Store) updateLease(ctx context.Context, bucket int, in *dynamodb.UpdateItemInput) (outbox.Lease, map[string]types.AttributeValue, error) {
	in.TableName = str(s.tables.Control)
	in.Key = leaseKey(bucket)
	in.ReturnValues = types.ReturnValueAllNew
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	out, err := s.client.UpdateItem(ctx, in)
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return outbox.Lease{}, nil, err
		}
		old := ccf.Item
		if old == nil {
			g, gerr := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: in.TableName, Key: in.Key, ConsistentRead: new(true)})
			if gerr != nil {
				return outbox.Lease{}, nil, gerr
			}
			old = g.Item
		}
		return outbox.Lease{}, old, errChanged
	}
	l, err := decodeLease(bucket, out.Attributes)
	return l, nil, err
}

// decodeLease decodes a lease item; missing attributes are zero.
func decodeLease(bucket int, item map[string]types.AttributeValue) (outbox.Lease, error) {
	l := outbox.Lease{Bucket: bucket}
	if o, ok := item[attrOwner].(*types.AttributeValueMemberS); ok {
		l.Owner = o.Value
	}
	var errs []error
	num := func(name string) int64 {
		v, err := intAttr(item, name, false)
		if err != nil && !errors.Is(err, errMissing) {
			errs = append(errs, err)
		}
		return v
	}
	l.Expires = fromMillis(num(attrExpires))
	l.Head = num(attrHead)
	l.Cleaned = num(attrCleaned)
	l.Gap = num(attrGap)
	l.GapSince = fromMillis(num(attrGapSince))
	l.Wake = num(attrWake)
	l.Epoch = num(attrEpoch)
	if len(errs) > 0 {
		return l, fmt.Errorf("dynamo: lease item of bucket %d: %w", bucket, errors.Join(errs...))
	}
	return l, nil
}

func checkLeaseArgs(bucket int, owner string, d time.Duration) error {
	switch {
	case bucket < 0:
		return fmt.Errorf("dynamo: bucket %d is negative", bucket)
	case owner == "":
		return errors.New("dynamo: lease owner is empty")
	case d <= 0:
		return fmt.Errorf("dynamo: lease duration %v is not positive", d)
	}
	return nil
}

func wrapLease(op string, bucket int, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("dynamo: %s lease of bucket %d: %w", op, bucket, err)
}
