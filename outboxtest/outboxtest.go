package outboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
	"github.com/dynakafka/outbox/store/memory"
)

// DynamoDBEndpointEnv names an environment variable that, when set, is the
// DynamoDB endpoint New uses (LocalStack, a DynamoDB Local you run, or
// AWS) instead of starting DynamoDB Local. The same variable as the
// outbox's own tests.
const DynamoDBEndpointEnv = "OUTBOX_TEST_DYNAMODB_ENDPOINT"

// Outbox is a ready outbox for a test: tables (or the memory store), an
// in-process Kafka (kfake) with the topics, a writer, and a relay running
// (Relay.Run) until the test ends.
type Outbox struct {
	// Writer writes your items and messages: a *dynamo.Writer on the
	// tables, or, in memory mode, a *FakeWriter that feeds the relay's
	// store (your items are then recorded, not applied).
	Writer dynamo.Enqueuer
	// Brokers are the kfake brokers' addresses, for your consumer.
	Brokers []string
	// Kafka is the in-process cluster (fault injection: kfake's ControlKey).
	Kafka *kfake.Cluster
	// DynamoDB is a client for the DynamoDB endpoint, for your own tables
	// (an inbox table, the read model); nil in memory mode. AWSConfig is
	// its configuration (region, credentials), to build other clients.
	DynamoDB  *dynamodb.Client
	AWSConfig aws.Config
	// Tables are the outbox's tables (zero in memory mode).
	Tables dynamo.Tables
	// Store is the relay's store: a *dynamo.Store, or the *memory.Store.
	Store outbox.Store
	// Relay is the running relay.
	Relay *relay.Relay
	// Topics are the created topics.
	Topics []string

	t       testing.TB
	timeout time.Duration
}

type config struct {
	memory       bool
	topics       []string
	partitions   int32
	buckets      int
	poll         time.Duration
	timeout      time.Duration
	relayOptions []relay.Option
}

// Option configures New.
type Option func(*config)

// Memory runs the outbox on the memory store instead of DynamoDB Local:
// no JVM, and Writer is a *FakeWriter that does not apply your items. Use
// it where the test needs no DynamoDB. Default: DynamoDB Local (or the
// endpoint in DynamoDBEndpointEnv).
func Memory() Option { return func(c *config) { c.memory = true } }

// Topics are the Kafka topics created (and checked by the publisher).
// Default: "events".
func Topics(topics ...string) Option {
	return func(c *config) { c.topics = append(c.topics, topics...) }
}

// Partitions is each topic's partition count. Default 3.
func Partitions(n int32) Option { return func(c *config) { c.partitions = n } }

// BucketCount is the outbox's bucket count. Default 8: few buckets make the
// relay's sweeps cheap.
func BucketCount(n int) Option { return func(c *config) { c.buckets = n } }

// PollInterval is how often the relay looks for work (relay.PollInterval).
// Default 50 ms.
func PollInterval(d time.Duration) Option { return func(c *config) { c.poll = d } }

// WaitTimeout bounds WaitForRecords. Default 30 s.
func WaitTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// RelayOptions are passed to relay.New after New's own. Default:
// none.
func RelayOptions(opts ...relay.Option) Option {
	return func(c *config) { c.relayOptions = append(c.relayOptions, opts...) }
}

// New returns a ready outbox for t: both tables in DynamoDB Local (started
// once per test binary, installed on first use, killed with the test
// process; or the endpoint in DynamoDBEndpointEnv) or the memory store, a
// kfake cluster with the topics, a writer, and a relay running Relay.Run
// until t ends. It fails t, saying why, when any of it cannot be set up.
func New(t testing.TB, opts ...Option) *Outbox {
	t.Helper()
	c := config{partitions: 3, buckets: 8, poll: 50 * time.Millisecond, timeout: 30 * time.Second}
	for _, o := range opts {
		o(&c)
	}
	if len(c.topics) == 0 {
		c.topics = []string{"events"}
	}
	switch {
	case c.partitions < 1:
		t.Fatalf("outboxtest.New: Partitions(%d): must be at least 1", c.partitions)
	case !outbox.ValidBucketCount(c.buckets):
		t.Fatalf("outboxtest.New: BucketCount(%d): must be 1..%d", c.buckets, outbox.MaxBucketCount)
	case c.poll <= 0 || c.timeout <= 0:
		t.Fatalf("outboxtest.New: PollInterval and WaitTimeout must be positive")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := &Outbox{t: t, timeout: c.timeout, Topics: c.topics}

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(c.partitions, c.topics...))
	if err != nil {
		t.Fatalf("outboxtest.New: start kfake: %v", err)
	}
	t.Cleanup(cluster.Close)
	o.Kafka, o.Brokers = cluster, cluster.ListenAddrs()

	if c.memory {
		st := memory.New(c.buckets)
		fw := NewFakeWriter(c.buckets)
		fw.store = st
		o.Store, o.Writer = st, fw
	} else {
		d, err := sharedDynamo(ctx)
		if err != nil {
			t.Fatalf("outboxtest.New: %v", err)
		}
		o.DynamoDB, o.AWSConfig = d.client, d.cfg
		o.Tables = dynamo.Tables{Messages: Name(t, "outbox"), Control: Name(t, "outbox-control")}
		if err := dynamo.CreateTables(ctx, d.client, o.Tables, dynamo.BucketCount(c.buckets)); err != nil {
			t.Fatalf("outboxtest.New: create tables: %v", err)
		}
		st, err := dynamo.NewStore(ctx, d.client, o.Tables)
		if err != nil {
			t.Fatalf("outboxtest.New: %v", err)
		}
		w, err := dynamo.NewWriter(ctx, d.client, o.Tables)
		if err != nil {
			t.Fatalf("outboxtest.New: %v", err)
		}
		o.Store, o.Writer = st, w
	}

	// The publisher's MaxMessageBytes and header names are the config
	// item's, as everywhere.
	stored, err := o.Store.Config(ctx)
	if err != nil {
		t.Fatalf("outboxtest.New: read the config item: %v", err)
	}
	pub, err := kafka.NewPublisher(ctx, o.Brokers, kafka.Topics(c.topics...), kafka.OutboxConfig(stored))
	if err != nil {
		t.Fatalf("outboxtest.New: publisher: %v", err)
	}
	t.Cleanup(pub.Close)
	rl, err := relay.New(ctx, o.Store, pub, append([]relay.Option{relay.PollInterval(c.poll)}, c.relayOptions...)...)
	if err != nil {
		t.Fatalf("outboxtest.New: relay: %v", err)
	}
	o.Relay = rl
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rl.Run(runCtx) }()
	// Cleanups run last-in first-out: the relay stops before the
	// publisher closes and the cluster goes.
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && runCtx.Err() == nil {
			t.Errorf("outboxtest: the relay stopped: %v", err)
		}
	})
	return o
}

// WaitForRecords reads topic from its start until at least n records
// arrived, and returns them (per partition in offset order, partitions
// interleaved as fetched). It fails the test after WaitTimeout, saying how
// many arrived. Each call reads the topic anew.
func (o *Outbox) WaitForRecords(t testing.TB, topic string, n int) []*kgo.Record {
	t.Helper()
	recs, err := o.read(topic, n)
	if err != nil {
		t.Fatalf("outboxtest: %v", err)
	}
	return recs
}

func (o *Outbox) read(topic string, n int) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("consumer for %s: %w", topic, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return recs, fmt.Errorf("%d of %d records on %s after %v", len(recs), n, topic, o.timeout)
		}
		for _, fe := range fs.Errors() {
			if fe.Err != context.DeadlineExceeded {
				return recs, fmt.Errorf("read %s: %w", topic, fe.Err)
			}
		}
		recs = append(recs, fs.Records()...)
	}
	return recs, nil
}

// Header returns the value of r's last header named key, and whether r has
// one (the relay stamps its headers after the message's own).
func Header(r *kgo.Record, key string) (string, bool) {
	v, ok := "", false
	for _, h := range r.Headers {
		if h.Key == key {
			v, ok = string(h.Value), true
		}
	}
	return v, ok
}

// Name returns a table name unique to this run of t: prefix, the test's
// name and random hex, within DynamoDB's naming rules.
func Name(t testing.TB, prefix string) string {
	var random [4]byte
	if _, err := rand.Read(random[:]); err != nil {
		t.Fatalf("outboxtest.Name: %v", err)
	}
	var b strings.Builder
	for _, r := range prefix + "-" + t.Name() {
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	base := b.String()
	if len(base) > 200 {
		base = base[:200]
	}
	return base + "-" + hex.EncodeToString(random[:])
}

type dynamoEnv struct {
	cfg    aws.Config
	client *dynamodb.Client
}

var (
	dynamoOnce sync.Once
	shared     *dynamoEnv
	sharedErr  error
)

// sharedDynamo is the test binary's DynamoDB: the endpoint in
// DynamoDBEndpointEnv, or one DynamoDB Local for all tests. Its process
// dies with the test binary (dynamolocal kills it when its parent dies).
func sharedDynamo(ctx context.Context) (*dynamoEnv, error) {
	dynamoOnce.Do(func() {
		endpoint := os.Getenv(DynamoDBEndpointEnv)
		if endpoint == "" {
			// A JVM starting on a busy CI machine can take longer than
			// dynamolocal's default 30 s; New's context (3 minutes)
			// still bounds the whole set-up.
			inst, err := dynamolocal.Start(ctx, dynamolocal.Options{StartTimeout: 2 * time.Minute, LeanJVM: true})
			if err != nil {
				sharedErr = fmt.Errorf("start DynamoDB Local (or set %s): %w", DynamoDBEndpointEnv, err)
				return
			}
			endpoint = inst.Endpoint
		}
		cfg, err := dynamolocal.NewConfig(ctx, endpoint, dynamolocal.DefaultRegion)
		if err != nil {
			sharedErr = err
			return
		}
		shared = &dynamoEnv{cfg: cfg, client: dynamolocal.NewClient(cfg, endpoint)}
	})
	return shared, sharedErr
}
