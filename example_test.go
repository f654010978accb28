package outbox_test

import (
	"context"
	"fmt"

	"github.com/dynakafka/outbox"
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
	relay, err := outbox.NewRelay(ctx, store, printer{})
	if err != nil {
		panic(err)
	}
	stats, err := relay.DrainBucket(ctx, bucket)
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
