package integration_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/relay"
)

// setTopicLimit sets the topic's max.message.bytes (an operator lowering or
// raising it while the relay runs).
func (e *env) setTopicLimit(ctx context.Context, t *testing.T, bytes int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kafka.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	v := strconv.Itoa(bytes)
	resps, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v}}, e.topic)
	if err == nil {
		err = resps[0].Err
	}
	if err != nil {
		t.Fatalf("set max.message.bytes of %s: %v", e.topic, err)
	}
	// A real broker applies the change from the metadata log a moment
	// later: wait until it reports the new value.
	for deadline := time.Now().Add(30 * time.Second); ; {
		rc, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, e.topic)
		if err == nil && len(rc) == 1 {
			for _, c := range rc[0].Configs {
				if c.Key == "max.message.bytes" && c.Value != nil && *c.Value == v {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("max.message.bytes of %s is not %s after 30s (%v)", e.topic, v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// observed collects the consumer-observed order of the rows (by the label
// at the start of each value).
type observed struct {
	mu   sync.Mutex
	rows []string
}

func (o *observed) add(v []byte) {
	label, _, _ := bytes.Cut(v, []byte(":"))
	o.mu.Lock()
	o.rows = append(o.rows, string(label))
	o.mu.Unlock()
}

func (o *observed) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprint(o.rows)
}

// row is a labelled value of size random (incompressible) bytes: the topic
// limit applies to the compressed batch.
func row(label string, size int) []byte {
	b := make([]byte, size)
	_, _ = rand.Read(b)
	return append([]byte(label+":"), b...)
}

// The reference case: rows 1, 2, 3 of one key; row 1 is too large for the
// topic (its max.message.bytes was lowered after the relay started). What a
// consumer observes, under each publish mode and record-error policy, before
// and after the operator repairs the cause.
func TestOrderAfterPartialFailure(t *testing.T) {
	cases := []struct {
		mode          string
		policy        outbox.RecordErrorPolicy
		before, after string
	}{
		// Park: row 1 goes to the dead letters and 2, 3 follow; replaying
		// the repaired row 1 puts it at the tail, by design.
		{"default", outbox.Park, "[row2 row3]", "[row2 row3 row1]"},
		{"strict", outbox.Park, "[row2 row3]", "[row2 row3 row1]"},
		// Block: nothing after row 1 becomes visible; once the topic limit is
		// raised again, the bucket resumes in order.
		{"default", outbox.Block, "[]", "[row1 row2 row3]"},
		{"strict", outbox.Block, "[]", "[row1 row2 row3]"},
		// Transactional (kafka.TxnPublisher): the transaction that carried
		// 1, 2, 3 is aborted, so a read_committed consumer (e.consume) sees
		// 2, 3 once, after 1 is parked — never 2, 3, 1, 2, 3.
		{"txn", outbox.Park, "[row2 row3]", "[row2 row3 row1]"},
		{"txn-strict", outbox.Park, "[row2 row3]", "[row2 row3 row1]"},
		{"txn", outbox.Block, "[]", "[row1 row2 row3]"},
	}
	for _, c := range cases {
		t.Run(c.mode+"/"+c.policy.String(), func(t *testing.T) {
			e := newEnv(t, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			pub := outbox.Publisher(e.pub)
			switch c.mode {
			case "strict":
				sp, err := kafka.NewPublisher(ctx, e.kafka.Brokers, kafka.Topics(e.topic), kafka.Strict())
				if err != nil {
					t.Fatal(err)
				}
				defer sp.Close()
				pub = sp
			case "txn", "txn-strict":
				opts := []kafka.Option{kafka.Topics(e.topic)}
				if c.mode == "txn-strict" {
					opts = append(opts, kafka.Strict())
				}
				tp, err := kafka.NewTxnPublisher(ctx, e.kafka.Brokers, e.tables.Messages, opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer tp.Close()
				pub = tp
			}
			r, err := relay.New(ctx, e.store, pub, relay.OnRecordError(c.policy), relay.DeadlineMargin(0),
				relay.RetryBackoff(10*time.Millisecond, 50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			obs := &observed{}
			cctx, stop := context.WithCancel(ctx)
			consumed := e.consume(cctx, t, func(_ string, _, value []byte) { obs.add(value) })
			defer func() { stop(); <-consumed }()

			res, err := e.writer.Write(ctx, nil,
				outbox.Message{Topic: e.topic, Key: []byte("order-1"), Value: row("row1", 350_000)},
				outbox.Message{Topic: e.topic, Key: []byte("order-1"), Value: row("row2", 200_000)},
				outbox.Message{Topic: e.topic, Key: []byte("order-1"), Value: row("row3", 200_000)})
			if err != nil {
				t.Fatal(err)
			}
			row1 := res.Messages[0]
			e.setTopicLimit(ctx, t, 300_000)

			_, err = r.DrainBucket(ctx, 0)
			switch c.policy {
			case outbox.Park:
				if err != nil {
					t.Fatal(err)
				}
				parked, err := e.store.ListParked(ctx, 0, 0)
				if err != nil || len(parked) != 1 || parked[0].Message.ID != row1.ID {
					t.Fatalf("parked %+v %v; want row 1", parked, err)
				}
			case outbox.Block:
				var pe *outbox.PublishError
				if !errors.As(err, &pe) || pe.MessageID != row1.ID || outbox.Classify(err) != outbox.RecordPermanent {
					t.Fatalf("err = %v; want the bucket blocked at row 1", err)
				}
			}
			// Wait for what should be visible (a real broker, or a
			// transaction's commit marker, takes a moment), then a little
			// longer so that anything more would be seen too.
			for deadline := time.Now().Add(10 * time.Second); obs.String() != c.before && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(500 * time.Millisecond)
			if got := obs.String(); got != c.before {
				t.Fatalf("consumer saw %s, want %s", got, c.before)
			}

			// The operator repairs the cause.
			switch c.policy {
			case outbox.Park:
				fixed := row1
				fixed.Value = row("row1", 100_000)
				if _, err := e.store.ReplayParked(ctx, 0, row1.Sequence, &fixed); err != nil {
					t.Fatal(err)
				}
			case outbox.Block:
				e.setTopicLimit(ctx, t, 2_000_000)
			}
			if _, err := r.DrainBucket(ctx, 0); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for obs.String() != c.after && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if got := obs.String(); got != c.after {
				t.Fatalf("after the repair the consumer saw %s, want %s", got, c.after)
			}
		})
	}
}
