package dynamo

import (
	"bytes"
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
	"github.com/google/uuid"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/internal/dynamoerr"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/sequence"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// writerEnv is an outbox plus a business table the caller's items go to.
type writerEnv struct {
	*env
	business string
	client   *faultClient
	writer   *Writer
}

// faultClient wraps the real client. Before every TransactWriteItems it asks
// fault what to do: run the real call or not, and which error to return
// instead of the real result (nil: the real result).
type faultClient struct {
	WriterAPI
	fault func(call int, in *dynamodb.TransactWriteItemsInput) (execute bool, inject error)

	mu     sync.Mutex
	calls  int
	tokens []string
	real   []error // what DynamoDB answered to each executed call
}

func (f *faultClient) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	f.mu.Lock()
	f.calls++
	n := f.calls
	f.tokens = append(f.tokens, aws.ToString(in.ClientRequestToken))
	fault := f.fault
	f.mu.Unlock()
	execute, inject := true, error(nil)
	if fault != nil {
		execute, inject = fault(n, in)
	}
	var (
		out *dynamodb.TransactWriteItemsOutput
		err error
	)
	if execute {
		out, err = f.WriterAPI.TransactWriteItems(ctx, in, opts...)
		f.mu.Lock()
		f.real = append(f.real, err)
		f.mu.Unlock()
	}
	if inject != nil {
		return nil, inject
	}
	return out, err
}

func newWriterEnv(t *testing.T, bucketCount int, opts ...WriterOption) *writerEnv {
	t.Helper()
	return newWriterEnvOn(t, newEnv(t, bucketCount), opts...)
}

// newWriterEnvOn is newWriterEnv over an outbox created with newEnv.
func newWriterEnvOn(t *testing.T, e *env, opts ...WriterOption) *writerEnv {
	t.Helper()
	ctx := ctxT(t)
	business := testenv.Name(t, "biz")
	_, err := e.d.Client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            str(business),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: str("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: str("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	fc := &faultClient{WriterAPI: e.d.Client}
	opts = append([]WriterOption{WithClock(fixedClock{t0})}, opts...)
	w, err := NewWriter(ctx, fc, e.tables, opts...)
	if err != nil {
		t.Fatalf("NewWriter: %v", err)
	}
	return &writerEnv{env: e, business: business, client: fc, writer: w}
}

// bump is the caller's item: add 1 to the aggregate's n, conditional on its
// version being version (0: the aggregate must not exist), and set version+1.
func (w *writerEnv) bump(id string, version int) types.TransactWriteItem {
	cond := "#ver = :ver"
	if version == 0 {
		cond = "attribute_not_exists(#ver)"
	}
	values := map[string]types.AttributeValue{":one": numAttr(1), ":next": numAttr(int64(version + 1))}
	if version != 0 {
		values[":ver"] = numAttr(int64(version))
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 str(w.business),
		Key:                       map[string]types.AttributeValue{"id": strAttr(id)},
		UpdateExpression:          str("ADD #n :one SET #ver = :next"),
		ConditionExpression:       str(cond),
		ExpressionAttributeNames:  map[string]string{"#n": "n", "#ver": "ver"},
		ExpressionAttributeValues: values,
	}}
}

// aggregate returns the aggregate's n and version (0, 0 when absent).
func (w *writerEnv) aggregate(t *testing.T, id string) (n, version int64) {
	t.Helper()
	item := w.getItem(t, w.business, map[string]types.AttributeValue{"id": strAttr(id)})
	n, _ = intAttr(item, "n", false)
	version, _ = intAttr(item, "ver", false)
	return n, version
}

// counter returns the last reserved sequence number of bucket (0: none).
func (w *writerEnv) counter(t *testing.T, bucket int) int64 {
	t.Helper()
	item := w.getItem(t, w.tables.Control, controlKey(sequence.PartitionKey(bucket), sequence.SortKey))
	n, _ := intAttr(item, "n", false)
	return n
}

// entries returns bucket's stored entries.
func (w *writerEnv) entries(t *testing.T, bucket int) []outbox.Entry {
	t.Helper()
	got, _, err := w.store.Pending(ctxT(t), bucket, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func keyed(key string) outbox.Message {
	return outbox.Message{Topic: "orders", Key: []byte(key), Value: []byte("value of " + key)}
}

// keyInBucket returns a key that BucketForKey puts in bucket b.
func keyInBucket(t *testing.T, b, bucketCount int) string {
	t.Helper()
	for i := range 10000 {
		k := fmt.Sprintf("key-%d", i)
		if outbox.BucketForKey([]byte(k), bucketCount) == b {
			return k
		}
	}
	t.Fatalf("no key for bucket %d", b)
	return ""
}

func TestWriteCommitsItemsAndMessages(t *testing.T) {
	w := newWriterEnv(t, 4)
	ctx := ctxT(t)
	k0, k1 := keyInBucket(t, 0, 4), keyInBucket(t, 1, 4)
	explicit := outbox.Message{ID: uuid.NewString(), Topic: "orders", Key: []byte(k1), Value: nil,
		CreatedAt: t0.Add(-time.Hour + 123456*time.Microsecond), Headers: []outbox.Header{{Key: "h", Value: []byte{}}}}
	res, err := w.writer.Write(ctx, []types.TransactWriteItem{w.bump("agg-1", 0)},
		keyed(k0), explicit, keyed(k0), outbox.Message{Topic: "audit", Partition: outbox.PartitionOf(6), Value: []byte("pinned")})
	if err != nil {
		t.Fatal(err)
	}
	got := res.Messages
	if len(got) != 4 {
		t.Fatalf("%d messages in the result", len(got))
	}
	// Sequences per bucket, in message order; partition 6 mod 4 = bucket 2.
	wantPlace := []struct {
		bucket int
		seq    int64
	}{{0, 1}, {1, 1}, {0, 2}, {2, 1}}
	for i, m := range got {
		if m.Bucket != wantPlace[i].bucket || m.Sequence != wantPlace[i].seq {
			t.Errorf("message %d at bucket %d seq %d, want %d/%d", i, m.Bucket, m.Sequence, wantPlace[i].bucket, wantPlace[i].seq)
		}
		if _, err := uuid.Parse(m.ID); err != nil {
			t.Errorf("message %d id %q: %v", i, m.ID, err)
		}
	}
	if got[1].ID != explicit.ID || !got[1].CreatedAt.Equal(explicit.CreatedAt.Truncate(time.Millisecond)) {
		t.Errorf("explicit id/created-at not kept: %+v", got[1])
	}
	if !got[0].CreatedAt.Equal(t0.Truncate(time.Millisecond)) {
		t.Errorf("default created-at = %v, want the clock's %v", got[0].CreatedAt, t0)
	}
	if got[0].ID == got[2].ID {
		t.Error("two messages got the same id")
	}
	// What is stored is what the result says.
	for _, m := range got {
		entries := w.entries(t, m.Bucket)
		var found bool
		for _, e := range entries {
			if e.Sequence == m.Sequence {
				found = true
				s := e.Message
				if e.Err != nil || s.ID != m.ID || s.Topic != m.Topic || !bytes.Equal(s.Key, m.Key) || (s.Value == nil) != (m.Value == nil) ||
					!s.CreatedAt.Equal(m.CreatedAt) || len(s.Headers) != len(m.Headers) {
					t.Errorf("stored %+v (err %v), result %+v", s, e.Err, m)
				}
			}
		}
		if !found {
			t.Errorf("message %s not stored at %d/%d", m.ID, m.Bucket, m.Sequence)
		}
	}
	if n, v := w.aggregate(t, "agg-1"); n != 1 || v != 1 {
		t.Errorf("aggregate n=%d ver=%d, want 1, 1", n, v)
	}
	// The next write continues the buckets' sequences.
	res, err = w.writer.Write(ctx, []types.TransactWriteItem{w.bump("agg-1", 1)}, keyed(k0))
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Messages[0]; m.Bucket != 0 || m.Sequence != 3 {
		t.Errorf("next message at %d/%d, want 0/3", m.Bucket, m.Sequence)
	}
	if w.client.calls != 2 {
		t.Errorf("%d TransactWriteItems calls for two writes", w.client.calls)
	}
}

func TestWriteOnlyItemsOrOnlyMessages(t *testing.T) {
	w := newWriterEnv(t, 2)
	ctx := ctxT(t)
	if _, err := w.writer.Write(ctx, []types.TransactWriteItem{w.bump("a", 0)}); err != nil {
		t.Fatalf("items without messages: %v", err)
	}
	res, err := w.writer.Write(ctx, nil, keyed("x"))
	if err != nil || len(res.Messages) != 1 || res.Messages[0].Sequence != 1 {
		t.Fatalf("messages without items: %+v, %v", res, err)
	}
}

func TestNewWriterBucketCount(t *testing.T) {
	d, tables := newTables(t, BucketCount(16))
	ctx := ctxT(t)
	w, err := NewWriter(ctx, d.Client, tables)
	if err != nil || w.BucketCount() != 16 {
		t.Fatalf("BucketCount from the table: %v, %d", err, w.BucketCount())
	}
	_, err = NewWriter(ctx, d.Client, Tables{Messages: tables.Messages, Control: testenv.Name(t, "none")})
	if !errors.Is(err, ErrNoConfig) {
		t.Fatalf("missing control table: %v, want ErrNoConfig", err)
	}
	if _, err := d.Client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: str(tables.Control), Key: controlKey(configPK, configSK)}); err != nil {
		t.Fatal(err)
	}
	if _, err = NewWriter(ctx, d.Client, tables); !errors.Is(err, ErrNoConfig) {
		t.Fatalf("missing config item: %v, want ErrNoConfig", err)
	}
}

// NewWriter fails at start, naming the table, when a table is missing or is
// not a messages table; before, a writer without its messages table bumped a
// sequence counter and tried to write a fence on its first Write.
func TestNewWriterChecksTables(t *testing.T) {
	w := newWriterEnv(t, 2)
	ctx := ctxT(t)
	missing := testenv.Name(t, "missing")
	cases := []struct {
		name   string
		tables Tables
		want   []string // the Option of each *TableError, in order; none: NewWriter succeeds
		reason string   // a word the (first) error's reason must hold
	}{
		{"both present", w.tables, nil, ""},
		{"missing messages table", Tables{Messages: missing, Control: w.tables.Control}, []string{"Tables.Messages"}, "does not exist"},
		{"missing control table", Tables{Messages: w.tables.Messages, Control: missing}, []string{"Tables.Control"}, "does not exist"},
		{"both missing", Tables{Messages: missing, Control: missing + "-ctl"}, []string{"Tables.Control", "Tables.Messages"}, "does not exist"},
		{"messages table with another key", Tables{Messages: w.business, Control: w.tables.Control}, []string{"Tables.Messages"}, "swapped"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := w.counter(t, 0) + w.counter(t, 1)
			nw, err := NewWriter(ctx, w.d.Client, c.tables)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("NewWriter: %v", err)
				}
				if _, err := nw.Write(ctx, nil, keyed("a")); err != nil {
					t.Fatalf("Write: %v", err)
				}
				return
			}
			if nw != nil || err == nil {
				t.Fatalf("NewWriter = %v, %v; want an error", nw, err)
			}
			var got []*TableError
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					var te *TableError
					if errors.As(e, &te) {
						got = append(got, te)
					}
				}
			} else {
				var te *TableError
				if errors.As(err, &te) {
					got = append(got, te)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("err = %v: %d *TableError, want %d", err, len(got), len(c.want))
			}
			for i, te := range got {
				table := c.tables.Messages
				if te.Option == "Tables.Control" {
					table = c.tables.Control
				}
				if te.Option != c.want[i] || te.Table != table || !strings.Contains(err.Error(), table) {
					t.Errorf("error %d: %+v (%v); want %s naming %q", i, te, err, c.want[i], table)
				}
			}
			if !strings.Contains(got[0].Reason, c.reason) {
				t.Errorf("reason %q lacks %q", got[0].Reason, c.reason)
			}
			if got[0].Option == "Tables.Control" != errors.Is(err, ErrNoConfig) {
				t.Errorf("errors.Is(ErrNoConfig) = %v for %s", errors.Is(err, ErrNoConfig), got[0].Option)
			}
			if after := w.counter(t, 0) + w.counter(t, 1); after != before {
				t.Errorf("sequence counters moved from %d to %d", before, after)
			}
		})
	}
}

// CreateTables validates the shared settings it writes before any I/O
// (the nil client is never called).
func TestCreateTablesOptions(t *testing.T) {
	tables := Tables{Messages: "never-m", Control: "never-c"}
	for _, c := range []struct {
		name   string
		opt    TablesOption
		option string
	}{
		{"bucket count", BucketCount(outbox.MaxBucketCount + 1), "BucketCount"},
		{"max message bytes", MaxMessageBytes(10), "MaxMessageBytes"},
		{"id header", MessageIDHeader(""), "MessageIDHeader"},
		{"bucket header", BucketHeader(""), "BucketHeader"},
		{"sequence header like the id header", SequenceHeader(outbox.DefaultMessageIDHeader), "SequenceHeader"},
	} {
		var oe *outbox.OptionError
		if err := CreateTables(ctxT(t), nil, tables, c.opt); !errors.As(err, &oe) || oe.Option != c.option {
			t.Errorf("%s: err = %v, want an *OptionError about %s", c.name, err, c.option)
		}
	}
}

func TestNewWriterOptions(t *testing.T) {
	d, tables := newTables(t)
	ctx := ctxT(t)
	cases := []struct {
		name   string
		opt    WriterOption
		option string
	}{
		{"attempts", MaxAttempts(0), "MaxAttempts"},
		{"fence ttl", FenceTTL(time.Minute), "FenceTTL"},
		{"clock", WithClock(nil), "WithClock"},
		{"logger", WithLogger(nil), "WithLogger"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewWriter(ctx, d.Client, tables, c.opt)
			var oe *outbox.OptionError
			if !errors.As(err, &oe) || oe.Option != c.option {
				t.Fatalf("err = %v, want an *OptionError about %s", err, c.option)
			}
		})
	}
}

func TestWriteValidationWritesNothing(t *testing.T) {
	w := newWriterEnvOn(t, newEnv(t, 1, MaxMessageBytes(2<<20)))
	ctx := ctxT(t)
	big := bytes.Repeat([]byte{1}, MaxItemBytes)
	dupID := outbox.NewID()
	many := make([]outbox.Message, 100)
	for i := range many {
		many[i] = keyed("k")
	}
	var largeItems []types.TransactWriteItem
	for i := range 11 {
		largeItems = append(largeItems, types.TransactWriteItem{Put: &types.Put{TableName: str(w.business), Item: map[string]types.AttributeValue{
			"id": strAttr(fmt.Sprint(i)), "blob": &types.AttributeValueMemberB{Value: bytes.Repeat([]byte{2}, 390*1024)},
		}}})
	}
	cases := []struct {
		name  string
		items []types.TransactWriteItem
		msgs  []outbox.Message
		index int
		field string
	}{
		{"nothing", nil, nil, -1, "Transaction"},
		{"bad topic", nil, []outbox.Message{keyed("a"), {Topic: "bad topic", Key: []byte("a")}}, 1, "Topic"},
		{"id header", nil, []outbox.Message{{Topic: "t", Headers: []outbox.Header{{Key: outbox.DefaultMessageIDHeader}}}}, 0, "Headers[0].Key"},
		{"bad id", nil, []outbox.Message{{ID: "not-a-uuid", Topic: "t"}}, 0, "ID"},
		{"negative partition", nil, []outbox.Message{{Topic: "t", Partition: outbox.PartitionOf(-1)}}, 0, "Partition"},
		{"before 1970", nil, []outbox.Message{{Topic: "t", CreatedAt: time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC)}}, 0, "CreatedAt"},
		{"item above 400 KB", nil, []outbox.Message{keyed("a"), {Topic: "t", Key: []byte("a"), Value: big}}, 1, "Value"},
		{"headers above 400 KB", nil, []outbox.Message{{Topic: "t", Headers: []outbox.Header{{Key: "h", Value: big}}}}, 0, "Headers"},
		{"101 items", []types.TransactWriteItem{w.bump("agg", 0)}, many, -1, "Transaction"},
		{"above 4 MB", largeItems, []outbox.Message{keyed("a")}, -1, "Transaction"},
		{"empty item", []types.TransactWriteItem{w.bump("agg", 0), {}}, []outbox.Message{keyed("a")}, -1, "items[1]"},
		{"the same id twice", nil, []outbox.Message{keyed("a"), {ID: dupID, Topic: "t"}, keyed("b"), {ID: dupID, Topic: "u"}}, 3, "ID"},
		{"bucket set", []types.TransactWriteItem{w.bump("agg", 0)}, []outbox.Message{keyed("a"), {Topic: "t", Bucket: 1}}, 1, "Bucket"},
		{"sequence set", nil, []outbox.Message{{Topic: "t", Sequence: 5}}, 0, "Sequence"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := w.writer.Write(ctx, c.items, c.msgs...)
			var ve *outbox.ValidationError
			if !errors.As(err, &ve) || ve.Index != c.index || ve.Field != c.field {
				t.Fatalf("err = %v, want a *ValidationError for message %d field %s", err, c.index, c.field)
			}
		})
	}
	if w.client.calls != 0 {
		t.Errorf("%d transactions sent for invalid writes", w.client.calls)
	}
	if n := w.counter(t, 0); n != 0 {
		t.Errorf("invalid writes reserved sequence numbers (counter %d)", n)
	}
	if n := w.count(t, 0); n != 0 {
		t.Errorf("invalid writes stored %d items", n)
	}
	if n, _ := w.aggregate(t, "agg"); n != 0 {
		t.Error("invalid writes applied the caller's item")
	}
}

// A message just under the item limit passes: the size check is not off by
// a wide margin.
func TestWriteLargestItem(t *testing.T) {
	w := newWriterEnvOn(t, newEnv(t, 1, MaxMessageBytes(2<<20)))
	m := outbox.Message{ID: uuid.NewString(), Topic: "t", Key: []byte("k"), CreatedAt: t0}
	m.Sequence, m.Value = maxSeqForSize, []byte{}
	overhead := itemSize(messageItem(m, 0))
	m.Sequence = 0 // the writer's to assign; the size bound counts the longest
	m.Value = bytes.Repeat([]byte{3}, MaxItemBytes-overhead)
	if _, err := w.writer.Write(ctxT(t), nil, m); err != nil && w.takesMaxItems(t) {
		t.Fatalf("a %d-byte item: %v", MaxItemBytes, err)
	}
	m.ID, m.Value = uuid.NewString(), append(m.Value, 0)
	var ve *outbox.ValidationError
	if _, err := w.writer.Write(ctxT(t), nil, m); !errors.As(err, &ve) || ve.Field != "Value" {
		t.Fatalf("a %d-byte item: %v, want a *ValidationError on Value", MaxItemBytes+1, err)
	}
}

// assertFenced checks that bucket holds fences, and only fences, at seqs.
func (w *writerEnv) assertFenced(t *testing.T, bucket int, seqs ...int64) {
	t.Helper()
	entries := w.entries(t, bucket)
	if len(entries) != len(seqs) {
		t.Fatalf("bucket %d holds %d entries (%+v), want fences at %v", bucket, len(entries), entries, seqs)
	}
	for i, e := range entries {
		if !e.Fence || e.Sequence != seqs[i] {
			t.Fatalf("bucket %d entry %d = %+v, want a fence at %d", bucket, i, e, seqs[i])
		}
	}
}

func TestWriteBusinessConditionFailedFencesReservations(t *testing.T) {
	w := newWriterEnv(t, 4)
	ctx := ctxT(t)
	k0, k3 := keyInBucket(t, 0, 4), keyInBucket(t, 3, 4)
	if _, err := w.writer.Write(ctx, []types.TransactWriteItem{w.bump("agg", 0)}, keyed(k0)); err != nil {
		t.Fatal(err)
	}
	// A stale writer: it read version 0, but the aggregate is at version 1.
	before := time.Now()
	_, err := w.writer.Write(ctx, []types.TransactWriteItem{w.bump("agg", 0)}, keyed(k0), keyed(k3), keyed(k0))
	if !errors.Is(err, outbox.ErrConditionFailed) {
		t.Fatalf("err = %v, want ErrConditionFailed", err)
	}
	var te *TransactionError
	if !errors.As(err, &te) || te.Attempts != 1 || te.ReleaseErr != nil {
		t.Fatalf("err = %#v", err)
	}
	if rs := te.CallerReasons(); len(rs) != 1 || aws.ToString(rs[0].Code) != dynamoerr.CodeCondition {
		t.Errorf("CallerReasons = %+v", rs)
	}
	// One TransactionError shape: the inbox's name matches the Writer's
	// error, and the caller's item comes before the outbox's three puts.
	var ite *inbox.TransactionError
	if !errors.As(err, &ite) || ite.Op != "dynamo: outbox write" || ite.CallerFrom != 0 || ite.CallerItems != 1 ||
		len(ite.Reasons) != 4 || !strings.HasPrefix(err.Error(), "dynamo: outbox write failed after 1 attempt(s)") {
		t.Errorf("errors.As(*inbox.TransactionError) = %+v (%v); want the Writer's error, the caller's items first", ite, err)
	}
	var tc *types.TransactionCanceledException
	if !errors.As(err, &tc) {
		t.Error("the SDK's TransactionCanceledException is not reachable with errors.As")
	}
	if w.client.calls != 2 {
		t.Errorf("%d calls; a failed business condition must not be retried", w.client.calls)
	}
	// Bucket 0 had message 1; 2 and 3 were reserved and released. Bucket 3's 1 too.
	entries := w.entries(t, 0)
	if len(entries) != 3 || entries[0].Fence || !entries[1].Fence || !entries[2].Fence || entries[2].Sequence != 3 {
		t.Fatalf("bucket 0 = %+v, want message 1 then fences 2 and 3", entries)
	}
	w.assertFenced(t, 3, 1)
	if n, v := w.aggregate(t, "agg"); n != 1 || v != 1 {
		t.Errorf("aggregate n=%d ver=%d after a failed write", n, v)
	}
	// The fences carry the TTL: FenceTTL after the writer's clock or the
	// wall clock, whichever is later.
	assertTTL(t, w.getItem(t, w.tables.Messages, messageKey(0, 2)), t0, before, DefaultFenceTTL)
}

func TestWriteResubmitsAfterFence(t *testing.T) {
	w := newWriterEnv(t, 2)
	ctx := ctxT(t)
	k0, k1 := keyInBucket(t, 0, 2), keyInBucket(t, 1, 2)
	// A relay gave up on bucket 0's next number before the writer committed.
	if err := w.store.Fence(ctx, 0, 1, t0); err != nil {
		t.Fatal(err)
	}
	res, err := w.writer.Write(ctx, []types.TransactWriteItem{w.bump("agg", 0)}, keyed(k0), keyed(k1))
	if err != nil {
		t.Fatalf("Write over a fenced sequence: %v", err)
	}
	if m := res.Messages; m[0].Sequence != 2 || m[1].Sequence != 2 {
		t.Fatalf("resubmitted at %d and %d, want 2 and 2 (new numbers in both buckets)", m[0].Sequence, m[1].Sequence)
	}
	if w.client.calls != 2 || w.client.tokens[0] == w.client.tokens[1] {
		t.Errorf("calls %d, tokens %v: a resubmission with new items needs a new token", w.client.calls, w.client.tokens)
	}
	// Bucket 1's first reservation (1) was released with a fence.
	if e := w.entries(t, 1); len(e) != 2 || !e[0].Fence || e[0].Sequence != 1 || e[1].Fence || e[1].Sequence != 2 {
		t.Errorf("bucket 1 = %+v, want fence 1, message 2", e)
	}
	if n, _ := w.aggregate(t, "agg"); n != 1 {
		t.Errorf("aggregate applied %d times", n)
	}
}

func TestWriteFencedOnEveryAttempt(t *testing.T) {
	w := newWriterEnv(t, 1, MaxAttempts(3))
	ctx := ctxT(t)
	// A relay that fences every reserved number just before the commit.
	w.client.fault = func(_ int, in *dynamodb.TransactWriteItemsInput) (bool, error) {
		for _, it := range in.TransactItems {
			if it.Put != nil && aws.ToString(it.Put.TableName) == w.tables.Messages {
				seq, _ := intAttr(it.Put.Item, attrSeq, true)
				if err := w.store.Fence(ctx, 0, seq, t0); err != nil {
					t.Errorf("fence %d: %v", seq, err)
				}
			}
		}
		return true, nil
	}
	_, err := w.writer.Write(ctx, []types.TransactWriteItem{w.bump("agg", 0)}, keyed("a"), keyed("b"))
	if !errors.Is(err, outbox.ErrSequenceFenced) {
		t.Fatalf("err = %v, want ErrSequenceFenced", err)
	}
	if w.client.calls != 3 {
		t.Errorf("%d attempts, want MaxAttempts = 3", w.client.calls)
	}
	w.assertFenced(t, 0, 1, 2, 3, 4, 5, 6)
	if n, _ := w.aggregate(t, "agg"); n != 0 {
		t.Error("the caller's item was applied")
	}
}

func cancelledBy(code string, items int) error {
	rs := make([]types.CancellationReason, items)
	for i := range rs {
		rs[i] = reason(dynamoerr.CodeNone)
	}
	rs[0] = reason(code)
	return cancelled(rs...)
}

func TestWriteRetriesTransientFailures(t *testing.T) {
	cases := []struct {
		name   string
		inject func(items int) error
		want   error
	}{
		{"conflict", func(n int) error { return cancelledBy(dynamoerr.CodeConflict, n) }, outbox.ErrConflict},
		{"throttled item", func(n int) error { return cancelledBy(dynamoerr.CodeThrottling, n) }, outbox.ErrThrottled},
		{"throttled request", func(int) error {
			return &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}
		}, outbox.ErrThrottled},
	}
	for _, c := range cases {
		t.Run(c.name+" then success", func(t *testing.T) {
			w := newWriterEnv(t, 1, MaxAttempts(3))
			w.client.fault = func(call int, in *dynamodb.TransactWriteItemsInput) (bool, error) {
				if call < 3 {
					return false, c.inject(len(in.TransactItems))
				}
				return true, nil
			}
			res, err := w.writer.Write(ctxT(t), []types.TransactWriteItem{w.bump("agg", 0)}, keyed("a"))
			if err != nil {
				t.Fatal(err)
			}
			if res.Messages[0].Sequence != 1 || w.client.calls != 3 {
				t.Errorf("sequence %d after %d calls", res.Messages[0].Sequence, w.client.calls)
			}
			if n, _ := w.aggregate(t, "agg"); n != 1 {
				t.Errorf("aggregate applied %d times", n)
			}
		})
		t.Run(c.name+" past the budget", func(t *testing.T) {
			w := newWriterEnv(t, 1, MaxAttempts(2))
			w.client.fault = func(_ int, in *dynamodb.TransactWriteItemsInput) (bool, error) {
				return false, c.inject(len(in.TransactItems))
			}
			_, err := w.writer.Write(ctxT(t), []types.TransactWriteItem{w.bump("agg", 0)}, keyed("a"), keyed("b"))
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if w.client.calls != 2 || w.client.tokens[0] != w.client.tokens[1] {
				t.Errorf("calls %d tokens %v", w.client.calls, w.client.tokens)
			}
			// Nothing was written, so the reservations were released.
			w.assertFenced(t, 0, 1, 2)
		})
	}
}

func TestWriteRejectedByDynamoDB(t *testing.T) {
	w := newWriterEnv(t, 1)
	// An item for a table that does not exist: DynamoDB refuses the request.
	bad := types.TransactWriteItem{Put: &types.Put{TableName: str(testenv.Name(t, "missing")), Item: map[string]types.AttributeValue{"id": strAttr("x")}}}
	_, err := w.writer.Write(ctxT(t), []types.TransactWriteItem{bad}, keyed("a"))
	var te *TransactionError
	if !errors.As(err, &te) || te.Err != nil || te.Attempts != 1 {
		t.Fatalf("err = %v, want a *TransactionError without a sentinel after 1 attempt", err)
	}
	for _, s := range []error{outbox.ErrOutcomeUnknown, outbox.ErrConflict, outbox.ErrConditionFailed} {
		if errors.Is(err, s) {
			t.Errorf("matches %v", s)
		}
	}
	w.assertFenced(t, 0, 1)
}

// The response of a committed transaction is lost: Write must retry with the
// same token and report one success, with the caller's item applied once.
func TestWriteResponseLostAfterCommit(t *testing.T) {
	w := newWriterEnv(t, 2)
	w.client.fault = func(call int, _ *dynamodb.TransactWriteItemsInput) (bool, error) {
		if call == 1 {
			return true, lostResponse() // committed, but the caller hears a timeout
		}
		return true, nil
	}
	res, err := w.writer.Write(ctxT(t), []types.TransactWriteItem{w.bump("agg", 0)}, keyed("a"), keyed("b"))
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if w.client.calls != 2 || w.client.tokens[0] != w.client.tokens[1] {
		t.Fatalf("calls %d, tokens %v; want a retry with the same token", w.client.calls, w.client.tokens)
	}
	// DynamoDB itself answered the retry with success (it honours the
	// token), rather than cancelling it and leaving Write to recognize its
	// own messages.
	if w.client.real[1] != nil && w.honoursTokens(t) {
		t.Errorf("DynamoDB answered the same-token retry with %v", w.client.real[1])
	}
	if n, v := w.aggregate(t, "agg"); n != 1 || v != 1 {
		t.Fatalf("aggregate n=%d ver=%d: the transaction ran twice", n, v)
	}
	total := 0
	for b := range 2 {
		for _, e := range w.entries(t, b) {
			if e.Fence {
				t.Errorf("fence at %d/%d after a committed write", b, e.Sequence)
			}
			total++
		}
	}
	if total != 2 || len(res.Messages) != 2 {
		t.Fatalf("%d stored, %d reported; want 2 and 2", total, len(res.Messages))
	}
}

// Belt and braces for an engine that does not honour the token (or a retry
// after its 10-minute window): the retry is evaluated again, its outbox puts
// fail on our own messages, and Write recognizes its earlier commit.
func TestWriteRecognizesOwnCommitWithoutToken(t *testing.T) {
	w := newWriterEnv(t, 1)
	w.client.fault = func(call int, in *dynamodb.TransactWriteItemsInput) (bool, error) {
		if call == 1 {
			return true, lostResponse()
		}
		in.ClientRequestToken = str(uuid.NewString())
		return true, nil
	}
	res, err := w.writer.Write(ctxT(t), []types.TransactWriteItem{w.bump("agg", 0)}, keyed("a"))
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if res.Messages[0].Sequence != 1 || len(w.entries(t, 0)) != 1 {
		t.Fatalf("result %+v, stored %+v", res.Messages, w.entries(t, 0))
	}
	if n, _ := w.aggregate(t, "agg"); n != 1 {
		t.Fatalf("aggregate applied %d times", n)
	}
}

func TestWriteOutcomeUnknown(t *testing.T) {
	cases := []struct {
		name      string
		committed bool
	}{
		{"committed", true},
		{"not committed", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWriterEnv(t, 1, MaxAttempts(3))
			w.client.fault = func(call int, _ *dynamodb.TransactWriteItemsInput) (bool, error) {
				return call == 1 && c.committed, lostResponse()
			}
			_, err := w.writer.Write(ctxT(t), []types.TransactWriteItem{w.bump("agg", 0)}, keyed("a"))
			if !errors.Is(err, outbox.ErrOutcomeUnknown) {
				t.Fatalf("err = %v, want ErrOutcomeUnknown", err)
			}
			if w.client.calls != 3 {
				t.Errorf("%d calls, want 3", w.client.calls)
			}
			// Never fenced: the messages may be stored.
			entries := w.entries(t, 0)
			if c.committed && (len(entries) != 1 || entries[0].Fence) || !c.committed && len(entries) != 0 {
				t.Fatalf("entries = %+v", entries)
			}
		})
	}
}

// A lost response followed by a cancellation with the same token proves the
// transaction never committed, so the final answer is definite.
func TestWriteLostThenConditionFailed(t *testing.T) {
	w := newWriterEnv(t, 1)
	ctx := ctxT(t)
	if _, err := w.writer.Write(ctx, []types.TransactWriteItem{w.bump("agg", 0)}); err != nil {
		t.Fatal(err)
	}
	w.client.fault = func(call int, _ *dynamodb.TransactWriteItemsInput) (bool, error) {
		if call == 2 {
			return false, lostResponse() // never reached DynamoDB
		}
		return true, nil
	}
	_, err := w.writer.Write(ctx, []types.TransactWriteItem{w.bump("agg", 0)}, keyed("a"))
	if !errors.Is(err, outbox.ErrConditionFailed) {
		t.Fatalf("err = %v, want ErrConditionFailed", err)
	}
	if w.client.calls != 3 || w.client.tokens[1] != w.client.tokens[2] {
		t.Fatalf("calls %d, tokens %v; want the lost call retried once with its token", w.client.calls, w.client.tokens)
	}
	w.assertFenced(t, 0, 1)
}

func TestWriteContextDoneBeforeSending(t *testing.T) {
	w := newWriterEnv(t, 1)
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	_, err := w.writer.Write(ctx, nil, keyed("a"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if w.client.calls != 0 {
		t.Errorf("%d transactions sent with a cancelled context", w.client.calls)
	}
}

// Concurrent writers of one aggregate, each reading its version first: the
// committed messages' sequence order equals the commit (version) order.
func TestWriteSequenceOrderFollowsCommitOrder(t *testing.T) {
	w := newWriterEnv(t, 1, MaxAttempts(10))
	ctx := ctxT(t)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []error
	)
	for writer := range 3 {
		wg.Go(func() {
			for range 4 {
				for {
					_, v := w.aggregate(t, "agg")
					m := keyed("agg")
					m.Headers = []outbox.Header{{Key: "version", Value: fmt.Appendf(nil, "%d", v+1)}, {Key: "writer", Value: fmt.Appendf(nil, "%d", writer)}}
					_, err := w.writer.Write(ctx, []types.TransactWriteItem{w.bump("agg", int(v))}, m)
					if err == nil {
						break
					}
					if !errors.Is(err, outbox.ErrConditionFailed) && !errors.Is(err, outbox.ErrConflict) {
						mu.Lock()
						failed = append(failed, err)
						mu.Unlock()
						return
					}
				}
			}
		})
	}
	wg.Wait()
	w.skipUnlessIsolated(t, failed)
	for _, err := range failed {
		t.Errorf("write: %v", err)
	}
	var versions []string
	for _, e := range w.entries(t, 0) {
		if !e.Fence {
			versions = append(versions, string(e.Message.Headers[0].Value))
		}
	}
	want := []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"}
	if strings.Join(versions, ",") != strings.Join(want, ",") {
		if !w.isolatesTransactions(t) {
			t.Skipf("versions in sequence order = %v, as an endpoint that does not serialize transactions allows", versions)
		}
		t.Fatalf("versions in sequence order = %v, want %v", versions, want)
	}
}

// recordingTracer injects a fixed traceparent and records the spans it starts.
type recordingTracer struct {
	mu    sync.Mutex
	spans []string
	ended []error
}

const testTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func (r *recordingTracer) Start(ctx context.Context, name string, s outbox.SpanStart) (context.Context, func(error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, fmt.Sprintf("%s kind=%d attrs=%v", name, s.Kind, s.Attributes))
	return ctx, func(err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ended = append(r.ended, err)
	}
}

func (r *recordingTracer) Inject(_ context.Context, hs []outbox.Header) []outbox.Header {
	hs = slices.DeleteFunc(hs, func(h outbox.Header) bool { return h.Key == outbox.TraceParentHeader })
	return append(hs, outbox.Header{Key: outbox.TraceParentHeader, Value: []byte(testTraceParent)})
}

func (r *recordingTracer) Extract(ctx context.Context, _ []outbox.Header) context.Context { return ctx }

// With a tracer, Write is one enqueue span and every stored message carries
// the trace context, replacing one the caller set, without changing the
// caller's messages; a refused write ends the span with its error.
func TestWriteInjectsTraceContext(t *testing.T) {
	tr := &recordingTracer{}
	w := newWriterEnv(t, 1, WithTracer(tr))
	ctx := ctxT(t)
	callers := []outbox.Header{{Key: "a", Value: []byte("1")}, {Key: outbox.TraceParentHeader, Value: []byte("stale")}}
	m := keyed("k")
	m.Headers = callers
	if _, err := w.writer.Write(ctx, nil, m, keyed("k")); err != nil {
		t.Fatal(err)
	}
	if string(callers[1].Value) != "stale" || len(callers) != 2 {
		t.Fatalf("the caller's headers changed: %v", callers)
	}
	entries := w.entries(t, 0)
	if len(entries) != 2 {
		t.Fatalf("%d entries", len(entries))
	}
	want := [][]outbox.Header{
		{{Key: "a", Value: []byte("1")}, {Key: outbox.TraceParentHeader, Value: []byte(testTraceParent)}},
		{{Key: outbox.TraceParentHeader, Value: []byte(testTraceParent)}},
	}
	for i, e := range entries {
		if fmt.Sprint(e.Message.Headers) != fmt.Sprint(want[i]) {
			t.Errorf("message %d headers %q, want %q", i, e.Message.Headers, want[i])
		}
	}
	_, err := w.writer.Write(ctx, nil, outbox.Message{Topic: "bad topic"})
	if err == nil {
		t.Fatal("an invalid topic was written")
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.spans) != 2 || !strings.HasPrefix(tr.spans[0], "outbox enqueue kind=1") || !strings.Contains(tr.spans[0], "messaging.destination.name=orders") {
		t.Fatalf("spans %q", tr.spans)
	}
	if len(tr.ended) != 2 || tr.ended[0] != nil || tr.ended[1] != err {
		t.Fatalf("spans ended with %v; want nil, then %v", tr.ended, err)
	}
}

// A writer of an outbox whose config item lists topics refuses any other
// topic, naming it and the list, and writes nothing; a listed topic
// passes. An outbox with no list takes any topic.
func TestWriteOnlyTopicsTheOutboxServes(t *testing.T) {
	ctx := ctxT(t)
	w := newWriterEnv(t, 1)
	if _, err := w.writer.Write(ctx, nil, outbox.Message{Topic: "order-evnts", Key: []byte("a")}); err != nil {
		t.Fatalf("an outbox without topics refused a topic: %v", err)
	}
	if _, err := Configure(ctx, w.d.Client, w.tables, outbox.Config{BucketCount: 1, Topics: []string{"orders", "audit", "orders"}}); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	c, err := w.store.Config(ctx)
	if err != nil || !slices.Equal(c.Topics, []string{"audit", "orders"}) {
		t.Fatalf("Config = %+v, %v; want topics audit,orders", c, err)
	}
	ww, err := NewWriter(ctx, w.client, w.tables, WithClock(fixedClock{t0}))
	if err != nil {
		t.Fatal(err)
	}
	calls, before := w.client.calls, w.counter(t, 0)
	_, err = ww.Write(ctx, []types.TransactWriteItem{w.bump("agg", 0)}, keyed("a"), outbox.Message{Topic: "order-evnts", Key: []byte("b")})
	var te *TopicError
	var ve *outbox.ValidationError
	switch {
	case !errors.As(err, &te) || te.Index != 1 || te.Topic != "order-evnts" || !slices.Equal(te.Topics, []string{"audit", "orders"}):
		t.Fatalf("err = %v, want a *TopicError for message 1, topic order-evnts, topics audit,orders", err)
	case !errors.As(err, &ve) || ve.Field != "Topic":
		t.Fatalf("err = %v, want it to match *outbox.ValidationError for Topic", err)
	case !strings.Contains(err.Error(), `"order-evnts"`) || !strings.Contains(err.Error(), "audit,orders"):
		t.Fatalf("err = %q, want it to name the topic and the list", err)
	}
	if w.client.calls != calls || w.counter(t, 0) != before {
		t.Error("a refused topic sent a transaction or reserved a sequence number")
	}
	if n, _ := w.aggregate(t, "agg"); n != 0 {
		t.Error("a refused topic applied the caller's item")
	}
	if _, err := ww.Write(ctx, nil, keyed("a"), outbox.Message{Topic: "audit", Key: []byte("b")}); err != nil {
		t.Fatalf("listed topics refused: %v", err)
	}
	// Emptying the list means any topic again (for writers made after it).
	if _, err := Configure(ctx, w.d.Client, w.tables, outbox.Config{BucketCount: 1}); err != nil {
		t.Fatal(err)
	}
	if c, err := w.store.Config(ctx); err != nil || len(c.Topics) != 0 {
		t.Fatalf("Config = %+v, %v; want no topics", c, err)
	}
	// CreateTables on the existing outbox sets the list with Topics, and
	// keeps it without.
	if err := CreateTables(ctx, w.d.Client, w.tables, BucketCount(1), Topics("orders")); err != nil {
		t.Fatal(err)
	}
	if err := CreateTables(ctx, w.d.Client, w.tables, BucketCount(1)); err != nil {
		t.Fatal(err)
	}
	if c, err := w.store.Config(ctx); err != nil || !slices.Equal(c.Topics, []string{"orders"}) {
		t.Fatalf("Config = %+v, %v; want topics orders", c, err)
	}
}

// WriteWithToken sends the caller's token, resends it after a lost
// response, takes a new one after a fence, and refuses a token DynamoDB
// would refuse before anything is reserved.
func TestWriteWithToken(t *testing.T) {
	w := newWriterEnv(t, 2)
	ctx := ctxT(t)
	const token = "6f1c3a5e-0000-4b7e-9a41-0c5d7e2f9b13"
	w.client.fault = func(call int, _ *dynamodb.TransactWriteItemsInput) (bool, error) {
		if call == 1 {
			return true, lostResponse()
		}
		return true, nil
	}
	if _, err := w.writer.WriteWithToken(ctx, token, nil, keyed("a")); err != nil {
		t.Fatal(err)
	}
	if w.client.calls != 2 || w.client.tokens[0] != token || w.client.tokens[1] != token || w.client.real[1] != nil && w.honoursTokens(t) {
		t.Fatalf("tokens %v, DynamoDB answered %v; want the caller's token twice and a success", w.client.tokens, w.client.real)
	}
	// A fenced reservation: resubmitted under a new token.
	w.client.fault, w.client.calls, w.client.tokens = nil, 0, nil
	k0 := keyInBucket(t, 0, 2)
	last := w.counter(t, 0)
	if err := w.store.Fence(ctx, 0, last+1, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.writer.WriteWithToken(ctx, "second-token", nil, keyed(k0)); err != nil {
		t.Fatal(err)
	}
	if w.client.calls != 2 || w.client.tokens[0] != "second-token" || w.client.tokens[1] == "second-token" {
		t.Fatalf("tokens %v; want the caller's, then a new one after the fence", w.client.tokens)
	}
	for _, bad := range []string{"", strings.Repeat("x", MaxTokenLength+1)} {
		before := w.counter(t, 0)
		_, err := w.writer.WriteWithToken(ctx, bad, nil, keyed(k0))
		var ve *outbox.ValidationError
		if !errors.As(err, &ve) || ve.Field != "ClientRequestToken" || w.counter(t, 0) != before {
			t.Errorf("token %q: %v, counter %d -> %d; want a ValidationError and nothing reserved", bad, err, before, w.counter(t, 0))
		}
	}
}
