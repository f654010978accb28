package dynamo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
)

// StoreAPI is the part of the DynamoDB client a Store uses: GetItem,
// PutItem, UpdateItem, DeleteItem, Query, BatchWriteItem, BatchGetItem
// (lease reads, combined), TransactWriteItems (parking and replaying) and DescribeTable (NewStore
// refuses global tables). *dynamodb.Client has them.
type StoreAPI interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

// Store is the DynamoDB outbox.Store and outbox.BucketProbe. It is safe for
// concurrent use.
type Store struct {
	client StoreAPI
	tables Tables
	cfg    settings
	// stored is the config item as NewStore read it: the retention that
	// replayed dead letters get in WatermarkMode.
	stored outbox.Config
	// epochs: what this Store remembers of the old epoch of the last
	// BucketCount change it looked at (rebucket.go: cut points, old
	// buckets seen drained, holes), under memoMu.
	memoMu sync.Mutex
	epochs *epochMemo
	// combine: the lease reads' and tombstones' request combiners
	// (combine.go), made on first use.
	combineOnce sync.Once
	combine     *combiners
}

var (
	_ outbox.Store         = (*Store)(nil)
	_ outbox.BucketProbe   = (*Store)(nil)
	_ outbox.CounterProbe  = (*Store)(nil)
	_ outbox.ParkedCounter = (*Store)(nil)
	_ outbox.StuckRecorder = (*Store)(nil)
	_ outbox.EpochGate     = (*Store)(nil)
)

// NewStore returns a Store over tables. It reads the config item, so the
// outbox must exist (see CreateTables), and runs on its shared settings
// (BucketCount, the mode, MaxMessageBytes, the header names), which no
// option states. Options (StoreOption): FenceTTL, TombstoneTTL,
// DeleteConcurrency, Region (region mode: the region ReplayParked reserves
// in, checked against the config item's list).
func NewStore(ctx context.Context, client StoreAPI, tables Tables, opts ...StoreOption) (*Store, error) {
	s := defaultSettings()
	applyOptions(&s, opts)
	if err := checkOpen(client, tables, &s); err != nil {
		return nil, err
	}
	// The config item and the tables' replicas at once: one round trip
	// of a relay's or sweeper's cold start instead of three.
	var regionErr error
	var wg sync.WaitGroup
	wg.Go(func() { regionErr = checkSingleRegion(ctx, client, tables, false) })
	stored, err := openOutbox(ctx, client, tables, &s)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if regionErr != nil && !stored.RegionMode() {
		// Region mode is safe on a global table (design.md §14).
		return nil, regionErr
	}
	if s.region != "" {
		if err := outbox.CheckRegion(stored, s.region); err != nil {
			return nil, err
		}
	}
	return &Store{client: client, tables: tables, cfg: s, stored: stored}, nil
}

// retention is the TTL a message the store writes gets (a replayed dead
// letter): the outbox's retention in WatermarkMode, none (0) in DeleteMode.
func (s *Store) retention() time.Duration {
	if s.stored.Mode == outbox.WatermarkMode {
		return s.stored.Retention
	}
	return 0
}

// Opened returns the outbox's configuration as NewStore read it from the
// config item, without another read (a function's init builds its
// publisher from its shared settings).
func (s *Store) Opened() outbox.Config { return s.stored }

// Config implements outbox.Store: it reads the config item consistently,
// with the outbox's Mode and, in WatermarkMode, its Retention.
func (s *Store) Config(ctx context.Context) (outbox.Config, error) {
	return readConfig(ctx, s.client, s.tables.Control)
}

// acquireAttempts bounds how often Acquire starts over when the lease
// changes between its conditional writes.
const acquireAttempts = 8

// errChanged: a conditional lease write failed; the old image says why.
var errChanged = errors.New("lease changed")

// ContendedError is returned by Acquire when the lease kept changing hands
// while it tried to take it or leave a wake-up: it left none, so it is not
// ErrLeaseHeld; the caller's drain failed and is retried later.
type ContendedError struct {
	Bucket   int
	Attempts int
}

func (e *ContendedError) Error() string {
	return fmt.Sprintf("dynamo: acquire bucket %d: the lease changed hands %d times while Acquire tried to take it or leave a wake-up; retry later", e.Bucket, e.Attempts)
}

// OutboxErrorClass implements outbox.Classifier: Retriable.
func (e *ContendedError) OutboxErrorClass() outbox.ErrorClass { return outbox.Retriable }

// Acquire implements outbox.Store.
//
// The common case is one conditional UpdateItem. Because a new owner
// increments the epoch and a returning owner does not, the write is split by
// who holds the lease: the takeover write (condition: no owner, or released
// or expired and not ours; ADD ep 1) is tried first; it returns the lease as
// it was (ALL_OLD) on success and on failure, which tells whether it took
// the lease from a holder that never released it. If its condition fails,
// Acquire either extends its own lease (condition: o = owner) or leaves a
// wake-up for the live holder (ADD w 1, condition: o and e unchanged). When
// that second write's condition fails too, the lease changed hands in between
// and Acquire starts over, at most acquireAttempts times; then it returns a
// *ContendedError, never ErrLeaseHeld without a wake-up.
func (s *Store) Acquire(ctx context.Context, bucket int, owner string, now time.Time, d time.Duration) (outbox.Lease, error) {
	if err := checkLeaseArgs(bucket, owner, d); err != nil {
		return outbox.Lease{}, err
	}
	exp := millis(now.Add(d))
	// The token names this acquisition: a resend of the write below that
	// already applied finds it in the item, with what the write replaced.
	token := outbox.NewID()
	for attempt := range acquireAttempts {
		if attempt > 0 {
			if err := sleep(ctx, backoff(attempt-1, 5*time.Millisecond, 100*time.Millisecond)); err != nil {
				return outbox.Lease{}, wrapLease("acquire", bucket, err)
			}
		}
		in := &dynamodb.UpdateItemInput{
			// Not held at now, whoever the owner: a process sharing this
			// owner's name is another holder.
			ConditionExpression: str("attribute_not_exists(#o) OR #e <= :now"),
			UpdateExpression: str("SET #o = :me, #e = :exp, #tk = :tk, #po = if_not_exists(#o, :none), #pe = if_not_exists(#e, :zero), " +
				"#ptk = if_not_exists(#tk, :none), " +
				"#v = :v, #hd = if_not_exists(#hd, :zero), " +
				"#cl = if_not_exists(#cl, :zero), #w = if_not_exists(#w, :zero) ADD #ep :one"),
			ExpressionAttributeNames: names(attrOwner, attrExpires, attrToken, attrPrevOwner, attrPrevExpires, attrPrevToken,
				attrVersion, attrHead, attrCleaned, attrWake, attrEpoch),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":now": numAttr(millis(now)), ":me": strAttr(owner), ":exp": numAttr(exp), ":tk": strAttr(token),
				":none": strAttr(""), ":v": numAttr(outbox.FormatVersion), ":zero": numAttr(0), ":one": numAttr(1),
			},
			ReturnValues: types.ReturnValueAllNew,
		}
		item, err := s.writeLease(ctx, bucket, in)
		if err == nil || errors.Is(err, errChanged) && strField(item, attrToken) == token {
			// Written now, or by an earlier send of this request whose
			// response was lost: the item says what it replaced.
			return acquired(bucket, item)
		}
		if !errors.Is(err, errChanged) {
			return outbox.Lease{}, wrapLease("acquire", bucket, err)
		}
		holder, derr := decodeLease(bucket, item)
		if derr != nil {
			return outbox.Lease{}, derr
		}
		if !holder.HeldAt(now) {
			continue // released or expired between our write and its check
		}
		_, _, err = s.updateLease(ctx, bucket, &dynamodb.UpdateItemInput{
			// The same hold: the epoch changes with every acquisition.
			ConditionExpression:      str("#ep = :holderEpoch AND #e = :holderExp"),
			UpdateExpression:         str("ADD #w :one"),
			ExpressionAttributeNames: names(attrEpoch, attrExpires, attrWake),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":holderEpoch": numAttr(holder.Epoch), ":holderExp": numAttr(millis(holder.Expires)), ":one": numAttr(1),
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
	return outbox.Lease{}, &ContendedError{Bucket: bucket, Attempts: acquireAttempts}
}

// acquired decodes the lease item an Acquire wrote, with what it replaced.
func acquired(bucket int, item map[string]types.AttributeValue) (outbox.Lease, error) {
	l, err := decodeLease(bucket, item)
	if err != nil {
		return outbox.Lease{}, err
	}
	prevOwner := strField(item, attrPrevOwner)
	prevExp, _ := intAttr(item, attrPrevExpires, false)
	l.TakenOver = prevOwner != "" && prevExp != 0
	if prevOwner != "" && prevExp == 0 {
		l.PrevReleasedBy, l.PrevToken = prevOwner, strField(item, attrPrevToken)
	}
	return l, nil
}

// strField is a string attribute of item, "" when missing.
func strField(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// mine is the condition that l's hold is still the lease's: its owner and,
// when l carries one (every lease Acquire returns does), its token — several
// processes may share an owner's name. It adds the names and values it uses.
func mine(l outbox.Lease, attrs map[string]string, values map[string]types.AttributeValue) string {
	attrs["#o"], values[":me"] = attrOwner, strAttr(l.Owner)
	if l.Token == "" {
		return "#o = :me"
	}
	attrs["#tk"], values[":tk"] = attrToken, strAttr(l.Token)
	return "#o = :me AND #tk = :tk"
}

// sameHold reports whether cur is l's hold (see mine).
func sameHold(cur, l outbox.Lease) bool {
	return cur.Owner == l.Owner && (l.Token == "" || cur.Token == l.Token)
}

// Renew implements outbox.Store.
func (s *Store) Renew(ctx context.Context, l outbox.Lease, now time.Time, d time.Duration) (outbox.Lease, error) {
	if err := checkLeaseArgs(l.Bucket, l.Owner, d); err != nil {
		return outbox.Lease{}, err
	}
	attrs := names(attrExpires)
	values := map[string]types.AttributeValue{":now": numAttr(millis(now)), ":exp": numAttr(millis(now.Add(d)))}
	nl, _, err := s.updateLease(ctx, l.Bucket, &dynamodb.UpdateItemInput{
		ConditionExpression:       str(mine(l, attrs, values) + " AND #e > :now"),
		UpdateExpression:          str("SET #e = :exp"),
		ExpressionAttributeNames:  attrs,
		ExpressionAttributeValues: values,
	})
	if errors.Is(err, errChanged) {
		return outbox.Lease{}, fmt.Errorf("dynamo: renew bucket %d for %s: %w", l.Bucket, l.Owner, outbox.ErrLeaseLost)
	}
	return nl, wrapLease("renew", l.Bucket, err)
}

// Update implements outbox.Store. The head never moves backwards: the write
// is also conditional on the stored head being <= u.Head, and a lower u.Head
// is refused with ErrLeaseLost (as if the lease were lost: the caller's view
// of the bucket is stale). A retried Update that already applied applies
// again, unchanged.
func (s *Store) Update(ctx context.Context, l outbox.Lease, u outbox.LeaseUpdate, now time.Time) (outbox.Lease, error) {
	if err := checkLeaseArgs(l.Bucket, l.Owner, time.Second); err != nil {
		return outbox.Lease{}, err
	}
	if u.Head < 0 || u.Cleaned < 0 || u.Gap < 0 {
		return outbox.Lease{}, fmt.Errorf("dynamo: update bucket %d: negative head %d, cleaned %d or gap %d", l.Bucket, u.Head, u.Cleaned, u.Gap)
	}
	update := "SET #hd = :hd, #cl = :cl, #g = :g, #gs = :gs"
	values := map[string]types.AttributeValue{
		":now": numAttr(millis(now)),
		":hd":  numAttr(u.Head), ":cl": numAttr(u.Cleaned), ":g": numAttr(u.Gap), ":gs": numAttr(millis(u.GapSince)),
	}
	attrs := names(attrExpires, attrHead, attrCleaned, attrGap, attrGapSince)
	cond := mine(l, attrs, values) + " AND #e > :now AND #hd <= :hd"
	if !u.Expires.IsZero() {
		update += ", #e = :exp"
		values[":exp"] = numAttr(millis(u.Expires))
	}
	nl, old, err := s.updateLease(ctx, l.Bucket, &dynamodb.UpdateItemInput{
		ConditionExpression:       str(cond),
		UpdateExpression:          str(update),
		ExpressionAttributeNames:  attrs,
		ExpressionAttributeValues: values,
	})
	if errors.Is(err, errChanged) {
		cur, _ := decodeLease(l.Bucket, old)
		if sameHold(cur, l) && cur.Expires.After(now) && cur.Head > u.Head {
			return outbox.Lease{}, fmt.Errorf("dynamo: update bucket %d: the head would move backwards from %d to %d: %w",
				l.Bucket, cur.Head, u.Head, outbox.ErrLeaseLost)
		}
		return outbox.Lease{}, fmt.Errorf("dynamo: update bucket %d for %s: %w", l.Bucket, l.Owner, outbox.ErrLeaseLost)
	}
	return nl, wrapLease("update", l.Bucket, err)
}

// endHold is the update that ends a hold: the owner stays (so that it may
// resume), the expiry becomes 0, head and cleaned move forward, and a gap
// that head passed is cleared. The condition keeps both marks monotonic.
func endHold(l outbox.Lease, head, cleaned int64) (cond, update string, attrs map[string]string, values map[string]types.AttributeValue) {
	cleaned = min(cleaned, head)
	update = "SET #e = :zero, #hd = :hd, #cl = :cl"
	attrs = names(attrExpires, attrHead, attrCleaned)
	if l.Gap != 0 && l.Gap <= head {
		update += ", #g = :zero, #gs = :zero"
		attrs["#g"], attrs["#gs"] = attrGap, attrGapSince
	}
	values = map[string]types.AttributeValue{":zero": numAttr(0), ":hd": numAttr(head), ":cl": numAttr(cleaned)}
	if l.Process != "" {
		update += ", #pi = :pi"
		attrs["#pi"], values[":pi"] = attrProcess, strAttr(l.Process)
	}
	cond = mine(l, attrs, values) + " AND (attribute_not_exists(#hd) OR #hd <= :hd) AND (attribute_not_exists(#cl) OR #cl <= :cl)"
	return cond, update, attrs, values
}

// Release implements outbox.Store: one conditional UpdateItem (condition:
// still ours, wake count unchanged, marks not moving backwards) that ends
// the hold and resets the wake count. When the condition fails, the old
// image tells why: another owner (ErrLeaseLost), already released by us (a
// retried request that applied: nil), or a wake-up (ErrWoken).
func (s *Store) Release(ctx context.Context, l outbox.Lease, head, cleaned int64) (outbox.Lease, error) {
	if err := checkLeaseArgs(l.Bucket, l.Owner, time.Second); err != nil {
		return outbox.Lease{}, err
	}
	cond, update, attrs, values := endHold(l, head, cleaned)
	values[":w"] = numAttr(l.Wake)
	attrs["#w"] = attrWake
	nl, old, err := s.updateLease(ctx, l.Bucket, &dynamodb.UpdateItemInput{
		ConditionExpression:       str(cond + " AND #w = :w"),
		UpdateExpression:          str(update + ", #w = :zero"),
		ExpressionAttributeNames:  attrs,
		ExpressionAttributeValues: values,
	})
	if !errors.Is(err, errChanged) {
		return nl, wrapLease("release", l.Bucket, err)
	}
	cur, _ := decodeLease(l.Bucket, old)
	switch {
	case !sameHold(cur, l):
		return outbox.Lease{}, fmt.Errorf("dynamo: release bucket %d for %s: now held by %q (another acquisition): %w", l.Bucket, l.Owner, cur.Owner, outbox.ErrLeaseLost)
	case cur.Expires.IsZero():
		return cur, nil // a retry of a release that applied
	case cur.Wake != l.Wake:
		return cur, fmt.Errorf("dynamo: release bucket %d: wake %d, last seen %d: %w", l.Bucket, cur.Wake, l.Wake, outbox.ErrWoken)
	}
	return outbox.Lease{}, fmt.Errorf("dynamo: release bucket %d: head %d or cleaned %d would move backwards (stored %d, %d): %w",
		l.Bucket, head, cleaned, cur.Head, cur.Cleaned, outbox.ErrLeaseLost)
}

// Abandon implements outbox.Store: like Release without the wake-count
// condition and without resetting it.
func (s *Store) Abandon(ctx context.Context, l outbox.Lease, head, cleaned int64) error {
	if err := checkLeaseArgs(l.Bucket, l.Owner, time.Second); err != nil {
		return err
	}
	cond, update, attrs, values := endHold(l, head, cleaned)
	_, old, err := s.updateLease(ctx, l.Bucket, &dynamodb.UpdateItemInput{
		ConditionExpression:       str(cond),
		UpdateExpression:          str(update),
		ExpressionAttributeNames:  attrs,
		ExpressionAttributeValues: values,
	})
	if !errors.Is(err, errChanged) {
		return wrapLease("abandon", l.Bucket, err)
	}
	if cur, _ := decodeLease(l.Bucket, old); !sameHold(cur, l) || cur.Expires.IsZero() {
		return nil // not ours any more, or already given up
	}
	// Ours, but a mark would move backwards: give the hold up, marks as they are.
	attrs, values = names(attrExpires), map[string]types.AttributeValue{":zero": numAttr(0)}
	update = "SET #e = :zero"
	if l.Process != "" {
		update += ", #pi = :pi"
		attrs["#pi"], values[":pi"] = attrProcess, strAttr(l.Process)
	}
	_, _, err = s.updateLease(ctx, l.Bucket, &dynamodb.UpdateItemInput{
		ConditionExpression:       str(mine(l, attrs, values)),
		UpdateExpression:          str(update),
		ExpressionAttributeNames:  attrs,
		ExpressionAttributeValues: values,
	})
	if errors.Is(err, errChanged) {
		return nil
	}
	return wrapLease("abandon", l.Bucket, err)
}

// Advance implements outbox.Store: one UpdateItem conditional on nobody
// holding the lease at now and on its head and gap being still l's.
func (s *Store) Advance(ctx context.Context, l outbox.Lease, head, cleaned int64, now time.Time) (outbox.Lease, error) {
	if l.Bucket < 0 || head < l.Head || head < 0 {
		return outbox.Lease{}, fmt.Errorf("dynamo: advance bucket %d from %d to %d: bad arguments", l.Bucket, l.Head, head)
	}
	cond := "(attribute_not_exists(#o) OR #e <= :now)"
	values := map[string]types.AttributeValue{":now": numAttr(millis(now)), ":hd": numAttr(head), ":cl": numAttr(min(cleaned, head)),
		":oldhd": numAttr(l.Head), ":oldg": numAttr(l.Gap), ":v": numAttr(outbox.FormatVersion)}
	if l.Head == 0 {
		cond += " AND (attribute_not_exists(#hd) OR #hd = :oldhd)"
	} else {
		cond += " AND #hd = :oldhd"
	}
	if l.Gap == 0 {
		cond += " AND (attribute_not_exists(#g) OR #g = :oldg)"
	} else {
		cond += " AND #g = :oldg"
	}
	update := "SET #hd = :hd, #cl = :cl, #v = :v"
	attrs := names(attrOwner, attrExpires, attrHead, attrCleaned, attrGap, attrVersion)
	if l.Gap != 0 && l.Gap <= head {
		update += ", #g = :zero, #gs = :zero"
		values[":zero"] = numAttr(0)
		attrs["#gs"] = attrGapSince
	}
	nl, old, err := s.updateLease(ctx, l.Bucket, &dynamodb.UpdateItemInput{
		ConditionExpression:       str(cond),
		UpdateExpression:          str(update),
		ExpressionAttributeNames:  attrs,
		ExpressionAttributeValues: values,
	})
	if !errors.Is(err, errChanged) {
		return nl, wrapLease("advance", l.Bucket, err)
	}
	cur, _ := decodeLease(l.Bucket, old)
	if cur.HeldAt(now) {
		return outbox.Lease{}, fmt.Errorf("dynamo: advance bucket %d: held by %s: %w", l.Bucket, cur.Owner, outbox.ErrLeaseHeld)
	}
	if cur.Head == head && head > l.Head {
		// A resend of this write that applied (or another relay's advance
		// to the same head): the lease is as asked.
		return cur, nil
	}
	return outbox.Lease{}, fmt.Errorf("dynamo: advance bucket %d: the lease changed since it was read: %w", l.Bucket, outbox.ErrLeaseLost)
}

// updateLease runs one conditional UpdateItem on bucket's lease and returns
// the new lease. When the condition fails it returns errChanged and the item
// as it was (from ReturnValuesOnConditionCheckFailure, or a consistent read
// if the engine returned none).
func (s *Store) updateLease(ctx context.Context, bucket int, in *dynamodb.UpdateItemInput) (outbox.Lease, map[string]types.AttributeValue, error) {
	in.ReturnValues = types.ReturnValueAllNew
	item, err := s.writeLease(ctx, bucket, in)
	if err != nil {
		return outbox.Lease{}, item, err
	}
	l, err := decodeLease(bucket, item)
	return l, nil, err
}

// writeLease runs one conditional UpdateItem on bucket's lease and returns
// the attributes in.ReturnValues asks for; when the condition fails,
// errChanged and the item as it was.
func (s *Store) writeLease(ctx context.Context, bucket int, in *dynamodb.UpdateItemInput) (map[string]types.AttributeValue, error) {
	in.TableName = str(s.tables.Control)
	in.Key = leaseKey(bucket)
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	out, err := s.client.UpdateItem(ctx, in)
	if err != nil {
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return nil, err
		}
		old := ccf.Item
		if old == nil {
			g, gerr := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: in.TableName, Key: in.Key, ConsistentRead: new(true)})
			if gerr != nil {
				return nil, gerr
			}
			old = g.Item
		}
		return old, errChanged
	}
	return out.Attributes, nil
}

// decodeLease decodes a lease item; missing attributes are zero.
func decodeLease(bucket int, item map[string]types.AttributeValue) (outbox.Lease, error) {
	l := outbox.Lease{Bucket: bucket}
	l.Owner, l.Token, l.Process = strField(item, attrOwner), strField(item, attrToken), strField(item, attrProcess)
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
	if seq := num(attrStuckSeq); seq > 0 {
		l.Stuck = outbox.Stuck{Sequence: seq, MessageID: stringOf(item[attrStuckID]), Topic: stringOf(item[attrStuckTopic]),
			Class: outbox.ErrorClass(num(attrStuckClass)), Reason: stringOf(item[attrStuckReason]),
			Since: fromMillis(num(attrStuckSince)), Last: fromMillis(num(attrStuckLast)), Count: num(attrStuckCount)}
	}
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

// RecordStuck implements outbox.StuckRecorder: one UpdateItem of the
// bucket's lease item that sets the stuck attributes (ks, ki, kt, kc, km,
// kf, kl, kn) and nothing of the hold, conditional on the stored head being
// below st.Sequence (or absent). A condition that fails (the bucket moved
// on) is not an error. A resent request sets the same values.
func (s *Store) RecordStuck(ctx context.Context, bucket int, st outbox.Stuck) error {
	if bucket < 0 || st.Sequence < 1 {
		return fmt.Errorf("dynamo: record why bucket %d stopped at sequence %d: bucket and sequence must be valid", bucket, st.Sequence)
	}
	set := func(u expression.UpdateBuilder, name string, v any) expression.UpdateBuilder {
		return u.Set(expression.Name(name), expression.Value(v))
	}
	var u expression.UpdateBuilder
	u = set(u, attrStuckSeq, st.Sequence)
	u = set(u, attrStuckID, st.MessageID)
	u = set(u, attrStuckTopic, st.Topic)
	u = set(u, attrStuckClass, int64(st.Class))
	u = set(u, attrStuckReason, truncate(st.Reason, outbox.MaxStuckReason))
	u = set(u, attrStuckSince, millis(st.Since))
	u = set(u, attrStuckLast, millis(st.Last))
	u = set(u, attrStuckCount, st.Count)
	e, err := buildExpr("record stuck", expression.NewBuilder().WithUpdate(u).WithCondition(expression.Or(
		expression.AttributeNotExists(expression.Name(attrHead)),
		expression.Name(attrHead).LessThan(expression.Value(st.Sequence)))))
	if err != nil {
		return err
	}
	_, err = s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 str(s.tables.Control),
		Key:                       leaseKey(bucket),
		ConditionExpression:       e.Condition(),
		UpdateExpression:          e.Update(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("dynamo: record why bucket %d stopped at sequence %d: %w", bucket, st.Sequence, err)
	}
	return nil
}

// Disown hands back a lease that owner released under the hold named by
// token (relay.Relay.HoldToken): it removes the owner, so that the next
// relay to acquire the bucket starts at once instead of waiting for a
// resume by owner (docs/design.md, "resuming": an acquirer waits because
// the releaser may still drain the bucket without a lease write). Only a
// process that never resumes may call it: a relay with
// ResumeReleased(false), or a process that ends after its drain, as
// `outbox drain` does. The condition is the token, not the name: several
// processes may share an owner name, and removing the name from another
// one's release would let an acquirer skip the wait while that process
// resumes. A lease held, released by another hold, or already disowned (a
// resend) is left alone (nil). An empty token is refused.
func (s *Store) Disown(ctx context.Context, bucket int, owner, token string) error {
	if err := checkLeaseArgs(bucket, owner, time.Second); err != nil {
		return err
	}
	if token == "" {
		return fmt.Errorf("dynamo: disown bucket %d for %s: no hold token (Relay.HoldToken is empty when the relay never acquired the bucket)", bucket, owner)
	}
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 str(s.tables.Control),
		Key:                       leaseKey(bucket),
		ConditionExpression:       str("#o = :me AND #tk = :tk AND #e = :zero"),
		UpdateExpression:          str("REMOVE #o"),
		ExpressionAttributeNames:  names(attrOwner, attrToken, attrExpires),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": strAttr(owner), ":tk": strAttr(token), ":zero": numAttr(0)},
	})
	if isConditionFailed(err) {
		return nil
	}
	return wrapLease("disown", bucket, err)
}
