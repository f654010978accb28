package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// printer is a Publisher that prints what it would produce.
type printer struct{}

func (printer) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	for _, m := range msgs {
		fmt.Printf("%s key=%s value=%s (bucket %d, sequence %d)\n", m.Topic, m.Key, m.Value, m.Bucket, m.Sequence)
	}
	return len(msgs), nil
}

// A relay drains one bucket in sequence order. In production the store is
// store/dynamo and the publisher kafka.Publisher; lambda/relay wires them.
func ExampleRelay_DrainBucket() {
	ctx := context.Background()
	store := memory.New(outbox.DefaultBucketCount)
	key := []byte("order-42")
	bucket := outbox.BucketForKey(key, outbox.DefaultBucketCount)
	for i, event := range []string{"placed", "paid", "shipped"} {
		_ = store.Put(outbox.Message{ID: outbox.NewID(), Bucket: bucket, Sequence: int64(i + 1),
			Topic: "orders", Key: key, Value: []byte(event)})
	}
	rl, err := relay.New(ctx, store, printer{})
	if err != nil {
		panic(err)
	}
	stats, err := rl.DrainBucket(ctx, bucket)
	fmt.Println(stats.Published, "published; error:", err)
	// Output:
	// orders key=order-42 value=placed (bucket 0, sequence 1)
	// orders key=order-42 value=paid (bucket 0, sequence 2)
	// orders key=order-42 value=shipped (bucket 0, sequence 3)
	// 3 published; error: <nil>
}

// Keys map to buckets with Kafka's murmur2 hash, so a writer in any language
// computes the same bucket (testdata/bucket_vectors.json has vectors).
func ExampleBucketForKey() {
	fmt.Println(outbox.BucketForKey([]byte("order-42"), 8), outbox.BucketForKey([]byte{}, 8))
	// Output: 0 1
}

// A sweep finds the buckets with pending messages (one bounded read per
// bucket, no scan), drains them within this relay's share, and reports the
// backlog. The sweeper Lambda runs one per minute; lambda/sweeper wires it.
func ExampleRelay_Sweep() {
	ctx := context.Background()
	store := memory.New(outbox.DefaultBucketCount)
	key := []byte("order-42")
	bucket := outbox.BucketForKey(key, outbox.DefaultBucketCount)
	for i, event := range []string{"placed", "paid"} {
		if err := store.Put(outbox.Message{ID: outbox.NewID(), Bucket: bucket, Sequence: int64(i + 1),
			Topic: "orders", Key: key, Value: []byte(event)}); err != nil {
			log.Fatal(err)
		}
	}
	rl, err := relay.New(ctx, store, printer{})
	if err != nil {
		log.Fatal(err)
	}
	rep, err := rl.Sweep(ctx)
	if err != nil {
		log.Fatal(err) // e.g. a *outbox.BucketRangeError: a writer uses another BucketCount
	}
	fmt.Printf("pending %d in buckets %v; drained %v; failed %d\n", rep.Pending, rep.Ready, rep.Drained, len(rep.Errors))
	// Output:
	// orders key=order-42 value=placed (bucket 0, sequence 1)
	// orders key=order-42 value=paid (bucket 0, sequence 2)
	// pending 2 in buckets [0]; drained [0]; failed 0
}

// Run sweeps every PollInterval until its context ends: a long-running relay
// for a container or a test, where no stream wakes it. A service would end
// the context on SIGTERM (signal.NotifyContext); here it ends once the
// message is published and deleted.
func ExampleRelay_Run() {
	store := memory.New(outbox.DefaultBucketCount)
	key := []byte("order-7")
	bucket := outbox.BucketForKey(key, outbox.DefaultBucketCount)
	if err := store.Put(outbox.Message{ID: outbox.NewID(), Bucket: bucket, Sequence: 1,
		Topic: "orders", Key: key, Value: []byte("placed")}); err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	rl, err := relay.New(ctx, store, printer{}, relay.PollInterval(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()
	for store.Count(bucket) > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	switch err := <-done; {
	case errors.Is(err, context.Canceled):
		fmt.Println("stopped")
	default:
		log.Fatal(err) // a *outbox.BucketRangeError: a writer uses another BucketCount
	}
	// Output:
	// orders key=order-7 value=placed (bucket 1, sequence 1)
	// stopped
}
