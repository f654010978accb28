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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
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

func drainAll(t *testing.T, r *relay.Relay, buckets int) {
	t.Helper()
	for b := range buckets {
		if _, err := r.DrainBucket(ctxT(t), b); err != nil && !errors.Is(err, outbox.ErrLeaseHeld) {
			t.Fatalf("drain bucket %d: %v", b, err)
		}
	}
}

// gatedErr reports whether err is what a drain may return while the
// relays work through a change: a lease another drain holds, a bucket
// beyond the relay's range, or new-epoch messages held by the gate.
func gatedErr(err error) bool {
	return err == nil || errors.Is(err, outbox.ErrLeaseHeld) || errors.As(err, new(*outbox.BucketRangeError)) || errors.Is(err, outbox.ErrGatePending)
}

// drainReverse drains buckets n-1..0 (new buckets before old ones, as
// relays racing each other may), tolerating gatedErr.
func drainReverse(t *testing.T, r *relay.Relay, n int) {
	t.Helper()
	for b := n - 1; b >= 0; b-- {
		if _, err := r.DrainBucket(ctxT(t), b); !gatedErr(err) {
			t.Fatalf("drain bucket %d: %v", b, err)
		}
	}
}

// counterOf reads bucket b's counter item: its epoch (ce) and cut point
// (cf), 0 when absent.
func counterOf(t *testing.T, e *env, b int) (ce, cf int64) {
	t.Helper()
	item := e.getItem(t, e.tables.Control, map[string]types.AttributeValue{"pk": strAttr(sequence.PartitionKey(b)), "sk": strAttr(sequence.SortKey)})
	ce, _ = intAttr(item, "ce", false)
	cf, _ = intAttr(item, "cf", false)
	return ce, cf
}

// configVersion is the config item's format version as stored.
func configVersion(t *testing.T, e *env) string {
	t.Helper()
	return e.getItem(t, e.tables.Control, controlKey(configPK, configSK))[attrVersion].(*types.AttributeValueMemberN).Value
}

// A change 8 → 16 with a message of every key pending: writers go on at
// once under the new count (every write during the change returns while
// the old epoch has not drained, since no relay runs until they all
// returned), stamp their messages with the new epoch, and the relays —
// draining new buckets before old ones — publish every key's old message
// before its new one; the change then ends the old epoch. Code that
// predates epochs can no longer reserve or start. Mutation: a gate always
// open publishes [new old] for the keys.
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
	changed := make(chan error, 1)
	var res ChangeResult
	go func() {
		var err error
		res, err = ChangeBucketCount(ctx, e.d.Client, e.tables, 16, ChangeTimeout(60*time.Second))
		changed <- err
	}()
	for !storedConfig(t, e.d.Client, e.tables).Draining() {
		time.Sleep(5 * time.Millisecond)
	}
	if v := configVersion(t, e); v != "4" {
		t.Errorf("config item version %s while the old epoch drains, want 4 (older code refuses it)", v)
	}
	// The writer read epoch 0: its first reservation meets a counter the
	// changer cut, or cuts it itself, or (before the cut) lands at a
	// number the cut point covers; either way it never waits.
	var wg sync.WaitGroup
	wrote := make(chan Result, keys)
	for k := range keys {
		wg.Go(func() {
			res, err := w.Write(ctx, nil, keyedV(fmt.Sprint("k", k), "new"))
			if err != nil {
				t.Errorf("write during the change: %v", err)
			}
			wrote <- res
		})
	}
	wg.Wait()
	close(wrote)
	if c := storedConfig(t, e.d.Client, e.tables); !c.Draining() {
		t.Fatalf("config %+v after the writes: the old epoch ended without a relay, or the writers waited for it", c)
	}
	stamped := 0
	for res := range wrote {
		for _, m := range res.Messages {
			item := e.getItem(t, e.tables.Messages, messageKey(m.Bucket, m.Sequence))
			if ep, _ := intAttr(item, attrMsgEpoch, false); ep == 1 {
				stamped++
				if want := outbox.BucketForKey(m.Key, 16); m.Bucket != want {
					t.Errorf("key %s written at epoch 1 to bucket %d, want %d (of 16)", m.Key, m.Bucket, want)
				}
			}
		}
	}
	if stamped == 0 {
		t.Errorf("no write during the change was stamped with epoch 1")
	}
	pub := &orderPublisher{}
	r, err := relay.New(ctx, e.store, pub, relay.GapTimeout(200*time.Millisecond), relay.GapPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		drainReverse(t, r, 16)
		select {
		case err := <-changed:
			if err != nil {
				t.Fatalf("ChangeBucketCount: %v", err)
			}
			done = true
		default:
		}
	}
	drainReverse(t, r, 16)
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 16 || c.BucketEpoch != 1 || c.Draining() {
		t.Fatalf("config after the change: %+v", c)
	}
	if res.From != 8 || res.To != 16 || res.Epoch != 1 || !res.Ended || len(res.Draining) != 0 {
		t.Errorf("result %+v", res)
	}
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
	if v := configVersion(t, e); v != "3" {
		t.Errorf("config item version %s after the old epoch ended, want 3", v)
	}
}

// The changer stopped right after the flip (no counter cut): a writer that
// read the old count still reserves at epoch 0 on the uncut counter (its
// number is below the coming cut point), a writer that read the new count
// cuts the counter itself and reserves above the cut point; the relays
// publish the key's messages in that order, and the sweep's EndOldEpoch
// (cutting the counters nobody cut) ends the old epoch.
func TestWritersCutCountersTheChangerDidNotReach(t *testing.T) {
	e := newEnv(t, 4)
	ctx := ctxT(t)
	before, err := NewWriter(ctx, e.d.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	stored := storedConfig(t, e.d.Client, e.tables)
	flipped := stored
	flipped.BucketCount, flipped.BucketEpoch, flipped.OldBucketCount = 8, 1, 4
	flipped.ChangeDeadline = time.UnixMilli(time.Now().Add(time.Minute).UnixMilli())
	if err := replaceConfig(ctx, e.d.Client, e.tables.Control, stored, flipped); err != nil {
		t.Fatal(err)
	}
	old, err := before.Write(ctx, nil, keyedV("a", "old"))
	if err != nil {
		t.Fatal(err)
	}
	after, err := NewWriter(ctx, e.d.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	nw, err := after.Write(ctx, nil, keyedV("a", "new"))
	if err != nil {
		t.Fatal(err)
	}
	om, nm := old.Messages[0], nw.Messages[0]
	if om.Bucket != outbox.BucketForKey([]byte("a"), 4) || nm.Bucket != outbox.BucketForKey([]byte("a"), 8) {
		t.Fatalf("old write at bucket %d, new at %d; want the key's buckets of 4 and 8", om.Bucket, nm.Bucket)
	}
	if ce, cf := counterOf(t, e, nm.Bucket); ce != 1 || cf >= nm.Sequence {
		t.Errorf("new bucket %d's counter: epoch %d, cut point %d; want cut by the writer into epoch 1, below its number %d", nm.Bucket, ce, cf, nm.Sequence)
	}
	if ce, _ := counterOf(t, e, om.Bucket); ce != 0 && om.Bucket != nm.Bucket {
		t.Errorf("old bucket %d's counter at epoch %d before any relay looked, want 0 (nobody cut it)", om.Bucket, ce)
	}
	pub := &orderPublisher{}
	r, err := relay.New(ctx, e.store, pub, relay.GapTimeout(200*time.Millisecond), relay.GapPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	drainReverse(t, r, 8)
	drainReverse(t, r, 8)
	if got := pub.keys["a"]; !slices.Equal(got, []string{"old", "new"}) {
		t.Errorf("key a published %v, want [old new]", got)
	}
	rep, err := r.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Change; c == nil || !c.Completed {
		t.Fatalf("sweep: change %+v, want the old epoch ended", c)
	}
	for b := range 4 { // every old bucket: cut by the gate or the sweep
		if ce, cf := counterOf(t, e, b); ce != 1 || b == om.Bucket && cf != om.Sequence {
			t.Errorf("old bucket %d's counter at epoch %d, cut point %d after the old epoch ended, want epoch 1", b, ce, cf)
		}
	}
}

// Two changes in a row: the first stands (its old epoch still draining,
// no relay runs) when its timeout passes; the second waits for that old
// epoch and, at its own timeout, is aborted with nothing written, naming
// the old bucket. Once a relay drained it the second change runs.
func TestChangeWaitsForThePreviousOldEpoch(t *testing.T) {
	e := newEnv(t, 8)
	ctx := ctxT(t)
	w, err := NewWriter(ctx, e.d.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	wr, err := w.Write(ctx, nil, keyedV("a", "1"))
	if err != nil {
		t.Fatal(err)
	}
	b := wr.Messages[0].Bucket
	res, err := ChangeBucketCount(ctx, e.d.Client, e.tables, 16, ChangeTimeout(300*time.Millisecond))
	if err != nil || res.Ended || !slices.Equal(res.Draining, []int{b}) {
		t.Fatalf("first change: %+v, %v; want it made, old bucket %d still draining", res, err, b)
	}
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 16 || c.BucketEpoch != 1 || c.OldBucketCount != 8 {
		t.Fatalf("config after the first change: %+v", c)
	}
	_, err = ChangeBucketCount(ctx, e.d.Client, e.tables, 12, ChangeTimeout(300*time.Millisecond))
	var ae *ChangeAbortedError
	if !errors.As(err, &ae) || ae.Interrupted != nil || !slices.Equal(ae.Draining, []int{b}) {
		t.Fatalf("second change = %v, want a *ChangeAbortedError naming old bucket %d", err, b)
	}
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 16 || c.BucketEpoch != 1 || c.OldBucketCount != 8 {
		t.Fatalf("config after the aborted second change: %+v (nothing may be written)", c)
	}
	r, err := relay.New(ctx, e.store, &orderPublisher{})
	if err != nil {
		t.Fatal(err)
	}
	drainReverse(t, r, 16)
	res, err = ChangeBucketCount(ctx, e.d.Client, e.tables, 12, ChangeTimeout(10*time.Second))
	if err != nil || !res.Ended || res.Epoch != 2 {
		t.Fatalf("second change after the drain: %+v, %v", res, err)
	}
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 12 || c.BucketEpoch != 2 || c.Draining() {
		t.Fatalf("config after the second change: %+v", c)
	}
}

// A number reserved last in its bucket and never written (a crashed writer)
// is no gap to a relay, since nothing follows it: the change fences it after
// its ChangeGapTimeout instead of leaving the old epoch draining.
func TestChangeFencesATrailingHole(t *testing.T) {
	e := newEnv(t, 8)
	reserve(t, e, 6, 1)
	res, err := ChangeBucketCount(ctxT(t), e.d.Client, e.tables, 16, ChangeTimeout(20*time.Second), ChangeGapTimeout(200*time.Millisecond))
	if err != nil || !res.Ended || res.Watched < 200*time.Millisecond {
		t.Fatalf("ChangeBucketCount: %+v, %v; want the old epoch ended after ≥ 200ms", res, err)
	}
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 16 || c.Draining() {
		t.Fatalf("config %+v", c)
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

// Every conditional write of a change survives an SDK resend: the flip
// and the end on the config item, the cuts.
func TestChangeSurvivesResends(t *testing.T) {
	e := newEnv(t, 8)
	reserve(t, e, 2, 3)
	fence(t, e, 2, 1, 2, 3)
	c := &resendingClient{StoreAPI: e.d.Client}
	res, err := ChangeBucketCount(ctxT(t), c, e.tables, 4)
	if err != nil {
		t.Fatalf("ChangeBucketCount with resends: %v", err)
	}
	if got := storedConfig(t, e.d.Client, e.tables); got.BucketCount != 4 || got.BucketEpoch != 1 || got.Draining() || res.Epoch != 1 || !res.Ended || c.resends < 2+8 {
		t.Fatalf("config %+v, result %+v after %d resends", got, res, c.resends)
	}
	if ce, cf := counterOf(t, e, 2); ce != 1 || cf != 3 {
		t.Errorf("bucket 2's counter after the change: epoch %d, cut point %d; want 1 and 3", ce, cf)
	}
	if last, err := sequence.Last(ctxT(t), e.d.Client, e.tables.Control, 2); err != nil || last != 3 {
		t.Errorf("bucket 2's counter after the change: %d, %v; want 3", last, err)
	}
}

// isCut reports whether in is a cut of bucket b's counter (sequence.Cut:
// every form sets or reads the cut point, cf; a reservation does not).
func isCut(in *dynamodb.UpdateItemInput, b int) bool {
	return strField(in.Key, attrPK) == sequence.PartitionKey(b) && strings.Contains(aws.ToString(in.UpdateExpression), "#cf")
}

// failingCutClient fails the first cut of each bucket in fail, as a table
// that stalled past the cut's bound would (the SDK's own retries spent).
type failingCutClient struct {
	StoreAPI
	mu     sync.Mutex
	fail   map[int]bool
	failed []int
}

func (c *failingCutClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.mu.Lock()
	for b := range c.fail {
		if isCut(in, b) {
			delete(c.fail, b)
			c.failed = append(c.failed, b)
			c.mu.Unlock()
			return nil, fmt.Errorf("operation error DynamoDB: UpdateItem, https response error StatusCode: 0, canceled, %w", context.DeadlineExceeded)
		}
	}
	c.mu.Unlock()
	return c.StoreAPI.UpdateItem(ctx, in, o...)
}

// Cuts that fail after the flip, while the caller still waits, do not end
// the change: the watch cuts each old bucket it looks at and ends the old
// epoch, writers cut the new buckets' counters they meet. CI's
// TestRebucketWhileWritersAndRelayRun and TestRebucketCLI failed on one cut
// that a saturated DynamoDB Local held past its bound.
func TestChangeGoesOnAfterAFailedCut(t *testing.T) {
	e := newEnv(t, 4)
	reserve(t, e, 2, 3)
	fence(t, e, 2, 1, 2, 3)
	c := &failingCutClient{StoreAPI: e.d.Client, fail: map[int]bool{2: true, 6: true}}
	res, err := ChangeBucketCount(ctxT(t), c, e.tables, 8)
	if err != nil {
		t.Fatalf("ChangeBucketCount after failed cuts of %v: %v", c.failed, err)
	}
	if slices.Sort(c.failed); !slices.Equal(c.failed, []int{2, 6}) {
		t.Fatalf("cuts failed: %v, want [2 6] (the fault did not fire)", c.failed)
	}
	if got := storedConfig(t, e.d.Client, e.tables); got.BucketCount != 8 || got.BucketEpoch != 1 || got.Draining() || !res.Ended {
		t.Fatalf("config %+v, result %+v; want 8 at epoch 1, the old epoch ended", got, res)
	}
	if ce, cf := counterOf(t, e, 2); ce != 1 || cf != 3 {
		t.Errorf("bucket 2's counter after the change: epoch %d, cut point %d; want 1 and 3 (cut by the watch)", ce, cf)
	}
	w, err := NewWriter(ctxT(t), c, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; ; k++ {
		m := keyedV(fmt.Sprint("k", k), "v")
		if outbox.BucketForKey(m.Key, 8) != 6 {
			continue
		}
		if _, err := w.Write(ctxT(t), nil, m); err != nil {
			t.Fatalf("a write to bucket 6, whose cut failed: %v", err)
		}
		break
	}
	if ce, _ := counterOf(t, e, 6); ce != 1 {
		t.Errorf("bucket 6's counter after a write: epoch %d, want 1 (cut by the writer)", ce)
	}
}

// laterChangeClient runs a later change (through the raw client) just
// before the writer's first cut of bucket reaches the table: the change
// cuts that counter first.
type laterChangeClient struct {
	StoreAPI
	bucket int
	change func()
	once   sync.Once
	ran    bool
}

func (c *laterChangeClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if isCut(in, c.bucket) {
		c.once.Do(func() { c.change(); c.ran = true })
	}
	return c.StoreAPI.UpdateItem(ctx, in, o...)
}

// A change can end with a new bucket's counter uncut (its cut failed; a
// writer cuts it when it meets it). A writer refused there cuts it, and
// when a later change cut it between the refusal and the writer's cut,
// the writer follows the config item to the later change instead of
// failing the write.
func TestWriterFollowsALaterChangeThatCutFirst(t *testing.T) {
	e := newEnv(t, 4)
	raw := e.d.Client
	if _, err := ChangeBucketCount(ctxT(t), &failingCutClient{StoreAPI: raw, fail: map[int]bool{6: true}}, e.tables, 8); err != nil {
		t.Fatal(err)
	}
	if ce, _ := counterOf(t, e, 6); ce != 0 {
		t.Fatalf("bucket 6's counter at epoch %d after the change, want uncut", ce)
	}
	c := &laterChangeClient{StoreAPI: raw, bucket: 6, change: func() {
		if _, err := ChangeBucketCount(ctxT(t), raw, e.tables, 12); err != nil {
			t.Errorf("the later change: %v", err)
		}
	}}
	w, err := NewWriter(ctxT(t), c, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	m := keyedV("k0", "v")
	for k := 0; outbox.BucketForKey(m.Key, 8) != 6; k++ {
		m = keyedV(fmt.Sprint("k", k), "v")
	}
	res, err := w.Write(ctxT(t), nil, m)
	if err != nil {
		t.Fatalf("a write that met a later change's cut: %v", err)
	}
	if !c.ran {
		t.Fatal("the later change never ran: the writer did not cut bucket 6")
	}
	if got, want := res.Messages[0].Bucket, outbox.BucketForKey(m.Key, 12); got != want {
		t.Errorf("the write landed in bucket %d, want %d (under the later count, 12)", got, want)
	}
}

// A change interrupted after the flip (Ctrl-C on outbox buckets set while
// the old epoch drains) stands: ChangeBucketCount returns no error and
// names the old buckets still draining; a writer writes under the new
// count at once.
func TestChangeInterruptedAfterTheFlipStands(t *testing.T) {
	e := newEnv(t, 8)
	w, err := NewWriter(ctxT(t), e.d.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	wr, err := w.Write(ctxT(t), nil, keyedV("a", "1"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan struct {
		res ChangeResult
		err error
	}, 1)
	go func() {
		res, err := ChangeBucketCount(ctx, e.d.Client, e.tables, 16, ChangeTimeout(5*time.Minute))
		done <- struct {
			res ChangeResult
			err error
		}{res, err}
	}()
	for {
		if ce, _ := counterOf(t, e, 15); ce == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	got := <-done
	if got.err != nil || got.res.Ended || !slices.Equal(got.res.Draining, []int{wr.Messages[0].Bucket}) {
		t.Fatalf("ChangeBucketCount interrupted after the flip = %+v, %v; want the change made, bucket %d draining", got.res, got.err, wr.Messages[0].Bucket)
	}
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 16 || c.BucketEpoch != 1 || c.OldBucketCount != 8 {
		t.Fatalf("config after the interrupted change: %+v, want 16 at epoch 1, old epoch of 8 draining", c)
	}
	res, err := w.Write(ctxT(t), nil, keyedV("a", "2"))
	if err != nil || res.Messages[0].Bucket != outbox.BucketForKey([]byte("a"), 16) {
		t.Errorf("a write after the interrupted change: %+v, %v; want it under 16", res, err)
	}
}

// A change begun by a version before the cut-over, left frozen (nb set,
// counters frozen): the first writer that meets a frozen counter aborts it
// (the count stays, at the next epoch) and writes; no wait for a deadline.
func TestWriterAbortsAnOlderVersionsChange(t *testing.T) {
	e := newEnv(t, 8)
	ctx := ctxT(t)
	w, err := NewWriter(ctx, e.d.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	stored := storedConfig(t, e.d.Client, e.tables)
	begin := stored
	begin.NextBucketCount, begin.ChangeDeadline = 16, time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	if err := replaceConfig(ctx, e.d.Client, e.tables.Control, stored, begin); err != nil {
		t.Fatal(err)
	}
	for b := range 8 { // the older version's freeze of the change to epoch 1
		if _, err := e.d.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: str(e.tables.Control), Key: map[string]types.AttributeValue{"pk": strAttr(sequence.PartitionKey(b)), "sk": strAttr(sequence.SortKey)},
			UpdateExpression:          str("SET #cf = if_not_exists(#n, :z), #n = :moved, #ce = :frz"),
			ExpressionAttributeNames:  map[string]string{"#cf": "cf", "#n": "n", "#ce": "ce"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":z": numAttr(0), ":moved": strAttr(sequence.MovedCounter), ":frz": numAttr(-1)},
		}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := w.Write(ctx, nil, keyedV("a", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 8 || c.BucketEpoch != 1 || c.Frozen() || c.Draining() {
		t.Fatalf("config after the writer's abort: %+v", c)
	}
	if got := res.Messages[0].Bucket; got != outbox.BucketForKey([]byte("a"), 8) {
		t.Errorf("bucket %d, want the old count's", got)
	}
	for b := range 16 {
		if ce, _ := counterOf(t, e, b); b < 8 && ce != 1 {
			t.Errorf("bucket %d's counter at epoch %d after the abort, want 1", b, ce)
		}
	}
}
