package testenv_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestDynamoDB(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := testenv.DynamoDB(t)
	if again := testenv.DynamoDB(t); again.Endpoint != d.Endpoint {
		t.Errorf("second call endpoint %q, first %q: want one engine per test binary", again.Endpoint, d.Endpoint)
	}

	table := testenv.Name(t, "control")
	_, err := d.Client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		StreamSpecification:  &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeKeysOnly},
	})
	if err != nil {
		t.Fatalf("CreateTable %s: %v", table, err)
	}
	if err := dynamodb.NewTableExistsWaiter(d.Client).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "config"}}
	item := map[string]types.AttributeValue{"pk": key["pk"], "bc": &types.AttributeValueMemberN{Value: "16"}}
	if _, err := d.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatalf("PutItem: %v", err)
	}
	got, err := d.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	if bc, ok := got.Item["bc"].(*types.AttributeValueMemberN); !ok || bc.Value != "16" {
		t.Errorf("GetItem bc = %#v, want 16", got.Item["bc"])
	}

	// The streams client must reach the same engine with the same
	// credentials (DynamoDB Local keeps each access key's tables apart).
	ls, err := d.Streams.ListStreams(ctx, &dynamodbstreams.ListStreamsInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatalf("ListStreams: %v", err)
	}
	if len(ls.Streams) != 1 {
		t.Errorf("ListStreams found %d streams for %s, want 1", len(ls.Streams), table)
	}
}

func TestKafka(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := testenv.Kafka(t)
	topic := testenv.Name(t, "events")
	testenv.CreateTopic(t, k, topic, 2)

	producer, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	want := []string{"a", "b", "c"}
	for _, v := range want {
		rec := &kgo.Record{Key: []byte("order-1"), Value: []byte(v)}
		if err := producer.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatalf("produce %q: %v", v, err)
		}
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var got []string
	for len(got) < len(want) {
		fetches := consumer.PollFetches(ctx)
		if err := fetches.Err(); err != nil {
			t.Fatalf("poll after %v: %v", got, err)
		}
		fetches.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	// One key, so one partition, so the order is kept.
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("consumed %v, want %v", got, want)
	}
}

func TestKafkaClusterIsFreshPerCall(t *testing.T) {
	if k := testenv.KafkaFromEnv(t); k != nil {
		t.Skipf("the environment names the brokers (%v): every call returns them", k.Brokers)
	}
	a, b := testenv.Kafka(t), testenv.Kafka(t)
	if a.Brokers[0] == b.Brokers[0] {
		t.Errorf("two calls share a cluster: %v and %v", a.Brokers, b.Brokers)
	}
}

var legalName = regexp.MustCompile(`^[A-Za-z0-9-]{3,249}$`)

func TestName(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		want   string // prefix of the result
	}{
		{name: "plain", prefix: "orders", want: "orders-TestName-plain-"},
		{name: "odd chars", prefix: "my_table.v2", want: "my-table-v2-TestName-odd-chars-"},
		{name: "empty prefix", prefix: "", want: "TestName-empty-prefix-"},
		{name: strings.Repeat("long", 60), prefix: "x", want: "x-TestName-long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := testenv.Name(t, tt.prefix), testenv.Name(t, tt.prefix)
			for _, n := range []string{a, b} {
				if !legalName.MatchString(n) || len(n) > 100 {
					t.Errorf("Name = %q: not a legal table and topic name of at most 100 characters", n)
				}
				if !strings.HasPrefix(n, tt.want) {
					t.Errorf("Name = %q, want prefix %q", n, tt.want)
				}
			}
			if a == b {
				t.Errorf("two calls returned the same name %q", a)
			}
		})
	}
}
