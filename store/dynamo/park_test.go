package dynamo

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/sequence"
)

// parkSetup stores msgs in bucket 0 and parks sequence seq (after moving
// head to seq-1) as holder "r", returning the lease.
func parkSetup(t *testing.T, e *env, msgs []outbox.Message, seq int64, reason string) outbox.Lease {
	t.Helper()
	ctx := ctxT(t)
	// Take the numbers from the counter, as writers do.
	c, err := sequence.NewCounter(e.d.Client, e.tables.Control, e.config(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reserve(ctx, 0, len(msgs)); err != nil {
		t.Fatal(err)
	}
	if err := e.put(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	l, err := e.store.Acquire(ctx, 0, "r", now, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if seq > 1 {
		if l, err = e.store.Update(ctx, l, outbox.LeaseUpdate{Head: seq - 1, Cleaned: seq - 1}, now); err != nil {
			t.Fatal(err)
		}
	}
	l, err = e.store.Park(ctx, l, outbox.Parked{Bucket: 0, Sequence: seq, Reason: reason, Attempts: 3, FirstFailure: now.Add(-time.Minute), LastFailure: now}, now)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testMsg(seq int64, key, value string) outbox.Message {
	return outbox.Message{ID: outbox.NewID(), Bucket: 0, Sequence: seq, Topic: "orders", Key: []byte(key), Value: []byte(value),
		Headers: []outbox.Header{{Key: "h", Value: []byte{0, 1}}}, CreatedAt: time.Now().Truncate(time.Millisecond)}
}

func TestParkListReplayDrop(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	m1, m2, m3 := testMsg(1, "k", "one"), testMsg(2, "k", "two"), testMsg(3, "k", "three")
	parkSetup(t, e, []outbox.Message{m1, m2, m3}, 2, "MESSAGE_TOO_LARGE: the broker rejected it")

	parked, err := e.store.ListParked(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 1 {
		t.Fatalf("%d parked", len(parked))
	}
	p := parked[0]
	if p.Err != nil || p.Sequence != 2 || p.Message.ID != m2.ID || string(p.Message.Value) != "two" || len(p.Message.Headers) != 1 ||
		p.Attempts != 3 || !strings.Contains(p.Reason, "MESSAGE_TOO_LARGE") || p.ParkedAt.IsZero() || p.FirstFailure.IsZero() {
		t.Fatalf("parked record %+v", p)
	}

	// Replay: at the tail, with the original id; the dead letter is gone.
	replayed, err := e.store.ReplayParked(ctx, 0, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if replayed.ID != m2.ID || replayed.Sequence <= 3 {
		t.Fatalf("replayed %+v; want the original id at a sequence above 3", replayed)
	}
	got, _, err := e.store.Pending(ctx, 0, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Message.ID != m2.ID || string(got[1].Message.Value) != "two" {
		t.Fatalf("pending after replay %+v", got)
	}
	if left, _ := e.store.ListParked(ctx, 0, 0); len(left) != 0 {
		t.Fatalf("dead letter still there: %+v", left)
	}
	if _, err := e.store.ReplayParked(ctx, 0, 2, nil); !errors.Is(err, ErrNotParked) {
		t.Fatalf("second replay: %v, want ErrNotParked", err)
	}
	if err := e.store.DropParked(ctx, 0, 2); !errors.Is(err, ErrNotParked) {
		t.Fatalf("drop of nothing: %v, want ErrNotParked", err)
	}
}

func TestReplayWithARepairedPayloadAndDrop(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	m1, m2 := testMsg(1, "k", "broken"), testMsg(2, "k", "fine")
	l := parkSetup(t, e, []outbox.Message{m1, m2}, 1, "INVALID_RECORD")
	// The second one is parked too, then dropped.
	if _, err := e.store.Park(ctx, l, outbox.Parked{Bucket: 0, Sequence: 2, Reason: "x"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	fixed := m1
	fixed.Value = []byte("repaired")
	other := fixed
	other.ID = outbox.NewID()
	var ve *outbox.ValidationError
	if _, err := e.store.ReplayParked(ctx, 0, 1, &other); !errors.As(err, &ve) || ve.Field != "ID" {
		t.Fatalf("replacement with another id: %v", err)
	}
	if _, err := e.store.ReplayParked(ctx, 0, 1, &fixed); err != nil {
		t.Fatal(err)
	}
	got, _, _ := e.store.Pending(ctx, 0, 2, 10)
	if len(got) != 1 || string(got[0].Message.Value) != "repaired" || got[0].Message.ID != m1.ID {
		t.Fatalf("pending %+v", got)
	}
	if err := e.store.DropParked(ctx, 0, 2); err != nil {
		t.Fatal(err)
	}
	if left, _ := e.store.ListParked(ctx, 0, 0); len(left) != 0 {
		t.Fatalf("left %+v", left)
	}
}

func TestParkKeepsAnUndecodableItemExactly(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	bad := map[string]types.AttributeValue{
		attrBucket: numAttr(0), attrSeq: numAttr(1), attrVersion: numAttr(1),
		attrID: strAttr("not-a-uuid"), attrTopic: &types.AttributeValueMemberN{Value: "42"}, "extra": strAttr("kept"),
	}
	parkRaw(t, e, bad)
	parked, err := e.store.ListParked(ctx, 0, 0)
	if err != nil || len(parked) != 1 || parked[0].Err == nil {
		t.Fatalf("parked %+v %v; want one undecodable record", parked, err)
	}
	if _, err := e.store.ReplayParked(ctx, 0, 1, nil); err == nil || !strings.Contains(err.Error(), "replacement") {
		t.Fatalf("replay of an undecodable item without a replacement: %v", err)
	}
	got, err := e.d.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: str(e.tables.Control), Key: controlKey(parkedPK(0), parkedSK(1)), ConsistentRead: new(true)})
	if err != nil {
		t.Fatal(err)
	}
	if x, ok := got.Item["extra"].(*types.AttributeValueMemberS); !ok || x.Value != "kept" {
		t.Fatalf("the raw item was not kept as stored: %v", got.Item)
	}
	if tp, ok := got.Item[attrTopic].(*types.AttributeValueMemberN); !ok || tp.Value != "42" {
		t.Fatalf("the malformed topic attribute changed: %v", got.Item[attrTopic])
	}
}

// parkRaw stores item (bucket 0, sequence 1) as it is and parks it.
func parkRaw(t *testing.T, e *env, item map[string]types.AttributeValue) {
	t.Helper()
	ctx := ctxT(t)
	c, err := sequence.NewCounter(e.d.Client, e.tables.Control, e.config(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reserve(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	putRaw(t, e, item)
	l, err := e.store.Acquire(ctx, 0, "r", time.Now(), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Park(ctx, l, outbox.Parked{Bucket: 0, Sequence: 1, Reason: "cannot decode"}, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// A replacement keeps the parked message's identity: its id (consumers
// deduplicate by it) and its topic. Empty fields take the parked message's;
// a different topic or id, or an id that is not a UUID, is refused with a
// *outbox.ValidationError naming the field, and nothing is stored.
func TestReplayReplacementChecks(t *testing.T) {
	const validID = "0190b2a4-7c1e-7d3a-9f00-0123456789ab"
	decodable := testMsg(1, "k", "broken")
	decodable.ID = validID
	// Undecodable items: a malformed header blob, with the id and topic
	// readable; and one whose id and topic attributes are unusable.
	readable := messageItem(outbox.Message{ID: validID, Bucket: 0, Sequence: 1, Topic: "orders", Key: []byte("k"), CreatedAt: t0}, 0)
	readable[attrHeaders] = &types.AttributeValueMemberB{Value: []byte{9, 9, 9}}
	unreadable := map[string]types.AttributeValue{
		attrBucket: numAttr(0), attrSeq: numAttr(1), attrVersion: numAttr(1),
		attrID: strAttr("not-a-uuid"), attrTopic: &types.AttributeValueMemberN{Value: "42"}, attrKey: &types.AttributeValueMemberB{Value: []byte("k")},
	}
	fix := func(id, topic string) *outbox.Message {
		return &outbox.Message{ID: id, Topic: topic, Key: []byte("k"), Value: []byte("repaired")}
	}
	cases := []struct {
		name        string
		parked      map[string]types.AttributeValue // nil: the decodable message
		replacement *outbox.Message
		field       string // the refused field; "" for accepted
		id, topic   string // as replayed
	}{
		{"same id and topic", nil, fix(validID, "orders"), "", validID, "orders"},
		{"empty id and topic keep the parked ones", nil, fix("", ""), "", validID, "orders"},
		{"another topic", nil, fix(validID, "payments"), "Topic", "", ""},
		{"another id", nil, fix(outbox.NewID(), "orders"), "ID", "", ""},
		{"undecodable, readable id and topic kept", readable, fix("", ""), "", validID, "orders"},
		{"undecodable, another topic", readable, fix("", "payments"), "Topic", "", ""},
		{"undecodable, another id", readable, fix(outbox.NewID(), "orders"), "ID", "", ""},
		{"undecodable without an id, empty id", unreadable, fix("", "orders"), "ID", "", ""},
		{"undecodable without an id, invalid id", unreadable, fix("not-a-uuid", "orders"), "ID", "", ""},
		{"undecodable without an id, a new id", unreadable, fix(validID, "orders"), "", validID, "orders"},
		{"undecodable without a topic, none given", unreadable, fix(validID, ""), "Topic", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 1)
			ctx := ctxT(t)
			if c.parked == nil {
				parkSetup(t, e, []outbox.Message{decodable}, 1, "INVALID_RECORD")
			} else {
				parkRaw(t, e, c.parked)
			}
			got, err := e.store.ReplayParked(ctx, 0, 1, c.replacement)
			if c.field != "" {
				var ve *outbox.ValidationError
				if !errors.As(err, &ve) || ve.Field != c.field || ve.Reason == "" {
					t.Fatalf("ReplayParked = %+v, %v; want a *ValidationError about %s", got, err, c.field)
				}
				// Nothing stored, nothing reserved, the dead letter kept.
				if entries, _, err := e.store.Pending(ctx, 0, 0, 10); err != nil || len(entries) != 0 {
					t.Fatalf("after a refused replay the bucket holds %+v (%v)", entries, err)
				}
				if n, _ := intAttr(e.getItem(t, e.tables.Control, controlKey(sequence.PartitionKey(0), sequence.SortKey)), "n", false); n != 1 {
					t.Errorf("counter at %d after a refused replay, want 1", n)
				}
				if left, err := e.store.ListParked(ctx, 0, 0); err != nil || len(left) != 1 {
					t.Fatalf("dead letters after a refused replay: %+v, %v", left, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReplayParked: %v", err)
			}
			entries, _, err := e.store.Pending(ctx, 0, 0, 10)
			if err != nil || len(entries) != 1 || entries[0].Err != nil {
				t.Fatalf("pending after replay: %+v, %v", entries, err)
			}
			stored := entries[0].Message
			if stored.ID != c.id || stored.Topic != c.topic || string(stored.Value) != "repaired" || stored.CreatedAt.UnixMilli() <= 0 {
				t.Fatalf("stored %+v, want id %s topic %s value repaired and a creation time", stored, c.id, c.topic)
			}
			if got.ID != stored.ID || got.Topic != stored.Topic || got.Sequence != entries[0].Sequence {
				t.Errorf("returned %+v, stored %+v", got, stored)
			}
		})
	}
}

func TestGetAndCountParked(t *testing.T) {
	e := newEnv(t, 2)
	ctx := ctxT(t)
	if n, err := e.store.CountParked(ctx, 0); err != nil || n != 0 {
		t.Fatalf("CountParked of an empty bucket = %d, %v", n, err)
	}
	m1, m2, m3 := testMsg(1, "k", "one"), testMsg(2, "k", "two"), testMsg(3, "k", "three")
	l := parkSetup(t, e, []outbox.Message{m1, m2, m3}, 1, "INVALID_RECORD")
	if _, err := e.store.Park(ctx, l, outbox.Parked{Bucket: 0, Sequence: 2, Reason: "again"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		bucket int
		want   int
	}{{0, 2}, {1, 0}} {
		if n, err := e.store.CountParked(ctx, tc.bucket); err != nil || n != tc.want {
			t.Fatalf("CountParked(%d) = %d, %v; want %d", tc.bucket, n, err, tc.want)
		}
	}
	p, err := e.store.GetParked(ctx, 0, 2)
	if err != nil || p.Sequence != 2 || p.Message.ID != m2.ID || string(p.Message.Value) != "two" || p.Reason != "again" {
		t.Fatalf("GetParked(0, 2) = %+v, %v", p, err)
	}
	if _, err := e.store.GetParked(ctx, 0, 3); !errors.Is(err, ErrNotParked) {
		t.Fatalf("GetParked of a message that is not parked: %v, want ErrNotParked", err)
	}
}

// A dead letter outlives an online BucketCount change: the shrink 8 → 3
// removes the bucket of one parked key and moves the other to another
// bucket. Replay appends each to its key's bucket under the new count,
// behind what the key wrote since (its writer already writes there); a
// replacement whose key belongs to another bucket is still refused.
func TestReplayParkedAfterABucketCountChange(t *testing.T) {
	e := newEnv(t, 8)
	ctx := ctxT(t)
	// removed: its bucket of 8 is gone at 3; moved: bucket of 8 below 3,
	// another bucket of 3.
	var removed, moved string
	for i := 0; removed == "" || moved == ""; i++ {
		k := fmt.Sprint("key-", i)
		b8, b3 := outbox.BucketForKey([]byte(k), 8), outbox.BucketForKey([]byte(k), 3)
		switch {
		case removed == "" && b8 >= 3:
			removed = k
		case moved == "" && b8 < 3 && b8 != b3:
			moved = k
		}
	}
	w, err := NewWriter(ctx, e.d.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	parked := map[string]outbox.Message{}
	for _, k := range []string{removed, moved} {
		res, err := w.Write(ctx, nil, keyedV(k, "old"))
		if err != nil {
			t.Fatal(err)
		}
		m := res.Messages[0]
		l, err := e.store.Acquire(ctx, m.Bucket, "r", time.Now(), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if l, err = e.store.Park(ctx, l, outbox.Parked{Bucket: m.Bucket, Sequence: m.Sequence, Reason: "INVALID_RECORD"}, time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Release(ctx, l, l.Head, l.Cleaned); err != nil {
			t.Fatal(err)
		}
		parked[k] = m
	}
	if _, err := ChangeBucketCount(ctx, e.d.Client, e.tables, 3, ChangeTimeout(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	// The key writes on under the new count before its dead letter is
	// replayed.
	res, err := w.Write(ctx, nil, keyedV(removed, "new"))
	if err != nil {
		t.Fatal(err)
	}
	newer := res.Messages[0]

	pr := parked[removed]
	wrong := pr
	for i := 0; outbox.BucketForKey(wrong.Key, 3) == outbox.BucketForKey(pr.Key, 3); i++ {
		wrong.Key = fmt.Append(nil, "other-", i)
	}
	var ve *outbox.ValidationError
	if _, err := e.store.ReplayParked(ctx, pr.Bucket, pr.Sequence, &wrong); !errors.As(err, &ve) || ve.Field != "Key" {
		t.Fatalf("replacement with a key of another bucket: %v, want a *ValidationError for Key", err)
	}
	fixed := pr
	fixed.Value = []byte("old, repaired")
	got, err := e.store.ReplayParked(ctx, pr.Bucket, pr.Sequence, &fixed)
	if err != nil {
		t.Fatalf("replay of the dead letter of removed bucket %d: %v", pr.Bucket, err)
	}
	if want := outbox.BucketForKey(pr.Key, 3); got.Bucket != want || got.Bucket != newer.Bucket || got.Sequence <= newer.Sequence || got.ID != pr.ID {
		t.Fatalf("replayed %+v; want id %s in bucket %d behind sequence %d", got, pr.ID, want, newer.Sequence)
	}
	pm := parked[moved]
	if got, err = e.store.ReplayParked(ctx, pm.Bucket, pm.Sequence, nil); err != nil {
		t.Fatalf("replay of the dead letter of moved key %s (bucket %d of 8): %v", moved, pm.Bucket, err)
	}
	if want := outbox.BucketForKey(pm.Key, 3); got.Bucket != want || got.ID != pm.ID {
		t.Fatalf("replayed %+v; want id %s in bucket %d", got, pm.ID, want)
	}
	for _, m := range parked {
		if left, err := e.store.ListParked(ctx, m.Bucket, 0); err != nil || len(left) != 0 {
			t.Fatalf("dead letters left in bucket %d: %+v, %v", m.Bucket, left, err)
		}
	}
	pub := &orderPublisher{}
	r, err := relay.New(ctx, e.store, pub)
	if err != nil {
		t.Fatal(err)
	}
	drainAll(t, r, 3)
	if got := pub.keys[removed]; !slices.Equal(got, []string{"new", "old, repaired"}) {
		t.Errorf("key %s published %v, want [new, old, repaired]", removed, got)
	}
	if got := pub.keys[moved]; !slices.Equal(got, []string{"old"}) {
		t.Errorf("key %s published %v, want [old]", moved, got)
	}
}
