package wiring

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/dynakafka/outbox/internal/harness/kafka/kfakeenv"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/lambda/emf"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
)

func TestMetricsLevel(t *testing.T) {
	cases := map[string]string{"": "INFO", "TRACE": "INFO", "DEBUG": "INFO", "INFO": "INFO", "WARN": "WARN",
		"ERROR": "ERROR", "FATAL": "FATAL", "warn": "WARN", "bogus": "INFO"}
	for in, want := range cases {
		if got := MetricsLevel(in); got != want {
			t.Errorf("MetricsLevel(%q) = %q, want %q", in, got, want)
		}
	}
	// The level reaches the line, where Lambda's log-level filter reads it.
	var buf bytes.Buffer
	e, err := NewEmitter(&buf, "orders-outbox", "ERROR")
	if err != nil {
		t.Fatal(err)
	}
	var l emf.Line
	l.Value(handler.LiveRelays, 1)
	if err := e.Emit(&l); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["level"] != "ERROR" || doc["Outbox"] != "orders-outbox" || doc["LiveRelays"] != 1.0 {
		t.Fatalf("line %s", buf.Bytes())
	}
	if _, err := NewEmitter(&buf, "", "INFO"); err == nil {
		t.Fatal("an empty table name made a dimension")
	}
}

func progressTable(t *testing.T, d *testenv.Dynamo) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tables := dynamo.Tables{Messages: testenv.Name(t, "m"), Control: testenv.Name(t, "c")}
	if err := dynamo.CreateTables(ctx, d.Client, tables, dynamo.BucketCount(4)); err != nil {
		t.Fatal(err)
	}
	return tables.Control
}

func TestProgressStoreOnDynamoDB(t *testing.T) {
	d := testenv.DynamoDB(t)
	table := progressTable(t, d)
	ctx := context.Background()
	s := NewProgressStore(d.Client, table)

	p, err := s.LoadProgress(ctx)
	if err != nil || p.Version != 0 || len(p.Buckets) != 0 {
		t.Fatalf("fresh table: %+v, %v", p, err)
	}
	p.Buckets = map[int]handler.Watched{3: {Head: 17, Sweeps: 2}, 4095: {Head: 0, Sweeps: 1}}
	if err := s.SaveProgress(ctx, p); err != nil {
		t.Fatal(err)
	}
	// A second sweep that loaded the same (empty) state loses the race.
	if err := s.SaveProgress(ctx, handler.Progress{}); !errors.Is(err, handler.ErrProgressConflict) {
		t.Fatalf("stale first save: %v, want ErrProgressConflict", err)
	}
	got, err := s.LoadProgress(ctx)
	if err != nil || got.Version != 1 || fmt.Sprint(got.Buckets) != fmt.Sprint(p.Buckets) {
		t.Fatalf("loaded %+v, %v; want version 1 and %v", got, err, p.Buckets)
	}
	got.Buckets = map[int]handler.Watched{}
	if err := s.SaveProgress(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveProgress(ctx, handler.Progress{Version: 1}); !errors.Is(err, handler.ErrProgressConflict) {
		t.Fatalf("stale save: %v, want ErrProgressConflict", err)
	}
	if again, err := s.LoadProgress(ctx); err != nil || again.Version != 2 || len(again.Buckets) != 0 {
		t.Fatalf("loaded %+v, %v", again, err)
	}

	// An item someone edited by hand is an error that names it, not an
	// empty progress.
	if _, err := d.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "sweeper"}, "sk": &types.AttributeValueMemberS{Value: "progress"},
		"rev": &types.AttributeValueMemberN{Value: "3"}, "bk": &types.AttributeValueMemberS{Value: "oops"},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadProgress(ctx); err == nil || !strings.Contains(err.Error(), "pk=sweeper sk=progress") {
		t.Fatalf("malformed item: %v", err)
	}
	if _, err := NewProgressStore(d.Client, "no-such-table").LoadProgress(ctx); err == nil || !strings.Contains(err.Error(), "no-such-table") {
		t.Fatalf("missing table: %v", err)
	}
}

// hint is the stream record the relay function gets for the message at
// bucket, seq.
func hint(bucket int, seq int64) events.DynamoDBEvent {
	return events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{{
		EventID: "1", EventName: string(events.DynamoDBOperationTypeInsert),
		Change: events.DynamoDBStreamRecord{SequenceNumber: "100", Keys: map[string]events.DynamoDBAttributeValue{
			"b": events.NewNumberAttribute(strconv.Itoa(bucket)), "s": events.NewNumberAttribute(strconv.FormatInt(seq, 10)),
		}},
	}}}
}

func lastRaw(buf *bytes.Buffer) []byte {
	ls := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
	return ls[len(ls)-1]
}

// lastLine decodes the last EMF line in buf into its metrics' values.
func lastLine(t *testing.T, buf *bytes.Buffer) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(lastRaw(buf), &doc); err != nil {
		t.Fatalf("%s: %v", lastRaw(buf), err)
	}
	return doc
}

// TestStuckBucketOnTopicAuthorizationFailure is issue 9's stuck-bucket test,
// on real parts: DynamoDB Local, kfake answering every produce to the topic
// with TOPIC_AUTHORIZATION_FAILED (a permanent, topic-wide error), the
// functions' handlers built as lambda/relay and lambda/sweeper build them.
// The relay reports the bucket for redelivery without failing the
// invocation and counts a fatal publish failure; every sweep fails its
// invocation (the sweeper's Errors alarm); the sweeper's EMF line shows the
// bucket stuck at the StuckAfter-th sweep, also across a new execution
// environment (the progress is in the control table); once the
// authorization is back, the next sweep delivers the message and the bucket
// is no longer stuck.
func TestStuckBucketOnTopicAuthorizationFailure(t *testing.T) {
	const stuckAfter = 3
	d := testenv.DynamoDB(t)
	k := kfakeenv.Kafka(t, kfake.NumBrokers(1))
	kfakeenv.RequireKfake(t, k)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tables := dynamo.Tables{Messages: testenv.Name(t, "m"), Control: testenv.Name(t, "c")}
	if err := dynamo.CreateTables(ctx, d.Client, tables, dynamo.BucketCount(4)); err != nil {
		t.Fatal(err)
	}
	topic := testenv.Name(t, "t")
	testenv.CreateTopic(t, k.KafkaCluster, topic, 2)
	env := map[string]string{
		"OUTBOX_MESSAGES_TABLE": tables.Messages, "OUTBOX_CONTROL_TABLE": tables.Control,
		"OUTBOX_TOPICS": topic, "KAFKA_BOOTSTRAP_SERVERS": strings.Join(k.Brokers, ","),
		"OUTBOX_DYNAMODB_ENDPOINT": d.Endpoint, "AWS_REGION": d.Config.Region, "KAFKA_AUTH": "none",
		"OUTBOX_SWEEP_MIN_AGE": "0s", "OUTBOX_LEASE_DURATION": "12s",
	}
	cfg, err := config.Load(func(s string) string { return env[s] })
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var relayOut, sweeperOut bytes.Buffer
	relayEMF, err := NewEmitter(&relayOut, cfg.MessagesTable, "INFO")
	if err != nil {
		t.Fatal(err)
	}
	sweeperEMF, err := NewEmitter(&sweeperOut, cfg.MessagesTable, "INFO")
	if err != nil {
		t.Fatal(err)
	}
	// As lambda/relay/main.go and lambda/sweeper/main.go wire them.
	metrics := handler.NewRelayMetrics()
	relayParts, err := BuildWith(ctx, cfg, d.Config, log, "relay/test", relay.WithMetrics(metrics))
	if err != nil {
		t.Fatal(err)
	}
	defer relayParts.Close()
	relayFn := handler.NewRelay(relayParts.Relay, cfg.Concurrency, log, handler.RelayEMF(relayEMF, metrics))
	// The sweeper takes over a bucket the relay gave up, and waits
	// ResumeWindow (default 10s) before publishing to it; a shorter window
	// (above the 12s lease's margin) keeps the test short.
	sweeperParts, err := BuildWith(ctx, cfg, d.Config, log, "sweeper/test", relay.ResumeWindow(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sweeperParts.Close()
	newSweeper := func() *handler.Sweeper {
		h, err := handler.NewSweeper(sweeperParts.Relay, log, handler.SweeperEMF(sweeperEMF), handler.StuckAfter(stuckAfter),
			handler.SweepProgress(NewProgressStore(sweeperParts.Dynamo, cfg.ControlTable)))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	denied := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.TopicAuthorizationFailed, Count: -1})
	w, err := dynamo.NewWriter(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Write(ctx, nil, outbox.Message{Topic: topic, Key: []byte("order-1"), Value: []byte("paid")})
	if err != nil {
		t.Fatal(err)
	}
	b, seq := res.Messages[0].Bucket, res.Messages[0].Sequence

	// The stream path: the bucket is reported for redelivery, the
	// invocation does not fail, and its line counts the fatal failure.
	resp, err := relayFn.Handle(ctx, hint(b, seq))
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("relay: %+v, %v; want one batch item failure and no function error", resp, err)
	}
	if m := lastLine(t, &relayOut); m["PublishFailuresFatal"] != 1.0 || m["BucketsFailed"] != 1.0 || m["MessagesPublished"] != 0.0 {
		t.Fatalf("relay line %v", m)
	}

	sweeper := newSweeper()
	for i := 1; i <= stuckAfter; i++ {
		if i == stuckAfter {
			sweeper = newSweeper() // a new execution environment: nothing in memory
		}
		sum, err := sweeper.Handle(ctx, events.CloudWatchEvent{})
		var stopped *handler.StoppedError
		if !errors.As(err, &stopped) || stopped.Errors[b] == nil || !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("sweep %d: err = %v; want a *handler.StoppedError for bucket %d caused by TOPIC_AUTHORIZATION_FAILED", i, err, b)
		}
		m := lastLine(t, &sweeperOut)
		want := 0.0
		if i == stuckAfter {
			want = 1
		}
		if m["StuckBuckets"] != want || m["PendingMessages"] != 1.0 || m["BucketsFailed"] != 1.0 || m["LiveRelays"] == nil {
			t.Fatalf("sweep %d: line %v, summary %+v; want StuckBuckets %v, PendingMessages 1, BucketsFailed 1", i, m, sum, want)
		}
		if age, _ := m["OldestPendingAge"].(float64); age < 0 {
			t.Fatalf("sweep %d: OldestPendingAge %v", i, m["OldestPendingAge"])
		}
	}
	t.Logf("the relay's line: %s", bytes.TrimSpace(relayOut.Bytes()))
	t.Logf("the sweeper's line at sweep %d: %s", stuckAfter, lastRaw(&sweeperOut))

	// Authorization is back: a sweep delivers the message, and the bucket
	// is stuck no more. A relay leaves a bucket it stopped alone for a few
	// seconds (the engine's stoppedRetry, 5 s; its sweeps report the stop
	// meanwhile), so the sweeps go on until one retries it; the sweeper
	// runs once a minute in a deployment, where that wait never shows.
	denied.Remove()
	var sum handler.Summary
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		sum, err = sweeper.Handle(ctx, events.CloudWatchEvent{})
		if err == nil || time.Now().After(deadline) {
			break
		}
		if !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("sweep after the fix: %+v, %v; want the stop it reports until it retries", sum, err)
		}
	}
	if err != nil || fmt.Sprint(sum.Drained) != fmt.Sprintf("[%d]", b) {
		t.Fatalf("sweep after the fix: %+v, %v", sum, err)
	}
	if m := lastLine(t, &sweeperOut); m["StuckBuckets"] != 0.0 || m["BucketsFailed"] != 0.0 {
		t.Fatalf("sweep after the fix: line %v", m)
	}
	if _, err := sweeper.Handle(ctx, events.CloudWatchEvent{}); err != nil {
		t.Fatal(err)
	}
	if m := lastLine(t, &sweeperOut); m["PendingMessages"] != 0.0 || m["OldestPendingAge"] != 0.0 || m["StuckBuckets"] != 0.0 {
		t.Fatalf("drained: line %v", m)
	}
}
