package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
)

// batchCall is one BatchGetItem or BatchWriteItem the fake received: what
// it asked, its context, and the gate it waits on (when the fake holds
// calls).
type batchCall struct {
	ctx     context.Context
	buckets []int     // BatchGetItem: the lease keys' buckets
	puts    []markKey // BatchWriteItem
	release chan struct{}
}

// batchFake is a DynamoDB client with only the batch calls: each call is
// sent on calls and, while hold is set, waits for its release (or its
// context). unprocessed decides, per call, which keys it leaves
// unprocessed; fail, which calls fail.
type batchFake struct {
	StoreAPI // nil: any other call panics
	tables   Tables
	calls    chan *batchCall

	mu          sync.Mutex
	hold        bool
	all         []*batchCall
	unprocessed func(c *batchCall, n int) (buckets []int, puts []markKey)
	fail        func(c *batchCall) error
}

func newBatchFake() *batchFake {
	return &batchFake{tables: Tables{Messages: "m", Control: "c"}, calls: make(chan *batchCall, 1000)}
}

func (f *batchFake) store(t *testing.T, opts ...StoreOption) *Store {
	s := defaultSettings()
	applyOptions(&s, opts)
	if err := s.validate(); err != nil {
		t.Fatal(err)
	}
	return &Store{client: f, tables: f.tables, cfg: s}
}

// enter records c, waits while held and returns what the call leaves
// unprocessed, or its error.
func (f *batchFake) enter(c *batchCall) ([]int, []markKey, error) {
	c.release = make(chan struct{})
	f.mu.Lock()
	f.all = append(f.all, c)
	n, hold, unprocessed, fail := len(f.all), f.hold, f.unprocessed, f.fail
	f.mu.Unlock()
	f.calls <- c
	if hold {
		select {
		case <-c.release:
		case <-c.ctx.Done():
			return nil, nil, c.ctx.Err()
		}
	}
	if fail != nil {
		if err := fail(c); err != nil {
			return nil, nil, err
		}
	}
	if unprocessed == nil {
		return nil, nil, nil
	}
	b, p := unprocessed(c, n)
	return b, p, nil
}

func (f *batchFake) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	ka := in.RequestItems[f.tables.Control]
	if len(in.RequestItems) != 1 || ka.ConsistentRead == nil || !*ka.ConsistentRead {
		return nil, fmt.Errorf("fake: want one consistent read of the control table, got %+v", in.RequestItems)
	}
	c := &batchCall{ctx: ctx}
	for _, k := range ka.Keys {
		var b int
		if _, err := fmt.Sscanf(strField(k, attrPK), "bucket#%d", &b); err != nil || strField(k, attrSK) != leaseSK {
			return nil, fmt.Errorf("fake: key %v is no lease key", k)
		}
		c.buckets = append(c.buckets, b)
	}
	if len(c.buckets) > batchGetMax || hasDuplicate(c.buckets) {
		return nil, fmt.Errorf("fake: ValidationException: %d keys, duplicates %v", len(c.buckets), hasDuplicate(c.buckets))
	}
	left, _, err := f.enter(c)
	if err != nil {
		return nil, err
	}
	out := &dynamodb.BatchGetItemOutput{Responses: map[string][]map[string]types.AttributeValue{}}
	for _, b := range c.buckets {
		if slices.Contains(left, b) {
			ka := out.UnprocessedKeys[f.tables.Control]
			ka.Keys = append(ka.Keys, leaseKey(b))
			if out.UnprocessedKeys == nil {
				out.UnprocessedKeys = map[string]types.KeysAndAttributes{}
			}
			out.UnprocessedKeys[f.tables.Control] = ka
			continue
		}
		if b%7 == 3 {
			continue // no lease item
		}
		item := leaseKey(b)
		item[attrOwner] = strAttr(fmt.Sprint("owner-", b))
		out.Responses[f.tables.Control] = append(out.Responses[f.tables.Control], item)
	}
	return out, nil
}

func (f *batchFake) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	c := &batchCall{ctx: ctx}
	reqs := in.RequestItems[f.tables.Messages]
	for _, r := range reqs {
		b, _ := intAttr(r.PutRequest.Item, attrBucket, true)
		seq, _ := intAttr(r.PutRequest.Item, attrSeq, true)
		c.puts = append(c.puts, markKey{int(b), seq})
	}
	if len(in.RequestItems) != 1 || len(c.puts) > batchWriteMax || hasDuplicate(c.puts) {
		return nil, fmt.Errorf("fake: ValidationException: %d puts, duplicates %v", len(c.puts), hasDuplicate(c.puts))
	}
	_, left, err := f.enter(c)
	if err != nil {
		return nil, err
	}
	out := &dynamodb.BatchWriteItemOutput{}
	for i, k := range c.puts {
		if slices.Contains(left, k) {
			if out.UnprocessedItems == nil {
				out.UnprocessedItems = map[string][]types.WriteRequest{}
			}
			out.UnprocessedItems[f.tables.Messages] = append(out.UnprocessedItems[f.tables.Messages], reqs[i])
		}
	}
	return out, nil
}

func hasDuplicate[K comparable](keys []K) bool {
	seen := map[K]bool{}
	for _, k := range keys {
		if seen[k] {
			return true
		}
		seen[k] = true
	}
	return false
}

// next returns the next call the fake received.
func (f *batchFake) next(t *testing.T) *batchCall {
	t.Helper()
	select {
	case c := <-f.calls:
		return c
	case <-time.After(time.Minute):
		t.Fatal("no call came")
		return nil
	}
}

// none checks that no call came that was not taken with next yet.
func (f *batchFake) none(t *testing.T) {
	t.Helper()
	select {
	case c := <-f.calls:
		t.Fatalf("an unexpected call: buckets %v, puts %v", c.buckets, c.puts)
	default:
	}
}

func (f *batchFake) setHold(hold bool) {
	f.mu.Lock()
	f.hold = hold
	f.mu.Unlock()
}

// waitQueued waits until n distinct keys are queued (not sent) in c.
func waitQueued[K comparable, V, R any](t *testing.T, c *combiner[K, V, R], n int) {
	t.Helper()
	waitCombiner(t, c, n, "keys queued", func() int { return len(c.queued) })
}

// waitWaiters waits until n callers' asks wait on queued keys in all (a
// key asked by two callers counts twice): with callers that share keys,
// waitQueued's count of keys is reached before the last of them joined.
func waitWaiters[K comparable, V, R any](t *testing.T, c *combiner[K, V, R], n int) {
	t.Helper()
	waitCombiner(t, c, n, "asks wait on queued keys", func() int {
		got := 0
		for _, p := range c.queued {
			got += len(p.waiters)
		}
		return got
	})
}

// waitCombiner polls count, under c's lock, until it says n.
func waitCombiner[K comparable, V, R any](t *testing.T, c *combiner[K, V, R], n int, what string, count func() int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c.mu.Lock()
		got := count()
		c.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s, want %d", got, what, n)
		}
		time.Sleep(time.Millisecond)
	}
}

type leaseResult struct {
	bucket int
	lease  outbox.Lease
	err    error
}

func readAsync(ctx context.Context, s *Store, bucket int, out chan<- leaseResult) {
	go func() {
		l, err := s.ReadLease(ctx, bucket)
		out <- leaseResult{bucket, l, err}
	}()
}

// checkLease checks that r is bucket's own lease as the fake stores it.
func checkLease(t *testing.T, r leaseResult) {
	t.Helper()
	want := fmt.Sprint("owner-", r.bucket)
	if r.bucket%7 == 3 {
		want = ""
	}
	if r.err != nil || r.lease.Bucket != r.bucket || r.lease.Owner != want {
		t.Errorf("ReadLease(%d) = %+v, %v; want owner %q", r.bucket, r.lease, r.err, want)
	}
}

// A look that finds a slot free is sent at once, alone: nothing waits for
// company.
func TestReadLeaseAloneIsSentAtOnce(t *testing.T) {
	f := newBatchFake()
	f.setHold(true)
	s := f.store(t)
	out := make(chan leaseResult, 1)
	readAsync(ctxT(t), s, 5, out)
	c := f.next(t)
	if !slices.Equal(c.buckets, []int{5}) {
		t.Fatalf("call of %v, want [5]", c.buckets)
	}
	close(c.release)
	checkLease(t, <-out)
}

// Looks that arrive while every slot is busy go together: N of them cost
// ceil(N/100) calls, each a consistent BatchGetItem of at most 100 keys, and
// each caller gets its own bucket's lease (or none).
func TestReadLeasesCombineWhileCallsAreInFlight(t *testing.T) {
	f := newBatchFake()
	f.setHold(true)
	s := f.store(t)
	ctx := ctxT(t)
	out := make(chan leaseResult, 300)
	held := fillLookSlots(t, ctx, f, s, out)
	const n = 250
	for b := 100; b < 100+n; b++ {
		readAsync(ctx, s, b, out)
	}
	waitQueued(t, s.combined().looks, n)
	f.none(t)
	f.setHold(false)
	releaseHeld(held)
	var sizes []int
	for range (n + batchGetMax - 1) / batchGetMax {
		sizes = append(sizes, len(f.next(t).buckets))
	}
	for range lookCalls + n {
		checkLease(t, <-out)
	}
	f.none(t)
	slices.Sort(sizes)
	if fmt.Sprint(sizes) != "[50 100 100]" {
		t.Errorf("the queued looks went out in calls of %v keys, want [50 100 100]", sizes)
	}
}

// A caller whose context ends while its look is queued returns the
// context's error at once, and its key is never sent; two callers of one
// bucket share its key.
func TestReadLeaseQueuedCallerLeavesWithItsContext(t *testing.T) {
	f := newBatchFake()
	f.setHold(true)
	s := f.store(t)
	ctx := ctxT(t)
	out := make(chan leaseResult, 10)
	held := fillLookSlots(t, ctx, f, s, out)
	gone, cancel := context.WithCancel(ctx)
	readAsync(gone, s, 50, out)
	readAsync(ctx, s, 51, out)
	readAsync(ctx, s, 51, out)
	waitQueued(t, s.combined().looks, 2)
	waitWaiters(t, s.combined().looks, 3)
	cancel()
	if r := <-out; r.bucket != 50 || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the cancelled caller got %+v, want bucket 50 and context.Canceled", r)
	}
	f.setHold(false)
	releaseHeld(held)
	if c := f.next(t); !slices.Equal(c.buckets, []int{51}) {
		t.Fatalf("the queued call asked %v, want [51] (the cancelled caller's key is never sent)", c.buckets)
	}
	for range lookCalls + 2 {
		checkLease(t, <-out)
	}
	f.none(t)
}

// One participant's context ending does not cancel the call the others
// wait on; the call runs until the latest participant's deadline, and is
// cancelled once every participant has left.
func TestReadLeaseCallOutlivesALeavingParticipant(t *testing.T) {
	f := newBatchFake()
	f.setHold(true)
	s := f.store(t)
	ctx := ctxT(t)
	out := make(chan leaseResult, 10)
	held := fillLookSlots(t, ctx, f, s, out)
	early, cancelEarly := context.WithTimeout(ctx, time.Hour)
	late, cancelLate := context.WithTimeout(ctx, 2*time.Hour)
	defer cancelLate()
	// The early caller first: the call carries its context's values.
	readAsync(early, s, 60, out)
	waitQueued(t, s.combined().looks, 1)
	readAsync(late, s, 61, out)
	waitQueued(t, s.combined().looks, 2)
	close(held[0].release)
	checkLease(t, <-out)
	c := f.next(t)
	if got := sorted(c.buckets); !slices.Equal(got, []int{60, 61}) {
		t.Fatalf("call of %v, want [60 61]", got)
	}
	if d, _ := c.ctx.Deadline(); !d.Equal(mustDeadline(late)) {
		t.Errorf("the call's deadline is %v, want the latest participant's, %v", d, mustDeadline(late))
	}
	cancelEarly()
	if r := <-out; r.bucket != 60 || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the leaving caller got %+v, want bucket 60 and context.Canceled", r)
	}
	if err := c.ctx.Err(); err != nil {
		t.Fatalf("the combined call was cancelled with its first participant: %v", err)
	}
	cancelLate()
	<-c.ctx.Done() // every participant left: the call is cancelled
	if r := <-out; r.bucket != 61 || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the second caller got %+v, want context.Canceled", r)
	}
	close(held[1].release)
	checkLease(t, <-out)
}

// overdueCtx reports a deadline that has passed but ends only when the
// test closes done: its timer, as a real one may be on a busy machine, has
// not fired yet.
type overdueCtx struct {
	context.Context
	done chan struct{}
}

func (c overdueCtx) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
func (c overdueCtx) Done() <-chan struct{}       { return c.done }
func (c overdueCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// A call's deadline runs on a timer of its own: when it fires before the
// caller's (same deadline), the caller still returns with its own context
// ended, so that it tells the interruption from a failure (waitPrevious:
// TestSetupPolicy failed in CI on a raw "context deadline exceeded" while
// its ctx.Err() was still nil).
func TestReadLeaseReturnsOnItsDeadlineWithItsContextEnded(t *testing.T) {
	f := newBatchFake()
	f.fail = func(c *batchCall) error {
		<-c.ctx.Done()
		return fmt.Errorf("operation error DynamoDB: BatchGetItem, %w", c.ctx.Err())
	}
	s := f.store(t)
	ctx := overdueCtx{Context: ctxT(t), done: make(chan struct{})}
	out := make(chan leaseResult, 1)
	readAsync(ctx, s, 5, out)
	f.next(t)
	select {
	case r := <-out:
		t.Fatalf("ReadLease returned %v while its context had not ended yet (ctx.Err() = %v)", r.err, ctx.Err())
	case <-time.After(200 * time.Millisecond):
	}
	close(ctx.done)
	if r := <-out; !errors.Is(r.err, context.DeadlineExceeded) || ctx.Err() == nil {
		t.Fatalf("ReadLease = %v, want the call's deadline error", r.err)
	}
}

func sorted(x []int) []int {
	x = slices.Clone(x)
	slices.Sort(x)
	return x
}

func mustDeadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// Keys the table leaves unprocessed are retried, and only they; each
// caller gets its own bucket's answer.
func TestReadLeaseRetriesUnprocessedKeys(t *testing.T) {
	f := newBatchFake()
	f.setHold(true)
	s := f.store(t)
	ctx := ctxT(t)
	out := make(chan leaseResult, 10)
	held := fillLookSlots(t, ctx, f, s, out)
	for _, b := range []int{20, 21, 22, 23} {
		readAsync(ctx, s, b, out)
	}
	waitQueued(t, s.combined().looks, 4)
	f.mu.Lock()
	f.hold = false
	f.unprocessed = func(c *batchCall, n int) ([]int, []markKey) {
		if n == lookCalls+1 {
			return []int{21, 23}, nil
		}
		return nil, nil
	}
	f.mu.Unlock()
	releaseHeld(held)
	first, retry := f.next(t), f.next(t)
	if got := sorted(first.buckets); !slices.Equal(got, []int{20, 21, 22, 23}) {
		t.Fatalf("first call %v", got)
	}
	if got := sorted(retry.buckets); !slices.Equal(got, []int{21, 23}) {
		t.Fatalf("the retry asked %v, want the unprocessed [21 23]", got)
	}
	for range lookCalls + 4 {
		checkLease(t, <-out)
	}
	f.none(t)
}

// holdMarks fills every tombstone call slot of s with a held call (bucket
// 1000+i, one put) and returns them and their results.
func holdMarks(t *testing.T, f *batchFake, s *Store) ([]*batchCall, chan error) {
	t.Helper()
	f.setHold(true)
	done := make(chan error, s.cfg.deleteConcurrency)
	var held []*batchCall
	for i := range s.cfg.deleteConcurrency {
		go func() { done <- s.MarkPublished(ctxT(t), 1000+i, []int64{1}, t0) }()
		held = append(held, f.next(t))
	}
	return held, done
}

func releaseAll(t *testing.T, f *batchFake, held []*batchCall, done chan error) {
	t.Helper()
	f.setHold(false)
	releaseHeld(held)
	for range held {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

type markResult struct {
	bucket int
	err    error
}

// Tombstones of many buckets queued while every slot is busy go out in as
// few calls of at most 25 as the limit allows; a put asked by two callers
// is sent once.
func TestMarkPublishedCombinesAcrossBuckets(t *testing.T) {
	f := newBatchFake()
	s := f.store(t, DeleteConcurrency(2))
	held, heldDone := holdMarks(t, f, s)
	out := make(chan markResult, 20)
	unique := map[markKey]bool{}
	for b := range 10 {
		// Each bucket's own 10..13.
		seqs := []int64{10, 11, 12, 13}
		for _, seq := range seqs {
			unique[markKey{b, seq}] = true
		}
		go func() {
			err := s.MarkPublished(ctxT(t), b, seqs, t0)
			out <- markResult{b, err}
		}()
	}
	// Two callers mark bucket 20's 1..3 (3 twice): a duplicate across
	// callers and within one.
	shared := []int64{1, 2, 3, 3}
	for i := range 2 {
		go func() {
			err := s.MarkPublished(ctxT(t), 20, shared, t0)
			out <- markResult{20 + i, err}
		}()
	}
	unique[markKey{20, 1}], unique[markKey{20, 2}], unique[markKey{20, 3}] = true, true, true
	waitQueued(t, s.combined().marks, len(unique))
	waitWaiters(t, s.combined().marks, 10*4+3+3) // both of bucket 20's callers joined
	f.none(t)
	releaseAll(t, f, held, heldDone)
	sent := map[markKey]int{}
	var sizes []int
	for range (len(unique) + batchWriteMax - 1) / batchWriteMax {
		c := f.next(t)
		sizes = append(sizes, len(c.puts))
		for _, k := range c.puts {
			sent[k]++
		}
	}
	for range 12 {
		if r := <-out; r.err != nil {
			t.Errorf("bucket %d: %v", r.bucket, r.err)
		}
	}
	f.none(t)
	slices.Sort(sizes)
	if fmt.Sprint(sizes) != "[18 25]" {
		t.Errorf("43 queued puts went out in calls of %v, want [18 25]", sizes)
	}
	for k := range unique {
		if sent[k] != 1 {
			t.Errorf("put %+v sent %d times, want once", k, sent[k])
		}
	}
}

// A call's error fails the callers whose puts were in it, and only them;
// puts left unprocessed are retried, and a caller whose puts stay
// unprocessed gets ErrThrottled while the others return.
func TestMarkPublishedAttributesErrorsAndUnprocessedPuts(t *testing.T) {
	f := newBatchFake()
	s := f.store(t, DeleteConcurrency(1))
	s.combined().marks.attempts = 3
	held, heldDone := holdMarks(t, f, s)
	boom := errors.New("boom")
	f.mu.Lock()
	f.fail = func(c *batchCall) error {
		if slices.Contains(c.puts, markKey{9, 1}) {
			return boom
		}
		return nil
	}
	f.unprocessed = func(c *batchCall, n int) ([]int, []markKey) {
		var left []markKey
		for _, k := range c.puts {
			// Bucket 2 never lands; bucket 3's first call does not.
			if k.bucket == 2 || k.bucket == 3 && n == 2 {
				left = append(left, k)
			}
		}
		return nil, left
	}
	f.mu.Unlock()
	out := make(chan markResult, 10)
	mark := func(b int, seqs []int64) {
		go func() { out <- markResult{b, s.MarkPublished(ctxT(t), b, seqs, t0)} }()
	}
	// One call: buckets 1, 2 and 3 (3 + 3 + 3 puts).
	mark(1, []int64{1, 2, 3})
	mark(2, []int64{1, 2, 3})
	mark(3, []int64{1, 2, 3})
	waitQueued(t, s.combined().marks, 9)
	releaseAll(t, f, held, heldDone)
	got := map[int]error{}
	for range 3 {
		r := <-out
		got[r.bucket] = r.err
	}
	if got[1] != nil || got[3] != nil {
		t.Errorf("buckets 1 and 3: %v, %v; want both landed (3's after a retry)", got[1], got[3])
	}
	if !errors.Is(got[2], outbox.ErrThrottled) || !strings.Contains(got[2].Error(), "bucket 2") {
		t.Errorf("bucket 2: %v; want ErrThrottled naming bucket 2", got[2])
	}
	// Calls: the first (9 puts), then the retries of 2 and 3 (6), then
	// of 2 alone (3), the last attempt.
	var sizes []int
	for range 3 {
		sizes = append(sizes, len(f.next(t).puts))
	}
	if fmt.Sprint(sizes) != "[9 6 3]" {
		t.Errorf("calls of %v puts, want [9 6 3]", sizes)
	}
	f.none(t)

	// A call that fails fails every caller with a put in it, not one
	// queued behind it.
	held, heldDone = holdMarks(t, f, s)
	mark(8, []int64{1})
	mark(9, []int64{1})
	waitQueued(t, s.combined().marks, 2)
	close(held[0].release)
	if err := <-heldDone; err != nil {
		t.Fatal(err)
	}
	failing := f.next(t) // held
	mark(10, []int64{1})
	waitQueued(t, s.combined().marks, 1)
	f.setHold(false)
	close(failing.release)
	for range 3 {
		r := <-out
		if r.bucket == 10 && r.err != nil || r.bucket != 10 && !errors.Is(r.err, boom) {
			t.Errorf("bucket %d: %v; want the call's error for 8 and 9 only", r.bucket, r.err)
		}
	}
	if c := f.next(t); !slices.Equal(c.puts, []markKey{{10, 1}}) {
		t.Errorf("after the failed call: %v, want bucket 10's put alone", c.puts)
	}
}

// fillLookSlots sends a look of buckets 0..lookCalls-1 and returns the
// held calls: every look slot is then busy, and what follows queues.
func fillLookSlots(t *testing.T, ctx context.Context, f *batchFake, s *Store, out chan leaseResult) []*batchCall {
	t.Helper()
	var held []*batchCall
	for b := range lookCalls {
		readAsync(ctx, s, b, out)
		held = append(held, f.next(t))
	}
	return held
}

// releaseHeld lets held calls return.
func releaseHeld(held []*batchCall) {
	for _, c := range held {
		close(c.release)
	}
}
