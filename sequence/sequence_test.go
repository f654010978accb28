package sequence_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/sequence"
	"github.com/dynakafka/outbox/store/dynamo"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newCounter(t *testing.T) *sequence.Counter {
	t.Helper()
	c, _, _ := newTables(t)
	return c
}

// newTables creates a fresh outbox and returns a counter over it, the
// client and the control table's name.
func newTables(t *testing.T) (*sequence.Counter, *dynamodb.Client, string) {
	t.Helper()
	d := testenv.DynamoDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tables := dynamo.Tables{Messages: testenv.Name(t, "msgs"), Control: testenv.Name(t, "ctl")}
	if err := dynamo.CreateTables(ctx, d.Client, tables); err != nil {
		t.Fatal(err)
	}
	c, err := sequence.NewCounter(d.Client, tables.Control, single, "")
	if err != nil {
		t.Fatal(err)
	}
	return c, d.Client, tables.Control
}

func TestReserveRanges(t *testing.T) {
	c := newCounter(t)
	ctx := context.Background()
	steps := []struct {
		bucket, n int
		first     int64
	}{
		{1, 3, 1}, // numbers start at 1
		{1, 2, 4},
		{2, 1, 1}, // buckets are independent
		{1, 1, 6},
		{2, 5, 2},
	}
	for _, s := range steps {
		first, err := c.Reserve(ctx, s.bucket, s.n)
		if err != nil {
			t.Fatal(err)
		}
		if first != s.first {
			t.Fatalf("Reserve(bucket %d, %d) = %d, want %d", s.bucket, s.n, first, s.first)
		}
	}
}

func TestReserveConcurrentRangesAreDisjoint(t *testing.T) {
	c := newCounter(t)
	ctx := context.Background()
	var (
		mu   sync.Mutex
		got  []int64
		wg   sync.WaitGroup
		errs = make(chan error, 4)
	)
	for w := range 4 {
		wg.Go(func() {
			for i := range 5 {
				n := 1 + (w+i)%3
				first, err := c.Reserve(ctx, 0, n)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for s := first; s < first+int64(n); s++ {
					got = append(got, s)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(got)
	for i, s := range got {
		if s != int64(i+1) {
			t.Fatalf("reserved numbers are not exactly 1..%d without repeats: position %d holds %d", len(got), i, s)
		}
	}
}

// single is a default-mode outbox's config item, as a writer reads it.
var single = outbox.Config{BucketCount: 16}

type countingClient struct{ calls int }

func (c *countingClient) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.calls++
	return &dynamodb.UpdateItemOutput{}, nil
}

func TestReserveRefusesBadArguments(t *testing.T) {
	cc := &countingClient{}
	c, err := sequence.NewCounter(cc, "ctl", single, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		bucket, n int
	}{
		{"zero numbers", 0, 0},
		{"negative numbers", 0, -1},
		{"too many numbers", 0, sequence.MaxReserve + 1},
		{"negative bucket", -1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.Reserve(context.Background(), tc.bucket, tc.n); err == nil {
				t.Fatal("no error")
			}
		})
	}
	if cc.calls != 0 {
		t.Fatalf("%d calls to DynamoDB for invalid arguments", cc.calls)
	}
	// A response without the counter is an error, not sequence 1-n.
	if _, err := c.Reserve(context.Background(), 0, 1); err == nil || cc.calls != 1 {
		t.Fatalf("Reserve with an empty response: err = %v", err)
	}
}

func TestNewCounterRequiresClientAndTable(t *testing.T) {
	if _, err := sequence.NewCounter(nil, "ctl", single, ""); err == nil {
		t.Error("nil client accepted")
	}
	if _, err := sequence.NewCounter(&countingClient{}, "", single, ""); err == nil {
		t.Error("empty table accepted")
	}
	var oe *outbox.OptionError
	if _, err := sequence.NewCounter(nil, "ctl", single, ""); !errors.As(err, &oe) || oe.Option != "client" {
		t.Errorf("nil client: %v, want an *outbox.OptionError about client", err)
	}
}

func TestPartitionKey(t *testing.T) {
	if got := sequence.PartitionKey(12); got != "bucket#12" {
		t.Fatalf("PartitionKey(12) = %q", got)
	}
}

func TestLastReadsWhatReserveTook(t *testing.T) {
	c, client, control := newTables(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, step := range []struct {
		bucket, reserve int
		want            int64
	}{
		{3, 0, 0}, // never reserved: 0, not an error
		{3, 4, 4},
		{3, 2, 6},
		{1, 0, 0}, // buckets are independent
		{1, 1, 1},
	} {
		if step.reserve > 0 {
			if _, err := c.Reserve(ctx, step.bucket, step.reserve); err != nil {
				t.Fatal(err)
			}
		}
		got, err := sequence.Last(ctx, client, control, step.bucket)
		if err != nil || got != step.want {
			t.Fatalf("Last(bucket %d) after reserving %d = %d, %v; want %d", step.bucket, step.reserve, got, err, step.want)
		}
	}
	if _, err := sequence.Last(ctx, client, control, -1); err == nil {
		t.Fatal("Last of bucket -1: no error")
	}
	if _, err := sequence.Last(ctx, client, testenv.Name(t, "missing"), 0); err == nil {
		t.Fatal("Last on a missing table: no error")
	}
}
