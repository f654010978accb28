package ddbmodel

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/local/dynamolocal"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestAgreesWithDynamoDBLocal runs one script of calls on DynamoDB Local
// and on the model, both through the real SDK client, and compares what
// each answered: items, counts, the key to continue from, error codes,
// cancellation reasons, old items and capacity units. DynamoDB Local is
// AWS's own emulator of the API; where it is known to report capacity
// differently from AWS's documentation, the script does not compare:
// DynamoDB Local charges an empty Query nothing (AWS: 1 RCU), a key of
// BatchGetItem that names no item nothing (AWS: "requests for nonexistent
// items consume the minimum read capacity units") and a BatchWriteItem
// delete of a missing item 2 WCU (AWS: 1, as DeleteItem, which Local
// charges 1), a resend of a committed transaction's token 2 RCU for two
// items of 2.4 KB (AWS: "the number of read capacity units consumed in
// reading the item", which the model reads as a transactional read of
// each item: 4); and it takes a TransactWriteItems naming one item twice
// (AWS refuses it: "no two of them can operate on the same item"). The
// model follows AWS's documentation there (TestUnitsCharged,
// TestTransactionValidation).
func TestAgreesWithDynamoDBLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts DynamoDB Local")
	}
	ctx := context.Background()
	d := testenv.DynamoDB(t)
	local := dynamolocal.NewClient(d.Config, d.Endpoint)
	model := sdkClient(t, New(Config{Latency: Fixed(0)}), "diff")
	prefix := testenv.Name(t, "diff")
	run := func(c *dynamodb.Client) []string {
		return diffScript(ctx, t, c, prefix)
	}
	want, got := run(local), run(model)
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			t.Errorf("step %d:\n  DynamoDB Local: %s\n  model:          %s", i, w, g)
		}
	}
}

// diffScript runs the script on c and returns one line per call.
func diffScript(ctx context.Context, t *testing.T, c *dynamodb.Client, prefix string) []string {
	t.Helper()
	msgs, ctl := prefix+"-m", prefix+"-c"
	for _, tb := range []struct {
		name, hash, rng string
		typ             types.ScalarAttributeType
	}{{msgs, "b", "s", types.ScalarAttributeTypeN}, {ctl, "pk", "sk", types.ScalarAttributeTypeS}} {
		_, err := c.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String(tb.name), BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(tb.hash), AttributeType: tb.typ}, {AttributeName: aws.String(tb.rng), AttributeType: tb.typ}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(tb.hash), KeyType: types.KeyTypeHash}, {AttributeName: aws.String(tb.rng), KeyType: types.KeyTypeRange}},
			StreamSpecification:  &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeKeysOnly}})
		if err != nil {
			t.Fatalf("create %s: %v", tb.name, err)
		}
	}
	var out []string
	total := types.ReturnConsumedCapacityTotal
	record := func(name string, res string, err error) {
		if err != nil {
			res = describeErr(err)
		}
		out = append(out, name+": "+res)
	}
	nm := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	key := func(b, s int64) Item { return Item{"b": n(b), "s": n(s)} }
	ck := func(pk, sk string) Item { return Item{"pk": s(pk), "sk": s(sk)} }
	units := func(cc *types.ConsumedCapacity) string {
		if cc == nil {
			return "units=none"
		}
		return fmt.Sprintf("units=%g", aws.ToFloat64(cc.CapacityUnits))
	}

	for seq := int64(1); seq <= 6; seq++ {
		po, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(msgs), Item: msg(0, seq, 100*int(seq)),
			ConditionExpression: aws.String("attribute_not_exists(#s)"), ExpressionAttributeNames: nm("#s", "s"), ReturnConsumedCapacity: total})
		if err == nil {
			record(fmt.Sprint("put ", seq), units(po.ConsumedCapacity), nil)
		} else {
			record(fmt.Sprint("put ", seq), "", err)
		}
	}
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(msgs), Item: msg(0, 2, 5),
		ConditionExpression: aws.String("attribute_not_exists(#s)"), ExpressionAttributeNames: nm("#s", "s"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	record("put over an existing item", "", err)
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(msgs), Item: msg(0, 7, 5),
		ConditionExpression: aws.String("#f <> :fence"), ExpressionAttributeNames: nm("#f", "f"), ExpressionAttributeValues: Item{":fence": s("F")}})
	record("put where a missing attribute <> a value", "ok", err)
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(msgs), Item: msg(0, 8, 5),
		ConditionExpression: aws.String("NOT (#f = :fence)"), ExpressionAttributeNames: nm("#f", "f"), ExpressionAttributeValues: Item{":fence": s("F")}})
	record("put where NOT a missing attribute = a value", "ok", err)
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(msgs), Item: msg(0, 9, 5),
		ConditionExpression: aws.String("#f < :fence"), ExpressionAttributeNames: nm("#f", "f"), ExpressionAttributeValues: Item{":fence": s("F")}})
	record("put where a missing attribute < a value", "ok", err)
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(msgs), Item: msg(0, 9, 5),
		ConditionExpression: aws.String("#s = :x"), ExpressionAttributeNames: nm("#s", "s"), ExpressionAttributeValues: Item{":x": n(1), ":unused": n(2)}})
	record("an unused value", "ok", err)

	upd := func(name string, in *dynamodb.UpdateItemInput) {
		in.ReturnConsumedCapacity = total
		o, err := c.UpdateItem(ctx, in)
		if err == nil {
			record(name, show(o.Attributes)+" "+units(o.ConsumedCapacity), nil)
		} else {
			record(name, "", err)
		}
	}
	upd("counter: ADD and SET, updated new", &dynamodb.UpdateItemInput{TableName: aws.String(ctl), Key: ck("bucket#0", "seq"),
		UpdateExpression: aws.String("ADD #n :n SET #v = :v"), ExpressionAttributeNames: nm("#n", "n", "#v", "v"),
		ExpressionAttributeValues: Item{":n": n(5), ":v": n(1)}, ReturnValues: types.ReturnValueUpdatedNew})
	upd("counter again, all new", &dynamodb.UpdateItemInput{TableName: aws.String(ctl), Key: ck("bucket#0", "seq"),
		UpdateExpression: aws.String("ADD #n :n SET #v = :v"), ExpressionAttributeNames: nm("#n", "n", "#v", "v"),
		ExpressionAttributeValues: Item{":n": n(3), ":v": n(2)}, ReturnValues: types.ReturnValueAllNew})
	upd("lease: acquire where no owner", &dynamodb.UpdateItemInput{TableName: aws.String(ctl), Key: ck("bucket#0", "lease"),
		ConditionExpression:       aws.String("attribute_not_exists(#o) OR #e <= :now"),
		UpdateExpression:          aws.String("SET #o = :me, #e = :exp, #po = if_not_exists(#o, :none), #w = if_not_exists(#w, :zero)"),
		ExpressionAttributeNames:  nm("#o", "o", "#e", "e", "#po", "po", "#w", "w"),
		ExpressionAttributeValues: Item{":now": n(100), ":me": s("me"), ":exp": n(130), ":none": s(""), ":zero": n(0)}, ReturnValues: types.ReturnValueAllNew})
	upd("lease: acquire while held", &dynamodb.UpdateItemInput{TableName: aws.String(ctl), Key: ck("bucket#0", "lease"),
		ConditionExpression: aws.String("attribute_not_exists(#o) OR #e <= :now"), UpdateExpression: aws.String("SET #o = :me"),
		ExpressionAttributeNames: nm("#o", "o", "#e", "e"), ExpressionAttributeValues: Item{":now": n(110), ":me": s("other")},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	upd("lease: release", &dynamodb.UpdateItemInput{TableName: aws.String(ctl), Key: ck("bucket#0", "lease"),
		ConditionExpression: aws.String("#o = :me AND #e > :now"), UpdateExpression: aws.String("REMOVE #po SET #e = :zero, #w = #w + :one"),
		ExpressionAttributeNames:  nm("#o", "o", "#e", "e", "#po", "po", "#w", "w"),
		ExpressionAttributeValues: Item{":now": n(110), ":me": s("me"), ":zero": n(0), ":one": n(1)}, ReturnValues: types.ReturnValueUpdatedOld})
	upd("a failing condition before an update that cannot apply", &dynamodb.UpdateItemInput{TableName: aws.String(ctl), Key: ck("bucket#0", "lease"),
		ConditionExpression: aws.String("attribute_not_exists(#o)"), UpdateExpression: aws.String("ADD #o :one"),
		ExpressionAttributeNames: nm("#o", "o"), ExpressionAttributeValues: Item{":one": n(1)}})
	upd("a key attribute", &dynamodb.UpdateItemInput{TableName: aws.String(ctl), Key: ck("bucket#0", "lease"),
		UpdateExpression: aws.String("SET #sk = :x"), ExpressionAttributeNames: nm("#sk", "sk"), ExpressionAttributeValues: Item{":x": s("y")}})
	upd("arithmetic on a string", &dynamodb.UpdateItemInput{TableName: aws.String(ctl), Key: ck("bucket#0", "lease"),
		UpdateExpression: aws.String("SET #o = #o + :one"), ExpressionAttributeNames: nm("#o", "o"), ExpressionAttributeValues: Item{":one": n(1)}})

	query := func(name string, in *dynamodb.QueryInput) {
		in.ReturnConsumedCapacity = total
		if in.TableName == nil {
			in.TableName = aws.String(msgs)
		}
		var pages []string
		for page := 0; page < 5; page++ {
			o, err := c.Query(ctx, in)
			if err != nil {
				record(name, "", err)
				return
			}
			var seqs []string
			for _, it := range o.Items {
				seqs = append(seqs, show(it))
			}
			u := units(o.ConsumedCapacity)
			if o.Count == 0 {
				u = "units=(empty: not compared)"
			}
			pages = append(pages, fmt.Sprintf("count=%d scanned=%d items=[%s] lek=%s %s", o.Count, o.ScannedCount, strings.Join(seqs, "; "), show(o.LastEvaluatedKey), u))
			if o.LastEvaluatedKey == nil {
				break
			}
			in.ExclusiveStartKey = o.LastEvaluatedKey
		}
		record(name, strings.Join(pages, " | "), nil)
	}
	kn := nm("#b", "b", "#s", "s")
	query("pages of 2 after 1", &dynamodb.QueryInput{KeyConditionExpression: aws.String("#b = :b AND #s > :after"), ExpressionAttributeNames: kn,
		ExpressionAttributeValues: Item{":b": n(0), ":after": n(1)}, Limit: aws.Int32(2), ConsistentRead: aws.Bool(true), ProjectionExpression: aws.String("#s")})
	query("exactly the last item", &dynamodb.QueryInput{KeyConditionExpression: aws.String("#b = :b AND #s > :after"), ExpressionAttributeNames: kn,
		ExpressionAttributeValues: Item{":b": n(0), ":after": n(5)}, Limit: aws.Int32(3), ConsistentRead: aws.Bool(true), ProjectionExpression: aws.String("#s")})
	query("between, reversed, eventually consistent", &dynamodb.QueryInput{KeyConditionExpression: aws.String("#b = :b AND #s BETWEEN :lo AND :hi"),
		ExpressionAttributeNames: kn, ExpressionAttributeValues: Item{":b": n(0), ":lo": n(2), ":hi": n(4)}, ScanIndexForward: aws.Bool(false),
		ProjectionExpression: aws.String("#s")})
	query("filtered", &dynamodb.QueryInput{KeyConditionExpression: aws.String("#b = :b"), FilterExpression: aws.String("attribute_not_exists(#f) OR #f <> :fence"),
		ExpressionAttributeNames: nm("#b", "b", "#f", "f", "#s", "s"), ExpressionAttributeValues: Item{":b": n(0), ":fence": s("F")}, ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String("#s")})
	query("count", &dynamodb.QueryInput{KeyConditionExpression: aws.String("#b = :b AND #s >= :x"), ExpressionAttributeNames: kn,
		ExpressionAttributeValues: Item{":b": n(0), ":x": n(3)}, Select: types.SelectCount, ConsistentRead: aws.Bool(true)})
	query("an empty bucket", &dynamodb.QueryInput{KeyConditionExpression: aws.String("#b = :b"), ExpressionAttributeNames: nm("#b", "b"),
		ExpressionAttributeValues: Item{":b": n(1)}, ConsistentRead: aws.Bool(true)})
	query("begins_with on a string sort key", &dynamodb.QueryInput{TableName: aws.String(ctl), KeyConditionExpression: aws.String("#pk = :pk AND begins_with(#sk, :p)"),
		ExpressionAttributeNames: nm("#pk", "pk", "#sk", "sk"), ExpressionAttributeValues: Item{":pk": s("bucket#0"), ":p": s("le")}, ConsistentRead: aws.Bool(true)})
	query("BETWEEN upside down", &dynamodb.QueryInput{KeyConditionExpression: aws.String("#b = :b AND #s BETWEEN :lo AND :hi"), ExpressionAttributeNames: kn,
		ExpressionAttributeValues: Item{":b": n(0), ":lo": n(4), ":hi": n(2)}})

	batchGet := func(name string, withUnits bool, keys ...map[string]types.AttributeValue) {
		bg, err := c.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{ReturnConsumedCapacity: total, RequestItems: map[string]types.KeysAndAttributes{
			msgs: {Keys: keys, ConsistentRead: aws.Bool(true), ProjectionExpression: aws.String("#s"), ExpressionAttributeNames: nm("#s", "s")}}})
		if err != nil {
			record(name, "", err)
			return
		}
		var its []string
		for _, it := range bg.Responses[msgs] {
			its = append(its, show(it))
		}
		sort.Strings(its)
		res := fmt.Sprintf("%v unprocessed=%d", its, len(bg.UnprocessedKeys))
		if withUnits {
			res += fmt.Sprintf(" units=%g", aws.ToFloat64(bg.ConsumedCapacity[0].CapacityUnits))
		}
		record(name, res, nil)
	}
	batchGet("batch get", true, key(0, 1), key(0, 4))
	batchGet("batch get of a missing key", false, key(0, 3), key(0, 99))
	batchWrite := func(name string, withUnits bool, reqs ...types.WriteRequest) {
		bw, err := c.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{ReturnConsumedCapacity: total, RequestItems: map[string][]types.WriteRequest{msgs: reqs}})
		if err != nil {
			record(name, "", err)
			return
		}
		res := fmt.Sprintf("unprocessed=%d", len(bw.UnprocessedItems))
		if withUnits {
			res += fmt.Sprintf(" units=%g", aws.ToFloat64(bw.ConsumedCapacity[0].CapacityUnits))
		}
		record(name, res, nil)
	}
	batchWrite("batch write", true, types.WriteRequest{PutRequest: &types.PutRequest{Item: Item{"b": n(0), "s": n(1), "f": s("P")}}},
		types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: key(0, 2)}})
	batchWrite("batch delete of a missing key", false, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: key(0, 50)}})
	_, err = c.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{msgs: {
		{DeleteRequest: &types.DeleteRequest{Key: key(0, 3)}}, {DeleteRequest: &types.DeleteRequest{Key: key(0, 3)}}}}})
	record("batch write of one key twice", "ok", err)

	tx := func(name string, token string, items ...types.TransactWriteItem) {
		withUnits := !strings.HasSuffix(name, "again")
		in := &dynamodb.TransactWriteItemsInput{TransactItems: items, ReturnConsumedCapacity: total}
		if token != "" {
			in.ClientRequestToken = aws.String(token)
		}
		o, err := c.TransactWriteItems(ctx, in)
		if err != nil {
			record(name, "", err)
			return
		}
		var us []string
		for _, cc := range o.ConsumedCapacity {
			us = append(us, fmt.Sprintf("%g", aws.ToFloat64(cc.CapacityUnits)))
		}
		sort.Strings(us)
		if !withUnits {
			us = []string{"not compared"}
		}
		record(name, "units="+strings.Join(us, ","), nil)
	}
	notExists := func(it Item) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{TableName: aws.String(msgs), Item: it, ConditionExpression: aws.String("attribute_not_exists(#s)"),
			ExpressionAttributeNames: nm("#s", "s"), ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}
	}
	tx("a writer's transaction", "tok-1", notExists(msg(0, 10, 900)), notExists(msg(0, 11, 1500)))
	tx("the same token again", "tok-1", notExists(msg(0, 10, 900)), notExists(msg(0, 11, 1500)))
	tx("one put over a fence", "", notExists(msg(0, 12, 10)), notExists(Item{"b": n(0), "s": n(1), "x": s("y")}))
	tx("a check that holds and a delete", "", types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: aws.String(ctl), Key: ck("bucket#0", "seq"),
		ConditionExpression: aws.String("#n >= :n"), ExpressionAttributeNames: nm("#n", "n"), ExpressionAttributeValues: Item{":n": n(8)}}},
		types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(msgs), Key: key(0, 4)}})

	do, err := c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(msgs), Key: key(0, 5), ReturnValues: types.ReturnValueAllOld, ReturnConsumedCapacity: total})
	if err == nil {
		record("delete", fmt.Sprintf("%d attributes %s", len(do.Attributes), units(do.ConsumedCapacity)), nil)
	} else {
		record("delete", "", err)
	}
	g, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(msgs), Key: key(0, 11), ConsistentRead: aws.Bool(true), ReturnConsumedCapacity: total,
		ProjectionExpression: aws.String("#s, #b"), ExpressionAttributeNames: nm("#s", "s", "#b", "b")})
	if err == nil {
		record("get", show(g.Item)+" "+units(g.ConsumedCapacity), nil)
	} else {
		record("get", "", err)
	}
	query("the bucket at the end", &dynamodb.QueryInput{KeyConditionExpression: aws.String("#b = :b"), ExpressionAttributeNames: nm("#b", "b", "#s", "s", "#f", "f"),
		ExpressionAttributeValues: Item{":b": n(0)}, ConsistentRead: aws.Bool(true), ProjectionExpression: aws.String("#s, #f")})
	return out
}

// describeErr is an error as the comparison sees it: its code, a failed
// condition's old item, a cancellation's reasons (with their old items).
func describeErr(err error) string {
	var tc *types.TransactionCanceledException
	if errors.As(err, &tc) {
		var rs []string
		for _, r := range tc.CancellationReasons {
			rs = append(rs, aws.ToString(r.Code)+"{"+show(r.Item)+"}")
		}
		return "TransactionCanceledException " + strings.Join(rs, ", ")
	}
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return "ConditionalCheckFailedException {" + show(cf.Item) + "}"
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return err.Error()
}
