package kafka

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A topic deleted under a publisher that produced to it: the next publish
// of its messages fails, within DeliveryTimeout, as a *TopicError (Fatal:
// the relay stops the bucket with the reason, instead of retrying a
// message that cannot be written), and the ones after it fail their check
// at once; once the topic is created again, the same publisher produces to
// the new topic (kgo refuses a recreated topic's new id until the topic is
// purged from the client). Also when the topic is deleted and created again
// between two publishes (the first one after it fails retriably, with
// UNKNOWN_TOPIC_ID, and the next succeeds). Both publishers.
func TestDeletedTopicStopsThenRecreatedResumes(t *testing.T) {
	k := testenv.Kafka(t)
	type publisher interface {
		outbox.Publisher
		Close()
	}
	// unbounded: kgo never gives up on the unknown topic, so the records
	// fail by DeliveryTimeout (kgo.ErrRecordTimeout) instead.
	unbounded := []Option{ClientOptions(kgo.UnknownTopicRetries(-1)), DeliveryTimeout(3 * time.Second)}
	for _, mode := range []string{"plain", "txn", "plain-unbounded-retries"} {
		for _, gap := range []bool{false, true} {
			name := mode + "/deleted"
			if gap {
				name = mode + "/recreated-between-publishes"
			}
			t.Run(name, func(t *testing.T) {
				ctx := testCtx(t)
				topic := newTopic(t, k, 1, nil)
				var p publisher
				var err error
				switch mode {
				case "txn":
					p, err = NewTxnPublisher(ctx, k.Brokers, testenv.Name(t, "txn"))
				case "plain-unbounded-retries":
					p, err = NewPublisher(ctx, k.Brokers, unbounded...)
				default:
					p, err = NewPublisher(ctx, k.Brokers)
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p.Close)
				msgs := messages(topic, 4, sameKey("k"))
				publish := func(i int) (time.Duration, error) {
					start := time.Now()
					n, err := p.Publish(ctx, msgs[i:i+1])
					if err == nil && n != 1 {
						t.Fatalf("message %d: acked %d without an error", i, n)
					}
					return time.Since(start), err
				}
				if _, err := publish(0); err != nil {
					t.Fatalf("before the deletion: %v", err)
				}
				testenv.DeleteTopic(t, k, topic)
				if !gap {
					for i := range 2 {
						took, err := publish(1)
						var te *TopicError
						if !errors.As(err, &te) || outbox.Classify(err) != outbox.Fatal || IsRetriable(err) ||
							!strings.Contains(err.Error(), "does not exist") {
							t.Fatalf("publish %d after the deletion: %v (class %v); want a Fatal *TopicError saying the topic does not exist", i+1, err, outbox.Classify(err))
						}
						if took >= defaultDeliveryTimeout()+AbandonGrace {
							t.Fatalf("publish %d after the deletion took %v; want it bounded below DeliveryTimeout", i+1, took)
						}
					}
				}
				testenv.CreateTopic(t, k, topic, 1)
				ok := -1
				for attempt := range 3 {
					_, err := publish(1)
					if err == nil {
						ok = attempt
						break
					}
					if outbox.Classify(err) != outbox.Retriable {
						t.Fatalf("attempt %d on the recreated topic: %v (class %v); want success, or a retriable error once", attempt+1, err, outbox.Classify(err))
					}
				}
				if ok < 0 || !gap && ok != 0 || ok > 1 {
					t.Fatalf("the recreated topic took %d attempts (-1: never); want 1 (2 when it was recreated between publishes)", ok+1)
				}
				if _, err := publish(2); err != nil {
					t.Fatalf("after the recreation: %v", err)
				}
				if got := ids(t, consumeCommitted(t, k, topic, 2)); strings.Join(got, ",") != strings.Join(msgIDs(msgs[1:3]), ",") {
					t.Fatalf("the recreated topic holds %v; want %v", got, msgIDs(msgs[1:3]))
				}
			})
		}
	}
}

// consumeCommitted reads n records of topic from its start, read_committed
// (a transaction's commit marker takes an offset, so ConsumeAll's count of
// end offsets does not fit).
func consumeCommitted(t *testing.T, k *testenv.KafkaCluster, topic string, n int) []*kgo.Record {
	t.Helper()
	ctx := testCtx(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records of %s: %v", len(recs), n, topic, err)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		recs = append(recs, fs.Records()...)
	}
	return recs
}

func defaultDeliveryTimeout() time.Duration {
	c := defaultCfg()
	_ = c.validate()
	return c.deliveryTimeout
}
