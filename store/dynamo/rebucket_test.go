package dynamo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/sequence"
)

// orderPublisher acknowledges everything and records the keys' order.
type orderPublisher struct {
	mu   sync.Mutex
	keys map[string][]string // key -> values in publish order
}

func (p *orderPublisher) Publish(_ context.Context, msgs []outbox.Message) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keys == nil {
		p.keys = map[string][]string{}
	}
	for _, m := range msgs {
		p.keys[string(m.Key)] = append(p.keys[string(m.Key)], string(m.Value))
	}
	return len(msgs), nil
}

func keyedV(key, value string) outbox.Message {
	return outbox.Message{Topic: "orders", Key: []byte(key), Value: []byte(value)}
}

func drainAll(t *testing.T, r *outbox.Relay, buckets int) {
	t.Helper()
	for b := range buckets {
		if _, err := r.DrainBucket(ctxT(t), b); err != nil && !errors.Is(err, outbox.ErrLeaseHeld) {
			t.Fatalf("drain bucket %d: %v", b, err)
		}
	}
}

// A change with messages pending and a writer that wants to write during
// it: the writer pauses until the old buckets drained, then writes under the
// new count; every key's old message is published before its new one, and
// code that predates epochs can no longer reserve.
func TestChangeBucketCountOnline(t *testing.T) {
	e := newEnv(t, 8)
	ctx := ctxT(t)
	w, err := NewWriter(ctx, e.d.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	const keys = 24
	for k := range keys {
		if _, err := w.Write(ctx, nil, keyedV(fmt.Sprint("k", k), "old")); err != nil {
			t.Fatal(err)
		}
	}
	pub := &orderPublisher{}
	r, err := outbox.NewRelay(ctx, e.store, pub, outbox.GapTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan error, 1)
	var res ChangeResult
	go func() {
		var err error
		res, err = ChangeBucketCount(ctx, e.d.Client, e.tables, 16, ChangeTimeout(40*time.Second))
		changed <- err
	}()
	// Wait for every counter to be frozen.
	for {
		c := storedConfig(t, e.d.Client, e.tables)
		if c.Changing() && frozenCount(t, e, 8) == 8 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	wrote := make(chan Result, keys)
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() {
			res, err := w.Write(ctx, nil, keyedV(fmt.Sprint("k", k), "new"))
			if err != nil {
				t.Errorf("write during the change: %v", err)
			}
			wrote <- res
		})
	}
	// Drain new buckets before old ones, over and over, as relays racing
	// each other may: only the change's gate keeps a key's new message
	// behind its old one.
	for done := false; !done; {
		select {
		case err := <-changed:
			if err != nil {
				t.Fatalf("ChangeBucketCount: %v", err)
			}
			done = true
		default:
		}
		drainReverse(t, r, 16)
	}
	wg.Wait()
	close(wrote)
	for res := range wrote {
		for _, m := range res.Messages {
			if want := outbox.BucketForKey(m.Key, 16); m.Bucket != want {
				t.Errorf("key %s written to bucket %d after the change, want %d (of 16)", m.Key, m.Bucket, want)
			}
		}
	}
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 16 || c.BucketEpoch != 1 || c.Changing() {
		t.Fatalf("config after the change: %+v", c)
	}
	if res.From != 8 || res.To != 16 || res.Epoch != 1 || res.Frozen <= 0 {
		t.Errorf("result %+v", res)
	}
	drainReverse(t, r, 16) // r learns the new count on its first drain beyond the old one
	for k := range keys {
		key := fmt.Sprint("k", k)
		if got := pub.keys[key]; !slices.Equal(got, []string{"old", "new"}) {
			t.Errorf("key %s published %v, want [old new]", key, got)
		}
	}
	// Code that predates epochs adds to n unconditionally: refused loudly.
	_, err = e.d.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: str(e.tables.Control), Key: map[string]types.AttributeValue{"pk": strAttr(sequence.PartitionKey(3)), "sk": strAttr(sequence.SortKey)},
		UpdateExpression: str("ADD #n :n SET #v = :v"), ExpressionAttributeNames: map[string]string{"#n": "n", "#v": "v"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": numAttr(1), ":v": numAttr(1)},
	})
	if apiCode(err) != "ValidationException" {
		t.Errorf("an old writer's reservation after the change = %v, want a ValidationException", err)
	}
	// And an old process starting is refused by the config item's version.
	if v := e.getItem(t, e.tables.Control, controlKey(configPK, configSK))[attrVersion]; v.(*types.AttributeValueMemberN).Value != "3" {
		t.Errorf("config item version %v, want 3", v)
	}
}

// drainReverse drains buckets n-1..0, skipping those beyond the relay's
// count.
func drainReverse(t *testing.T, r *outbox.Relay, n int) {
	t.Helper()
	for b := n - 1; b >= 0; b-- {
		_, err := r.DrainBucket(ctxT(t), b)
		if err != nil && !errors.Is(err, outbox.ErrLeaseHeld) && !errors.As(err, new(*outbox.BucketRangeError)) {
			t.Fatalf("drain bucket %d: %v", b, err)
		}
	}
}

func frozenCount(t *testing.T, e *env, n int) int {
	t.Helper()
	frozen := 0
	for b := range n {
		item := e.getItem(t, e.tables.Control, map[string]types.AttributeValue{"pk": strAttr(sequence.PartitionKey(b)), "sk": strAttr(sequence.SortKey)})
		if v, ok := item["ce"].(*types.AttributeValueMemberN); ok && v.Value[0] == '-' {
			frozen++
		}
	}
	return frozen
}

// With no relay running the drain never ends: the change is aborted at its
// deadline, the count stays, and writers go on at the next epoch.
func TestChangeBucketCountAbortsAtDeadline(t *testing.T) {
	e := newEnv(t, 8)
	ctx := ctxT(t)
	w, err := NewWriter(ctx, e.d.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Write(ctx, nil, keyedV("a", "1"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ChangeBucketCount(ctx, e.d.Client, e.tables, 4, ChangeTimeout(300*time.Millisecond))
	var ae *ChangeAbortedError
	if !errors.As(err, &ae) || !slices.Equal(ae.Draining, []int{res.Messages[0].Bucket}) {
		t.Fatalf("ChangeBucketCount = %v, want a *ChangeAbortedError naming bucket %d", err, res.Messages[0].Bucket)
	}
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 8 || c.BucketEpoch != 1 || c.Changing() {
		t.Fatalf("config after the abort: %+v", c)
	}
	res2, err := w.Write(ctx, nil, keyedV("a", "2"))
	if err != nil {
		t.Fatal(err)
	}
	if m, old := res2.Messages[0], res.Messages[0]; m.Bucket != old.Bucket || m.Sequence != old.Sequence+1 {
		t.Errorf("after the abort the key's message is at %d/%d, want %d/%d", m.Bucket, m.Sequence, old.Bucket, old.Sequence+1)
	}
}

// A change whose caller stopped (crashed) after freezing some counters:
// once its deadline passed, the first writer that meets a frozen counter
// aborts it, and writes.
func TestWriterAbortsAnAbandonedChange(t *testing.T) {
	e := newEnv(t, 8)
	ctx := ctxT(t)
	w, err := NewWriter(ctx, e.d.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	stored := storedConfig(t, e.d.Client, e.tables)
	begin := stored
	begin.NextBucketCount, begin.ChangeDeadline = 16, time.UnixMilli(time.Now().Add(200*time.Millisecond).UnixMilli())
	if err := replaceConfig(ctx, e.d.Client, e.tables.Control, stored, begin); err != nil {
		t.Fatal(err)
	}
	for b := range 8 {
		if _, err := sequence.Freeze(ctx, e.d.Client, e.tables.Control, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	res, err := w.Write(ctx, nil, keyedV("a", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(begin.ChangeDeadline) {
		t.Errorf("the write ended before the change's deadline %v: the writer aborted a change that could still finish", begin.ChangeDeadline)
	}
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 8 || c.BucketEpoch != 1 || c.Changing() {
		t.Fatalf("config after the writer's abort: %+v", c)
	}
	if got := res.Messages[0].Bucket; got != outbox.BucketForKey([]byte("a"), 8) {
		t.Errorf("bucket %d, want the old count's", got)
	}
	if n := frozenCount(t, e, 16); n != 0 {
		t.Errorf("%d counters still frozen", n)
	}
}

// A change whose caller stopped between the flip and the thaw: a writer
// thaws the counter it needs.
func TestWriterThawsAfterAnInterruptedFlip(t *testing.T) {
	e := newEnv(t, 8)
	ctx := ctxT(t)
	w, err := NewWriter(ctx, e.d.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	first, err := w.Write(ctx, nil, keyedV("a", "1"))
	if err != nil {
		t.Fatal(err)
	}
	// Publish it, so the change can drain.
	r, err := outbox.NewRelay(ctx, e.store, &orderPublisher{})
	if err != nil {
		t.Fatal(err)
	}
	drainAll(t, r, 8)
	stored := storedConfig(t, e.d.Client, e.tables)
	begin := stored
	begin.NextBucketCount, begin.ChangeDeadline = 2, time.UnixMilli(time.Now().Add(time.Minute).UnixMilli())
	if err := replaceConfig(ctx, e.d.Client, e.tables.Control, stored, begin); err != nil {
		t.Fatal(err)
	}
	for b := range 8 {
		if _, err := sequence.Freeze(ctx, e.d.Client, e.tables.Control, b, 0); err != nil {
			t.Fatal(err)
		}
	}
	done := begin
	done.BucketCount, done.BucketEpoch, done.NextBucketCount, done.ChangeDeadline = 2, 1, 0, time.Time{}
	if err := replaceConfig(ctx, e.d.Client, e.tables.Control, begin, done); err != nil {
		t.Fatal(err)
	}
	res, err := w.Write(ctx, nil, keyedV("a", "2"))
	if err != nil {
		t.Fatal(err)
	}
	m := res.Messages[0]
	if m.Bucket != outbox.BucketForKey([]byte("a"), 2) {
		t.Errorf("bucket %d, want the new count's", m.Bucket)
	}
	if m.Bucket == first.Messages[0].Bucket && m.Sequence <= first.Messages[0].Sequence {
		t.Errorf("sequence %d reused below the fence point %d", m.Sequence, first.Messages[0].Sequence)
	}
	// A resumed change finds nothing to do but thaw the rest.
	if _, err := ChangeBucketCount(ctx, e.d.Client, e.tables, 2); err != nil {
		t.Fatal(err)
	}
}

// A number reserved last in its bucket and never written (a crashed writer)
// is no gap to a relay, since nothing follows it: the change fences it after
// its GapTimeout instead of waiting for its deadline.
func TestChangeFencesATrailingHole(t *testing.T) {
	e := newEnv(t, 8)
	reserve(t, e, 6, 1)
	res, err := ChangeBucketCount(ctxT(t), e.d.Client, e.tables, 16, ChangeTimeout(20*time.Second), ChangeGapTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatalf("ChangeBucketCount: %v", err)
	}
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 16 || res.Frozen < 200*time.Millisecond {
		t.Fatalf("config %+v after %v", c, res.Frozen)
	}
	if item := e.getItem(t, e.tables.Messages, messageKey(6, 1)); item[attrFence] == nil {
		t.Errorf("bucket 6 sequence 1 not fenced: %v", item)
	}
}

// resendingClient sends every UpdateItem twice and answers the second
// response, as the SDK does when the first response was lost.
type resendingClient struct {
	StoreAPI
	resends int
}

func (c *resendingClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if _, err := c.StoreAPI.UpdateItem(ctx, in, o...); err != nil {
		return nil, err
	}
	c.resends++
	return c.StoreAPI.UpdateItem(ctx, in, o...)
}

// Every conditional write of a change survives an SDK resend: the begin and
// the flip on the config item, the freezes and the thaws.
func TestChangeSurvivesResends(t *testing.T) {
	e := newEnv(t, 8)
	reserve(t, e, 2, 3)
	fence(t, e, 2, 1, 2, 3)
	c := &resendingClient{StoreAPI: e.d.Client}
	res, err := ChangeBucketCount(ctxT(t), c, e.tables, 4)
	if err != nil {
		t.Fatalf("ChangeBucketCount with resends: %v", err)
	}
	if got := storedConfig(t, e.d.Client, e.tables); got.BucketCount != 4 || got.BucketEpoch != 1 || res.Epoch != 1 || c.resends < 2+2*8 {
		t.Fatalf("config %+v, result %+v after %d resends", got, res, c.resends)
	}
	if n := frozenCount(t, e, 8); n != 0 {
		t.Errorf("%d counters still frozen", n)
	}
	if last, err := sequence.Last(ctxT(t), e.d.Client, e.tables.Control, 2); err != nil || last != 3 {
		t.Errorf("bucket 2's counter after the change: %d, %v; want 3", last, err)
	}
}

// A change left in progress past its deadline by a crashed tool is finished
// by the next change (its buckets are drained: nothing was pending), which
// then runs.
func TestChangeAfterAnAbandonedOne(t *testing.T) {
	e := newEnv(t, 8)
	ctx := ctxT(t)
	stored := storedConfig(t, e.d.Client, e.tables)
	begin := stored
	begin.NextBucketCount, begin.ChangeDeadline = 16, time.UnixMilli(time.Now().Add(-time.Second).UnixMilli())
	if err := replaceConfig(ctx, e.d.Client, e.tables.Control, stored, begin); err != nil {
		t.Fatal(err)
	}
	if _, err := sequence.Freeze(ctx, e.d.Client, e.tables.Control, 2, 0); err != nil {
		t.Fatal(err)
	}
	res, err := ChangeBucketCount(ctx, e.d.Client, e.tables, 4)
	if err != nil {
		t.Fatalf("ChangeBucketCount after an abandoned change: %v", err)
	}
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 4 || c.BucketEpoch != 2 || !res.Resumed || res.From != 16 {
		t.Fatalf("config %+v, result %+v; want 4 at epoch 2, from the abandoned change's 16 at epoch 1", c, res)
	}
	if n := frozenCount(t, e, 16); n != 0 {
		t.Errorf("%d counters still frozen", n)
	}
}

// The same with a message pending and no relay: the abandoned change ends
// aborted (8 stays, epoch 1), and the next change runs (and aborts too).
func TestChangeAfterAnAbandonedOneThatCannotDrain(t *testing.T) {
	e := newEnv(t, 8)
	ctx := ctxT(t)
	reserve(t, e, 5, 1)
	e.mustPut(t, message(5, 1))
	stored := storedConfig(t, e.d.Client, e.tables)
	begin := stored
	begin.NextBucketCount, begin.ChangeDeadline = 16, time.UnixMilli(time.Now().Add(-time.Second).UnixMilli())
	if err := replaceConfig(ctx, e.d.Client, e.tables.Control, stored, begin); err != nil {
		t.Fatal(err)
	}
	_, err := ChangeBucketCount(ctx, e.d.Client, e.tables, 4, ChangeTimeout(200*time.Millisecond))
	var ae *ChangeAbortedError
	if !errors.As(err, &ae) || ae.From != 8 || ae.To != 4 {
		t.Fatalf("ChangeBucketCount = %v, want the second change 8 → 4 aborted", err)
	}
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 8 || c.BucketEpoch != 2 || c.Changing() {
		t.Fatalf("config %+v; want 8 at epoch 2 (two aborted changes)", c)
	}
}

// A change whose caller's context ends while it waits for a bucket that
// cannot drain (no relay runs: Ctrl-C on outbox buckets set) is aborted
// before ChangeBucketCount returns, not left for its deadline: the count
// stays, every counter is thawed, and a writer writes at once.
func TestChangeInterruptedIsAborted(t *testing.T) {
	e := newEnv(t, 8)
	w, err := NewWriter(ctxT(t), e.d.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctxT(t), nil, keyedV("a", "1")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() {
		_, err := ChangeBucketCount(ctx, e.d.Client, e.tables, 16, ChangeTimeout(5*time.Minute))
		done <- err
	}()
	for frozenCount(t, e, 16) < 16 {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	err = <-done
	var ae *ChangeAbortedError
	if !errors.As(err, &ae) || !errors.Is(ae.Interrupted, context.Canceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("ChangeBucketCount after its context ended = %v, want a *ChangeAbortedError interrupted by context.Canceled", err)
	}
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 8 || c.BucketEpoch != 1 || c.Changing() {
		t.Fatalf("config after the interrupted change: %+v, want 8 at epoch 1 (aborted)", c)
	}
	if n := frozenCount(t, e, 16); n != 0 {
		t.Errorf("%d counters still frozen", n)
	}
	wctx, wcancel := context.WithTimeout(ctxT(t), 30*time.Second) // the change's deadline is 5 minutes away
	defer wcancel()
	if _, err := w.Write(wctx, nil, keyedV("a", "2")); err != nil {
		t.Errorf("a write after the interrupted change: %v", err)
	}
}
