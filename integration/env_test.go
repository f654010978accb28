package integration_test

import (
	"context"
	"fmt"
	"github.com/dynakafka/outbox/internal/harness/kafka/kfakeenv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
)

// env is one outbox on real parts: fresh tables on DynamoDB Local (or the
// endpoint in OUTBOX_TEST_DYNAMODB_ENDPOINT), a topic on kfake (or
// OUTBOX_TEST_KAFKA_BROKERS), a writer, a store and a publisher.
type env struct {
	dynamo   *testenv.Dynamo
	kafka    *testenv.KafkaCluster
	kfake    *kfakeenv.Cluster // set by newEnv: kafka, in process when it is kfake
	tables   dynamo.Tables
	business string
	topic    string
	writer   *dynamo.Writer
	store    *dynamo.Store
	pub      *kafka.Publisher

	// consumedTo: the next offset consume has read of each partition.
	mu         sync.Mutex
	consumedTo map[int32]int64
}

func newEnv(t *testing.T, bucketCount int, opts ...dynamo.TablesOption) *env {
	t.Helper()
	k := kfakeenv.Kafka(t)
	e := newEnvOn(t, k.KafkaCluster, bucketCount, opts...)
	e.kfake = k
	return e
}

// newEnvOn is newEnv on the Kafka cluster k.
func newEnvOn(t *testing.T, k *testenv.KafkaCluster, bucketCount int, opts ...dynamo.TablesOption) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := &env{
		dynamo:   testenv.DynamoDB(t),
		kafka:    k,
		tables:   dynamo.Tables{Messages: testenv.Name(t, "msgs"), Control: testenv.Name(t, "ctl")},
		business: testenv.Name(t, "aggs"),
		topic:    testenv.Name(t, "topic"),
	}
	if err := dynamo.CreateTables(ctx, e.dynamo.Client, e.tables, append([]dynamo.TablesOption{dynamo.BucketCount(bucketCount)}, opts...)...); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dynamo.Client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(e.business),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := dynamodb.NewTableExistsWaiter(e.dynamo.Client).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(e.business)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	testenv.CreateTopic(t, e.kafka, e.topic, 8)
	var err error
	if e.writer, err = dynamo.NewWriter(ctx, e.dynamo.Client, e.tables); err != nil {
		t.Fatal(err)
	}
	if e.store, err = dynamo.NewStore(ctx, e.dynamo.Client, e.tables); err != nil {
		t.Fatal(err)
	}
	if e.pub, err = kafka.NewPublisher(ctx, e.kafka.Brokers, kafka.Topics(e.topic), kafka.OutboxConfig(e.store.Opened())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pub.Close)
	return e
}

func (e *env) relay(t *testing.T, opts ...relay.Option) *relay.Relay {
	t.Helper()
	r, err := relay.New(context.Background(), e.store, e.pub, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *env) seedAggregates(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	for start := 0; start < n; start += 25 {
		var reqs []types.WriteRequest
		for i := start; i < min(start+25, n); i++ {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
				"id": &types.AttributeValueMemberS{Value: fmt.Sprintf("agg-%03d", i)}, "version": num(0),
			}}})
		}
		for len(reqs) > 0 {
			out, err := e.dynamo.Client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{e.business: reqs}})
			if err != nil {
				t.Fatal(err)
			}
			reqs = out.UnprocessedItems[e.business]
		}
	}
}

// consume reads the topic from the start until ctx is done, calling fn for
// each record with its message-id header. It reads read_committed, as the
// inbox does: the same as read_uncommitted for the idempotent publisher,
// and what the transactional one (kafka.TxnPublisher) requires. The returned channel closes when
// the consumer has stopped.
func (e *env) consume(ctx context.Context, t *testing.T, fn func(headerID string, key, value []byte)) <-chan struct{} {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Brokers...), kgo.ConsumeTopics(e.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachError(func(topic string, p int32, err error) {
				if ctx.Err() == nil {
					t.Errorf("consume %s/%d: %v", topic, p, err)
				}
			})
			fs.EachRecord(func(r *kgo.Record) {
				e.mu.Lock()
				if e.consumedTo == nil {
					e.consumedTo = map[int32]int64{}
				}
				e.consumedTo[r.Partition] = max(e.consumedTo[r.Partition], r.Offset+1)
				e.mu.Unlock()
				id := ""
				for _, h := range r.Headers {
					if h.Key == outbox.DefaultMessageIDHeader {
						id = string(h.Value)
					}
				}
				fn(id, r.Key, r.Value)
			})
		}
	}()
	return done
}

// readToEnd waits (bounded by ctx) until consume has read every partition of
// the topic up to its end offset now, the end a third-party consumer reads
// to once nothing publishes any more; it returns the end offsets' total.
func (e *env) readToEnd(ctx context.Context, t *testing.T) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, e.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", e.topic, err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	for {
		behind := 0
		e.mu.Lock()
		ends.Each(func(o kadm.ListedOffset) {
			if e.consumedTo[o.Partition] < o.Offset {
				behind++
			}
		})
		e.mu.Unlock()
		if behind == 0 {
			return total
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the consumer did not read %s to its end offsets (%d partitions behind)", e.topic, behind)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pendingMessages counts message items (not fences) left in the messages
// table, with a Scan (tests only).
func (e *env) pendingMessages(ctx context.Context, t *testing.T) int {
	t.Helper()
	return e.countItems(ctx, t, "attribute_not_exists(#f)", map[string]string{"#f": "f"})
}

// undecided counts the messages not yet decided: in DeleteMode those not
// replaced by tombstones, in WatermarkMode those above their bucket's head.
func (e *env) undecided(ctx context.Context, t *testing.T, mode outbox.Mode, buckets int) int {
	t.Helper()
	if mode == outbox.DeleteMode {
		return e.pendingMessages(ctx, t)
	}
	n := 0
	for b := range buckets {
		l, err := e.store.ReadLease(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		k, _, err := e.store.Peek(ctx, b, l.Head, 100)
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	return n
}

// countItems counts the messages table's items that match filter, with a
// Scan (tests only).
func (e *env) countItems(ctx context.Context, t *testing.T, filter string, names map[string]string) int {
	t.Helper()
	n := 0
	p := dynamodb.NewScanPaginator(e.dynamo.Client, &dynamodb.ScanInput{
		TableName:                aws.String(e.tables.Messages),
		FilterExpression:         aws.String(filter),
		ExpressionAttributeNames: names,
		ConsistentRead:           aws.Bool(true),
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n += int(out.Count)
	}
	return n
}
