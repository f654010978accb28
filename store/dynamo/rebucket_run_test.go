package dynamo

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
)

// seqPublisher acknowledges everything and checks, per key, that values
// (a writer's counter for the key) arrive in increasing order.
type seqPublisher struct {
	mu         sync.Mutex
	last       map[string]int
	seen       map[string]bool // key/value published
	violations int
	duplicates int
}

func (p *seqPublisher) Publish(_ context.Context, msgs []outbox.Message) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		k, v := string(m.Key), 0
		v, _ = strconv.Atoi(string(m.Value))
		id := k + "/" + string(m.Value)
		switch {
		case p.seen[id]:
			p.duplicates++ // a redelivery, which consumers drop: not an order violation
		case v < p.last[k]:
			p.violations++
		default:
			p.last[k] = v
		}
		p.seen[id] = true
	}
	return len(msgs), nil
}

// TestRebucketWhileWritersAndRelayRun changes BucketCount 8 → 16 → 12 while
// writers write and a relay drains, and checks that no committed message is
// lost, that every key's messages are published in the order its writer
// committed them, and how long writers paused.
func TestRebucketWhileWritersAndRelayRun(t *testing.T) {
	e := newEnv(t, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pub := &seqPublisher{last: map[string]int{}, seen: map[string]bool{}}
	r, err := relay.New(ctx, e.store, pub, relay.GapTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The relay: drains every bucket it knows of, over and over, all at
	// once (as the relay function does, bounded by MaxInFlight), newest
	// buckets started first (the order most likely to break per-key
	// order): a new bucket held by the gate waits while the old ones drain.
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		for relayCtx.Err() == nil {
			var round sync.WaitGroup
			for b := 15; b >= 0; b-- {
				round.Go(func() {
					r.DrainBucket(relayCtx, b) // errors: a bucket beyond the count, a held lease, the gate; the next round retries
				})
			}
			round.Wait()
		}
	}()
	const writers, keysPerWriter = 4, 6
	var (
		committed atomic.Int64
		maxPause  atomic.Int64 // ns
		mu        sync.Mutex
		written   = map[string]bool{}
		failed    []error
		stop      atomic.Bool
		wg        sync.WaitGroup
	)
	for i := range writers {
		w, err := NewWriter(ctx, e.d.Client, e.tables)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for n := 1; !stop.Load(); n++ {
				for k := range keysPerWriter {
					key := fmt.Sprintf("w%d-k%d", i, k)
					start := time.Now()
					_, err := w.Write(ctx, nil, outbox.Message{Topic: "orders", Key: []byte(key), Value: []byte(strconv.Itoa(n))})
					if err != nil {
						mu.Lock()
						failed = append(failed, fmt.Errorf("writer %d: %w", i, err))
						mu.Unlock()
						return
					}
					d := int64(time.Since(start))
					for cur := maxPause.Load(); d > cur && !maxPause.CompareAndSwap(cur, d); cur = maxPause.Load() {
					}
					committed.Add(1)
					mu.Lock()
					written[key+"/"+strconv.Itoa(n)] = true
					mu.Unlock()
				}
			}
		})
	}
	changes := 0
	for _, to := range []int{16, 12} {
		time.Sleep(time.Second)
		res, err := ChangeBucketCount(ctx, e.d.Client, e.tables, to, ChangeTimeout(time.Minute))
		if err != nil {
			t.Fatalf("change to %d: %v", to, err)
		}
		changes++
		t.Logf("changed %d → %d at epoch %d: flip and cut %v, old epoch drained in %v (ended %v)", res.From, res.To, res.Epoch,
			res.Flip.Round(time.Millisecond), res.Watched.Round(time.Millisecond), res.Ended)
	}
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()
	if len(failed) > 0 {
		stopRelay()
		<-relayDone
		e.skipUnlessIsolated(t, failed)
	}
	for _, err := range failed {
		t.Error(err)
	}
	// Let the relay publish the rest.
	deadline := time.Now().Add(time.Minute)
	for {
		pub.mu.Lock()
		lost := 0
		for id := range written {
			if !pub.seen[id] {
				lost++
			}
		}
		pub.mu.Unlock()
		if lost == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopRelay()
	<-relayDone
	pub.mu.Lock()
	defer pub.mu.Unlock()
	lost := 0
	for id := range written {
		if !pub.seen[id] {
			lost++
		}
	}
	c := storedConfig(t, e.d.Client, e.tables)
	t.Logf("rebucket: changes=%d committed=%d lost=%d order_violations=%d longest_write_ms=%d (duplicates=%d, bucket_count=%d epoch=%d)",
		changes, committed.Load(), lost, pub.violations, time.Duration(maxPause.Load()).Milliseconds(), pub.duplicates, c.BucketCount, c.BucketEpoch)
	fmt.Printf("rebucket: changes=%d committed=%d lost=%d order_violations=%d longest_write_ms=%d\n",
		changes, committed.Load(), lost, pub.violations, time.Duration(maxPause.Load()).Milliseconds())
	if lost != 0 || pub.violations != 0 || changes != 2 || c.BucketCount != 12 || c.BucketEpoch != 2 || committed.Load() == 0 {
		t.Fatalf("lost=%d order_violations=%d changes=%d config=%+v", lost, pub.violations, changes, c)
	}
}
