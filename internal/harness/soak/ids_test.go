package soak

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dynakafka/outbox"
)

// produceIDs must find every message id in real produce requests, compressed
// or not, so that a REQUEST_TIMED_OUT fault attributes what it can duplicate.
func TestProduceIDs(t *testing.T) {
	for _, codec := range []kgo.CompressionCodec{kgo.NoCompression(), kgo.Lz4Compression()} {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
		if err != nil {
			t.Fatal(err)
		}
		seen := make(chan []string, 10)
		c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			seen <- produceIDs(req)
			return nil, nil, false
		})
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		var recs []*kgo.Record
		for i := range 20 {
			id := outbox.NewID()
			want = append(want, id)
			recs = append(recs, &kgo.Record{Topic: "t", Value: []byte(fmt.Sprint("v", i)),
				Headers: []kgo.RecordHeader{{Key: "x", Value: []byte("y")}, {Key: outbox.DefaultMessageIDHeader, Value: []byte(id)}}})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		cancel()
		cl.Close()
		c.Close()
		var got []string
		for len(seen) > 0 {
			got = append(got, <-seen...)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%v: ids %v, want %v", codec, got, want)
		}
	}
}
