package handler

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// TestTopicDeletedUnderTheRelayFunction: the relay function's handler, with
// the engine and the Kafka publisher of one warm container, meets a topic
// deleted after it published to it: the invocation ends well before its
// deadline, reports only that bucket for redelivery, the other bucket's
// message is published, and the bucket's lease carries the reason and is
// given up; once the topic is created again the same container publishes
// the message to it (no cold start needed). On kfake, and on Apache Kafka
// in make test's real-broker lane.
func TestTopicDeletedUnderTheRelayFunction(t *testing.T) {
	k := testenv.Kafka(t)
	gone, other := testenv.Name(t, "gone"), testenv.Name(t, "other")
	testenv.CreateTopic(t, k, gone, 1)
	testenv.CreateTopic(t, k, other, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a hang guard
	defer cancel()
	mem := memory.New(2)
	pub, err := kafka.NewPublisher(ctx, k.Brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	rl, err := relay.New(ctx, mem, pub)
	if err != nil {
		t.Fatal(err)
	}
	h := NewRelay(rl, 4, slog.New(slog.NewTextHandler(io.Discard, nil)))

	var streamSeq int
	hint := func(m outbox.Message) events.DynamoDBEventRecord {
		streamSeq++
		return events.DynamoDBEventRecord{EventID: strconv.Itoa(streamSeq), EventName: string(events.DynamoDBOperationTypeInsert),
			Change: events.DynamoDBStreamRecord{SequenceNumber: fmt.Sprintf("%028d", streamSeq), Keys: map[string]events.DynamoDBAttributeValue{
				"b": events.NewNumberAttribute(strconv.Itoa(m.Bucket)), "s": events.NewNumberAttribute(strconv.FormatInt(m.Sequence, 10))}}}
	}
	const budget = 20 * time.Second // the invocation's time
	// invoke hands the handler one batch with a hint for each of msgs and
	// returns its response, how long it took and the batch.
	invoke := func(what string, msgs ...outbox.Message) (events.DynamoDBEventResponse, time.Duration, events.DynamoDBEvent) {
		t.Helper()
		ev := events.DynamoDBEvent{}
		for _, m := range msgs {
			ev.Records = append(ev.Records, hint(m))
		}
		ictx, icancel := context.WithTimeout(ctx, budget)
		defer icancel()
		start := time.Now()
		resp, err := h.Handle(ictx, ev)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return resp, time.Since(start), ev
	}
	var n int
	put := func(topic string, bucket int, seq int64) outbox.Message {
		n++
		m := outbox.Message{ID: fmt.Sprintf("m%d", n), Topic: topic, Key: []byte("k"), Value: []byte("v"), Bucket: bucket, Sequence: seq, CreatedAt: time.Now()}
		if err := mem.Put(m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	consumed := func(topic string, n int) []string {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		cctx, ccancel := context.WithTimeout(ctx, time.Minute)
		defer ccancel()
		var got []string
		for len(got) < n {
			fs := cl.PollFetches(cctx)
			if cctx.Err() != nil {
				t.Fatalf("consumed %v of %d records of %s: %v", got, n, topic, cctx.Err())
			}
			fs.EachRecord(func(r *kgo.Record) {
				for _, hd := range r.Headers {
					if hd.Key == outbox.DefaultMessageIDHeader {
						got = append(got, string(hd.Value))
					}
				}
			})
		}
		return got
	}

	first := put(gone, 0, 1)
	if resp, _, _ := invoke("before the deletion", first); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("before the deletion: failures %+v", resp.BatchItemFailures)
	}
	consumed(gone, 1)

	testenv.DeleteTopic(t, k, gone)
	stuck, flows := put(gone, 0, 2), put(other, 1, 1)
	for i := range 2 {
		resp, took, ev := invoke("after the deletion", stuck, flows)
		if took > budget/2 {
			t.Errorf("invocation %d after the deletion took %v of its %v; want it to end long before the deadline", i+1, took, budget)
		}
		if f := resp.BatchItemFailures; len(f) != 1 || f[0].ItemIdentifier != ev.Records[0].Change.SequenceNumber {
			t.Errorf("invocation %d after the deletion: failures %+v; want bucket 0's record alone (%s)", i+1, f, ev.Records[0].Change.SequenceNumber)
		}
		l := mem.Lease(0)
		if !l.Stuck.Current(l.Head) || l.Stuck.Sequence != 2 || !strings.Contains(l.Stuck.Reason, "does not exist") || !l.Expires.IsZero() {
			t.Errorf("invocation %d after the deletion: bucket 0's lease %+v; want it released, stopped at 2 because the topic does not exist", i+1, l)
		}
	}
	if got := consumed(other, 1); got[0] != flows.ID {
		t.Errorf("bucket 1 published %v; want %s", got, flows.ID)
	}

	testenv.CreateTopic(t, k, gone, 1)
	if resp, _, _ := invoke("after the recreation", stuck); len(resp.BatchItemFailures) != 0 {
		t.Errorf("after the topic was created again: failures %+v; want the warm container to publish to it", resp.BatchItemFailures)
	}
	if got := consumed(gone, 1); got[0] != stuck.ID {
		t.Errorf("the recreated topic holds %v; want %s", got, stuck.ID)
	}
}
