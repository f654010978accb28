package lambdakafka

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// env: an inbox table and a log of what the callback applied, per key.
type env struct {
	ib *inbox.Inbox

	mu      sync.Mutex
	applied map[string][]int64 // key → sequences applied, in order
	skipped int
	failing atomic.Bool // the callback fails on key "k1", sequence 2
	calls   atomic.Int64
}

func newEnv(t *testing.T, opts ...inbox.Option) *env {
	t.Helper()
	d := testenv.DynamoDB(t)
	table := testenv.Name(t, "inbox")
	if err := inbox.CreateTable(ctxT(t), d.Client, table); err != nil {
		t.Fatal(err)
	}
	e := &env{applied: map[string][]int64{}}
	ib, err := inbox.New(ctxT(t), d.Client, table, append(opts, inbox.WithMetrics(metrics{e}))...)
	if err != nil {
		t.Fatal(err)
	}
	e.ib = ib
	return e
}

// fn is the callback: it adds nothing (the read model is the inbox's
// reports of what it applied, kept by metrics), and fails on k1's
// sequence 2 while failing is set.
func (e *env) fn(tx *inbox.Tx) error {
	e.calls.Add(1)
	m := tx.Message()
	if e.failing.Load() && string(tx.Record().Key) == "k1" && m.Sequence == 2 {
		return errors.New("downstream unavailable")
	}
	return nil
}

// metrics collects what was applied from the inbox's reports.
type metrics struct{ e *env }

func (m metrics) Processed(r inbox.Result, _ error) {
	m.e.mu.Lock()
	defer m.e.mu.Unlock()
	if r.Status == inbox.Skipped {
		m.e.skipped++
	}
	if r.Status != inbox.Applied {
		return
	}
	k := "k" + strconv.Itoa(int(r.Message.Partition))
	m.e.applied[k] = append(m.e.applied[k], r.Message.Sequence)
}

// record is a Kafka event record as the mapping sends it: base64 key and
// value, headers as signed byte arrays.
func record(topic string, partition, offset int64, key string, seq int64) events.KafkaRecord {
	hs := []map[string]events.JSONNumberBytes{
		{outbox.DefaultMessageIDHeader: events.JSONNumberBytes("id-" + key + "-" + strconv.FormatInt(seq, 10))},
		{outbox.DefaultBucketHeader: events.JSONNumberBytes(strconv.Itoa(int(partition)))},
		{outbox.DefaultSequenceHeader: events.JSONNumberBytes(strconv.FormatInt(seq, 10))},
	}
	return events.KafkaRecord{Topic: topic, Partition: partition, Offset: offset, TimestampType: "CREATE_TIME",
		Key: base64.StdEncoding.EncodeToString([]byte(key)), Value: base64.StdEncoding.EncodeToString([]byte(`{"n":1}`)), Headers: hs}
}

// event builds a Kafka event and sends it through its JSON form, as the
// mapping delivers it.
func event(t *testing.T, recs ...events.KafkaRecord) events.KafkaEvent {
	t.Helper()
	ev := events.KafkaEvent{EventSource: "aws:kafka", Records: map[string][]events.KafkaRecord{}}
	for _, r := range recs {
		k := r.Topic + "-" + strconv.Itoa(int(r.Partition))
		ev.Records[k] = append(ev.Records[k], r)
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var out events.KafkaEvent
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func batch(t *testing.T) events.KafkaEvent {
	var recs []events.KafkaRecord
	for p := range int64(2) {
		for i := range int64(3) {
			recs = append(recs, record("orders", p, 10+i, "k"+strconv.Itoa(int(p)), i+1))
		}
	}
	return event(t, recs...)
}

// A record that fails stops its partition: with ReportBatchItemFailures the
// response names it (and only its partition), the records after it are
// not processed; the mapping's redelivery from it applies the rest once,
// in order. Without the option the invocation fails, and the whole batch
// delivered again applies each record once.
func TestAFailedRecordStopsItsPartition(t *testing.T) {
	for _, partial := range []bool{true, false} {
		t.Run("partial="+strconv.FormatBool(partial), func(t *testing.T) {
			e := newEnv(t, inbox.InOrder())
			h, err := inbox.NewHandler(e.ib, e.fn, inbox.RecordRetries(0, time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			var opts []Option
			if partial {
				opts = append(opts, ReportBatchItemFailures())
			}
			f, err := New(h, opts...)
			if err != nil {
				t.Fatal(err)
			}
			e.failing.Store(true)
			ev := batch(t)
			resp, err := f.Handle(ctxT(t), ev)
			want := []BatchItemFailure{{ItemIdentifier{Partition: "orders-1", Offset: 11}}}
			var npe *NotProcessedError
			switch {
			case partial && (err != nil || !slices.Equal(resp.BatchItemFailures, want)):
				t.Fatalf("Handle = %+v, %v; want failures %+v", resp, err, want)
			case !partial && (!errors.As(err, &npe) || !slices.Equal(npe.Failures, want)):
				t.Fatalf("Handle = %+v, %v; want a *NotProcessedError naming %+v", resp, err, want)
			}
			if got := e.applied["k1"]; !slices.Equal(got, []int64{1}) {
				t.Fatalf("partition 1 applied %v, want [1]: nothing after the failed record", got)
			}
			// The mapping delivers again: from the failed record
			// (partial), or the whole batch.
			e.failing.Store(false)
			again := ev
			if partial {
				again = event(t, ev.Records["orders-1"][1:]...)
			}
			resp, err = f.Handle(ctxT(t), again)
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("redelivery: %+v, %v", resp, err)
			}
			if b, _ := json.Marshal(resp); string(b) != `{"batchItemFailures":[]}` {
				t.Fatalf("a successful response is %s", b)
			}
			for _, k := range []string{"k0", "k1"} {
				if got := e.applied[k]; !slices.Equal(got, []int64{1, 2, 3}) {
					t.Errorf("%s applied %v, want [1 2 3]", k, got)
				}
			}
		})
	}
}

// The response's JSON is what the Kafka mapping reads.
func TestResponseJSON(t *testing.T) {
	b, err := json.Marshal(Response{BatchItemFailures: []BatchItemFailure{{ItemIdentifier{Partition: "orders-3", Offset: 42}}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"batchItemFailures":[{"itemIdentifier":{"partition":"orders-3","offset":42}}]}`; string(b) != want {
		t.Fatalf("%s, want %s", b, want)
	}
}

// The event fixture (testdata/event.json, in the mapping's format) decodes
// into the records the inbox reads: base64 key and value, signed-byte
// headers in order.
func TestRecordFromFixture(t *testing.T) {
	b, err := os.ReadFile("testdata/event.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev events.KafkaEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	r, err := Record(ev.Records["orders-0"][0])
	if err != nil {
		t.Fatal(err)
	}
	m, err := inbox.Parse(r, outbox.HeaderNames{})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Key) != "order-1" || string(r.Value) != `{"type":"OrderPlaced"}` || m.ID != "0192f0a4-5b6c-7d8e-9f00-112233445566" ||
		m.Bucket != 3 || m.Sequence != 7 || r.Offset != 15 || r.Partition != 0 || string(r.Headers[0].Value) != "\xff\x00" {
		t.Fatalf("record %+v, message %+v", r, m)
	}
}

// A record whose value is not base64 goes to the poison policy; a deadline
// too close starts nothing and reports every partition's first record.
func TestPoisonAndDeadline(t *testing.T) {
	e := newEnv(t)
	h, err := inbox.NewHandler(e.ib, e.fn, inbox.OnPoison(inbox.Skip()))
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(h, ReportBatchItemFailures())
	if err != nil {
		t.Fatal(err)
	}
	bad := record("orders", 0, 5, "k0", 1)
	bad.Value = "not base64!"
	resp, err := f.Handle(ctxT(t), event(t, bad, record("orders", 0, 6, "k0", 2)))
	if err != nil || len(resp.BatchItemFailures) != 0 || e.skipped != 1 || e.calls.Load() != 1 {
		t.Fatalf("Handle = %+v, %v; skipped %d, callback calls %d; want the bad record skipped, the next applied", resp, err, e.skipped, e.calls.Load())
	}

	ctx, cancel := context.WithTimeout(ctxT(t), DefaultDeadlineMargin/2)
	defer cancel()
	resp, err = f.Handle(ctx, batch(t))
	want := []BatchItemFailure{{ItemIdentifier{"orders-0", 10}}, {ItemIdentifier{"orders-1", 10}}}
	if err != nil || !slices.Equal(resp.BatchItemFailures, want) {
		t.Fatalf("near the deadline: %+v, %v; want %+v", resp, err, want)
	}
}

func TestNewRefuses(t *testing.T) {
	var oe *outbox.OptionError
	if _, err := New(nil); !errors.As(err, &oe) || oe.Option != "h" {
		t.Fatalf("New(nil) = %v", err)
	}
	e := newEnv(t)
	h, err := inbox.NewHandler(e.ib, e.fn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(h, DeadlineMargin(-time.Second)); !errors.As(err, &oe) || oe.Option != "DeadlineMargin" {
		t.Fatalf("New(DeadlineMargin(-1s)) = %v", err)
	}
}
