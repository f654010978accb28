package ddbmodel

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// clock is a manual clock for the token buckets.
type clock struct{ t time.Time }

func (c *clock) now() time.Time               { return c.t }
func (c *clock) advance(d time.Duration)      { c.t = c.t.Add(d) }
func newClock() *clock                        { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }
func s(v string) *types.AttributeValueMemberS { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func b(size int) *types.AttributeValueMemberB {
	return &types.AttributeValueMemberB{Value: make([]byte, size)}
}

// newDB is a model without latency, on clk, with the outbox's two table
// shapes: messages (b N, s N, with a stream) and control (pk S, sk S).
func newDB(t *testing.T, clk *clock, shards int) *DB {
	t.Helper()
	db := New(Config{Latency: Fixed(0), Now: clk.now, Shards: shards})
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		hash   string
		rng    string
		typ    types.ScalarAttributeType
		stream bool
	}{{"msgs", "b", "s", types.ScalarAttributeTypeN, true}, {"ctl", "pk", "sk", types.ScalarAttributeTypeS, false}} {
		in := &dynamodb.CreateTableInput{TableName: aws.String(c.name), BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(c.hash), AttributeType: c.typ}, {AttributeName: aws.String(c.rng), AttributeType: c.typ}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(c.hash), KeyType: types.KeyTypeHash}, {AttributeName: aws.String(c.rng), KeyType: types.KeyTypeRange}}}
		if c.stream {
			in.StreamSpecification = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeKeysOnly}
		}
		if _, err := db.CreateTable(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func msg(bucket, seq int64, valueBytes int) Item {
	return Item{"b": n(bucket), "s": n(seq), "v": b(valueBytes)}
}

func TestItemSize(t *testing.T) {
	tests := []struct {
		name string
		item Item
		want int
	}{
		{"string: name and UTF-8 bytes", Item{"ab": s("héllo")}, 2 + 6},
		{"number: a byte per two significant digits, plus one", Item{"n": n(12345)}, 1 + 3 + 1},
		{"number: zeros at either end are not significant", Item{"n": &types.AttributeValueMemberN{Value: "-1200.00"}}, 1 + 1 + 1},
		{"binary", Item{"v": b(100)}, 1 + 100},
		{"bool and null", Item{"t": &types.AttributeValueMemberBOOL{Value: true}, "z": &types.AttributeValueMemberNULL{Value: true}}, 2 + 2},
		{"map: 3 bytes, and a byte, the key and the value per entry", Item{"m": &types.AttributeValueMemberM{Value: Item{"k": s("vv")}}}, 1 + 3 + 1 + 1 + 2},
		{"list: 3 bytes, and a byte and the value per element", Item{"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{s("a"), n(7)}}}, 1 + 3 + (1 + 1) + (1 + 2)},
		{"string set", Item{"ss": &types.AttributeValueMemberSS{Value: []string{"ab", "c"}}}, 2 + 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ItemSize(tt.item); got != tt.want {
				t.Errorf("ItemSize = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestUnits(t *testing.T) {
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"a write of 1 byte is 1 WCU", WriteUnits(1, false), 1},
		{"a write of 1024 bytes is 1 WCU", WriteUnits(1024, false), 1},
		{"a write of 1025 bytes is 2 WCU", WriteUnits(1025, false), 2},
		{"a delete of nothing is still 1 WCU", WriteUnits(0, false), 1},
		{"transactional writes cost twice", WriteUnits(1025, true), 4},
		{"a consistent read of 4096 bytes is 1 RCU", ReadUnits(4096, true, false), 1},
		{"a consistent read of 4097 bytes is 2 RCU", ReadUnits(4097, true, false), 2},
		{"an eventually consistent read costs half", ReadUnits(4097, false, false), 1},
		{"an eventually consistent read of nothing is 0.5 RCU", ReadUnits(0, false, false), 0.5},
		{"a transactional read costs twice", ReadUnits(100, true, true), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

// TestUnitsCharged checks the units each operation is charged by the
// model, item sizes known: the larger of before and after for a write,
// twice in a transaction, the items read (before the filter) for a Query.
func TestUnitsCharged(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	db := newDB(t, clk, 1)
	units := func(op string) float64 {
		u := db.Counts("")[OpTable{op, "msgs"}].Units
		db.ResetCounts("")
		return u
	}
	mustPut := func(it Item) {
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("msgs"), Item: it}); err != nil {
			t.Fatal(err)
		}
	}
	mustPut(msg(0, 1, 3000)) // 3000 + 1+2 + 1+2 + 1 bytes: 3 WCU
	if u := units("PutItem"); u != 3 {
		t.Errorf("put of a 3 KB item: %v WCU, want 3", u)
	}
	mustPut(msg(0, 1, 10)) // replaces 3 KB by a small item: the larger, 3
	if u := units("PutItem"); u != 3 {
		t.Errorf("put over a 3 KB item: %v WCU, want 3 (the larger of before and after)", u)
	}
	_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String("msgs"), Key: Item{"b": n(0), "s": n(1)},
		UpdateExpression: aws.String("SET #v = :v"), ExpressionAttributeNames: map[string]string{"#v": "v"},
		ExpressionAttributeValues: Item{":v": b(2500)}})
	if err != nil {
		t.Fatal(err)
	}
	if u := units("UpdateItem"); u != 3 {
		t.Errorf("update to 2.5 KB: %v WCU, want 3", u)
	}
	_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String("msgs"), Item: msg(0, 2, 900)}},
		{ConditionCheck: &types.ConditionCheck{TableName: aws.String("msgs"), Key: Item{"b": n(0), "s": n(1)},
			ConditionExpression: aws.String("attribute_exists(#s)"), ExpressionAttributeNames: map[string]string{"#s": "s"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if u := units("TransactWriteItems"); u != 2+6 {
		t.Errorf("transaction of a 1 KB put and a check of a 2.5 KB item: %v WCU, want 8", u)
	}
	for i := int64(3); i <= 6; i++ {
		mustPut(msg(0, i, 1500))
	}
	units("PutItem")
	// Items 2..6: 0.9 + 4×1.5 KB ≈ 7 KB read: 2 RCU, though the filter
	// keeps one.
	out, err := db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("msgs"), ConsistentRead: aws.Bool(true),
		KeyConditionExpression: aws.String("#b = :b AND #s >= :two"), FilterExpression: aws.String("#s = :two"),
		ExpressionAttributeNames: map[string]string{"#b": "b", "#s": "s"}, ExpressionAttributeValues: Item{":b": n(0), ":two": n(2)}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Count != 1 || out.ScannedCount != 5 {
		t.Errorf("query: count %d, scanned %d; want 1 and 5", out.Count, out.ScannedCount)
	}
	if u := units("Query"); u != 2 {
		t.Errorf("query reading 7 KB: %v RCU, want 2", u)
	}
	_, err = db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{"msgs": {
		Keys: []map[string]types.AttributeValue{{"b": n(0), "s": n(3)}, {"b": n(0), "s": n(99)}}, ConsistentRead: aws.Bool(true)}}})
	if err != nil {
		t.Fatal(err)
	}
	if u := units("BatchGetItem"); u != 2 {
		t.Errorf("batch get of a 1.5 KB item and a missing key: %v RCU, want 2", u)
	}
}

// TestPartitionKeyCapacity checks the per-partition-key ceilings: writes
// beyond 1,000 WCU in a second on one key are refused with
// ProvisionedThroughputExceeded while another key writes on, the bucket
// refills with time, a transaction costs twice and is cancelled with
// ThrottlingError, a batch returns the throttled part unprocessed, and
// reads beyond 3,000 RCU are refused.
func TestPartitionKeyCapacity(t *testing.T) {
	ctx := context.Background()
	put := func(db *DB, bucket, seq int64) error {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("msgs"), Item: msg(bucket, seq, 100)})
		return err
	}
	t.Run("writes", func(t *testing.T) {
		clk := newClock()
		db := newDB(t, clk, 1)
		for i := range int64(1000) {
			if err := put(db, 0, i); err != nil {
				t.Fatalf("write %d of the first 1,000 WCU: %v", i, err)
			}
		}
		var pt *types.ProvisionedThroughputExceededException
		if err := put(db, 0, 1000); !errors.As(err, &pt) {
			t.Fatalf("write 1,001 in the same instant: %v, want ProvisionedThroughputExceeded", err)
		}
		if r := pt.ThrottlingReasons; len(r) != 1 || aws.ToString(r[0].Reason) != "TableWriteKeyRangeThroughputExceeded" {
			t.Errorf("throttling reasons %+v", r)
		}
		if err := put(db, 1, 0); err != nil {
			t.Errorf("another partition key: %v", err)
		}
		clk.advance(10 * time.Millisecond)
		for i := range int64(10) {
			if err := put(db, 0, 2000+i); err != nil {
				t.Fatalf("10 ms later, write %d of 10 WCU: %v", i, err)
			}
		}
		if err := put(db, 0, 3000); !errors.As(err, &pt) {
			t.Errorf("the 11th write 10 ms later: %v, want ProvisionedThroughputExceeded", err)
		}
		c := db.Counts("")[OpTable{"PutItem", "msgs"}]
		if c.Throttled != 2 || c.Calls != 1000+1+1+10+1 {
			t.Errorf("counts %+v: want 2 throttled of 1,013 calls", c)
		}
	})
	t.Run("transactions cost twice", func(t *testing.T) {
		clk := newClock()
		db := newDB(t, clk, 1)
		tx := func(seq int64) error {
			_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
				{Put: &types.Put{TableName: aws.String("msgs"), Item: msg(0, seq, 100)}},
				{Put: &types.Put{TableName: aws.String("msgs"), Item: msg(1, seq, 100)}},
			}})
			return err
		}
		for i := range int64(500) {
			if err := tx(i); err != nil {
				t.Fatalf("transaction %d of 500 (2 WCU per key each): %v", i, err)
			}
		}
		var tc *types.TransactionCanceledException
		if err := tx(500); !errors.As(err, &tc) {
			t.Fatalf("transaction 501: %v, want TransactionCanceled", err)
		}
		for i, r := range tc.CancellationReasons {
			if aws.ToString(r.Code) != reasonThrottling {
				t.Errorf("reason %d: %s, want %s", i, aws.ToString(r.Code), reasonThrottling)
			}
		}
		if got := len(db.Items("msgs")); got != 1000 {
			t.Errorf("%d items, want the 1,000 of the committed transactions", got)
		}
	})
	t.Run("batch writes", func(t *testing.T) {
		clk := newClock()
		db := newDB(t, clk, 1)
		for i := range int64(990) {
			if err := put(db, 0, i); err != nil {
				t.Fatal(err)
			}
		}
		var reqs []types.WriteRequest
		for i := range int64(25) {
			bucket := int64(0)
			if i%2 == 1 {
				bucket = 1
			}
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: msg(bucket, 1000+i, 100)}})
		}
		out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{"msgs": reqs}})
		if err != nil {
			t.Fatal(err)
		}
		// Bucket 0 gets 13 requests and has 10 WCU left.
		if got := len(out.UnprocessedItems["msgs"]); got != 3 {
			t.Errorf("%d unprocessed, want 3", got)
		}
		if c := db.Counts("")[OpTable{"BatchWriteItem", "msgs"}]; c.Throttled != 1 || c.Units != 22 {
			t.Errorf("batch counts %+v: want one throttled call of 22 WCU", c)
		}
	})
	t.Run("reads", func(t *testing.T) {
		clk := newClock()
		db := newDB(t, clk, 1)
		if err := put(db, 0, 1); err != nil {
			t.Fatal(err)
		}
		get := func() error {
			_, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("msgs"), Key: Item{"b": n(0), "s": n(1)}, ConsistentRead: aws.Bool(true)})
			return err
		}
		for i := range 3000 {
			if err := get(); err != nil {
				t.Fatalf("read %d of 3,000 RCU: %v", i, err)
			}
		}
		var pt *types.ProvisionedThroughputExceededException
		if err := get(); !errors.As(err, &pt) {
			t.Fatalf("read 3,001: %v, want ProvisionedThroughputExceeded", err)
		}
		clk.advance(time.Millisecond)
		for i := range 3 {
			if err := get(); err != nil {
				t.Fatalf("1 ms later, read %d of 3: %v", i, err)
			}
		}
	})
}

func TestTokenBucket(t *testing.T) {
	t0 := time.Unix(0, 0)
	tests := []struct {
		name  string
		steps []struct {
			at     time.Duration
			cost   float64
			admits bool
		}
	}{
		{"a full bucket admits its burst", []struct {
			at     time.Duration
			cost   float64
			admits bool
		}{{0, 1000, true}, {0, 1, false}}},
		{"it refills at the rate", []struct {
			at     time.Duration
			cost   float64
			admits bool
		}{{0, 1000, true}, {100 * time.Millisecond, 100, true}, {100 * time.Millisecond, 1, false}}},
		{"it banks no more than the burst", []struct {
			at     time.Duration
			cost   float64
			admits bool
		}{{0, 1, true}, {10 * time.Second, 1000, true}, {10 * time.Second, 1, false}}},
		{"a cost over what is left is refused, smaller ones pass", []struct {
			at     time.Duration
			cost   float64
			admits bool
		}{{0, 999, true}, {0, 2, false}, {0, 1, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var bk tokenBucket
			for i, st := range tt.steps {
				if got := bk.take(t0.Add(st.at), 1000, 1000, st.cost); got != st.admits {
					t.Errorf("step %d (cost %v at %v): admitted %v, want %v", i, st.cost, st.at, got, st.admits)
				}
			}
		})
	}
}

// TestConditionalWrites: a put conditioned on the key's absence writes
// once; the second is refused with the item as it was (ALL_OLD); a
// transaction with one failing condition writes nothing and names the
// item; a resend of a committed transaction's token writes nothing again.
func TestConditionalWrites(t *testing.T) {
	ctx := context.Background()
	db := newDB(t, newClock(), 1)
	names := map[string]string{"#s": "s"}
	put := func(seq int64, v int) error {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("msgs"), Item: msg(0, seq, v),
			ConditionExpression: aws.String("attribute_not_exists(#s)"), ExpressionAttributeNames: names,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
		return err
	}
	if err := put(1, 10); err != nil {
		t.Fatal(err)
	}
	var cf *types.ConditionalCheckFailedException
	if err := put(1, 20); !errors.As(err, &cf) {
		t.Fatalf("second put: %v, want ConditionalCheckFailed", err)
	}
	if v, ok := cf.Item["v"].(*types.AttributeValueMemberB); !ok || len(v.Value) != 10 {
		t.Errorf("the failure's item %v, want the first put's", cf.Item)
	}
	tx := &dynamodb.TransactWriteItemsInput{ClientRequestToken: aws.String("token-1"), TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String("msgs"), Item: msg(0, 2, 5), ConditionExpression: aws.String("attribute_not_exists(#s)"), ExpressionAttributeNames: names}},
		{Put: &types.Put{TableName: aws.String("msgs"), Item: msg(0, 1, 5), ConditionExpression: aws.String("attribute_not_exists(#s)"), ExpressionAttributeNames: names,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
	}}
	_, err := db.TransactWriteItems(ctx, tx)
	var tc *types.TransactionCanceledException
	if !errors.As(err, &tc) {
		t.Fatalf("transaction over a taken key: %v", err)
	}
	if got := fmt.Sprint(aws.ToString(tc.CancellationReasons[0].Code), " ", aws.ToString(tc.CancellationReasons[1].Code)); got != "None ConditionalCheckFailed" {
		t.Errorf("reasons %s", got)
	}
	if tc.CancellationReasons[1].Item == nil {
		t.Error("no old item with the failed condition's reason")
	}
	if got := len(db.Items("msgs")); got != 1 {
		t.Fatalf("%d items after a cancelled transaction, want 1", got)
	}
	tx.TransactItems = tx.TransactItems[:1]
	for i := range 2 {
		if _, err := db.TransactWriteItems(ctx, tx); err != nil {
			t.Fatalf("send %d of a transaction with its token: %v", i+1, err)
		}
	}
	recs := streamRecords(t, db)
	if got := fmt.Sprint(recs); got != "[INSERT 0/1 INSERT 0/2]" {
		t.Errorf("stream records %s: want one INSERT per item written", got)
	}
}

// streamRecords reads every record of the messages table's stream, shard
// by shard: event name and b/s.
func streamRecords(t *testing.T, db *DB) []string {
	t.Helper()
	ctx := context.Background()
	st := db.Streams()
	arn := db.tables["msgs"].stream.arn
	var out []string
	for _, sh := range db.tables["msgs"].stream.shards {
		it, err := st.GetShardIterator(ctx, shardIterInput(arn, sh.id))
		if err != nil {
			t.Fatal(err)
		}
		recs, err := st.GetRecords(ctx, recordsInput(it.ShardIterator))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs.Records {
			k := r.Dynamodb.Keys
			out = append(out, fmt.Sprintf("%s %s/%s", r.EventName, attrN(k["b"]), attrN(k["s"])))
		}
	}
	return out
}

// TestTransactionValidation: DynamoDB refuses a transaction that names one
// item twice ("no two of them can operate on the same item"), and a resend
// of a committed transaction with its token writes nothing and is charged
// the transactional reads of its items ("subsequent TransactWriteItems
// calls with the same client token return the number of read capacity
// units consumed in reading the item").
func TestTransactionValidation(t *testing.T) {
	ctx := context.Background()
	db := newDB(t, newClock(), 1)
	put := types.TransactWriteItem{Put: &types.Put{TableName: aws.String("msgs"), Item: msg(0, 1, 1500)}}
	_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{put, put}})
	var api interface{ ErrorCode() string }
	if !errors.As(err, &api) || api.ErrorCode() != "ValidationException" {
		t.Fatalf("one item twice: %v, want ValidationException", err)
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{put}, ClientRequestToken: aws.String("t"),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal}
	for i, want := range []float64{4, 2} {
		out, err := db.TransactWriteItems(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if got := aws.ToFloat64(out.ConsumedCapacity[0].CapacityUnits); got != want {
			t.Errorf("send %d: %v units, want %v", i+1, got, want)
		}
	}
	if recs := streamRecords(t, db); len(recs) != 1 {
		t.Errorf("stream records %v, want one INSERT", recs)
	}
}

// TestConditionBeforeUpdate: a write whose condition fails is refused for
// its condition even when its update could not apply to the item (an ADD
// to a string): DynamoDB evaluates the condition first. The writer meets
// this after a BucketCount change, when the legacy counter it ADDs to
// holds the string that moved it.
func TestConditionBeforeUpdate(t *testing.T) {
	ctx := context.Background()
	db := newDB(t, newClock(), 1)
	key := Item{"pk": s("bucket#0"), "sk": s("seq")}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("ctl"), Item: Item{"pk": s("bucket#0"), "sk": s("seq"), "n": s("moved"), "ce": n(-1)}}); err != nil {
		t.Fatal(err)
	}
	in := &dynamodb.UpdateItemInput{TableName: aws.String("ctl"), Key: key, UpdateExpression: aws.String("ADD #n :n"),
		ConditionExpression: aws.String("attribute_not_exists(#ce)"), ExpressionAttributeNames: map[string]string{"#n": "n", "#ce": "ce"},
		ExpressionAttributeValues: Item{":n": n(1)}, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}
	_, err := db.UpdateItem(ctx, in)
	var cf *types.ConditionalCheckFailedException
	if !errors.As(err, &cf) || cf.Item == nil {
		t.Fatalf("update under a failing condition: %v, want ConditionalCheckFailed with the item", err)
	}
	in.ConditionExpression, in.ExpressionAttributeNames = nil, map[string]string{"#n": "n"}
	var api interface{ ErrorCode() string }
	if _, err := db.UpdateItem(ctx, in); !errors.As(err, &api) || api.ErrorCode() != "ValidationException" {
		t.Fatalf("the same update without the condition: %v, want ValidationException", err)
	}
}
