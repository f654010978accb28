package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// decodeApply is a callback that decodes the record's JSON value first: a
// value it cannot decode is a permanent error.
func (e *env) decodeApply(tx *Tx) error {
	var v struct {
		N int `json:"n"`
	}
	if err := json.Unmarshal(tx.Record().Value, &v); err != nil {
		return Permanent(fmt.Errorf("decode order event: %w", err))
	}
	return e.apply(tx)
}

// poisonedBatch is 100 good records with JSON values over 10 keys, and
// among them a record not from the outbox (no stamped headers, at index
// 30) and one the callback cannot decode (valid headers, at index 70).
func poisonedBatch(topic string) (recs []*kgo.Record, want produced) {
	want = produced{}
	seq := map[int]int64{}
	good := 0
	for i := range 102 {
		switch i {
		case 30:
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte("stranger"), Value: []byte(`{"n":1}`),
				Headers: []kgo.RecordHeader{{Key: "source", Value: []byte("another service")}}})
			continue
		case 70:
			r := rec(topic, 0, 0, "key-bad", outbox.NewID(), 0, 1)
			r.Value = []byte("not json")
			recs = append(recs, r)
			continue
		}
		key := fmt.Sprintf("key-%02d", good%10)
		good++
		b := outbox.BucketForKey([]byte(key), partitions)
		seq[b]++
		want[key] = append(want[key], seq[b])
		r := rec(topic, 0, 0, key, outbox.NewID(), b, seq[b])
		r.Value = []byte(`{"n":` + strconv.Itoa(i) + `}`)
		recs = append(recs, r)
	}
	return recs, want
}

// The done-when: with the dead-letter policy, a consumer given 1
// foreign and 1 undecodable record among 100 good ones applies the 100,
// dead-letters the 2 with their coordinates and error, and keeps going.
func TestConsumerDeadLettersPoison(t *testing.T) {
	for _, sinkKind := range []string{"topic", "table"} {
		t.Run(sinkKind, func(t *testing.T) {
			e := newEnv(t)
			k := testenv.Kafka(t)
			topic, dlq, group := testenv.Name(t, "orders"), testenv.Name(t, "orders-dlq"), testenv.Name(t, "group")
			testenv.CreateTopic(t, k, topic, 2)
			testenv.CreateTopic(t, k, dlq, 1)
			var sink DeadLetterSink = DeadLetterTopic(dlq, nil)
			dlTable := testenv.Name(t, "dlq")
			if sinkKind == "table" {
				if err := CreateTable(ctxT(t), e.d.Client, dlTable); err != nil {
					t.Fatal(err)
				}
				sink = DeadLetterTable(e.d.Client, dlTable)
			}
			recs, want := poisonedBatch(topic)
			cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if err := cl.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}

			tl := newTally()
			c, err := NewConsumer(e.inbox(t, nil, WithMetrics(tl)), e.decodeApply,
				ClientOptions(kgo.SeedBrokers(k.Brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(50*time.Millisecond)),
				MaxPollRecords(50), OnPoison(DeadLetterTo(sink)))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(ctxT(t))
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			stopped := 0
			var runErr error
		wait:
			for deadline := time.Now().Add(time.Minute); tl.count(Applied)+tl.count(DeadLettered) < 102; time.Sleep(20 * time.Millisecond) {
				select {
				case runErr = <-done:
					stopped = 1
					break wait
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("timed out: %s dead_lettered=%d", tl, tl.count(DeadLettered))
				}
			}
			cancel()
			if stopped == 0 {
				runErr = <-done
			}
			line := fmt.Sprintf("inbox-poison: applied=%d dead_lettered=%d stopped=%d", tl.count(Applied), tl.count(DeadLettered), stopped)
			fmt.Printf("%s sink=%s\n", line, sinkKind)
			if err := errors.Join(runErr, c.Close()); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if line != "inbox-poison: applied=100 dead_lettered=2 stopped=0" {
				t.Fatal(line)
			}
			e.checkReadModel(t, want)
			if n, _ := e.applied(t, "key-bad"); n != 0 {
				t.Errorf("the undecodable record was applied %d times", n)
			}

			// What was dead-lettered: the two records, with their error and
			// coordinates, and the original key, value and headers.
			var letters []deadLetterSeen
			if sinkKind == "topic" {
				letters = readDeadLetterTopic(t, k, dlq)
			} else {
				letters = readDeadLetterTable(t, e, dlTable, topic, recs)
			}
			if len(letters) != 2 {
				t.Fatalf("%d dead letters, want 2: %+v", len(letters), letters)
			}
			for _, d := range letters {
				switch string(d.key) {
				case "stranger":
					if d.value != `{"n":1}` || d.headers["source"] != "another service" || !strings.Contains(d.err, "x-outbox-message-id") {
						t.Errorf("foreign record's dead letter: %+v", d)
					}
				case "key-bad":
					if d.value != "not json" || d.headers[outbox.DefaultMessageIDHeader] == "" || !strings.Contains(d.err, "decode order event") {
						t.Errorf("undecodable record's dead letter: %+v", d)
					}
				default:
					t.Errorf("dead letter of a good record: %+v", d)
				}
				if d.topic != topic || d.offset < 0 || d.partition < 0 {
					t.Errorf("dead letter's source: %+v", d)
				}
			}

			// Everything was committed: a fresh consumer of the group gets
			// nothing (nor does the group stop on the poison again).
			tl2 := newTally()
			stop := runConsumer(t, k, e.inbox(t, nil, WithMetrics(tl2)), e.decodeApply, group, topic)
			time.Sleep(500 * time.Millisecond)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if n := tl2.total(); n != 0 {
				t.Fatalf("a fresh consumer of the group processed %d records after the poison was committed: %s", n, tl2)
			}
		})
	}
}

type deadLetterSeen struct {
	key, value, err string
	topic           string
	partition       int64
	offset          int64
	headers         map[string]string
}

func bytesOf(av types.AttributeValue) []byte {
	if b, ok := av.(*types.AttributeValueMemberB); ok {
		return b.Value
	}
	return nil
}

func listOf(av types.AttributeValue) []map[string]types.AttributeValue {
	var out []map[string]types.AttributeValue
	if l, ok := av.(*types.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			if m, ok := v.(*types.AttributeValueMemberM); ok {
				out = append(out, m.Value)
			}
		}
	}
	return out
}

func readDeadLetterTopic(t *testing.T, k *testenv.KafkaCluster, dlq string) []deadLetterSeen {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []deadLetterSeen
	for _, r := range pollAll(t, cl, 2) {
		d := deadLetterSeen{key: string(r.Key), value: string(r.Value), headers: map[string]string{}}
		for _, h := range r.Headers {
			d.headers[h.Key] = string(h.Value)
		}
		d.err, d.topic = d.headers[DeadLetterErrorHeader], d.headers[DeadLetterTopicHeader]
		d.partition, _ = strconv.ParseInt(d.headers[DeadLetterPartitionHeader], 10, 32)
		d.offset, err = strconv.ParseInt(d.headers[DeadLetterOffsetHeader], 10, 64)
		if err != nil || d.headers[DeadLetterAtHeader] == "" || d.headers[DeadLetterAttemptsHeader] != "1" {
			t.Errorf("dead letter headers: %v", d.headers)
		}
		out = append(out, d)
	}
	return out
}

// readDeadLetterTable scans the table's dead-letter items.
func readDeadLetterTable(t *testing.T, e *env, table, topic string, recs []*kgo.Record) []deadLetterSeen {
	t.Helper()
	out, err := e.d.Client.Scan(ctxT(t), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	var seen []deadLetterSeen
	for _, it := range out.Items {
		d := deadLetterSeen{topic: stringOf(it[attrTopic]), partition: intOf(it[attrPart]), offset: intOf(it[attrOffset]),
			err: stringOf(it["err"]), headers: map[string]string{}}
		if pk := stringOf(it[attrPK]); pk != DeadLetterKey(d.topic, int32(d.partition), d.offset) {
			t.Errorf("dead letter key %s for %s/%d@%d", pk, d.topic, d.partition, d.offset)
		}
		d.key, d.value = string(bytesOf(it["k"])), string(bytesOf(it["val"]))
		for _, h := range listOf(it["h"]) {
			d.headers[stringOf(h["k"])] = string(bytesOf(h["v"]))
		}
		seen = append(seen, d)
	}
	return seen
}

// Handler's policies without Kafka: what each does with a foreign record,
// a permanent and a transient callback error.
func TestHandlerPolicies(t *testing.T) {
	e := newEnv(t)
	topic := testenv.Name(t, "orders")
	foreign := &kgo.Record{Topic: topic, Offset: 1, Key: []byte("k")}
	transient := errors.New("downstream unavailable")
	for _, c := range []struct {
		name       string
		policy     Policy
		rec        *kgo.Record
		fnErr      error
		wantStatus Status
		wantErr    bool
		wantCalls  int64
	}{
		{"stop on a foreign record", Stop(), foreign, nil, Failed, true, 0},
		{"skip a foreign record", Skip(), foreign, nil, Skipped, false, 0},
		{"permanent: not retried, skipped", Skip(), nil, Permanent(errors.New("bad value")), Skipped, false, 1},
		{"transient: retried twice, then stop", Stop(), nil, transient, Failed, true, 3},
		{"transient: retried twice, then skipped", Skip(), nil, transient, Skipped, false, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			tl := newTally()
			var calls atomic.Int64
			fn := func(tx *Tx) error {
				calls.Add(1)
				if c.fnErr != nil {
					return c.fnErr
				}
				return e.apply(tx)
			}
			h, err := NewHandler(e.inbox(t, nil, WithMetrics(tl)), fn, OnPoison(c.policy), RecordRetries(2, time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			r := c.rec
			if r == nil {
				r = rec(topic, 0, 5, "key-00", outbox.NewID(), 0, 1)
			}
			st, err := h.Handle(ctxT(t), r)
			if st != c.wantStatus || (err != nil) != c.wantErr || calls.Load() != c.wantCalls {
				t.Fatalf("Handle = %v, %v after %d calls; want %v, error %v, %d calls", st, err, calls.Load(), c.wantStatus, c.wantErr, c.wantCalls)
			}
			if c.wantErr && c.fnErr != nil && !errors.Is(err, c.fnErr) {
				t.Fatalf("Handle's error %v does not wrap the callback's", err)
			}
			if got := tl.count(Skipped); got != map[bool]int{true: 1}[st == Skipped] {
				t.Fatalf("Skipped reported %d times", got)
			}
		})
	}
}

// The poison options are validated.
func TestPoisonOptionsRefused(t *testing.T) {
	e := newEnv(t)
	ib := e.inbox(t, nil)
	client := ClientOptions(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"))
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, c := range []struct {
		name     string
		consumer []ConsumerOption // NewConsumer's; nil: NewHandler's
		handler  []HandlerOption
		option   string
	}{
		{"two policies", []ConsumerOption{client, OnPoison(Skip()), OnPoison(Stop())}, nil, "OnPoison"},
		{"dead letter without a sink", []ConsumerOption{client, OnPoison(DeadLetterTo(nil))}, nil, "OnPoison"},
		{"dead-letter topic without a name", []ConsumerOption{client, OnPoison(DeadLetterTo(DeadLetterTopic("", nil)))}, nil, "DeadLetterTopic"},
		{"dead-letter table without a client", []ConsumerOption{client, OnPoison(DeadLetterTo(DeadLetterTable(nil, "dlq")))}, nil, "DeadLetterTable"},
		{"retries", []ConsumerOption{client, RecordRetries(11, time.Second)}, nil, "RecordRetries"},
		{"backoff", []ConsumerOption{client, RecordRetries(1, 0)}, nil, "RecordRetries"},
		{"handler with two policies", nil, []HandlerOption{OnPoison(Skip()), OnPoison(Stop())}, "OnPoison"},
		{"handler's dead-letter topic without a client", nil, []HandlerOption{OnPoison(DeadLetterTo(DeadLetterTopic("dlq", nil)))}, "DeadLetterTopic"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.consumer != nil {
				var co *Consumer
				if co, err = NewConsumer(ib, e.apply, c.consumer...); err == nil {
					co.Close()
				}
			} else {
				_, err = NewHandler(ib, e.apply, c.handler...)
			}
			var oe *outbox.OptionError
			if !errors.As(err, &oe) || oe.Option != c.option {
				t.Fatalf("= %v, want an *OptionError for %s", err, c.option)
			}
		})
	}
	if _, err := NewHandler(ib, e.apply, OnPoison(DeadLetterTo(DeadLetterTopic("dlq", cl)))); err != nil {
		t.Fatalf("a Handler with a dead-letter client: %v", err)
	}
}
