package otel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/otel"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// One order placed by a traced writer, relayed, and consumed through the
// inbox: the consumer's spans are in the writer's trace (writer span →
// enqueue → process → the handler's span), and the relay's batch span links
// to the message's context.
func TestOneTraceFromWriterToConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tr := otel.NewTracer(otel.TracerProvider(tp))
	app := tp.Tracer("orders-service")

	d := testenv.DynamoDB(t)
	k := testenv.Kafka(t)
	tables := dynamo.Tables{Messages: testenv.Name(t, "msgs"), Control: testenv.Name(t, "ctl")}
	inboxTable, view, topic := testenv.Name(t, "inbox"), testenv.Name(t, "view"), testenv.Name(t, "orders")
	const buckets = 2
	if err := dynamo.CreateTables(ctx, d.Client, tables, dynamo.BucketCount(buckets)); err != nil {
		t.Fatal(err)
	}
	if err := inbox.CreateTable(ctx, d.Client, inboxTable); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String(view), BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}}}); err != nil {
		t.Fatal(err)
	}
	testenv.CreateTopic(t, k, topic, buckets)

	// The writer, inside the service's own span.
	w, err := dynamo.NewWriter(ctx, d.Client, tables, dynamo.WithTracer(tr))
	if err != nil {
		t.Fatal(err)
	}
	wctx, placeOrder := app.Start(ctx, "place order")
	res, err := w.Write(wctx, nil, outbox.Message{Topic: topic, Key: []byte("order-1"), Value: []byte(`{"amount_cents":1200}`)})
	placeOrder.End()
	if err != nil {
		t.Fatal(err)
	}
	msg := res.Messages[0]

	// The relay, with a traced publisher.
	store, err := dynamo.NewStore(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kafka.NewPublisher(ctx, k.Brokers, kafka.Topics(topic), kafka.WithTracer(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	rl, err := relay.New(ctx, store, pub, relay.DeadlineMargin(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.DrainBucket(ctx, msg.Bucket); err != nil {
		t.Fatal(err)
	}

	// The consumer.
	ib, err := inbox.New(ctx, d.Client, inboxTable, inbox.InOrder(), inbox.WithTracer(tr))
	if err != nil {
		t.Fatal(err)
	}
	applied := make(chan struct{})
	c, err := inbox.NewConsumer(ib, func(tx *inbox.Tx) error {
		_, span := app.Start(tx.Context(), "apply order")
		defer span.End()
		tx.Add(types.TransactWriteItem{Put: &types.Put{TableName: aws.String(view),
			Item: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: string(tx.Record().Key)}}}})
		return nil
	}, inbox.ClientOptions(kgo.SeedBrokers(k.Brokers...), kgo.ConsumerGroup(testenv.Name(t, "view")), kgo.ConsumeTopics(topic)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	go func() {
		for runCtx.Err() == nil {
			for _, s := range rec.Ended() {
				if s.Name() == "process "+topic {
					close(applied)
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	select {
	case <-applied:
	case <-ctx.Done():
		t.Fatal("the record was not consumed")
	}
	stop()
	if err := errors.Join(<-done, c.Close()); err != nil {
		t.Fatal(err)
	}

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s
	}
	root, enqueue, publish, process, handler := spans["place order"], spans["outbox enqueue"], spans["outbox publish"], spans["process "+topic], spans["apply order"]
	for name, s := range map[string]sdktrace.ReadOnlySpan{"place order": root, "outbox enqueue": enqueue, "outbox publish": publish, "process": process, "apply order": handler} {
		if s == nil {
			t.Fatalf("no %q span among %v", name, names(rec.Ended()))
		}
	}
	t.Logf("spans:\n%s", tree(rec.Ended()))

	traceID := root.SpanContext().TraceID()
	chain := []struct {
		child, parent sdktrace.ReadOnlySpan
		kind          trace.SpanKind
	}{
		{enqueue, root, trace.SpanKindProducer},
		{process, enqueue, trace.SpanKindConsumer},
		{handler, process, trace.SpanKindInternal},
	}
	for _, c := range chain {
		if c.child.SpanContext().TraceID() != traceID || c.child.Parent().SpanID() != c.parent.SpanContext().SpanID() || c.child.SpanKind() != c.kind {
			t.Errorf("%s: trace %s parent %s kind %v; want trace %s, parent %s (%s), kind %v", c.child.Name(),
				c.child.SpanContext().TraceID(), c.child.Parent().SpanID(), c.child.SpanKind(), traceID, c.parent.SpanContext().SpanID(), c.parent.Name(), c.kind)
		}
	}
	if !process.Parent().IsRemote() {
		t.Error("the process span's parent is not a remote context (it should come from the record's headers)")
	}
	links := publish.Links()
	if len(links) != 1 || links[0].SpanContext.SpanID() != enqueue.SpanContext().SpanID() || links[0].SpanContext.TraceID() != traceID {
		t.Errorf("publish links %+v; want one link to the enqueue span %s", links, enqueue.SpanContext().SpanID())
	}
	for _, kv := range process.Attributes() {
		if kv.Key == "messaging.message.id" && kv.Value.AsString() != msg.ID {
			t.Errorf("process span message id %s, want %s", kv.Value.AsString(), msg.ID)
		}
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// tree prints the spans by trace, each under its parent, with links.
func tree(spans []sdktrace.ReadOnlySpan) string {
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	byID := map[trace.SpanID]bool{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = true
	}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if p := s.Parent().SpanID(); p.IsValid() && byID[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(s sdktrace.ReadOnlySpan, depth int)
	walk = func(s sdktrace.ReadOnlySpan, depth int) {
		fmt.Fprintf(&b, "%s%s [%s] trace=%s span=%s", strings.Repeat("  ", depth), s.Name(), s.SpanKind(), s.SpanContext().TraceID(), s.SpanContext().SpanID())
		if s.Parent().IsRemote() {
			fmt.Fprintf(&b, " parent=%s (remote, from the record's traceparent)", s.Parent().SpanID())
		}
		for _, l := range s.Links() {
			fmt.Fprintf(&b, " link→trace=%s span=%s", l.SpanContext.TraceID(), l.SpanContext.SpanID())
		}
		b.WriteString("\n")
		for _, c := range children[s.SpanContext().SpanID()] {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}
