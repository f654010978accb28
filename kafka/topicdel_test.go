package kafka

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/kafka/kafkatest"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A topic deleted under a publisher that produced to it: the next publish
// of its messages fails, within DeliveryTimeout, as a *TopicError (Fatal:
// the relay stops the bucket with the reason, instead of retrying a
// message that cannot be written), and the ones after it fail their check
// at once; once the topic is created again, the same publisher produces to
// the new topic (kgo refuses a recreated topic's new id for the client's
// life, so the publisher replaces the client). Also when the topic is deleted and created again
// between two publishes (the first one after it fails retriably, with
// UNKNOWN_TOPIC_ID, and replaces its client; the next succeeds). Both
// publishers.
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
					if f, ok := p.(outbox.HolderFencer); ok && errors.Is(err, outbox.ErrFenceRequired) {
						// As the relay does: fence (under the lease), publish.
						if err := f.FenceHolders(ctx, msgs[i].Bucket); err != nil {
							return time.Since(start), err
						}
						n, err = p.Publish(ctx, msgs[i:i+1])
					}
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
				var firstErr error
				for attempt := range 3 {
					_, err := publish(1)
					if err == nil {
						ok = attempt
						break
					}
					if attempt == 0 {
						firstErr = err
					}
					if outbox.Classify(err) != outbox.Retriable {
						t.Fatalf("attempt %d on the recreated topic: %v (class %v); want success, or a retriable error once", attempt+1, err, outbox.Classify(err))
					}
				}
				// Recreated between publishes, the client still holds the
				// old topic: the first publish must take the path that
				// fails with UNKNOWN_TOPIC_ID and replaces the client, and
				// the second succeed. After a failed publish found the
				// topic gone, the client was replaced already.
				if want := map[bool]int{false: 0, true: 1}[gap]; ok != want {
					t.Fatalf("the recreated topic took %d attempts (0: never; first error %v); want %d", ok+1, firstErr, want+1)
				}
				if gap && !errors.Is(firstErr, kerr.UnknownTopicID) {
					t.Fatalf("the first publish to the recreated topic failed with %v; want UNKNOWN_TOPIC_ID", firstErr)
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
	return kafkatest.ConsumeN(t, k, topic, n, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
}

func defaultDeliveryTimeout() time.Duration {
	c := defaultCfg()
	_ = c.validate()
	return c.deliveryTimeout
}

// Two buckets on one single-partition topic, the topic deleted and created
// again under them: bucket B's publish fails first and its look at the topic
// is slow (held by a gate); meanwhile bucket A's publish fails, the
// publisher moves to the new topic and A publishes there; then B's look
// ends and B publishes again. Every message reported acknowledged must be
// in the new topic. A publisher that purged the topic from its shared
// client at B's late failure (as it did) restarted the partition's
// idempotent sequence at 0 under the same producer id after A had
// published there: B's record matched a batch the broker had cached and
// was answered as a duplicate, acknowledged and never written. A record
// published alone afterwards goes to the new topic at once: the isolation
// client, which knew the old topic, was replaced with the shared one.
func TestTopicRecreatedUnderConcurrentPublishesLosesNothing(t *testing.T) {
	k := testenv.Kafka(t)
	ctx := testCtx(t)
	topic := newTopic(t, k, 1, nil)
	p := newPublisher(t, k)
	msgs := messages(topic, 8, sameKey("k"))
	for i := range msgs {
		msgs[i].Bucket = i % 2 // even: bucket A (0), odd: bucket B (1)
	}
	// before the deletion: each bucket once through the shared client, and
	// one message alone (the isolation client knows the old topic too)
	for i := range 2 {
		if _, err := p.Publish(ctx, msgs[i:i+1]); err != nil {
			t.Fatalf("before the deletion: %v", err)
		}
	}
	if err := p.PublishAlone(ctx, msgs[7]); err != nil {
		t.Fatalf("before the deletion, alone: %v", err)
	}
	entered, gate := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	p.testLostTopic = func(string) {
		if !held.Swap(true) { // the first look only: bucket B's
			close(entered)
			<-gate
		}
	}
	testenv.DeleteTopic(t, k, topic)
	testenv.CreateTopic(t, k, topic, 1)

	var acked []string
	// publishUntil publishes msgs[i] until Kafka acknowledges it, and
	// returns the errors seen before.
	publishUntil := func(i int) []error {
		var errs []error
		for len(errs) < 5 {
			n, err := p.Publish(ctx, msgs[i:i+1])
			if err == nil && n == 1 {
				return errs
			}
			if outbox.Classify(err) != outbox.Retriable {
				t.Errorf("message %d (bucket %d): %v (class %v); want success or a retriable error", i, msgs[i].Bucket, err, outbox.Classify(err))
				return errs
			}
			errs = append(errs, err)
		}
		t.Errorf("message %d (bucket %d) failed %d times: %v", i, msgs[i].Bucket, len(errs), errs)
		return errs
	}
	bDone := make(chan []error, 1)
	go func() { bDone <- publishUntil(3) }()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatalf("bucket B's publish to the recreated topic never failed for its topic")
	}
	// B's look at the topic is held: bucket A moves to the new topic.
	for _, i := range []int{2, 4, 6} {
		if errs := publishUntil(i); i == 2 && len(errs) == 0 {
			t.Errorf("bucket A's first publish to the recreated topic succeeded at once; want it to fail (the client held the old topic)")
		}
		acked = append(acked, msgs[i].ID)
	}
	close(gate)
	errs := <-bDone
	if len(errs) == 0 || !errors.Is(errs[0], kerr.UnknownTopicID) {
		t.Errorf("bucket B's first error: %v; want UNKNOWN_TOPIC_ID", errs)
	}
	acked = append(acked, msgs[3].ID)
	if errs := publishUntil(5); len(errs) != 0 {
		t.Errorf("bucket B's next publish failed %v; want success at once", errs)
	}
	acked = append(acked, msgs[5].ID)
	// The isolation client was replaced with the shared one: a record
	// published alone goes to the new topic at once.
	if err := p.PublishAlone(ctx, msgs[7]); err != nil {
		t.Errorf("publishing alone after the shared client moved to the new topic: %v; want success at once", err)
	} else {
		acked = append(acked, msgs[7].ID)
	}

	got := make(map[string]bool)
	for _, id := range ids(t, consumeAll(t, k, topic)) {
		got[id] = true
	}
	var missing []string
	for _, id := range acked {
		if !got[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("acknowledged but not in the topic: %v (the topic holds %d of the %d acknowledged)", missing, len(acked)-len(missing), len(acked))
	}
}
