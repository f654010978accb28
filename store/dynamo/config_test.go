package dynamo

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/sequence"
)

// storedConfig reads the config item, failing the test when it cannot.
func storedConfig(t *testing.T, client getItemAPI, tables Tables) outbox.Config {
	t.Helper()
	c, err := readConfig(ctxT(t), client, tables.Control)
	if err != nil {
		t.Fatalf("read config: %v", err)
	}
	return c
}

func deleteConfig(t *testing.T, e *env) {
	t.Helper()
	if _, err := e.d.Client.DeleteItem(ctxT(t), &dynamodb.DeleteItemInput{TableName: str(e.tables.Control), Key: controlKey(configPK, configSK)}); err != nil {
		t.Fatal(err)
	}
}

func message(bucket int, seq int64) outbox.Message {
	return outbox.Message{ID: outbox.NewID(), Bucket: bucket, Sequence: seq, Topic: "orders", Key: []byte("k"), Value: []byte("v"), CreatedAt: time.Now()}
}

// setCleaned writes bucket's lease item as a relay leaves it after a drain:
// no owner, head and cleaned at seq.
func setCleaned(t *testing.T, e *env, bucket int, seq int64) {
	t.Helper()
	item := leaseKey(bucket)
	item[attrHead], item[attrCleaned], item[attrVersion] = numAttr(seq), numAttr(seq), numAttr(outbox.FormatVersion)
	if _, err := e.d.Client.PutItem(ctxT(t), &dynamodb.PutItemInput{TableName: str(e.tables.Control), Item: item}); err != nil {
		t.Fatal(err)
	}
}

// reserve moves bucket's sequence counter to n, as writers reserving
// numbers do.
func reserve(t *testing.T, e *env, bucket int, n int64) {
	t.Helper()
	ctr, err := sequence.NewCounter(e.d.Client, e.tables.Control, e.config(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctr.Reserve(ctxT(t), bucket, int(n)); err != nil {
		t.Fatal(err)
	}
}

func fence(t *testing.T, e *env, bucket int, seqs ...int64) {
	t.Helper()
	for _, s := range seqs {
		if err := putFence(ctxT(t), e.d.Client, e.tables.Messages, bucket, s, time.Now(), DefaultFenceTTL); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSetBucketCount(t *testing.T) {
	cases := []struct {
		name      string
		stored    int                        // 0: no config item
		setup     func(t *testing.T, e *env) // the outbox's contents
		requested int
		// want: the count stored afterwards; draining: the old buckets
		// still draining afterwards (nil for none): with no relay
		// running, a change with messages pending stands, its old epoch
		// draining (the config item's OldBucketCount).
		want     int
		draining []int
	}{
		{name: "creates the config item", stored: 0, requested: 8, want: 8},
		{name: "same count", stored: 8, requested: 8, want: 8},
		{name: "same count with messages pending", stored: 8, requested: 8, want: 8,
			setup: func(t *testing.T, e *env) { e.mustPut(t, message(3, 1)) }},
		{name: "grows an empty outbox", stored: 8, requested: 16, want: 16},
		{name: "shrinks an empty outbox", stored: 16, requested: 4, want: 4},
		{
			// Counters ran ahead of heads and fences fill the gap: counter
			// minus head would say pending, but nothing is to publish.
			name: "fences and drained buckets are empty", stored: 8, requested: 16, want: 16,
			setup: func(t *testing.T, e *env) {
				setCleaned(t, e, 2, 40)
				fence(t, e, 2, 41, 42, 43)
				reserve(t, e, 2, 43)
				fence(t, e, 6, 1)
				reserve(t, e, 6, 1)
			},
		},
		{name: "a pending message", stored: 8, requested: 16, want: 16, draining: []int{5},
			setup: func(t *testing.T, e *env) { reserve(t, e, 5, 2); e.mustPut(t, message(5, 1), message(5, 2)) }},
		{name: "several buckets", stored: 8, requested: 2, want: 2, draining: []int{1, 4, 7},
			setup: func(t *testing.T, e *env) {
				reserve(t, e, 7, 1)
				reserve(t, e, 1, 4)
				reserve(t, e, 4, 9)
				e.mustPut(t, message(7, 1), message(1, 4), message(4, 9))
			}},
		{name: "a reserved number never written", stored: 8, requested: 16, want: 16, draining: []int{6},
			setup: func(t *testing.T, e *env) { reserve(t, e, 6, 1) }},
		{name: "a message after the cleaned mark", stored: 8, requested: 16, want: 16, draining: []int{2},
			setup: func(t *testing.T, e *env) {
				setCleaned(t, e, 2, 40)
				reserve(t, e, 2, 41)
				e.mustPut(t, message(2, 41))
			}},
		{name: "a message behind many fences", stored: 8, requested: 16, want: 16, draining: []int{3},
			setup: func(t *testing.T, e *env) {
				reserve(t, e, 3, 151)
				seqs := make([]int64, 150)
				for i := range seqs {
					seqs[i] = int64(i + 1)
				}
				fence(t, e, 3, seqs...)
				e.mustPut(t, message(3, 151))
			}},
		// Buckets beyond both counts are no relay's either way.
		{name: "a stray message beyond both counts", stored: 8, requested: 4, want: 4,
			setup: func(t *testing.T, e *env) { e.mustPut(t, message(20, 1)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, max(c.stored, 1))
			if c.stored == 0 {
				deleteConfig(t, e)
			}
			if c.setup != nil {
				c.setup(t, e)
			}
			// With no relay the old epoch drains only when nothing is
			// pending: the change watches it until the context ends.
			ctx, cancel := context.WithTimeout(ctxT(t), DefaultChangeMargin+3*time.Second)
			defer cancel()
			prev, err := SetBucketCount(ctx, e.d.Client, e.tables, c.requested)
			if prev != c.stored {
				t.Errorf("previous = %d, want %d", prev, c.stored)
			}
			if err != nil {
				t.Fatalf("SetBucketCount(%d): %v", c.requested, err)
			}
			got := storedConfig(t, e.d.Client, e.tables)
			if got.BucketCount != c.want || got.FormatVersion != outbox.FormatVersion {
				t.Errorf("config item %+v, want bucket count %d, format %d", got, c.want, outbox.FormatVersion)
			}
			switch {
			case c.draining == nil && got.Draining():
				t.Errorf("config item %+v: an old epoch still draining, want none", got)
			case c.draining != nil:
				waiting, err := e.store.undrained(ctxT(t), got, false)
				if err != nil || got.OldBucketCount != c.stored || !slices.Equal(waiting, c.draining) {
					t.Errorf("config item %+v, old buckets draining %v (%v); want %d's buckets %v", got, waiting, err, c.stored, c.draining)
				}
			}
			// What a relay opens: the resulting count.
			if s, err := NewStore(ctxT(t), e.d.Client, e.tables); err != nil || s.Opened().BucketCount != c.want {
				t.Errorf("NewStore: %v, BucketCount %d; want %d", err, s.Opened().BucketCount, c.want)
			}
		})
	}
}

func (e *env) mustPut(t *testing.T, msgs ...outbox.Message) {
	t.Helper()
	for _, m := range msgs {
		if err := e.put(ctxT(t), m); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSetBucketCountRefusesBadInput(t *testing.T) {
	d, tables := newTables(t, BucketCount(8))
	for _, n := range []int{0, -1, outbox.MaxBucketCount + 1} {
		var oe *outbox.OptionError
		if _, err := SetBucketCount(ctxT(t), d.Client, tables, n); !errors.As(err, &oe) || oe.Option != "BucketCount" {
			t.Errorf("SetBucketCount(%d) = %v, want an OptionError for BucketCount", n, err)
		}
	}
	if _, err := SetBucketCount(ctxT(t), d.Client, Tables{Messages: tables.Messages}, 8); err == nil {
		t.Error("no control table name accepted")
	}
	// A control table that does not exist is an error, not a reason to
	// write somewhere.
	missing := Tables{Messages: tables.Messages, Control: tables.Control + "-missing"}
	var nf *types.ResourceNotFoundException
	if _, err := SetBucketCount(ctxT(t), d.Client, missing, 8); !errors.As(err, &nf) {
		t.Errorf("SetBucketCount on a missing table = %v, want ResourceNotFoundException", err)
	}
}

// racingClient changes the config item to 32 buckets just before the first
// UpdateItem, as another deployment tool would between the check and the
// write.
type racingClient struct {
	StoreAPI
	tables Tables
	raced  bool
}

func (c *racingClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if !c.raced {
		c.raced = true
		item := controlKey(configPK, configSK)
		item[attrBuckets], item[attrVersion] = numAttr(32), numAttr(outbox.FormatVersion)
		if _, err := c.StoreAPI.PutItem(ctx, &dynamodb.PutItemInput{TableName: str(c.tables.Control), Item: item}); err != nil {
			return nil, err
		}
	}
	return c.StoreAPI.UpdateItem(ctx, in, o...)
}

func TestSetBucketCountIsConditional(t *testing.T) {
	e := newEnv(t, 8)
	_, err := SetBucketCount(ctxT(t), &racingClient{StoreAPI: e.d.Client, tables: e.tables}, e.tables, 16)
	if err == nil || !strings.Contains(err.Error(), "changed while BucketCount was being changed from 8 to 16 and a BucketCount change from 8 to 16 was being made") {
		t.Fatalf("err = %v, want the concurrent change reported", err)
	}
	if got := storedConfig(t, e.d.Client, e.tables); got.BucketCount != 32 {
		t.Fatalf("bucket count %d, want the concurrent writer's 32 kept", got.BucketCount)
	}
}

// CreateTables on an existing outbox adds topics to its list, but refuses
// a list that drops a stored topic (writers that write it would refuse
// their messages) unless ReplaceTopics says so; an empty list (any topic)
// and a first list are no drop.
func TestCreateTablesRefusesToDropTopics(t *testing.T) {
	d, tables := newTables(t, BucketCount(1), Topics("orders", "audit"))
	ctx := ctxT(t)
	topics := func() []string { return storedConfig(t, d.Client, tables).Topics }

	if err := CreateTables(ctx, d.Client, tables, BucketCount(1), Topics("orders", "audit", "payments")); err != nil {
		t.Fatalf("a list that adds a topic: %v", err)
	}
	var tde *TopicsDroppedError
	var me *outbox.MisconfigurationError
	err := CreateTables(ctx, d.Client, tables, BucketCount(1), Topics("orders"))
	if !errors.As(err, &tde) || !slices.Equal(tde.Dropped, []string{"audit", "payments"}) || !errors.As(err, &me) || me.Setting != "Topics" ||
		!strings.Contains(err.Error(), "audit,payments") || !strings.Contains(err.Error(), "ReplaceTopics") {
		t.Fatalf("a list that drops audit and payments: %v; want a *TopicsDroppedError naming them", err)
	}
	if got := topics(); !slices.Equal(got, []string{"audit", "orders", "payments"}) {
		t.Fatalf("topics after the refusal %v; want them unchanged", got)
	}
	var oe *outbox.OptionError
	if err := CreateTables(ctx, d.Client, tables, BucketCount(1), ReplaceTopics()); !errors.As(err, &oe) || oe.Option != "ReplaceTopics" {
		t.Fatalf("ReplaceTopics without Topics: %v; want an OptionError", err)
	}
	if err := CreateTables(ctx, d.Client, tables, BucketCount(1), Topics("orders"), ReplaceTopics()); err != nil {
		t.Fatalf("a replacing list: %v", err)
	}
	if got := topics(); !slices.Equal(got, []string{"orders"}) {
		t.Fatalf("topics after the replacement %v; want [orders]", got)
	}
	if err := CreateTables(ctx, d.Client, tables, BucketCount(1), Topics()); err != nil {
		t.Fatalf("an empty list (any topic): %v", err)
	}
	if err := CreateTables(ctx, d.Client, tables, BucketCount(1), Topics("audit")); err != nil {
		t.Fatalf("a first list on an outbox that serves any topic: %v", err)
	}
	if got := topics(); !slices.Equal(got, []string{"audit"}) {
		t.Fatalf("topics %v; want [audit]", got)
	}
}
