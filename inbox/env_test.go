package inbox

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// env is a fresh inbox table and business table on the test binary's
// DynamoDB.
type env struct {
	d        *testenv.Dynamo
	table    string // processed ids
	business string // the read model: one item per key, n counts applications
}

func newEnv(t *testing.T) *env {
	t.Helper()
	d := testenv.DynamoDB(t)
	e := &env{d: d, table: testenv.Name(t, "inbox"), business: testenv.Name(t, "biz")}
	ctx := ctxT(t)
	if err := CreateTable(ctx, d.Client, e.table); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	_, err := d.Client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(e.business),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// inbox returns a new Inbox on e's table over client (nil: the plain one).
func (e *env) inbox(t *testing.T, client API, opts ...Option) *Inbox {
	t.Helper()
	if client == nil {
		client = e.d.Client
	}
	ib, err := New(ctxT(t), client, e.table, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return ib
}

// apply is the business operation: add 1 to n of the record's key and
// append the record's sequence to its list, so that both the number and the
// order of applications show.
func (e *env) apply(tx *Tx) error {
	m := tx.Message()
	tx.Add(types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(e.business),
		Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: string(tx.Record().Key)}},
		UpdateExpression:          aws.String("ADD #n :one SET #seqs = list_append(if_not_exists(#seqs, :empty), :seq)"),
		ExpressionAttributeNames:  map[string]string{"#n": "n", "#seqs": "seqs"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": num(1), ":empty": &types.AttributeValueMemberL{}, ":seq": &types.AttributeValueMemberL{Value: []types.AttributeValue{num(m.Sequence)}}},
	}})
	return nil
}

// applied returns how often key's records were applied and their sequences
// in the order they were.
func (e *env) applied(t *testing.T, key string) (int64, []int64) {
	t.Helper()
	out, err := e.d.Client.GetItem(ctxT(t), &dynamodb.GetItemInput{TableName: aws.String(e.business), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: key}}})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	if l, ok := out.Item["seqs"].(*types.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			seqs = append(seqs, intOf(v))
		}
	}
	return intOf(out.Item["n"]), seqs
}

// rec builds a record as the relay publishes it: key, the message-id header
// and, when seq > 0, the bucket and sequence headers.
func rec(topic string, partition int32, offset int64, key, id string, bucket int, seq int64) *kgo.Record {
	r := &kgo.Record{Topic: topic, Partition: partition, Offset: offset, Key: []byte(key), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: outbox.DefaultMessageIDHeader, Value: []byte(id)}}}
	if seq > 0 {
		r.Headers = append(r.Headers,
			kgo.RecordHeader{Key: outbox.DefaultBucketHeader, Value: []byte(strconv.Itoa(bucket))},
			kgo.RecordHeader{Key: outbox.DefaultSequenceHeader, Value: []byte(strconv.FormatInt(seq, 10))})
	}
	return r
}

// tally counts Process outcomes (a Metrics).
type tally struct {
	mu     sync.Mutex
	status map[Status]int
	gaps   int64
	errs   int
}

func newTally() *tally { return &tally{status: map[Status]int{}} }

func (c *tally) Processed(r Result, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status[r.Status]++
	c.gaps += r.Gap
	if err != nil {
		c.errs++
	}
}

func (c *tally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("applied=%d duplicate=%d stale=%d failed=%d gaps=%d", c.status[Applied], c.status[Duplicate], c.status[Stale], c.status[Failed], c.gaps)
}

// clock is a settable outbox.Clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
