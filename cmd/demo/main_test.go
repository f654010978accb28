package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"github.com/dynakafka/outbox/internal/harness/kafka/kfakeenv"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/cmd/internal/pipeline"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func client(t *testing.T, k *testenv.KafkaCluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// ensureTopic on a broker that already has the topic: before, the demo took
// kadm.CreateTopic's TOPIC_ALREADY_EXISTS for a failure and stopped.
func TestEnsureTopic(t *testing.T) {
	k := kfakeenv.Kafka(t, kfake.NumBrokers(1))
	cl := client(t, k.KafkaCluster)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name        string
		existing    int32 // partitions of the topic created beforehand; 0: none
		wantCreated bool
		wantErr     *TopicError
	}{
		{"new topic", 0, true, nil},
		{"existing, same partitions", 4, false, nil},
		{"existing, other partitions", 6, false, &TopicError{Partitions: 6, Want: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := testenv.Name(t, "orders")
			if tc.existing > 0 {
				testenv.CreateTopic(t, k.KafkaCluster, topic, tc.existing)
			}
			created, err := ensureTopic(ctx, cl, topic, 4)
			if created != tc.wantCreated {
				t.Errorf("created = %v, want %v", created, tc.wantCreated)
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("ensureTopic: %v", err)
				}
				if n, ok, err := pipeline.PartitionCount(ctx, cl, topic); err != nil || !ok || n != 4 {
					t.Errorf("topic has %d partitions (exists %v, %v), want 4", n, ok, err)
				}
				return
			}
			var te *TopicError
			if !errors.As(err, &te) || te.Topic != topic || te.Partitions != tc.wantErr.Partitions || te.Want != tc.wantErr.Want {
				t.Fatalf("ensureTopic = %v, want a *TopicError for %s: %d partitions, %d wanted", err, topic, tc.wantErr.Partitions, tc.wantErr.Want)
			}
			if !strings.Contains(err.Error(), "-buckets 6") {
				t.Errorf("the error does not say how to fix it: %v", err)
			}
		})
	}
}

// delayDeletes holds every BatchWriteItem (the relay's deletes) for d, so
// that a delete is still in flight when the demo sees the last delivery and
// stops.
func delayDeletes(d time.Duration) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("delayDeletes",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if _, ok := in.Parameters.(*dynamodb.BatchWriteItemInput); ok {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return middleware.InitializeOutput{}, middleware.Metadata{}, ctx.Err()
					}
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	}
}

// syncBuffer is a bytes.Buffer for several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The demo against a broker that already has the topic, with records of an
// earlier run in it: every order is delivered, the earlier records are not
// counted, and stopping after the last delivery logs no ERROR although the
// relay's last deletes are still running (before, they were cancelled and
// each logged "drain stopped" at ERROR).
func TestDemoWithExistingTopic(t *testing.T) {
	d := testenv.DynamoDB(t)
	k := kfakeenv.Kafka(t, kfake.NumBrokers(1))
	topic := testenv.Name(t, "orders")
	const buckets = 4
	testenv.CreateTopic(t, k.KafkaCluster, topic, buckets)

	// An earlier run's records, which this run must not count.
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for range 5 {
		r := &kgo.Record{Value: []byte("old"), Headers: []kgo.RecordHeader{{Key: outbox.DefaultMessageIDHeader, Value: []byte(outbox.NewID())}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()

	var logs, out syncBuffer
	o := options{
		orders: 40, writers: 4, buckets: buckets, customers: 20, topic: topic, drainTimeout: 3 * time.Minute,
		dynamoEndpoint: d.Endpoint, brokers: k.Brokers, logs: &logs, out: &out,
		apiOptions: []func(*middleware.Stack) error{delayDeletes(2 * time.Second)},
	}
	code, err := run(ctx, o)
	t.Logf("demo output:\n%s%s", logs.String(), out.String())
	if err != nil || code != 0 {
		t.Fatalf("run = %d, %v", code, err)
	}
	summary := regexp.MustCompile(`orders=40 enqueued=40 applied=40 duplicates_skipped=(\d+) lost=0 read_model_mismatches=0 `)
	if !summary.MatchString(out.String()) {
		t.Errorf("summary %q, want every order enqueued and delivered once", out.String())
	}
	if !strings.Contains(logs.String(), "topic "+topic+" exists") {
		t.Errorf("the demo did not report the existing topic")
	}
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"level":"ERROR"`) {
			t.Errorf("ERROR logged: %s", sc.Text())
		}
	}
}
