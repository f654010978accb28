package integration_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/checker"
	"github.com/dynakafka/outbox/store/dynamo"
)

// settleRebucket waits until every committed message was consumed (and a
// little longer, for late duplicates), stops the consumer, and returns the
// checker's verdict and the config item.
func (e *env) settleRebucket(ctx context.Context, t *testing.T, chk *checker.Checker, stopConsumer func(), consumed <-chan struct{}) (checker.Result, outbox.Config) {
	t.Helper()
	waitDelivered(t, chk, 5*time.Minute)
	time.Sleep(300 * time.Millisecond)
	stopConsumer()
	<-consumed
	c, err := dynamo.ReadConfig(ctx, e.dynamo.Client, e.tables)
	if err != nil {
		t.Fatal(err)
	}
	return chk.Result(), c
}

// BucketCount changes 8 → 16 → 12 online while writers write and the relay
// runs as deployed (stream → event-source mapping → relay handler → Kafka):
// no committed message is lost, every key's messages are consumed in the
// order its writer committed them, and writers only pause (docs/design.md
// §13). One stream shard hands the relay its hints in commit order, which
// hides a change that does not wait for the drain (the mutation passes
// here): store/dynamo's TestChangeBucketCountOnline and
// TestRebucketWhileWritersAndRelayRun, which drain new buckets first, and
// the simulator catch it.
func TestRebucketWhileWritersAndRelayRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	chk := checker.New()
	relay := e.relayBehindMapping(ctx, t, chk)
	cctx, stopConsumer := context.WithCancel(ctx)
	consumed := e.checkDelivery(cctx, t, chk)

	var (
		stop atomic.Bool
		wg   sync.WaitGroup
		// spans: every committed write's and every change's [start, end];
		// the longest write that overlapped a change is what a change
		// costs a writer, beside the longest other one (the machine).
		spansMu         sync.Mutex
		writes, changed [][2]time.Time
	)
	span := func(to *[][2]time.Time, start time.Time) {
		spansMu.Lock()
		*to = append(*to, [2]time.Time{start, time.Now()})
		spansMu.Unlock()
	}
	for w := range 4 {
		wg.Go(func() {
			order := map[string]int64{}
			for i := 0; !stop.Load(); i++ {
				key := fmt.Sprintf("w%d-k%d", w, i%6)
				order[key]++
				m := outbox.Message{ID: outbox.NewID(), Topic: e.topic, Key: []byte(key), Value: []byte(fmt.Sprint(order[key]))}
				start := time.Now()
				if _, err := e.writer.Write(ctx, nil, m); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				span(&writes, start)
				chk.Committed(m.ID, key, order[key])
			}
		})
	}
	changes := 0
	for _, to := range []int{16, 12} {
		time.Sleep(1500 * time.Millisecond)
		cstart := time.Now()
		res, err := dynamo.ChangeBucketCount(ctx, e.dynamo.Client, e.tables, to, dynamo.ChangeTimeout(2*time.Minute))
		span(&changed, cstart)
		if err != nil {
			t.Fatalf("change to %d: %v", to, err)
		}
		changes++
		t.Logf("BucketCount %d → %d at epoch %d: flip and cut %v, old epoch watched %v (ended %v)", res.From, res.To, res.Epoch,
			res.Flip.Round(time.Millisecond), res.Watched.Round(time.Millisecond), res.Ended)
	}
	time.Sleep(1500 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	r, c := e.settleRebucket(ctx, t, chk, stopConsumer, consumed)
	during, outside := longestWrites(writes, changed)
	t.Logf("rebucket: changes=%d committed=%d lost=%d order_violations=%d longest_write_during_change_ms=%d longest_write_outside_ms=%d (duplicates=%d unexplained=%d bucket_count=%d epoch=%d relay_count=%d)",
		changes, r.Committed, r.Lost, r.OrderViolations, during.Milliseconds(), outside.Milliseconds(), r.Duplicates, r.Unexplained, c.BucketCount, c.BucketEpoch, relay.BucketCount())
	if !r.OK() || changes != 2 || c.BucketCount != 12 || c.BucketEpoch != 2 || r.Committed == 0 {
		t.Fatalf("result %+v, config %+v", r, c)
	}
	if relay.BucketCount() != 12 && relay.BucketCount() != 16 {
		t.Errorf("the relay never learnt of the new buckets: it has %d", relay.BucketCount())
	}
}

// longestWrites returns the longest of writes that overlapped one of
// changes, and the longest other one.
func longestWrites(writes, changes [][2]time.Time) (during, outside time.Duration) {
	for _, w := range writes {
		d := w[1].Sub(w[0])
		if slices.ContainsFunc(changes, func(c [2]time.Time) bool { return w[0].Before(c[1]) && c[0].Before(w[1]) }) {
			during = max(during, d)
		} else {
			outside = max(outside, d)
		}
	}
	return during, outside
}
