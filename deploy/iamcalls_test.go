package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda/messages"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/sequence"
	"github.com/dynakafka/outbox/store/dynamo"
)

// recordingClient passes the DynamoDB calls of dynamo.StoreAPI (a superset
// of WriterAPI) to a real client and records, for each, the IAM action and
// the table it needs: a TransactWriteItems needs its items' own actions
// (PutItem, UpdateItem, DeleteItem, ConditionCheckItem) on their tables.
type recordingClient struct {
	c     *dynamodb.Client
	names map[string]string // table name -> resource name in the template ("<MessagesTable.Arn>")
	mu    sync.Mutex
	calls map[grant]bool
}

func (r *recordingClient) note(action, table string) {
	res, ok := r.names[table]
	if !ok {
		return // the caller's own business table
	}
	r.mu.Lock()
	r.calls[grant{Action: "dynamodb:" + action, Resource: res}] = true
	r.mu.Unlock()
}

func (r *recordingClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	r.note("GetItem", aws.ToString(in.TableName))
	return r.c.GetItem(ctx, in, o...)
}

func (r *recordingClient) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	r.note("DescribeTable", aws.ToString(in.TableName))
	return r.c.DescribeTable(ctx, in, o...)
}

func (r *recordingClient) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	r.note("PutItem", aws.ToString(in.TableName))
	return r.c.PutItem(ctx, in, o...)
}

func (r *recordingClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	r.note("UpdateItem", aws.ToString(in.TableName))
	return r.c.UpdateItem(ctx, in, o...)
}

func (r *recordingClient) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	r.note("DeleteItem", aws.ToString(in.TableName))
	return r.c.DeleteItem(ctx, in, o...)
}

func (r *recordingClient) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	r.note("Query", aws.ToString(in.TableName))
	return r.c.Query(ctx, in, o...)
}

func (r *recordingClient) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	for table := range in.RequestItems {
		r.note("BatchWriteItem", table)
	}
	return r.c.BatchWriteItem(ctx, in, o...)
}

func (r *recordingClient) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	for table := range in.RequestItems {
		r.note("BatchGetItem", table)
	}
	return r.c.BatchGetItem(ctx, in, o...)
}

func (r *recordingClient) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			r.note("PutItem", aws.ToString(it.Put.TableName))
		case it.Update != nil:
			r.note("UpdateItem", aws.ToString(it.Update.TableName))
		case it.Delete != nil:
			r.note("DeleteItem", aws.ToString(it.Delete.TableName))
		case it.ConditionCheck != nil:
			r.note("ConditionCheckItem", aws.ToString(it.ConditionCheck.TableName))
		}
	}
	return r.c.TransactWriteItems(ctx, in, o...)
}

var (
	_ dynamo.StoreAPI  = (*recordingClient)(nil)
	_ dynamo.WriterAPI = (*recordingClient)(nil)
)

func (r *recordingClient) recorded() []grant {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]grant, 0, len(r.calls))
	for g := range r.calls {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// newRecordedOutbox creates an outbox (as the stack's tables, with the
// config item) and a recording client over it.
func newRecordedOutbox(t *testing.T, bucketCount int) (*testenv.Dynamo, dynamo.Tables, *recordingClient) {
	t.Helper()
	d := testenv.DynamoDB(t)
	tables := dynamo.Tables{Messages: testenv.Name(t, "m"), Control: testenv.Name(t, "c")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamo.CreateTables(ctx, d.Client, tables, dynamo.BucketCount(bucketCount)); err != nil {
		t.Fatal(err)
	}
	rec := &recordingClient{c: d.Client, calls: map[grant]bool{},
		names: map[string]string{tables.Messages: "<MessagesTable.Arn>", tables.Control: "<ControlTable.Arn>"}}
	return d, tables, rec
}

// policyGrants evaluates a managed policy's statements under the default
// parameters.
func policyGrants(t *testing.T, name string) []grant {
	t.Helper()
	tmpl := loadTemplate(t)
	e, err := newEvaluator(tmpl, map[string]string{"KafkaBootstrapServers": "b:9092", "KafkaAuthMode": "none"})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := e.Eval(at(tmpl, "Resources", name, "Properties", "PolicyDocument"))
	if err != nil {
		t.Fatal(err)
	}
	var out []grant
	for _, s := range at(doc, "Statement").([]any) {
		for _, a := range stringList(at(s, "Action")) {
			for _, r := range stringList(at(s, "Resource")) {
				out = append(out, grant{Action: a, Resource: r})
			}
		}
	}
	return out
}

// TestWriterPolicy: the policy a writer service attaches (output
// WriterPolicyArn) is exactly the writer contract (NewWriter reads the config
// item, checks the messages table with a GetItem and both tables with a
// DescribeTable (no replicas); Write reserves with
// UpdateItem on the control table and puts messages, and fences, on the
// messages table), and that is exactly what a Writer calls, recorded while
// it opens, writes, loses a business condition (and fences) and spans
// buckets.
func TestWriterPolicy(t *testing.T) {
	contract := join(
		grants([]string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DescribeTable"}, "<MessagesTable.Arn>", ""),
		grants([]string{"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DescribeTable"}, "<ControlTable.Arn>", ""),
	)
	diffGrants(t, policyGrants(t, "WriterPolicy"), contract)

	d, tables, rec := newRecordedOutbox(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	orders := createOrders(ctx, t, d)
	w, err := dynamo.NewWriter(ctx, rec, tables)
	if err != nil {
		t.Fatal(err)
	}
	put := func(cond string) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{TableName: &orders,
			Item:                map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "o-1"}},
			ConditionExpression: aws.String(cond)}}
	}
	msg := func(key string) outbox.Message {
		return outbox.Message{Topic: "orders", Key: []byte(key), Value: []byte("{}")}
	}
	if _, err := w.Write(ctx, []types.TransactWriteItem{put("attribute_not_exists(id)")}, msg("a"), msg("b"), msg("c")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, []types.TransactWriteItem{put("attribute_not_exists(id)")}, msg("a")); !errors.Is(err, outbox.ErrConditionFailed) {
		t.Fatalf("second write: %v, want ErrConditionFailed (and fences)", err)
	}
	calls := rec.recorded()
	t.Logf("a writer called: %v", calls)
	// "granted but not needed" = a policy action the writer never called.
	diffGrants(t, contract, calls)
}

func storedEpoch(ctx context.Context, t *testing.T, client *dynamodb.Client, tables dynamo.Tables) int64 {
	t.Helper()
	c, err := dynamo.ReadConfig(ctx, client, tables)
	if err != nil {
		t.Fatal(err)
	}
	return c.BucketEpoch
}

// TestSetupPolicy: the custom resource's role grants exactly what
// dynamo.Configure calls when it creates the config item, finds it
// unchanged, changes the count and the mode on an empty outbox, the
// retention on a busy one, a count change on a busy one that no relay
// drains (online: flip, cut, watch; the change stands, its old epoch
// draining) and a second change that waits for that old epoch and is
// aborted before its flip.
func TestSetupPolicy(t *testing.T) {
	d, tables, rec := newRecordedOutbox(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := d.Client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &tables.Control, Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "config"}, "sk": &types.AttributeValueMemberS{Value: "config"}}}); err != nil {
		t.Fatal(err)
	}
	wm := func(n int, hours time.Duration) outbox.Config {
		return outbox.Config{BucketCount: n, Mode: outbox.WatermarkMode, Retention: hours * time.Hour}
	}
	steps := []struct {
		want    outbox.Config
		write   bool // a message is pending before this step
		refused bool
		hole    bool // a number reserved last in a bucket, never written: the change fences it
		short   bool // no relay runs: a 1-second watch (or wait)
	}{{outbox.Config{BucketCount: 8}, false, false, false, false}, {outbox.Config{BucketCount: 8}, false, false, false, false},
		{outbox.Config{BucketCount: 16}, false, false, false, false},
		{wm(16, 24), false, false, false, false}, {wm(12, 24), false, false, true, false}, {wm(12, 24), false, false, false, false},
		{wm(12, 48), true, false, false, false}, {wm(4, 48), false, false, false, true}, {wm(8, 48), false, true, false, true}}
	for _, s := range steps {
		if s.hole {
			stored, err := dynamo.ReadConfig(ctx, d.Client, tables)
			var ctr *sequence.Counter
			if err == nil {
				ctr, err = sequence.NewCounter(d.Client, tables.Control, stored, "")
			}
			if err == nil {
				_, err = ctr.ReserveAt(ctx, 3, 1, storedEpoch(ctx, t, d.Client, tables))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if s.write {
			w, err := dynamo.NewWriter(ctx, d.Client, tables)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(ctx, nil, outbox.Message{Topic: "orders", Key: []byte("k"), Value: []byte("v")}); err != nil {
				t.Fatal(err)
			}
		}
		cctx := ctx
		if s.short {
			// No relay runs: the change stands after a 1-second watch, and
			// the next one is aborted after a 1-second wait for it.
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(ctx, dynamo.DefaultChangeMargin+time.Second)
			defer cancel()
		}
		_, err := dynamo.Configure(cctx, rec, tables, s.want, dynamo.ChangeGapTimeout(100*time.Millisecond))
		var ce *dynamo.ChangeAbortedError
		if s.refused != errors.As(err, &ce) || (!s.refused && err != nil) {
			t.Fatalf("Configure(%+v) = %v, refused want %v", s.want, err, s.refused)
		}
	}
	calls := rec.recorded()
	tmpl := loadTemplate(t)
	e, err := newEvaluator(tmpl, map[string]string{"KafkaBootstrapServers": "b:9092", "KafkaAuthMode": "none"})
	if err != nil {
		t.Fatal(err)
	}
	granted, err := roleGrants(e, "SetupRole")
	if err != nil {
		t.Fatal(err)
	}
	var tables2 []grant // the role's table grants; its log group aside
	for _, g := range granted {
		if g.Resource != "<SetupLogGroup.Arn>" {
			tables2 = append(tables2, g)
		}
	}
	diffGrants(t, tables2, calls)
}

// TestEnqueuePolicy: what the enqueue function calls on the outbox's
// tables, recorded while it commits, answers a replay (a token mismatch,
// then a read of the idempotency record), refuses a reused key and loses a
// business condition, is exactly WriterPolicy plus PutItem of the records
// on the control table: the statements of EnqueueRole besides the business
// tables (TestEnqueueRole checks the template has exactly these).
func TestEnqueuePolicy(t *testing.T) {
	contract := join(
		// DescribeTable: NewWriter refuses a global table at init.
		grants([]string{"dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:PutItem"}, "<MessagesTable.Arn>", ""),
		grants([]string{"dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}, "<ControlTable.Arn>", ""),
	)
	diffGrants(t, join(policyGrants(t, "WriterPolicy"), grants([]string{"dynamodb:PutItem"}, "<ControlTable.Arn>", "")), contract)

	d, _, rec, h := newEnqueueOutbox(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	orders := createOrders(ctx, t, d)
	req := func(key, order string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"idempotencyKey": %q, "transactItems": [{"Put": {"TableName": %q, "Item": {"id": {"S": %q}},
			"ConditionExpression": "attribute_not_exists(id)"}}], "messages": [{"topic": "orders", "key": %q}, {"topic": "orders", "key": "x"}]}`,
			key, orders, order, order))
	}
	if _, err := h.Handle(ctx, req("k-1", "o-1")); err != nil {
		t.Fatal(err)
	}
	if out, err := h.Handle(ctx, req("k-1", "o-1")); err != nil || !out.(*handler.EnqueueResponse).Duplicate {
		t.Fatalf("replay: %v, %v", out, err)
	}
	var ie messages.InvokeResponse_Error
	if _, err := h.Handle(ctx, req("k-1", "o-2")); !errors.As(err, &ie) || ie.Type != handler.ErrorValidation {
		t.Fatalf("reused key: %v", err)
	}
	if _, err := h.Handle(ctx, req("k-2", "o-1")); !errors.As(err, &ie) || ie.Type != handler.ErrorConditionFailed {
		t.Fatalf("condition: %v", err)
	}
	calls := rec.recorded()
	t.Logf("the enqueue function called: %v", calls)
	diffGrants(t, contract, calls)
}

// createOrders creates a service's own table (key id), outside the outbox's
// policies.
func createOrders(ctx context.Context, t *testing.T, d *testenv.Dynamo) string {
	t.Helper()
	orders := testenv.Name(t, "orders")
	if _, err := d.Client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &orders,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}); err != nil {
		t.Fatal(err)
	}
	return orders
}
