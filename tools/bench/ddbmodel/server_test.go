package ddbmodel

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/store/dynamo"
)

// sdkClient is the real SDK client on the model's HTTP API for role.
func sdkClient(t *testing.T, db *DB, role string) *dynamodb.Client {
	t.Helper()
	url, stop, err := db.Serve(role)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	cfg, err := dynamolocal.NewConfig(context.Background(), url, "us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	return dynamolocal.NewClient(cfg, url, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = false })
}

// TestStoreOverHTTP runs the real store/dynamo code with the real SDK
// client on the model: CreateTables (CreateTable, DescribeTable, the TTL
// calls, the config item), a Writer committing messages in transactions
// with their counters, the Store reading them back in order with its
// consistent Query and replacing them by tombstones with BatchWriteItem.
func TestStoreOverHTTP(t *testing.T) {
	ctx := context.Background()
	db := New(Config{Latency: Fixed(0)})
	c := sdkClient(t, db, "test")
	tables := dynamo.Tables{Messages: "m", Control: "c"}
	if err := dynamo.CreateTables(ctx, c, tables, dynamo.BucketCount(2)); err != nil {
		t.Fatalf("CreateTables: %v", err)
	}
	w, err := dynamo.NewWriter(ctx, c, tables)
	if err != nil {
		t.Fatalf("NewWriter: %v", err)
	}
	var ids []string
	for i := range 5 {
		r, err := w.Write(ctx, nil, outbox.Message{Topic: "t", Key: []byte("k"), Value: []byte(fmt.Sprint("value ", i))})
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		ids = append(ids, r.Messages[0].ID)
	}
	st, err := dynamo.NewStore(ctx, c, tables)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	bucket, err := w.Bucket(outbox.Message{Topic: "t", Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	entries, _, err := st.Pending(ctx, bucket, 0, 10)
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	var got []string
	var seqs []int64
	for _, e := range entries {
		got = append(got, e.Message.ID)
		seqs = append(seqs, e.Message.Sequence)
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("pending %v, want the messages written, in order: %v", got, ids)
	}
	if err := st.MarkPublished(ctx, bucket, seqs, time.Now()); err != nil {
		t.Fatalf("MarkPublished: %v", err)
	}
	if entries, _, err = st.Pending(ctx, bucket, 0, 10); err != nil || len(entries) != len(ids) {
		t.Fatalf("pending after MarkPublished: %d entries, %v", len(entries), err)
	}
	for _, e := range entries {
		if !e.Published {
			t.Errorf("entry %d after MarkPublished is not a published tombstone", e.Sequence)
		}
	}
	calls := db.Counts("test")
	for _, op := range []OpTable{{"TransactWriteItems", "m"}, {"UpdateItem", "c"}, {"Query", "m"}, {"BatchWriteItem", "m"}} {
		if calls[op].Calls == 0 || calls[op].Units == 0 {
			t.Errorf("%v: %+v, want calls and units counted", op, calls[op])
		}
	}
}

// TestErrorsOverHTTP: the SDK reads the model's errors as DynamoDB's: a
// failed condition with the old item, a cancelled transaction with its
// reasons, and a throttled call that its retryer retries (4 attempts, all
// answered by the model).
func TestErrorsOverHTTP(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	db := newDB(t, clk, 1)
	db.cfg.WCUPerKey = 2 // two writes of one unit, then throttled (the clock does not move)
	c := sdkClient(t, db, "test")
	names := map[string]string{"#s": "s"}
	put := &dynamodb.PutItemInput{TableName: aws.String("msgs"), Item: msg(0, 1, 10), ConditionExpression: aws.String("attribute_not_exists(#s)"),
		ExpressionAttributeNames: names, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal}
	out, err := c.PutItem(ctx, put)
	if err != nil {
		t.Fatal(err)
	}
	if out.ConsumedCapacity == nil || aws.ToFloat64(out.ConsumedCapacity.CapacityUnits) != 1 {
		t.Errorf("consumed capacity %+v, want 1 unit", out.ConsumedCapacity)
	}
	_, err = c.PutItem(ctx, put)
	var cf *types.ConditionalCheckFailedException
	if !errors.As(err, &cf) || len(cf.Item) != 3 {
		t.Fatalf("second put: %v, want ConditionalCheckFailed with the item", err)
	}
	db.cfg.WCUPerKey = -1
	_, err = c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String("msgs"), Item: msg(0, 2, 10)}},
		{Put: &types.Put{TableName: aws.String("msgs"), Item: msg(0, 1, 10), ConditionExpression: aws.String("attribute_not_exists(#s)"),
			ExpressionAttributeNames: names, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
	}})
	var tc *types.TransactionCanceledException
	if !errors.As(err, &tc) || len(tc.CancellationReasons) != 2 || aws.ToString(tc.CancellationReasons[1].Code) != reasonCondition ||
		len(tc.CancellationReasons[1].Item) != 3 {
		t.Fatalf("transaction: %v, want cancelled with ConditionalCheckFailed and the item for the second put", err)
	}
	db.cfg.WCUPerKey = 2
	db.ResetCounts("test")
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("msgs"), Item: msg(0, 3, 10)})
	var pt *types.ProvisionedThroughputExceededException
	if !errors.As(err, &pt) {
		t.Fatalf("put over the key's capacity: %v, want ProvisionedThroughputExceeded", err)
	}
	if n := db.Counts("test")[OpTable{"PutItem", "msgs"}]; n.Calls != 4 || n.Throttled != 4 {
		t.Errorf("the model answered %+v; want the SDK's 4 attempts, all throttled", n)
	}
}
