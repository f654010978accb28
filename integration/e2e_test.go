package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/attrib"
	"github.com/dynakafka/outbox/internal/harness/checker"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// payload is what the sample writers put in a message's value.
type payload struct {
	ID        string `json:"id"`
	Aggregate string `json:"agg"`
	Version   int64  `json:"ver"`
	Index     int    `json:"idx"`
}

func (p payload) order() int64 { return p.Version*1000 + int64(p.Index) }

// batchCounter is a relay.Metrics that measures published batch sizes.
type batchCounter struct{ batches, messages atomic.Int64 }

func (b *batchCounter) Batch(s relay.BatchStats) {
	if s.Acked > 0 {
		b.batches.Add(1)
		b.messages.Add(int64(s.Acked))
	}
}

func (b *batchCounter) Drain(relay.DrainStats) {}

func (b *batchCounter) mean() float64 {
	if n := b.batches.Load(); n > 0 {
		return float64(b.messages.Load()) / float64(n)
	}
	return 0
}

// TestEndToEnd: 20 concurrent writers update 500 version-checked aggregates
// and enqueue at least 4,000 messages (2,000 in watermark mode) in multi-message transactions, 5 % of
// which fail their business condition on purpose; two relays drain with the
// default BatchSize and concurrency while a consumer reads the topic back.
// No faults are injected, so every committed message must arrive exactly
// once, in aggregate-version order, and no rolled-back message at all. It
// runs in both modes (watermark with a smaller volume): in delete mode the
// table ends empty, in watermark mode it ends holding every committed
// message, each with its TTL, and nothing above any head.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run skipped in -short mode")
	}
	t.Parallel() // runs beside the package's other long tests
	for _, c := range []struct {
		mode   outbox.Mode
		target int
		opts   []dynamo.TablesOption
	}{
		{outbox.DeleteMode, 4_000, nil},
		{outbox.WatermarkMode, 2_000, []dynamo.TablesOption{dynamo.WithMode(outbox.WatermarkMode), dynamo.Retention(2 * time.Hour)}},
	} {
		t.Run(c.mode.String(), func(t *testing.T) { endToEnd(t, c.mode, c.target, e2eRun{}, c.opts...) })
	}
}

// e2eRun varies an end-to-end run.
type e2eRun struct {
	// kafka is the cluster to publish to. Default: testenv.Kafka.
	kafka *testenv.KafkaCluster
	// midway, if set, is called once (from its own goroutine) when half of
	// the target is committed, while the writers and relays go on.
	midway func()
}

// endToEnd runs the end-to-end scenario and returns the checker's result and
// the environment it ran in; it fails t if a promise is broken.
func endToEnd(t *testing.T, mode outbox.Mode, target int, run e2eRun, opts ...dynamo.TablesOption) (checker.Result, *env) {
	const (
		writers    = 20
		aggregates = 500
		staleShare = 0.05
	)
	k := run.kafka
	if k == nil {
		k = testenv.Kafka(t)
	}
	env := newEnvOn(t, k, 8, opts...)
	// Bounds against hangs, not speed checks (a busy 2-core machine, the
	// package's long tests in parallel).
	ctx, cancel := context.WithTimeout(context.Background(), 18*time.Minute)
	defer cancel()
	env.seedAggregates(ctx, t, aggregates)

	metrics := &batchCounter{}
	chk := checker.New()
	// The relays' store and publisher attribute duplicates: a busy machine
	// can stall a drain past its lease's cut-off, and the next holder then
	// publishes again what the first published but did not record — legal
	// (at least once). A duplicate of a message already recorded as
	// published is not, and fails the run as "unexplained".
	at := attrib.New(env.store, env.pub, chk)
	at.Watermark = mode == outbox.WatermarkMode
	relayCtx, stopRelays := context.WithCancel(ctx)
	var relays sync.WaitGroup
	// In WatermarkMode a relay that resumes a bucket it released publishes
	// without writing per message; when another relay acquires the bucket
	// meanwhile, the resumer's head update is refused and the acquirer
	// publishes the same messages again (docs/design.md §9.1). Two relays
	// with different ids polling the same buckets hit this constantly (806
	// duplicates in 3,158 messages), so the watermark run drains without
	// resuming, as design.md advises for such deployments.
	for i := range 2 {
		// Each relay publishes through its own probe: the I4 check compares
		// their publish intervals per bucket.
		r, err := relay.New(ctx, at, at.ViaAs(fmt.Sprint("e2e-relay-", i), env.pub), relay.RelayID(fmt.Sprint("e2e-relay-", i)), relay.PollInterval(100*time.Millisecond), relay.WithMetrics(metrics),
			relay.ResumeReleased(mode == outbox.DeleteMode))
		if err != nil {
			t.Fatal(err)
		}
		if r.Mode() != mode {
			t.Fatalf("relay in %v mode on tables created in %v mode: it must take the config item's", r.Mode(), mode)
		}
		relays.Add(1)
		go func() {
			defer relays.Done()
			if err := r.Run(relayCtx); err != nil && relayCtx.Err() == nil {
				t.Errorf("relay: %v", err)
			}
		}()
	}

	consumerCtx, stopConsumer := context.WithCancel(ctx)
	consumed := env.consume(consumerCtx, t, func(headerID string, key []byte, value []byte) {
		var p payload
		if err := json.Unmarshal(value, &p); err != nil {
			t.Errorf("record %s: %v", headerID, err)
			return
		}
		chk.Delivered(headerID, p.ID, string(key), p.order())
	})

	var (
		committed, rolledBack, txs, staleTxs, notSentTxs atomic.Int64
		wg                                               sync.WaitGroup
	)
	midwayDone := make(chan struct{})
	go func() {
		defer close(midwayDone)
		for committed.Load() < int64(target/2) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		if run.midway != nil {
			run.midway()
		}
	}()
	for w := range writers {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for committed.Load() < int64(target) && ctx.Err() == nil {
				agg := fmt.Sprintf("agg-%03d", rng.IntN(aggregates))
				ver, err := env.readVersion(ctx, agg)
				if err != nil {
					t.Error(err)
					return
				}
				stale := rng.Float64() < staleShare
				expected := ver
				if stale {
					expected = ver - 1 // a stale read: the business condition must fail
				}
				n := 1 + rng.IntN(20)
				msgs := make([]outbox.Message, n)
				for i := range msgs {
					p := payload{ID: outbox.NewID(), Aggregate: agg, Version: ver + 1, Index: i}
					v, _ := json.Marshal(p)
					msgs[i] = outbox.Message{ID: p.ID, Topic: env.topic, Key: []byte(agg), Value: v,
						Headers: []outbox.Header{{Key: "kind", Value: []byte("order-updated")}}}
				}
				txs.Add(1)
				_, err = env.writer.Write(ctx, []types.TransactWriteItem{env.bumpVersion(agg, expected)}, msgs...)
				switch {
				case err == nil:
					for _, m := range msgs {
						var p payload
						_ = json.Unmarshal(m.Value, &p)
						chk.Committed(m.ID, agg, p.order())
					}
					committed.Add(int64(n))
				case errors.Is(err, outbox.ErrConditionFailed), errors.Is(err, outbox.ErrConflict):
					// Stale on purpose, or another writer updated the
					// aggregate first: nothing was written.
					if stale {
						staleTxs.Add(1)
					}
					for _, m := range msgs {
						chk.RolledBack(m.ID)
					}
					rolledBack.Add(int64(n))
				case notSent(err):
					// The write gave up before any TransactWriteItems
					// was sent (DynamoDB Local answers a busy machine's
					// counter updates with "too long waiting for a
					// lock"): nothing was written, and the checker
					// fails the run if any of these is ever published.
					for _, m := range msgs {
						chk.RolledBack(m.ID)
					}
					rolledBack.Add(int64(n))
					notSentTxs.Add(1)
				default:
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	<-midwayDone
	if t.Failed() {
		stopRelays()
		stopConsumer()
		return checker.Result{}, env
	}

	// Wait for the consumer to have everything (bounded).
	deadline := time.Now().Add(8 * time.Minute)
	for chk.Missing() > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	// Then wait until every message is decided, bounded: the consumer can
	// have a message before its drain's tombstones land, and stopping the
	// relays then leaves it above its head (written lazily in DeleteMode)
	// for the final drain to publish again, through the closed client
	// (CI, 2026-12-07: TestRealEndToEnd/delete hung in that drain's
	// retries until its context ended).
	waited := time.Now()
	undecided := env.undecided(ctx, t, mode, 8)
	for deadline := waited.Add(2 * time.Minute); undecided > 0 && time.Now().Before(deadline); undecided = env.undecided(ctx, t, mode, 8) {
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("undecided messages when the relays stop: %d (waited %v)", undecided, time.Since(waited).Round(time.Millisecond))
	// Then stop the relays and close their client (records it had sent
	// may still land until then), and read the topic to its end offsets,
	// the end a third-party consumer reads to: every late duplicate or
	// phantom is judged too.
	stopRelays()
	relays.Wait()
	env.pub.Close()
	records := env.readToEnd(ctx, t)
	stopConsumer()
	<-consumed

	r := chk.Result()
	if int64(r.Deliveries) != records {
		t.Errorf("the consumer saw %d records, the topic's end offsets add up to %d", r.Deliveries, records)
	}
	ov := at.Overlaps()
	fmt.Printf("outbox-e2e: mode=%s committed=%d rolledback=%d delivered_unique=%d duplicates=%d unexplained=%d %s lost=%d phantom=%d order_violations=%d mean_batch=%.1f duplicates_by_cause=%s\n",
		mode, r.Committed, r.RolledBack, r.DeliveredUnique, r.Duplicates, r.Unexplained, ov, r.Lost, r.Phantom, r.OrderViolations, metrics.mean(), r.Causes())
	t.Logf("transactions=%d stale=%d (%.1f%%)", txs.Load(), staleTxs.Load(), 100*float64(staleTxs.Load())/float64(txs.Load()))
	t.Logf("transactions not sent (the writer gave up before sending, nothing written)=%d", notSentTxs.Load())
	if r.Committed < target {
		t.Fatalf("only %d messages committed, want at least %d", r.Committed, target)
	}
	if share := float64(staleTxs.Load()) / float64(txs.Load()); share < 0.02 || share > 0.10 {
		t.Errorf("business-condition failures are %.1f%% of transactions, want about 5%%", 100*share)
	}
	for _, id := range r.UnexplainedIDs[:min(3, len(r.UnexplainedIDs))] {
		for _, line := range at.Trace(id) {
			t.Logf("unexplained %s: %s", id, line)
		}
	}
	if ov.UnadmittedCount() > 0 {
		t.Errorf("I4: %d publishes of one bucket by two relays at once that no documented window admits: %s", ov.UnadmittedCount(), ov.Details())
	}
	if !r.OK() {
		t.Fatalf("broken promises: lost=%d (e.g. %v) phantom=%d (e.g. %v) order_violations=%d (e.g. %v) header_mismatch=%d unexplained=%d (e.g. %v)",
			r.Lost, first(r.LostIDs), r.Phantom, first(r.PhantomIDs), r.OrderViolations, r.Violations[:min(3, len(r.Violations))], r.HeaderMismatch,
			r.Unexplained, first(r.UnexplainedIDs))
	}
	if r.RolledBack == 0 {
		t.Error("no transaction was rolled back; the phantom check saw nothing")
	}
	if metrics.mean() <= 1 {
		t.Errorf("mean published batch %.2f, want > 1", metrics.mean())
	}
	// Stopping the relays may cut a drain between its head update and its
	// delete: one more drain deletes such leftovers without publishing (in
	// watermark mode it brings every head up to date).
	// Its publisher is closed: it can only fail, within its bound, if it
	// finds a message to publish.
	final := env.relay(t, relay.RelayID("e2e-final"))
	fctx, fcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer fcancel()
	if errs := final.DrainBuckets(fctx, []int{0, 1, 2, 3, 4, 5, 6, 7}); len(errs) != 0 {
		t.Errorf("final drain: %v", errs)
	}
	left := env.pendingMessages(ctx, t)
	switch mode {
	case outbox.DeleteMode:
		if left != 0 {
			t.Errorf("%d messages still in the outbox table after the drain", left)
		}
	case outbox.WatermarkMode:
		// Every committed message is retained, with its TTL, and none is
		// above its bucket's head: all published, nothing deleted.
		if left != r.Committed {
			t.Errorf("%d messages retained, want all %d committed", left, r.Committed)
		}
		if n := env.countItems(ctx, t, "attribute_not_exists(#f) AND attribute_not_exists(#x)", map[string]string{"#f": "f", "#x": "x"}); n != 0 {
			t.Errorf("%d retained messages without a TTL", n)
		}
		for b := range 8 {
			l, err := env.store.ReadLease(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			if n, _, err := env.store.Peek(ctx, b, l.Head, 10); err != nil || n != 0 {
				t.Errorf("bucket %d: %d messages above head %d (%v)", b, n, l.Head, err)
			}
		}
	}
	return r, env
}

func first(s []string) []string { return s[:min(3, len(s))] }

// bumpVersion is the business item: version = expected+1 if version = expected.
func (e *env) bumpVersion(agg string, expected int64) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(e.business),
		Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: agg}},
		UpdateExpression:          aws.String("SET #v = :next"),
		ConditionExpression:       aws.String("#v = :expected"),
		ExpressionAttributeNames:  map[string]string{"#v": "version"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":next": num(expected + 1), ":expected": num(expected)},
	}}
}

func (e *env) readVersion(ctx context.Context, agg string) (int64, error) {
	out, err := e.dynamo.Client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(e.business),
		Key:            map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: agg}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return 0, fmt.Errorf("read aggregate %s: %w", agg, err)
	}
	v, ok := out.Item["version"].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("aggregate %s has no version", agg)
	}
	return strconv.ParseInt(v.Value, 10, 64)
}

func num(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// notSent reports whether a Write failed before it sent any transaction
// (the writer says so: Attempts 0), so that nothing of it was written.
func notSent(err error) bool {
	var te *dynamo.TransactionError
	return errors.As(err, &te) && te.Attempts == 0
}
