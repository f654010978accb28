package replay_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/replay"
	"github.com/dynakafka/outbox/store/memory"
)

// printer is a publisher that prints what it would produce.
type printer struct{}

func (printer) Publish(_ context.Context, msgs []outbox.Message) (int, error) {
	for _, m := range msgs {
		fmt.Printf("publish bucket %d sequence %d: %s\n", m.Bucket, m.Sequence, m.Value)
	}
	return len(msgs), nil
}

// Publish sequences 2..4 of bucket 0 again, after the relay published 1..5.
// With DynamoDB the store is a *dynamo.Store and the publisher the relay's
// *kafka.Publisher.
func ExampleRange() {
	ctx := context.Background()
	mem := memory.New(1)
	for seq := int64(1); seq <= 5; seq++ {
		_ = mem.Put(outbox.Message{ID: outbox.NewID(), Sequence: seq, Topic: "orders", Value: fmt.Appendf(nil, "event %d", seq)})
	}
	l, _ := mem.Acquire(ctx, 0, "relay", t0, time.Minute)
	_, _ = mem.Release(ctx, l, 5, 5) // as a watermark relay leaves it: head 5, messages kept
	st, err := replay.Range(ctx, watermark{mem}, printer{}, 0, 2, 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("replayed %d (sequences %d..%d)\n", st.Published, st.First, st.Last)
	// Output:
	// publish bucket 0 sequence 2: event 2
	// publish bucket 0 sequence 3: event 3
	// publish bucket 0 sequence 4: event 4
	// replayed 3 (sequences 2..4)
}
