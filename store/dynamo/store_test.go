package dynamo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

const leaseFor = 30 * time.Second

// hookClient wraps the real client with optional hooks.
type hookClient struct {
	StoreAPI
	beforeUpdate func(in *dynamodb.UpdateItemInput)
	onGet        func(in *dynamodb.GetItemInput)
	queries      atomic.Int64
	batchWrite   func(ctx context.Context, in *dynamodb.BatchWriteItemInput) (*dynamodb.BatchWriteItemOutput, error)
}

func (h *hookClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if h.beforeUpdate != nil {
		h.beforeUpdate(in)
	}
	return h.StoreAPI.UpdateItem(ctx, in, opts...)
}

func (h *hookClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if h.onGet != nil {
		h.onGet(in)
	}
	return h.StoreAPI.GetItem(ctx, in, opts...)
}

func (h *hookClient) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	h.queries.Add(1)
	return h.StoreAPI.Query(ctx, in, opts...)
}

func (h *hookClient) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	if h.batchWrite != nil {
		return h.batchWrite(ctx, in)
	}
	return h.StoreAPI.BatchWriteItem(ctx, in, opts...)
}

// hooked returns a store over e's tables whose client is wrapped by h.
func (e *env) hooked(t *testing.T, h *hookClient, opts ...StoreOption) *Store {
	t.Helper()
	h.StoreAPI = e.d.Client
	s, err := NewStore(ctxT(t), h, e.tables, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *env) leaseItem(t *testing.T, bucket int) map[string]types.AttributeValue {
	return e.getItem(t, e.tables.Control, leaseKey(bucket))
}

func isWake(in *dynamodb.UpdateItemInput) bool {
	return aws.ToString(in.UpdateExpression) == "ADD #w :one"
}

func TestAcquireLearnsTheHolderFromTheFailedWrite(t *testing.T) {
	e := newEnv(t, 2)
	ctx := ctxT(t)
	// DynamoDB Local returns the old item with a failed condition
	// (ReturnValuesOnConditionCheckFailure), so no extra read is needed.
	s := e.hooked(t, &hookClient{onGet: func(in *dynamodb.GetItemInput) {
		if aws.ToString(in.TableName) == e.tables.Control && stringOf(in.Key[attrSK]) == leaseSK {
			t.Errorf("Acquire read the lease: the engine did not return the old image")
		}
	}})
	a, err := s.Acquire(ctx, 1, "a", t0, leaseFor)
	if err != nil || a.Epoch != 1 || a.Wake != 0 {
		t.Fatalf("first acquire: %+v, %v", a, err)
	}
	for i := range 3 {
		if _, err := s.Acquire(ctx, 1, "b", t0.Add(time.Duration(i)*time.Second), leaseFor); !errors.Is(err, outbox.ErrLeaseHeld) {
			t.Fatalf("contender: %v", err)
		}
	}
	item := e.leaseItem(t, 1)
	if o := stringOf(item[attrOwner]); o != "a" {
		t.Errorf("owner %q", o)
	}
	if w, _ := intAttr(item, attrWake, true); w != 3 {
		t.Errorf("wake = %d after 3 contenders", w)
	}
	if ep, _ := intAttr(item, attrEpoch, true); ep != 1 {
		t.Errorf("epoch = %d; contenders must not change it", ep)
	}
	if e, _ := intAttr(item, attrExpires, true); e != t0.Add(leaseFor).UnixMilli() {
		t.Errorf("expiry = %d, want %d (Unix ms)", e, t0.Add(leaseFor).UnixMilli())
	}
}

func TestAcquireAfterTheHolderReleasedInBetween(t *testing.T) {
	e := newEnv(t, 2)
	ctx := ctxT(t)
	a, err := e.store.Acquire(ctx, 0, "a", t0, leaseFor)
	if err != nil {
		t.Fatal(err)
	}
	var released atomic.Bool
	s := e.hooked(t, &hookClient{beforeUpdate: func(in *dynamodb.UpdateItemInput) {
		// The holder releases after the contender's takeover failed and
		// before its wake-up lands.
		if isWake(in) && !released.Swap(true) {
			if _, err := e.store.Release(ctx, a, 0, 0); err != nil {
				t.Errorf("release: %v", err)
			}
		}
	}})
	b, err := s.Acquire(ctx, 0, "b", t0.Add(time.Second), leaseFor)
	if err != nil {
		t.Fatalf("Acquire after the holder released: %v", err)
	}
	if !released.Load() || b.Owner != "b" || b.Epoch != 2 || b.Wake != 0 {
		t.Fatalf("lease = %+v (released %v)", b, released.Load())
	}
}

// Issue 8 item 1: Acquire returns ErrLeaseHeld only when it left a wake-up.
// When the lease keeps changing hands under it, it gives up with an error
// that makes the caller retry instead.
func TestAcquireThatLeftNoWakeUpIsNotErrLeaseHeld(t *testing.T) {
	e := newEnv(t, 2)
	ctx := ctxT(t)
	a, err := e.store.Acquire(ctx, 0, "a", t0, leaseFor)
	if err != nil {
		t.Fatal(err)
	}
	var renewals atomic.Int64
	s := e.hooked(t, &hookClient{beforeUpdate: func(in *dynamodb.UpdateItemInput) {
		// The holder renews between every takeover attempt and wake-up.
		if isWake(in) {
			n := renewals.Add(1)
			if a, err = e.store.Renew(ctx, a, t0.Add(time.Duration(n)*time.Millisecond), leaseFor); err != nil {
				t.Errorf("renew: %v", err)
			}
		}
	}})
	_, err = s.Acquire(ctx, 0, "b", t0.Add(time.Second), leaseFor)
	var ce *ContendedError
	if errors.Is(err, outbox.ErrLeaseHeld) || !errors.As(err, &ce) || !strings.Contains(err.Error(), "changed hands") {
		t.Fatalf("err = %v, want a *ContendedError (not ErrLeaseHeld: no wake-up was left)", err)
	}
	if outbox.Classify(err) != outbox.Retriable {
		t.Errorf("class %v, want retriable", outbox.Classify(err))
	}
	if renewals.Load() != acquireAttempts {
		t.Errorf("%d wake-up attempts, want %d", renewals.Load(), acquireAttempts)
	}
	if l, _ := e.store.ReadLease(ctx, 0); l.Wake != 0 {
		t.Errorf("wake = %d: a wake-up landed after all", l.Wake)
	}
}

func TestAcquireOwnExpiredLease(t *testing.T) {
	e := newEnv(t, 2)
	ctx := ctxT(t)
	a, err := e.store.Acquire(ctx, 1, "a", t0, leaseFor)
	if err != nil {
		t.Fatal(err)
	}
	// Expired, nobody took it: its owner's name takes it over like anyone
	// else's (another process may share the name): a new hold, with a new
	// epoch and token, reported as a takeover.
	a2, err := e.store.Acquire(ctx, 1, "a", t0.Add(time.Hour), leaseFor)
	if err != nil || a2.Epoch != a.Epoch+1 || a2.Token == a.Token || !a2.TakenOver || !a2.Expires.Equal(t0.Add(time.Hour+leaseFor)) {
		t.Fatalf("re-acquire of an expired own lease: %+v, %v", a2, err)
	}
}

func TestLeaseArgumentsChecked(t *testing.T) {
	e := newEnv(t, 2)
	ctx := ctxT(t)
	cases := []struct {
		name string
		call func() error
	}{
		{"negative bucket", func() error { _, err := e.store.Acquire(ctx, -1, "a", t0, leaseFor); return err }},
		{"empty owner", func() error { _, err := e.store.Acquire(ctx, 0, "", t0, leaseFor); return err }},
		{"zero duration", func() error { _, err := e.store.Acquire(ctx, 0, "a", t0, 0); return err }},
		{"renew without owner", func() error { _, err := e.store.Renew(ctx, outbox.Lease{}, t0, leaseFor); return err }},
		{"negative head", func() error {
			_, err := e.store.Update(ctx, outbox.Lease{Owner: "a"}, outbox.LeaseUpdate{Head: -1}, t0)
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); err == nil {
				t.Fatal("no error")
			}
		})
	}
	if item := e.leaseItem(t, 0); item != nil {
		t.Errorf("invalid calls wrote a lease: %v", item)
	}
}

func TestUpdateHeadNeverMovesBackwards(t *testing.T) {
	e := newEnv(t, 2)
	ctx := ctxT(t)
	a, err := e.store.Acquire(ctx, 0, "a", t0, leaseFor)
	if err != nil {
		t.Fatal(err)
	}
	a, err = e.store.Update(ctx, a, outbox.LeaseUpdate{Head: 10, Cleaned: 8, Expires: t0.Add(time.Minute)}, t0)
	if err != nil || !a.Expires.Equal(t0.Add(time.Minute)) {
		t.Fatalf("update: %+v, %v", a, err)
	}
	_, err = e.store.Update(ctx, a, outbox.LeaseUpdate{Head: 9, Cleaned: 9}, t0)
	if !errors.Is(err, outbox.ErrLeaseLost) || !strings.Contains(err.Error(), "backwards") {
		t.Fatalf("err = %v, want ErrLeaseLost saying the head would move backwards", err)
	}
	if l, _ := e.store.ReadLease(ctx, 0); l.Head != 10 || l.Cleaned != 8 {
		t.Fatalf("lease changed by a refused update: %+v", l)
	}
	// The same head is fine (a batch of only leftovers).
	if _, err := e.store.Update(ctx, a, outbox.LeaseUpdate{Head: 10, Cleaned: 10}, t0); err != nil {
		t.Fatalf("same head: %v", err)
	}
}

func TestReleaseNeverMovesMarksBackwards(t *testing.T) {
	e := newEnv(t, 2)
	ctx := ctxT(t)
	a, err := e.store.Acquire(ctx, 1, "a", t0, leaseFor)
	if err != nil {
		t.Fatal(err)
	}
	if a, err = e.store.Update(ctx, a, outbox.LeaseUpdate{Head: 12, Cleaned: 10}, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Release(ctx, a, 12, 5); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("release with a lower cleaned: %v, want ErrLeaseLost", err)
	}
	if l, _ := e.store.ReadLease(ctx, 1); l.Owner != "a" || l.Cleaned != 10 || l.Head != 12 || !l.HeldAt(t0) {
		t.Fatalf("a refused release changed the lease: %+v", l)
	}
	l, err := e.store.Release(ctx, a, 12, 11)
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	if l.Owner != "a" || !l.Expires.IsZero() || l.Cleaned != 11 || l.Head != 12 {
		t.Fatalf("released lease = %+v", l)
	}
}

// TestReleaseRecordsTheReleasingProcess: Release and Abandon store the
// hold's Process (a relay's instance id), ReadLease and the next Acquire
// report it, and a hold that names none leaves the last one standing
// (companion drains pick a releaser's buckets by it, design §4.3.4).
func TestReleaseRecordsTheReleasingProcess(t *testing.T) {
	e := newEnv(t, 2)
	ctx := ctxT(t)
	a, err := e.store.Acquire(ctx, 1, "relay/fn", t0, leaseFor)
	if err != nil {
		t.Fatal(err)
	}
	a.Process = "process-a"
	if _, err := e.store.Release(ctx, a, 0, 0); err != nil {
		t.Fatal(err)
	}
	if l, err := e.store.ReadLease(ctx, 1); err != nil || l.Process != "process-a" || !l.Released() {
		t.Fatalf("after a's release: %+v, %v; want released by process-a", l, err)
	}
	b, err := e.store.Acquire(ctx, 1, "relay/fn", t0, leaseFor)
	if err != nil || b.Process != "process-a" || b.PrevToken != a.Token {
		t.Fatalf("b's acquisition: %+v, %v; want process-a's release reported", b, err)
	}
	b.Process = "process-b"
	if err := e.store.Abandon(ctx, b, 0, 0); err != nil {
		t.Fatal(err)
	}
	if l, _ := e.store.ReadLease(ctx, 1); l.Process != "process-b" {
		t.Fatalf("after b's abandon: process %q, want process-b", l.Process)
	}
	c, err := e.store.Acquire(ctx, 1, "relay/fn", t0, leaseFor)
	if err != nil {
		t.Fatal(err)
	}
	c.Process = ""
	if _, err := e.store.Release(ctx, c, 0, 0); err != nil {
		t.Fatal(err)
	}
	if l, _ := e.store.ReadLease(ctx, 1); l.Process != "process-b" {
		t.Fatalf("after a release that names no process: %q, want process-b kept", l.Process)
	}
}

// appliedTwice applies every UpdateItem of a release twice, as the SDK's
// retryer does when the first response is lost, and returns the second
// answer.
type appliedTwice struct{ StoreAPI }

func (c appliedTwice) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if !strings.Contains(aws.ToString(in.UpdateExpression), "#e = :zero") {
		return c.StoreAPI.UpdateItem(ctx, in, o...)
	}
	if _, err := c.StoreAPI.UpdateItem(ctx, in, o...); err != nil {
		return nil, err
	}
	return c.StoreAPI.UpdateItem(ctx, in, o...)
}

// Issue 8 item 7: an SDK retry of a release that already applied must not
// report the lease lost (the drained bucket would be reported failed).
func TestRetriedReleaseThatAppliedSucceeds(t *testing.T) {
	e := newEnv(t, 2)
	ctx := ctxT(t)
	s := &Store{client: appliedTwice{e.d.Client}, tables: e.tables, cfg: e.store.cfg}
	for _, woken := range []bool{false, true} {
		a, err := s.Acquire(ctx, 0, "a", t0, leaseFor)
		if err != nil {
			t.Fatal(err)
		}
		if woken {
			if _, err := s.Acquire(ctx, 0, "b", t0, leaseFor); !errors.Is(err, outbox.ErrLeaseHeld) {
				t.Fatal(err)
			}
			if a, err = s.Release(ctx, a, 0, 0); !errors.Is(err, outbox.ErrWoken) {
				t.Fatalf("release after a wake-up: %v", err)
			}
		}
		if _, err := s.Release(ctx, a, 3, 3); err != nil {
			t.Fatalf("woken=%v: retried release: %v, want nil", woken, err)
		}
		if err := s.Abandon(ctx, a, 3, 3); err != nil {
			t.Fatalf("abandon after release: %v", err)
		}
	}
}

func putRaw(t *testing.T, e *env, item map[string]types.AttributeValue) {
	t.Helper()
	if _, err := e.d.Client.PutItem(ctxT(t), &dynamodb.PutItemInput{TableName: str(e.tables.Messages), Item: item}); err != nil {
		t.Fatal(err)
	}
}

func TestPendingPaginatesPastOneMegabyte(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	// 12 items of 150 KB: DynamoDB returns at most 1 MB per page.
	for seq := int64(1); seq <= 12; seq++ {
		m := outbox.Message{ID: outbox.NewID(), Sequence: seq, Topic: "t", Key: []byte{byte(seq)},
			Value: bytes.Repeat([]byte{byte(seq)}, 150*1024), CreatedAt: t0}
		putRaw(t, e, messageItem(m, 0))
	}
	h := &hookClient{}
	s := e.hooked(t, h)
	cases := []struct {
		after     int64
		limit     int
		n         int
		end       bool
		firstSeen int64
	}{
		{0, 10, 10, false, 1},
		{0, 12, 12, true, 1},
		{0, 100, 12, true, 1},
		{3, 9, 9, true, 4},
		{3, 8, 8, false, 4},
	}
	for _, c := range cases {
		before := h.queries.Load()
		got, end, err := s.Pending(ctx, 0, c.after, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != c.n || end != c.end || got[0].Sequence != c.firstSeen {
			t.Fatalf("Pending(after %d, limit %d) = %d entries from %d, end %v; want %d from %d, end %v",
				c.after, c.limit, len(got), got[0].Sequence, end, c.n, c.firstSeen, c.end)
		}
		for i, g := range got {
			if g.Err != nil || g.Sequence != c.firstSeen+int64(i) || len(g.Message.Value) != 150*1024 {
				t.Fatalf("entry %d = seq %d err %v", i, g.Sequence, g.Err)
			}
		}
		if q := h.queries.Load() - before; q < 2 {
			t.Errorf("Pending(after %d, limit %d) read %d items of 150 KB in %d query; pages are 1 MB", c.after, c.limit, len(got), q)
		}
	}
}

func TestPendingReturnsUndecodableItemsAsEntries(t *testing.T) {
	e := newEnv(t, 1)
	m := outbox.Message{ID: outbox.NewID(), Topic: "t", CreatedAt: t0}
	for _, seq := range []int64{1, 3} {
		m.Sequence = seq
		putRaw(t, e, messageItem(m, 0))
	}
	bad := messageItem(m, 0)
	bad[attrSeq] = numAttr(2)
	bad[attrHeaders] = &types.AttributeValueMemberB{Value: []byte{1, 5}}
	putRaw(t, e, bad)
	got, end, err := e.store.Pending(ctxT(t), 0, 0, 10)
	if err != nil || !end || len(got) != 3 {
		t.Fatalf("Pending = %d entries, %v, %v", len(got), end, err)
	}
	var ie *ItemError
	if got[0].Err != nil || got[2].Err != nil || !errors.As(got[1].Err, &ie) || ie.Attribute != attrHeaders || got[1].Sequence != 2 {
		t.Fatalf("entries = %+v", got)
	}
}

func TestMarkPublishedRetriesUnprocessedItems(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	var seqs []int64
	for seq := int64(1); seq <= 60; seq++ {
		putRaw(t, e, messageItem(outbox.Message{ID: outbox.NewID(), Sequence: seq, Topic: "t", CreatedAt: t0}, 0))
		seqs = append(seqs, seq, seq) // duplicates are allowed
	}
	var calls, deferred atomic.Int64
	s := e.hooked(t, &hookClient{batchWrite: func(ctx context.Context, in *dynamodb.BatchWriteItemInput) (*dynamodb.BatchWriteItemOutput, error) {
		calls.Add(1)
		reqs := in.RequestItems[e.tables.Messages]
		if len(reqs) > 25 {
			t.Errorf("a batch of %d puts", len(reqs))
		}
		// Like a throttled table: the second half stays unprocessed.
		half := (len(reqs) + 1) / 2
		if _, err := e.d.Client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{
			RequestItems: map[string][]types.WriteRequest{e.tables.Messages: reqs[:half]},
		}); err != nil {
			return nil, err
		}
		deferred.Add(int64(len(reqs) - half))
		return &dynamodb.BatchWriteItemOutput{UnprocessedItems: map[string][]types.WriteRequest{e.tables.Messages: reqs[half:]}}, nil
	}}, DeleteConcurrency(2))
	if err := s.MarkPublished(ctx, 0, seqs, t0); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, 0); n != 0 {
		t.Fatalf("%d items left", n)
	}
	if deferred.Load() == 0 || calls.Load() < 4 {
		t.Fatalf("calls %d, deferred %d: the unprocessed path did not run", calls.Load(), deferred.Load())
	}
}

// A marking that finds calls free is cut evenly over up to markSpread (4)
// of them, not packed into one: a call takes as long as its slowest put
// (make demo on DynamoDB Local: p50 490-575 ms with one call per 8 puts,
// 230-350 ms cut over 4). At most DeleteConcurrency calls are in flight,
// and what queues behind them goes in calls of 25.
func TestMarkPublishedCutsThePutsEvenlyOverFreeCalls(t *testing.T) {
	e := newEnv(t, 1)
	var mu sync.Mutex
	var sizes []int
	for _, c := range []struct {
		calls int
		n     int64
		want  string
	}{{4, 1, "[1]"}, {4, 6, "[2 2 2]"}, {4, 20, "[5 5 5 5]"}, {4, 22, "[4 6 6 6]"}, {4, 130, "[5 25 25 25 25 25]"},
		{DefaultDeleteConcurrency, 25, "[4 7 7 7]"}, {DefaultDeleteConcurrency, 200, "[25 25 25 25 25 25 25 25]"},
		{2, 25, "[12 13]"}, {1, 30, "[5 25]"}} {
		s := e.hooked(t, &hookClient{batchWrite: func(ctx context.Context, in *dynamodb.BatchWriteItemInput) (*dynamodb.BatchWriteItemOutput, error) {
			mu.Lock()
			sizes = append(sizes, len(in.RequestItems[e.tables.Messages]))
			mu.Unlock()
			return &dynamodb.BatchWriteItemOutput{}, nil
		}}, DeleteConcurrency(c.calls))
		mu.Lock()
		sizes = nil
		mu.Unlock()
		var seqs []int64
		for seq := range c.n {
			seqs = append(seqs, seq+1)
		}
		if err := s.MarkPublished(ctxT(t), 0, seqs, t0); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		slices.Sort(sizes)
		got := fmt.Sprint(sizes)
		mu.Unlock()
		if got != c.want {
			t.Errorf("DeleteConcurrency %d, %d tombstones: calls of %s puts, want %s", c.calls, c.n, got, c.want)
		}
	}
}

func TestMarkPublishedStopsWithTheContext(t *testing.T) {
	e := newEnv(t, 1)
	s := e.hooked(t, &hookClient{batchWrite: func(ctx context.Context, in *dynamodb.BatchWriteItemInput) (*dynamodb.BatchWriteItemOutput, error) {
		return &dynamodb.BatchWriteItemOutput{UnprocessedItems: in.RequestItems}, nil // never progresses
	}})
	ctx, cancel := context.WithTimeout(ctxT(t), 200*time.Millisecond)
	defer cancel()
	err := s.MarkPublished(ctx, 0, []int64{1, 2, 3}, t0)
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, outbox.ErrThrottled) {
		t.Fatalf("err = %v, want the context's deadline (or ErrThrottled)", err)
	}
}

func TestCreateTables(t *testing.T) {
	d, tables := newTables(t, BucketCount(12))
	ctx := ctxT(t)
	// Idempotent.
	if err := CreateTables(ctx, d.Client, tables, BucketCount(12)); err != nil {
		t.Fatalf("second CreateTables: %v", err)
	}
	// Another bucket count is refused, naming both.
	err := CreateTables(ctx, d.Client, tables, BucketCount(8))
	var me *outbox.MisconfigurationError
	if !errors.As(err, &me) || me.Configured != "8" || me.Stored != "12" || !strings.Contains(me.Fix, "outbox buckets set") {
		t.Fatalf("CreateTables with another BucketCount: %v; want both counts and outbox buckets set", err)
	}
	// Without the option the default (8) is meant, and refused too.
	if err := CreateTables(ctx, d.Client, tables); !errors.As(err, &me) {
		t.Fatalf("CreateTables with the default over 12: %v", err)
	}
	desc, err := d.Client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: str(tables.Messages)})
	if err != nil {
		t.Fatal(err)
	}
	if ss := desc.Table.StreamSpecification; ss == nil || !aws.ToBool(ss.StreamEnabled) || ss.StreamViewType != types.StreamViewTypeKeysOnly {
		t.Errorf("stream = %+v, want KEYS_ONLY", ss)
	}
	if bm := desc.Table.BillingModeSummary; bm == nil || bm.BillingMode != types.BillingModePayPerRequest {
		t.Errorf("billing = %+v", bm)
	}
	for _, name := range []string{tables.Messages, tables.Control} {
		ttl, err := d.Client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: str(name)})
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TimeToLiveDescription.TimeToLiveStatus != types.TimeToLiveStatusEnabled || aws.ToString(ttl.TimeToLiveDescription.AttributeName) != attrTTL {
			t.Errorf("TTL of %s = %+v", name, ttl.TimeToLiveDescription)
		}
	}
	// A table of the wrong shape under the messages name is refused.
	wrong := Tables{Messages: tables.Control, Control: testenv.Name(t, "ctl2")}
	if err := CreateTables(ctx, d.Client, wrong); !errors.As(err, &me) || me.Setting != "Tables.Messages" {
		t.Fatalf("CreateTables over a control table as messages table: %v", err)
	}
	if err := CreateTables(ctx, d.Client, Tables{Messages: "same", Control: "same"}); err == nil {
		t.Fatal("one table for both accepted")
	}
}

func TestNewStoreChecksConfig(t *testing.T) {
	d, tables := newTables(t, BucketCount(4))
	ctx := ctxT(t)
	if _, err := NewStore(ctx, d.Client, Tables{Messages: tables.Messages, Control: testenv.Name(t, "none")}); !errors.Is(err, ErrNoConfig) {
		t.Fatalf("NewStore without an outbox: %v", err)
	}
	var oe *outbox.OptionError
	if _, err := NewStore(ctx, d.Client, tables, DeleteConcurrency(0)); !errors.As(err, &oe) || oe.Option != "DeleteConcurrency" {
		t.Fatalf("DeleteConcurrency(0): %v", err)
	}
	s, err := NewStore(ctx, d.Client, tables, FenceTTL(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.Config(ctx); err != nil || c.BucketCount != 4 || c.FormatVersion != outbox.FormatVersion {
		t.Fatalf("Config = %+v, %v", c, err)
	}
	before := time.Now()
	if err := s.Fence(ctx, 0, 1, t0); err != nil {
		t.Fatal(err)
	}
	e := &env{d: d, tables: tables, store: s}
	assertTTL(t, e.getItem(t, tables.Messages, messageKey(0, 1)), t0, before, 48*time.Hour)
	before = time.Now()
	if err := s.Heartbeat(ctx, "r1", t0, time.Minute); err != nil {
		t.Fatal(err)
	}
	hb := e.getItem(t, tables.Control, controlKey(relaysPK, "r1"))
	if seen, _ := intAttr(hb, attrSeen, true); seen != t0.UnixMilli() {
		t.Errorf("seen = %d", seen)
	}
	assertTTL(t, hb, t0, before, time.Minute)
}

// assertTTL checks that item's x is ttl after the later of now (the caller's
// clock) and the wall clock, read before the write and now.
func assertTTL(t *testing.T, item map[string]types.AttributeValue, now, before time.Time, ttl time.Duration) {
	t.Helper()
	after := time.Now()
	lo, hi := ttlSeconds(expiresAtFrom(now, before, ttl)), ttlSeconds(expiresAtFrom(now, after, ttl))
	if x, err := intAttr(item, attrTTL, true); err != nil || x < lo || x > hi {
		t.Errorf("TTL attribute %d (%v), want %d..%d: %v after max(now, wall clock)", x, err, lo, hi, ttl)
	}
}

func expiresAtFrom(now, wall time.Time, ttl time.Duration) time.Time {
	if now.After(wall) {
		return now.Add(ttl)
	}
	return wall.Add(ttl)
}

func TestExpiresAtFollowsTheLaterClock(t *testing.T) {
	defer func(f func() time.Time) { wallClock = f }(wallClock)
	wall := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	wallClock = func() time.Time { return wall }
	cases := []struct {
		name string
		now  time.Time
		want time.Time
	}{
		{"fake clock in the past", wall.Add(-30 * 24 * time.Hour), wall.Add(time.Hour)},
		{"clock ahead of the wall", wall.Add(time.Minute), wall.Add(time.Minute + time.Hour)},
		{"same", wall, wall.Add(time.Hour)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := expiresAt(c.now, time.Hour); !got.Equal(c.want) {
				t.Fatalf("expiresAt = %v, want %v", got, c.want)
			}
		})
	}
}

// Peek skips any number of fences without letting them use up its limit,
// in pages that grow, so a long run of fences costs few calls.
func TestPeekSkipsFencesInGrowingPages(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	const fences = 3000
	var reqs []types.WriteRequest
	for seq := int64(1); seq <= fences; seq++ {
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: fenceItem(0, seq, t0, t0.Add(DefaultFenceTTL))}})
	}
	for len(reqs) > 0 {
		n := min(len(reqs), batchWriteMax)
		out, err := e.d.Client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{e.tables.Messages: reqs[:n]}})
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs[n:], out.UnprocessedItems[e.tables.Messages]...)
	}
	m := outbox.Message{ID: outbox.NewID(), Sequence: fences + 1, Topic: "t", CreatedAt: t0.Add(time.Second)}
	putRaw(t, e, messageItem(m, 0))
	h := &hookClient{}
	s := e.hooked(t, h)
	n, oldest, err := s.Peek(ctx, 0, 0, 1)
	if err != nil || n != 1 || !oldest.Equal(m.CreatedAt) {
		t.Fatalf("Peek = %d %v %v, want 1 %v", n, oldest, err, m.CreatedAt)
	}
	// Pages of 1, 2, 4, ..., 512 items, then of peekMaxPage: 10 calls for
	// the first 1023 fences, 2 for the other 1977, 1 that finds the message.
	if q := h.queries.Load(); q > 13 {
		t.Fatalf("%d Query calls to skip %d fences; the pages do not grow", q, fences)
	}
}

// An item whose fence flag is not the boolean true is not a fence: the relay
// parks it as undecodable, so the probe must report it as work.
func TestPeekCountsMalformedFenceFlags(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	putRaw(t, e, fenceItem(0, 1, t0, t0.Add(DefaultFenceTTL)))
	for seq, flag := range map[int64]types.AttributeValue{
		2: &types.AttributeValueMemberBOOL{Value: false},
		3: strAttr("true"),
	} {
		item := fenceItem(0, seq, t0, t0.Add(DefaultFenceTTL))
		item[attrFence] = flag
		putRaw(t, e, item)
	}
	n, _, err := e.store.Peek(ctx, 0, 0, 10)
	if err != nil || n != 2 {
		t.Fatalf("Peek = %d %v, want 2 (the two malformed flags, not the fence)", n, err)
	}
	got, _, err := e.store.Pending(ctx, 0, 0, 10)
	if err != nil || len(got) != 3 || got[1].Err == nil || got[2].Err == nil {
		t.Fatalf("Pending = %+v %v; want the malformed flags as undecodable entries", got, err)
	}
}

// RecordStuck puts why a bucket stopped on its lease item without touching
// the hold, and drops a record for a bucket whose head passed it.
func TestRecordStuck(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	now := time.UnixMilli(time.Now().UnixMilli())
	l, err := e.store.Acquire(ctx, 0, "relay-a", now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	st := outbox.Stuck{Sequence: 3, MessageID: outbox.NewID(), Topic: "gone", Class: outbox.Fatal, Reason: `topic "gone" does not exist`,
		Since: now, Last: now.Add(time.Minute), Count: 7}
	if err := e.store.RecordStuck(ctx, 0, st); err != nil {
		t.Fatal(err)
	}
	got, err := e.store.ReadLease(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Stuck != st || got.Owner != l.Owner || !got.Expires.Equal(l.Expires) || got.Epoch != l.Epoch {
		t.Fatalf("lease %+v, want the hold of %+v and stuck %+v", got, l, st)
	}
	// The lease protocol's writes keep it (and return it).
	if l, err = e.store.Update(ctx, got, outbox.LeaseUpdate{Head: 3, Cleaned: 3}, now); err != nil || l.Stuck != st {
		t.Fatalf("Update = %+v, %v", l, err)
	}
	// Head passed 3: a late record is dropped, without an error.
	late := st
	late.Count, late.Reason = 8, "late"
	if err := e.store.RecordStuck(ctx, 0, late); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.store.ReadLease(ctx, 0); got.Stuck != st || got.Stuck.Current(got.Head) {
		t.Fatalf("lease %+v: want the old record kept, and stale", got)
	}
}

// Opened is the config item as NewStore read it: what Config reads again.
func TestOpenedIsTheConfigItem(t *testing.T) {
	e := newEnv(t, 3, WithMode(outbox.WatermarkMode), Retention(48*time.Hour))
	s, err := NewStore(ctxT(t), e.d.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	read, err := s.Config(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Opened(); fmt.Sprint(got) != fmt.Sprint(read) || got.BucketCount != 3 || got.Mode != outbox.WatermarkMode {
		t.Fatalf("Opened() = %+v; Config read %+v", got, read)
	}
}
