package esm

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// BenchmarkPutToInvoke measures, on DynamoDB Local, the time from a PutItem
// to the function being invoked with that item. Puts land at a random phase
// of the poll cycle, as in a quiet production table, so the mean includes
// half a poll interval on average.
func BenchmarkPutToInvoke(b *testing.B) {
	for _, poll := range []time.Duration{250 * time.Millisecond, 10 * time.Millisecond} {
		b.Run("poll="+poll.String(), func(b *testing.B) {
			d := testenv.DynamoDB(b)
			ctx := context.Background()
			table := testenv.Name(b, "esm-bench")
			arn := messagesTable(ctx, b, d.Client, table)
			got := make(chan struct{}, 16)
			m, err := New(d.Streams, arn, InProcess(func(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
				for range ev.Records {
					got <- struct{}{}
				}
				return events.DynamoDBEventResponse{}, nil
			}), PollInterval(poll))
			if err != nil {
				b.Fatal(err)
			}
			run(b, m)
			s := 0
			for b.Loop() {
				b.StopTimer()
				time.Sleep(rand.N(poll))
				s++
				b.StartTimer()
				if _, err := d.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: messageKey(1, s)}); err != nil {
					b.Fatal(err)
				}
				select {
				case <-got:
				case <-time.After(10 * time.Second):
					b.Fatal("the item did not arrive within 10s")
				}
			}
		})
	}
}

// BenchmarkBacklog measures how fast a mapping delivers a backlog of items
// already in a DynamoDB Local stream (what the demo's relay sees after a
// burst of writes), in records per second.
func BenchmarkBacklog(b *testing.B) {
	const items = 1000
	d := testenv.DynamoDB(b)
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		table := testenv.Name(b, "esm-backlog")
		arn := messagesTable(ctx, b, d.Client, table)
		for first := 1; first <= items; first += 25 {
			var reqs []ddbtypes.WriteRequest
			for s := first; s < first+25 && s <= items; s++ {
				reqs = append(reqs, ddbtypes.WriteRequest{PutRequest: &ddbtypes.PutRequest{Item: messageKey(2, s)}})
			}
			if _, err := d.Client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddbtypes.WriteRequest{table: reqs}}); err != nil {
				b.Fatal(err)
			}
		}
		done := make(chan struct{})
		var delivered atomic.Int64
		m, err := New(d.Streams, arn, InProcess(func(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			if delivered.Add(int64(len(ev.Records))) == items {
				close(done)
			}
			return events.DynamoDBEventResponse{}, nil
		}))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		stop := run(b, m)
		select {
		case <-done:
		case <-time.After(time.Minute):
			b.Fatalf("%d of %d delivered after a minute", delivered.Load(), items)
		}
		b.StopTimer()
		stop()
		b.StartTimer()
	}
	b.ReportMetric(float64(items*b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkMappingOverhead measures the mapping's own cost per record
// (building events, the JSON round trip of InProcess, batching) on an
// in-memory stream with a function that does nothing.
func BenchmarkMappingOverhead(b *testing.B) {
	const records = 10_000
	for b.Loop() {
		b.StopTimer()
		f := newFakeStreams("s")
		f.inserts("s", records)
		f.close("s")
		m, err := New(f, fakeARN, InProcess(func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			return events.DynamoDBEventResponse{}, nil
		}), fast()...)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		stop := run(b, m)
		waitFor(b, "the backlog", func() bool { return m.Stats().ShardsExhausted == 1 })
		b.StopTimer()
		stop()
		b.StartTimer()
	}
	b.ReportMetric(float64(records*b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkRIEInvoke measures a warm invocation of a real bootstrap under the
// emulator with a batch of 100 KEYS_ONLY records (the default BatchSize).
func BenchmarkRIEInvoke(b *testing.B) {
	p, _ := startEcho(b)
	recs := make([]events.DynamoDBEventRecord, 0, 100)
	for i := range 100 {
		ev, err := BuildEvent(outboxStream, echoRecord(i, ""))
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, ev.Records...)
	}
	ev := events.DynamoDBEvent{Records: recs}
	ctx := context.Background()
	if _, err := p.Invoke(ctx, ev); err != nil { // the cold start
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := p.Invoke(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
}
