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
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/local/esm"
	"github.com/dynakafka/outbox/store/dynamo"
	"github.com/dynakafka/outbox/tools/bench/ddbmodel"
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
	streams  esm.StreamsAPI
	brokers  []string
	// model is the modelled DynamoDB the stage runs on (modelled.go), nil
	// on DynamoDB Local or a given endpoint; directWriters makes the
	// writers call it in process (modelClient).
	model         *ddbmodel.DB
	directWriters bool
	// writerMeter is the meter of the last writers' SDK client.
	writerMeter *meter
	admin       *kadm.Client
	tables      dynamo.Tables
	topic       string
	buckets     int
	closers     []func()
}

// modelSpec runs a stage on the DynamoDB model instead of DynamoDB Local:
// cfg is the model's behaviour, brokers the kfake cluster's broker count
// and produce the latency kfake adds to each Produce request (nil: none).
type modelSpec struct {
	cfg     ddbmodel.Config
	brokers int
	produce ddbmodel.Dist
}

// open starts what the stage needs and creates its outbox (BucketCount
// buckets, and opts: the mode) and its topic (one partition per bucket).
func (e *env) open(ctx context.Context, name string, buckets int, opts ...dynamo.TablesOption) (_ *stage, err error) {
	return e.openOn(ctx, name, buckets, nil, opts...)
}

// openOn opens a stage on the model spec describes (nil: DynamoDB Local
// or the given endpoint, and the given brokers or a kfake of one broker).
func (e *env) openOn(ctx context.Context, name string, buckets int, spec *modelSpec, opts ...dynamo.TablesOption) (_ *stage, err error) {
	st := &stage{name: name, endpoint: e.endpoint, brokers: e.brokers, buckets: buckets, meter: newMeter()}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	var create dynamo.AdminAPI
	switch {
	case spec != nil:
		// The model serves the code under measurement on one listener
		// (calls counted under "handler") and the bench's own set-up and
		// checks on another ("plain"); the tables are created in process.
		st.model = ddbmodel.New(spec.cfg)
		url, stop, err := st.model.Serve(roleHandler)
		if err != nil {
			return nil, err
		}
		st.closers = append(st.closers, stop)
		plainURL, stopPlain, err := st.model.Serve("plain")
		if err != nil {
			return nil, err
		}
		st.closers = append(st.closers, stopPlain)
		st.endpoint = url
		if st.awsCfg, err = awsConfig(ctx, url); err != nil {
			return nil, err
		}
		st.plain = dynamolocal.NewClient(st.awsCfg, plainURL)
		st.metered = dynamolocal.NewClient(st.awsCfg, st.endpoint, st.meter.option)
		st.streams = st.model.Streams()
		create = modelClient{st.model, "setup"}
	case st.endpoint == "":
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
	if st.model == nil {
		if st.awsCfg, err = awsConfig(ctx, st.endpoint); err != nil {
			return nil, err
		}
		st.plain = dynamolocal.NewClient(st.awsCfg, st.endpoint)
		st.metered = dynamolocal.NewClient(st.awsCfg, st.endpoint, st.meter.option)
		st.streams = dynamolocal.NewStreamsClient(st.awsCfg, st.endpoint)
		create = st.plain
	}
	if len(st.brokers) == 0 || spec != nil {
		n, produce := 1, ddbmodel.Dist(nil)
		if spec != nil {
			n, produce = max(1, spec.brokers), spec.produce
		}
		cluster, err := kfake.NewCluster(kfake.NumBrokers(n))
		if err != nil {
			return nil, err
		}
		if produce != nil {
			delayProduce(cluster, produce)
		}
		st.closers = append(st.closers, cluster.Close)
		st.brokers = cluster.ListenAddrs()
	}
	base := "bench-" + name + "-" + e.run
	st.tables = dynamo.Tables{Messages: base + "-outbox", Control: base + "-outbox-control"}
	st.topic = base
	if err := dynamo.CreateTables(ctx, create, st.tables, append([]dynamo.TablesOption{dynamo.BucketCount(buckets)}, opts...)...); err != nil {
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

// delayProduce makes the cluster answer each Produce request after a
// latency drawn from d, as a broker replicating to its followers would
// (acks=all); other requests, fetches among them, are not delayed. The
// sleeping request yields to the others (kfake.SleepControl).
func delayProduce(cluster *kfake.Cluster, d ddbmodel.Dist) {
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if lat := d.Sample(); lat > 0 {
			cluster.SleepControl(func() { time.Sleep(lat) })
		}
		return nil, nil, false
	})
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
