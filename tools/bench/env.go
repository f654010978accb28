package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/store/dynamo"
)

// env knows where the stages run: a fresh DynamoDB Local and a fresh kfake
// per stage, or the endpoints given by the environment.
type env struct {
	endpoint string   // given DynamoDB endpoint; "" = fresh DynamoDB Local per stage
	brokers  []string // given brokers; nil = fresh kfake per stage
	run      string   // suffix that makes table and topic names unique

	mu            sync.Mutex
	dynamoVersion string
	instances     int
}

// stage is one stage's endpoints, clients, tables and topic.
type stage struct {
	name     string
	endpoint string
	awsCfg   aws.Config
	plain    *dynamodb.Client // set-up and checks: not metered
	meter    *meter
	metered  *dynamodb.Client // the code under measurement
	streams  *dynamodbstreams.Client
	brokers  []string
	admin    *kadm.Client
	tables   dynamo.Tables
	topic    string
	buckets  int
	closers  []func()
}

// open starts what the stage needs and creates its outbox (BucketCount
// buckets, and opts: the mode) and its topic (one partition per bucket).
func (e *env) open(ctx context.Context, name string, buckets int, opts ...dynamo.TablesOption) (_ *stage, err error) {
	st := &stage{name: name, endpoint: e.endpoint, brokers: e.brokers, buckets: buckets, meter: newMeter()}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	if st.endpoint == "" {
		// A JVM on a loaded 2-core machine can take longer than the
		// default 30 s to answer; the bench times stages, not starts.
		inst, err := dynamolocal.Start(ctx, dynamolocal.Options{StartTimeout: 3 * time.Minute})
		if err != nil {
			return nil, err
		}
		st.closers = append(st.closers, func() { _ = inst.Stop() })
		st.endpoint = inst.Endpoint
		e.mu.Lock()
		e.dynamoVersion = inst.Version
		e.instances++
		e.mu.Unlock()
	}
	if st.awsCfg, err = awsConfig(ctx, st.endpoint); err != nil {
		return nil, err
	}
	st.plain = dynamolocal.NewClient(st.awsCfg, st.endpoint)
	st.metered = dynamolocal.NewClient(st.awsCfg, st.endpoint, st.meter.option)
	st.streams = dynamolocal.NewStreamsClient(st.awsCfg, st.endpoint)
	if len(st.brokers) == 0 {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return nil, err
		}
		st.closers = append(st.closers, cluster.Close)
		st.brokers = cluster.ListenAddrs()
	}
	base := "bench-" + name + "-" + e.run
	st.tables = dynamo.Tables{Messages: base + "-outbox", Control: base + "-outbox-control"}
	st.topic = base
	if err := dynamo.CreateTables(ctx, st.plain, st.tables, append([]dynamo.TablesOption{dynamo.BucketCount(buckets)}, opts...)...); err != nil {
		return nil, fmt.Errorf("stage %s: create tables: %w", name, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(st.brokers...))
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, cl.Close)
	st.admin = kadm.NewClient(cl)
	created, err := st.admin.CreateTopic(ctx, int32(buckets), -1, nil, st.topic)
	if err == nil && !errors.Is(created.Err, kerr.TopicAlreadyExists) {
		err = created.Err
	}
	if err != nil {
		return nil, fmt.Errorf("stage %s: create topic %s: %w", name, st.topic, err)
	}
	return st, nil
}

func (st *stage) close() {
	for i := len(st.closers) - 1; i >= 0; i-- {
		st.closers[i]()
	}
	st.closers = nil
}

// keepIdle rebuilds the measured client to keep n idle connections per
// host instead of the SDK's default 10.
func (st *stage) keepIdle(n int) {
	st.meter.idleConns = n
	st.metered = dynamolocal.NewClient(st.awsCfg, st.endpoint, st.meter.option)
}

// roles names the stage's tables for meter snapshots.
func (st *stage) roles() map[string]string {
	return map[string]string{st.tables.Messages: "messages", st.tables.Control: "control"}
}

// remaining counts the messages left in the messages table's buckets:
// fences and the tombstones of published messages (DeleteMode) are not
// pending work. In WatermarkMode it counts the retained messages too.
func (st *stage) remaining(ctx context.Context) (int, error) {
	n := 0
	for b := range st.buckets {
		var start map[string]types.AttributeValue
		for {
			out, err := st.plain.Query(ctx, &dynamodb.QueryInput{
				TableName:                 aws.String(st.tables.Messages),
				KeyConditionExpression:    aws.String("#b = :b"),
				FilterExpression:          aws.String("attribute_not_exists(#f)"),
				ExpressionAttributeNames:  map[string]string{"#b": "b", "#f": "f"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":b": &types.AttributeValueMemberN{Value: strconv.Itoa(b)}},
				Select:                    types.SelectCount,
				ConsistentRead:            aws.Bool(true),
				ExclusiveStartKey:         start,
			})
			if err != nil {
				return 0, err
			}
			n += int(out.Count)
			if len(out.LastEvaluatedKey) == 0 {
				break
			}
			start = out.LastEvaluatedKey
		}
	}
	return n, nil
}

// produced is the number of records in the stage's topic.
func (st *stage) produced(ctx context.Context) (int64, error) {
	ends, err := st.admin.ListEndOffsets(ctx, st.topic)
	if err != nil {
		return 0, err
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}

// producerOptions are the kgo settings the kafka.Publisher uses (see
// kafka.NewPublisher: acks=all, idempotent, murmur2 sticky-key partitioning,
// batches up to MaxMessageBytes, lz4, no record delivery timeout), for the
// raw and the naive producers.
func producerOptions(brokers []string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.MetadataMinAge(kafka.DefaultMetadataMinAge),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerBatchMaxBytes(int32(outbox.DefaultMaxMessageBytes + 4)),
		kgo.RecordDeliveryTimeout(0),
		kgo.ProducerBatchCompression(kafka.DefaultCompression()...),
	}
}

// awsConfig: local engines get static local credentials; anything else the
// default chain.
func awsConfig(ctx context.Context, endpoint string) (aws.Config, error) {
	if u, err := url.Parse(endpoint); err == nil {
		host := u.Hostname()
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			return dynamolocal.NewConfig(ctx, endpoint, os.Getenv("AWS_REGION"))
		}
	}
	return awsconfig.LoadDefaultConfig(ctx)
}

// brokerList splits KAFKA_BOOTSTRAP_SERVERS.
func brokerList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

func runID() string { return strconv.FormatInt(time.Now().UnixNano()/1e6, 36) }
