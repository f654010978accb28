package dynamo

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/dynamoerr"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is one fresh outbox on the test binary's DynamoDB.
type env struct {
	d      *testenv.Dynamo
	tables Tables
	store  *Store
	// retention: the TTL put gives messages (WatermarkMode), 0 for none.
	retention time.Duration
	// probe: the endpoint probes' table (probe_test.go), made once.
	probeOnce sync.Once
	probe     string
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newTables creates a fresh outbox (new table names) and returns its names.
func newTables(t *testing.T, opts ...TablesOption) (*testenv.Dynamo, Tables) {
	t.Helper()
	d := testenv.DynamoDB(t)
	tables := Tables{Messages: testenv.Name(t, "msgs"), Control: testenv.Name(t, "ctl")}
	if err := CreateTables(ctxT(t), d.Client, tables, opts...); err != nil {
		t.Fatalf("CreateTables: %v", err)
	}
	return d, tables
}

func newEnv(t *testing.T, bucketCount int, opts ...TablesOption) *env {
	t.Helper()
	d, tables := newTables(t, append([]TablesOption{BucketCount(bucketCount)}, opts...)...)
	s, err := NewStore(ctxT(t), d.Client, tables)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	return &env{d: d, tables: tables, store: s, retention: s.retention()}
}

// config is the outbox's config item, as a writer reads it.
func (e *env) config(t *testing.T) outbox.Config {
	t.Helper()
	cfg, err := ReadConfig(ctxT(t), e.d.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// put stores msgs at their Bucket and Sequence in one transaction, as a
// committed writer would, and returns an error wrapping
// outbox.ErrAlreadyWritten if a position is taken.
func (e *env) put(ctx context.Context, msgs ...outbox.Message) error {
	var items []types.TransactWriteItem
	for _, m := range msgs {
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			TableName:                str(e.tables.Messages),
			Item:                     withRetention(messageItem(m, 0), m.CreatedAt, e.retention),
			ConditionExpression:      str("attribute_not_exists(#s)"),
			ExpressionAttributeNames: names(attrSeq),
		}})
	}
	_, err := e.d.Client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	var tc *types.TransactionCanceledException
	if errors.As(err, &tc) {
		for _, r := range tc.CancellationReasons {
			if r.Code != nil && *r.Code == dynamoerr.CodeCondition {
				return errors.Join(outbox.ErrAlreadyWritten, err)
			}
		}
	}
	return err
}

// getItem reads one item of table consistently (nil when absent).
func (e *env) getItem(t *testing.T, table string, key map[string]types.AttributeValue) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.d.Client.GetItem(ctxT(t), &dynamodb.GetItemInput{TableName: str(table), Key: key, ConsistentRead: new(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// count returns how many items bucket holds in the messages table.
func (e *env) count(t *testing.T, bucket int) int {
	t.Helper()
	entries, _, err := e.store.Pending(ctxT(t), bucket, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, en := range entries {
		if !en.Fence {
			n++
		}
	}
	return n
}
