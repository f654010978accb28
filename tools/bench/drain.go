package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/fanout"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
)

// The relay's defaults, which the raw limits are measured at, and the raw
// drains' parallelism: rawLoops buckets (or producers) at once, the relay's
// default before Concurrency came to follow the hinted buckets (issue 28).
// The relay itself runs at its default Concurrency (0: every bucket at once)
// in every stage.
const (
	rawLoops       = 8
	relayBatch     = 500 // relay.BatchSize default
	deleteChunk    = 25  // BatchWriteItem's limit
	deleteParallel = 4   // a drain's tombstone calls at once, as MarkPublished spread them before it combined drains
)

// drainResult is one timed drain of a pre-filled backlog.
type drainResult struct {
	Name       string   `json:"name"`
	Backlog    backlog  `json:"backlog"`
	Messages   int      `json:"messages"` // messages moved (deleted, produced or both)
	Seconds    float64  `json:"seconds"`
	MsgsPerS   float64  `json:"msgs_per_s"`
	Calls      int64    `json:"dynamodb_calls,omitempty"`
	Attempts   int64    `json:"dynamodb_attempts,omitempty"`
	CallsPerM  float64  `json:"dynamodb_calls_per_msg,omitempty"`
	Dynamo     snapshot `json:"dynamodb"`
	Remaining  int      `json:"remaining_items"`
	Produced   int64    `json:"records_in_topic,omitempty"`
	Concurrent int      `json:"concurrency"`
	Load       string   `json:"loadavg_after"` // the machine's load average when the drain ended
	// Relay drains only: batches and the time their publishes took, and
	// the Kafka requests the publisher's clients sent during the drain.
	Batches               int64            `json:"batches,omitempty"`
	PublishSeconds        float64          `json:"publish_seconds,omitempty"`
	KafkaRequests         map[string]int64 `json:"kafka_requests,omitempty"`
	KafkaRequestsPerBatch float64          `json:"kafka_requests_per_batch,omitempty"`
	Note                  string           `json:"note,omitempty"`
}

func (r *drainResult) finish(elapsed time.Duration, st *stage) {
	r.Seconds = elapsed.Seconds()
	r.Load = loadavg()
	if r.Seconds > 0 {
		r.MsgsPerS = float64(r.Messages) / r.Seconds
	}
	r.Dynamo = st.meter.snapshot(st.roles())
	r.Calls, r.Attempts = r.Dynamo.calls()
	if r.Messages > 0 {
		r.CallsPerM = float64(r.Calls) / float64(r.Messages)
	}
}

// rawDynamo drains the backlog with nothing but the DynamoDB calls the relay
// cannot avoid, at the relay's concurrency: per bucket, a consistent Query
// of BatchSize items, then their deletes in BatchWriteItem calls of 25,
// DeleteConcurrency at once; 8 buckets at once.
func rawDynamo(ctx context.Context, st *stage, bl backlog) (drainResult, error) {
	r := drainResult{Name: "raw DynamoDB (consistent Query + BatchWriteItem delete)", Backlog: bl, Concurrent: rawLoops}
	err := pages(ctx, st, &r, func(b int, items []map[string]types.AttributeValue) error {
		return deleteItems(ctx, st, b, items)
	})
	return r, err
}

// pages runs, for every bucket (8 at once), a loop of consistent Queries of
// BatchSize items, handing each page to move (which removes its items), and
// records the drain in r.
func pages(ctx context.Context, st *stage, r *drainResult, move func(b int, items []map[string]types.AttributeValue) error) error {
	var moved atomic.Int64
	start := time.Now()
	err := forBuckets(st.buckets, rawLoops, func(b int) error {
		var after int64
		for {
			out, err := st.metered.Query(ctx, &dynamodb.QueryInput{
				TableName:                 aws.String(st.tables.Messages),
				KeyConditionExpression:    aws.String("#b = :b AND #s > :after"),
				ExpressionAttributeNames:  map[string]string{"#b": "b", "#s": "s"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":b": num(int64(b)), ":after": num(after)},
				ConsistentRead:            aws.Bool(true),
				Limit:                     aws.Int32(relayBatch),
			})
			if err != nil {
				return err
			}
			if len(out.Items) > 0 {
				if err := move(b, out.Items); err != nil {
					return err
				}
				moved.Add(int64(len(out.Items)))
				after, _ = strconv.ParseInt(out.Items[len(out.Items)-1]["s"].(*types.AttributeValueMemberN).Value, 10, 64)
			}
			if len(out.LastEvaluatedKey) == 0 {
				return nil
			}
		}
	})
	r.Messages = int(moved.Load())
	r.finish(time.Since(start), st)
	if err != nil {
		return err
	}
	return r.check(ctx, st)
}

// check records what the drain left in the table and put in the topic.
func (r *drainResult) check(ctx context.Context, st *stage) (err error) {
	if r.Remaining, err = st.remaining(ctx); err != nil {
		return err
	}
	r.Produced, err = st.produced(ctx)
	return err
}

// deleteItems deletes items in chunks of 25, deleteParallel chunks at once.
func deleteItems(ctx context.Context, st *stage, bucket int, items []map[string]types.AttributeValue) error {
	var chunks [][]types.WriteRequest
	for i := 0; i < len(items); i += deleteChunk {
		var reqs []types.WriteRequest
		for _, it := range items[i:min(i+deleteChunk, len(items))] {
			reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{
				Key: map[string]types.AttributeValue{"b": it["b"], "s": it["s"]}}})
		}
		chunks = append(chunks, reqs)
	}
	return forBuckets(len(chunks), deleteParallel, func(i int) error {
		return batchWrite(ctx, st.metered, st.tables.Messages, chunks[i])
	})
}

// forBuckets runs fn(0..n-1), at most parallel at once, and returns the
// first error (fanout.Each: no call starts after it).
func forBuckets(n, parallel int, fn func(int) error) error {
	return fanout.Each(context.Background(), n, parallel, func(_ context.Context, i int) error { return fn(i) })
}

// rawKafka produces the same number of records as the backlog (same sizes,
// keys and headers) with the publisher's kgo settings, at the relay's
// concurrency: 8 producers, each producing BatchSize records at once and
// waiting for all of them before the next batch, as Publish does.
func rawKafka(ctx context.Context, st *stage, g *gen, n int) (drainResult, error) {
	r := drainResult{Name: "raw Kafka (kgo produce, publisher settings)", Concurrent: rawLoops}
	cl, err := kgo.NewClient(producerOptions(st.brokers)...)
	if err != nil {
		return r, err
	}
	defer cl.Close()
	// Build the records first: generating them is not Kafka's cost.
	per := make([][]*kgo.Record, st.buckets)
	for i := range n {
		b := i % st.buckets
		per[b] = append(per[b], record(g.message(st.topic, b)))
	}
	// Warm up metadata and the producer id outside the timing.
	if err := cl.ProduceSync(ctx, record(g.message(st.topic, 0))).FirstErr(); err != nil {
		return r, err
	}
	var moved atomic.Int64
	start := time.Now()
	err = forBuckets(st.buckets, rawLoops, func(b int) error {
		recs := per[b]
		for len(recs) > 0 {
			batch := recs[:min(relayBatch, len(recs))]
			recs = recs[len(batch):]
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				first error
			)
			for _, rec := range batch {
				wg.Add(1)
				cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
					if err != nil {
						mu.Lock()
						first = cmpErr(first, err)
						mu.Unlock()
					}
					wg.Done()
				})
			}
			wg.Wait()
			if first != nil {
				return first
			}
			moved.Add(int64(len(batch)))
		}
		return nil
	})
	r.Messages = int(moved.Load())
	r.finish(time.Since(start), st)
	return r, err
}

// rawPipeline is the relay's work done by hand with nothing else: per
// bucket, a consistent Query of BatchSize items, their records produced
// (publisher settings, all at once, waiting for every ack), then their
// deletes (BatchWriteItem, 25 per call, 4 at once); 8 buckets at once. No
// lease, no head update, no decoding or validation: the floor under the
// relay engine's own overhead when DynamoDB and Kafka share the machine.
func rawPipeline(ctx context.Context, st *stage, bl backlog) (drainResult, error) {
	r := drainResult{Name: "raw pipeline (Query → produce → delete by hand)", Backlog: bl, Concurrent: rawLoops}
	cl, err := kgo.NewClient(producerOptions(st.brokers)...)
	if err != nil {
		return r, err
	}
	defer cl.Close()
	err = pages(ctx, st, &r, func(b int, items []map[string]types.AttributeValue) error {
		recs := make([]*kgo.Record, len(items))
		for i, it := range items {
			recs[i] = itemRecord(st.topic, it)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return err
		}
		return deleteItems(ctx, st, b, items)
	})
	return r, err
}

// itemRecord is the record for a stored message item, taken as it is (key,
// value, the id as the message-id header; the item's own headers are left
// out, which only flatters the hand-written loops).
func itemRecord(topic string, it map[string]types.AttributeValue) *kgo.Record {
	id, _ := it["id"].(*types.AttributeValueMemberS)
	var idv []byte
	if id != nil {
		idv = []byte(id.Value)
	}
	return &kgo.Record{Topic: topic, Key: bin(it["k"]), Value: bin(it["val"]),
		Headers: []kgo.RecordHeader{{Key: outbox.DefaultMessageIDHeader, Value: idv}}}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// relayDrain drains the backlog with the relay engine on store/dynamo and
// kafka.Publisher (kafka.TxnPublisher when mode is transactional, under
// the messages table's name, as the functions build it), all options at
// their defaults but for the mode's.
func relayDrain(ctx context.Context, st *stage, bl backlog, name string, mode relayMode) (drainResult, error) {
	r := drainResult{Name: name, Backlog: bl}
	store, err := dynamo.NewStore(ctx, st.metered, st.tables)
	if err != nil {
		return r, err
	}
	reqs := newRequestCounter()
	kopts := []kafka.Option{kafka.Topics(st.topic), kafka.ClientOptions(kgo.WithHooks(reqs))}
	var pub interface {
		outbox.Publisher
		Close()
	}
	if mode.Transactional {
		pub, err = kafka.NewTxnPublisher(ctx, st.brokers, st.tables.Messages, kopts...)
	} else {
		pub, err = kafka.NewPublisher(ctx, st.brokers, kopts...)
	}
	if err != nil {
		return r, err
	}
	defer pub.Close()
	var acked, batches, publishNanos atomic.Int64
	rl, err := relay.New(ctx, store, pub, relay.WithMetrics(metricsFunc(func(s relay.BatchStats) {
		acked.Add(int64(s.Acked))
		batches.Add(1)
		publishNanos.Add(int64(s.PublishDuration))
	})))
	if err != nil {
		return r, err
	}
	buckets := make([]int, rl.BucketCount())
	r.Concurrent = len(buckets) // the default Concurrency: every bucket at once
	for i := range buckets {
		buckets[i] = i
	}
	st.meter.reset() // count the drain only, not the set-up reads
	reqs.reset()     // nor the publisher's topic checks
	start := time.Now()
	errs := rl.DrainBuckets(ctx, buckets)
	elapsed := time.Since(start)
	r.Messages = int(acked.Load())
	r.Batches, r.PublishSeconds = batches.Load(), time.Duration(publishNanos.Load()).Seconds()
	var total int64
	r.KafkaRequests, total = reqs.byName()
	if r.Batches > 0 {
		r.KafkaRequestsPerBatch = float64(total) / float64(r.Batches)
	}
	r.finish(elapsed, st)
	if len(errs) > 0 {
		var all []error
		for b, err := range errs {
			all = append(all, fmt.Errorf("bucket %d: %w", b, err))
		}
		return r, errors.Join(all...)
	}
	err = r.check(ctx, st)
	return r, err
}

type metricsFunc func(relay.BatchStats)

func (f metricsFunc) Batch(s relay.BatchStats) { f(s) }
func (metricsFunc) Drain(relay.DrainStats)     {}

// naiveDrain is the send-then-mark relay of the usual outbox FAQ, on the
// same SDK and Kafka clients: loop { Query Limit 1 ConsistentRead;
// ProduceSync one record; DeleteItem }. With loops = 1 it is the FAQ's relay
// as written, one poller going round the buckets; with loops = 8 each bucket
// has its own loop, 8 at once, the relay's concurrency, so that the
// comparison is of batching alone.
func naiveDrain(ctx context.Context, st *stage, bl backlog, loops int) (drainResult, error) {
	r := drainResult{Name: fmt.Sprintf("naive send-then-mark relay, %d loop(s)", loops), Backlog: bl, Concurrent: loops,
		Note: "loop { Query Limit 1 ConsistentRead; ProduceSync 1 record; DeleteItem }"}
	cl, err := kgo.NewClient(producerOptions(st.brokers)...)
	if err != nil {
		return r, err
	}
	defer cl.Close()
	var moved atomic.Int64
	// step moves one message of bucket b, if it has one.
	step := func(b int) (bool, error) {
		out, err := st.metered.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(st.tables.Messages),
			KeyConditionExpression:    aws.String("#b = :b"),
			ExpressionAttributeNames:  map[string]string{"#b": "b"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":b": num(int64(b))},
			ConsistentRead:            aws.Bool(true),
			Limit:                     aws.Int32(1),
		})
		if err != nil || len(out.Items) == 0 {
			return false, err
		}
		it := out.Items[0]
		if err := cl.ProduceSync(ctx, itemRecord(st.topic, it)).FirstErr(); err != nil {
			return false, err
		}
		if _, err := st.metered.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String(st.tables.Messages), Key: map[string]types.AttributeValue{"b": it["b"], "s": it["s"]},
		}); err != nil {
			return false, err
		}
		moved.Add(1)
		return true, nil
	}
	start := time.Now()
	if loops == 1 {
		for more := true; more && err == nil; {
			more = false
			for b := range st.buckets {
				var moved bool
				if moved, err = step(b); err != nil {
					break
				}
				more = more || moved
			}
		}
	} else {
		err = forBuckets(st.buckets, loops, func(b int) error {
			for {
				if moved, err := step(b); err != nil || !moved {
					return err
				}
			}
		})
	}
	r.Messages = int(moved.Load())
	r.finish(time.Since(start), st)
	if err != nil {
		return r, err
	}
	err = r.check(ctx, st)
	return r, err
}

func bin(av types.AttributeValue) []byte {
	if b, ok := av.(*types.AttributeValueMemberB); ok {
		return b.Value
	}
	return nil
}
