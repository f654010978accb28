package wiring

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/store/dynamo"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestBuildOnRealParts(t *testing.T) {
	d := testenv.DynamoDB(t)
	k := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tables := dynamo.Tables{Messages: testenv.Name(t, "m"), Control: testenv.Name(t, "c")}
	if err := dynamo.CreateTables(ctx, d.Client, tables, dynamo.BucketCount(4)); err != nil {
		t.Fatal(err)
	}
	topic := testenv.Name(t, "t")
	testenv.CreateTopic(t, k, topic, 4)
	getenv := func(extra map[string]string) func(string) string {
		m := map[string]string{
			"OUTBOX_MESSAGES_TABLE": tables.Messages, "OUTBOX_CONTROL_TABLE": tables.Control,
			"OUTBOX_TOPICS": topic, "KAFKA_BOOTSTRAP_SERVERS": strings.Join(k.Brokers, ","),
			"OUTBOX_DYNAMODB_ENDPOINT": d.Endpoint, "AWS_REGION": d.Config.Region, "KAFKA_AUTH": "none",
		}
		for a, b := range extra {
			m[a] = b
		}
		return func(s string) string { return m[s] }
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	cfg, err := config.Load(getenv(nil))
	if err != nil {
		t.Fatal(err)
	}
	p, err := BuildWith(ctx, cfg, d.Config, log, "relay/test")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Relay.BucketCount() != 4 || p.Relay.ID() != "relay/test" {
		t.Fatalf("relay bucket count %d id %q", p.Relay.BucketCount(), p.Relay.ID())
	}
	// The parts work together: a written message is drained to Kafka.
	w, err := dynamo.NewWriter(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Write(ctx, nil, outbox.Message{Topic: topic, Key: []byte("k"), Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Relay.DrainBucket(ctx, res.Messages[0].Bucket)
	if err != nil || st.Published != 1 {
		t.Fatalf("drain: %+v %v", st, err)
	}

	if _, ok := p.Publisher.(*kafka.Publisher); !ok {
		t.Fatalf("default publisher is %T, want *kafka.Publisher", p.Publisher)
	}

	// OUTBOX_KAFKA_TRANSACTIONAL=true builds the relay on a TxnPublisher
	// whose ids are the messages table's, and it drains.
	tcfg, err := config.Load(getenv(map[string]string{"OUTBOX_KAFKA_TRANSACTIONAL": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	tp, err := BuildWith(ctx, tcfg, d.Config, log, "relay/test")
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	if _, ok := tp.Publisher.(*kafka.TxnPublisher); !ok || TxnPrefix(tcfg) != tables.Messages {
		t.Fatalf("transactional publisher is %T, prefix %q", tp.Publisher, TxnPrefix(tcfg))
	}
	res, err = w.Write(ctx, nil, outbox.Message{Topic: topic, Key: []byte("k"), Value: []byte("v2")})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := tp.Relay.DrainBucket(ctx, res.Messages[0].Bucket); err != nil || st.Published != 1 {
		t.Fatalf("transactional drain: %+v %v", st, err)
	}

	// Misconfigurations fail the init, naming what to fix.
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"missing table", map[string]string{"OUTBOX_CONTROL_TABLE": "no-such-table"}, "OUTBOX_CONTROL_TABLE=no-such-table"},
		{"missing topic", map[string]string{"OUTBOX_TOPICS": "no-such-topic"}, "no-such-topic"},
		// Without topics to check, init still asks a broker (port 1 refuses).
		{"no broker answers", map[string]string{"OUTBOX_TOPICS": "", "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}, "KAFKA_BOOTSTRAP_SERVERS=[127.0.0.1:1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Load(getenv(c.env))
			if err != nil {
				t.Fatal(err)
			}
			p, err := BuildWith(ctx, cfg, d.Config, log, "relay/test")
			if err == nil {
				p.Close()
				t.Fatal("built despite the misconfiguration")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not name %q", err, c.want)
			}
		})
	}

	// A cold start after an online BucketCount change (docs/design.md
	// §13.5): the stack does not update the functions for it, and they
	// read the count from the config item only, 8 at epoch 1 now. It
	// starts on that count and drains a message written under it.
	if _, err := dynamo.ChangeBucketCount(ctx, d.Client, tables, 8); err != nil {
		t.Fatal(err)
	}
	if c, err := dynamo.ReadConfig(ctx, d.Client, tables); err != nil || c.BucketCount != 8 || c.BucketEpoch == 0 {
		t.Fatalf("after the change: %+v %v; want 8 at an epoch above 0", c, err)
	}
	cold, err := BuildWith(ctx, cfg, d.Config, log, "relay/test")
	if err != nil {
		t.Fatalf("cold start after the change: %v", err)
	}
	defer cold.Close()
	if cold.Relay.BucketCount() != 8 {
		t.Errorf("cold-started relay runs on %d buckets, want the config item's 8", cold.Relay.BucketCount())
	}
	w8, err := dynamo.NewWriter(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	var high dynamo.Result
	for i := 0; ; i++ { // a key of a bucket the old count did not have
		if high, err = w8.Write(ctx, nil, outbox.Message{Topic: topic, Key: []byte(fmt.Sprint("k", i)), Value: []byte("v8")}); err != nil {
			t.Fatal(err)
		}
		if high.Messages[0].Bucket >= 4 {
			break
		}
	}
	if st, err := cold.Relay.DrainBucket(ctx, high.Messages[0].Bucket); err != nil || st.Published != 1 {
		t.Fatalf("drain of bucket %d after the cold start: %+v %v", high.Messages[0].Bucket, st, err)
	}
}
