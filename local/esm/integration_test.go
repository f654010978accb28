package esm

import (
	"context"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// messagesTable creates a table shaped like the outbox's messages table (b, s
// numbers; KEYS_ONLY stream) and returns its stream ARN.
func messagesTable(ctx context.Context, t testing.TB, client *dynamodb.Client, name string) string {
	t.Helper()
	out, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: &name,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{
			{AttributeName: aws.String("b"), AttributeType: ddbtypes.ScalarAttributeTypeN},
			{AttributeName: aws.String("s"), AttributeType: ddbtypes.ScalarAttributeTypeN},
		},
		KeySchema: []ddbtypes.KeySchemaElement{
			{AttributeName: aws.String("b"), KeyType: ddbtypes.KeyTypeHash},
			{AttributeName: aws.String("s"), KeyType: ddbtypes.KeyTypeRange},
		},
		BillingMode: ddbtypes.BillingModePayPerRequest,
		StreamSpecification: &ddbtypes.StreamSpecification{
			StreamEnabled:  aws.Bool(true),
			StreamViewType: ddbtypes.StreamViewTypeKeysOnly,
		},
	})
	if err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	t.Cleanup(func() {
		client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
	})
	arn := aws.ToString(out.TableDescription.LatestStreamArn)
	if arn == "" {
		t.Fatalf("table %s has no stream ARN", name)
	}
	return arn
}

func messageKey(b, s int) map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{
		"b": &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(b)},
		"s": &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(s)},
	}
}

// TestDynamoDBLocalStream runs a mapping on a real DynamoDB Local stream, at
// Lambda's polling cadence, and checks that every new item arrives once, in
// order, as the event Lambda would deliver, and that the writes the relay
// makes itself (updates, deletes) are filtered out.
func TestDynamoDBLocalStream(t *testing.T) {
	const items = 20
	d := testenv.DynamoDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	table := testenv.Name(t, "esm")
	arn := messagesTable(ctx, t, d.Client, table)

	type arrival struct {
		rec events.DynamoDBEventRecord
		at  time.Time
	}
	var (
		mu       sync.Mutex
		arrived  []arrival
		batches  int
		received = make(chan struct{}, items)
	)
	m, err := New(d.Streams, arn, InProcess(func(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		batches++
		for _, r := range ev.Records {
			arrived = append(arrived, arrival{r, now})
			received <- struct{}{}
		}
		return events.DynamoDBEventResponse{}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)

	// Items are written one by one, a little apart, so that each one's
	// latency is measured from an idle poller, as in a quiet production
	// table.
	put := make(map[int]time.Time, items)
	putDone := make(map[int]time.Time, items)
	for s := 1; s <= items; s++ {
		put[s] = time.Now()
		if _, err := d.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: messageKey(3, s)}); err != nil {
			t.Fatal(err)
		}
		putDone[s] = time.Now()
		time.Sleep(37 * time.Millisecond)
	}
	if _, err := d.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &table, Key: messageKey(3, 1),
		UpdateExpression:          aws.String("SET #v = :v"),
		ExpressionAttributeNames:  map[string]string{"#v": "v"},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":v": &ddbtypes.AttributeValueMemberN{Value: "1"}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: messageKey(3, 2)}); err != nil {
		t.Fatal(err)
	}

	for range items {
		select {
		case <-received:
		case <-ctx.Done():
			t.Fatalf("only %d of %d items arrived within the test's time", len(arrived), items)
		}
	}
	waitFor(t, "the update and the delete to be filtered", func() bool { return m.Stats().RecordsFiltered == 2 })

	mu.Lock()
	defer mu.Unlock()
	var order []int
	var latencies []time.Duration
	for _, a := range arrived {
		s, err := a.rec.Change.Keys["s"].Int64()
		if err != nil {
			t.Fatalf("key s of %+v: %v", a.rec, err)
		}
		order = append(order, int(s))
		latencies = append(latencies, a.at.Sub(put[int(s)]))
	}
	if want := span(1, items); !reflect.DeepEqual(order, want) {
		t.Errorf("items arrived as %v, want each once in write order %v", order, want)
	}
	if st := m.Stats(); st.RecordsSeen != items+2 || st.RecordsDropped != 0 || st.Retries != 0 {
		t.Errorf("stats %+v, want %d seen and nothing retried or dropped", st, items+2)
	}

	// The delivered event is the one in the fixture, but for the fields that
	// change with every run.
	_, want := fixture(t, "batch.json")
	want.Records = want.Records[:1]
	got := events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{arrived[0].rec}}
	if g, w := normalize(t, got), normalize(t, want); !reflect.DeepEqual(g, w) {
		t.Errorf("delivered record differs from the fixture beyond volatile fields\n got: %v\nwant: %v", g, w)
	}
	r := arrived[0].rec
	if r.EventSourceArn != arn || r.EventID == "" || r.Change.SequenceNumber == "" || r.AWSRegion == "" {
		t.Errorf("volatile fields must still be set: %+v", r)
	}
	// The field is approximate: DynamoDB rounds it down to the second,
	// DynamoDB Local (3.x) down to the minute. So it lies between the
	// write's minute and a second after its PutItem returned (the clocks
	// may differ by that).
	s, _ := r.Change.Keys["s"].Int64()
	if c := r.Change.ApproximateCreationDateTime.Time; c.Before(put[int(s)].Truncate(time.Minute).Add(-time.Second)) || c.After(putDone[int(s)].Add(time.Second)) {
		t.Errorf("ApproximateCreationDateTime %v is not the time item %d was written, %v to %v (rounded down to the second or the minute)",
			c, s, put[int(s)].Format(time.RFC3339Nano), putDone[int(s)].Format(time.RFC3339Nano))
	}

	slices.Sort(latencies)
	t.Logf("put→invoke on DynamoDB Local, %d items, poll every %v: min %v, median %v, max %v; %d invocations; region %q",
		items, m.cfg.pollInterval, latencies[0].Round(time.Millisecond), latencies[len(latencies)/2].Round(time.Millisecond),
		latencies[len(latencies)-1].Round(time.Millisecond), batches, r.AWSRegion)
}
