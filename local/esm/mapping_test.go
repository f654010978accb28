package esm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/dynakafka/outbox"
)

const (
	insert = types.OperationTypeInsert
	modify = types.OperationTypeModify
	remove = types.OperationTypeRemove
)

// recorder is a function that records the records of every invocation (as
// indexes into the fake stream) and answers with respond.
type recorder struct {
	mu       sync.Mutex
	batches  [][]int
	requests []string
	respond  func(ctx context.Context, call int, batch []int) (events.DynamoDBEventResponse, error)
}

func (r *recorder) handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	idx := make([]int, len(ev.Records))
	for i, rec := range ev.Records {
		idx[i] = indexOf(rec.Change.SequenceNumber)
	}
	lc, _ := lambdacontext.FromContext(ctx)
	r.mu.Lock()
	r.batches = append(r.batches, idx)
	if lc != nil {
		r.requests = append(r.requests, lc.AwsRequestID)
	}
	call := len(r.batches)
	r.mu.Unlock()
	if r.respond == nil {
		return events.DynamoDBEventResponse{}, nil
	}
	return r.respond(ctx, call, idx)
}

func (r *recorder) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.batches)
}

func (r *recorder) got() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// failed reports the records with these indexes as batch item failures.
func failed(idx ...int) events.DynamoDBEventResponse {
	var resp events.DynamoDBEventResponse
	for _, i := range idx {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: seqOf(i)})
	}
	return resp
}

func span(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// fast makes the mapping poll and discover quickly, so tests take
// milliseconds instead of Lambda's quarter seconds.
func fast(extra ...Opt) []Opt {
	return append([]Opt{PollInterval(2 * time.Millisecond), DiscoveryInterval(20 * time.Millisecond)}, extra...)
}

// run runs m until the test ends or stop is called; stop checks that Run
// returned nil promptly.
func run(t testing.TB, m *Mapping) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v after cancel, want nil", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("Run did not return within 5s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// failureSummary is what the delivery tests check of a FailureRecord.
type failureSummary struct {
	Condition     string
	First, Last   int
	Size, Invokes int
	FunctionError string
}

func summarize(fr FailureRecord) failureSummary {
	return failureSummary{
		Condition:     fr.RequestContext.Condition,
		First:         indexOf(fr.BatchInfo.StartSequenceNumber),
		Last:          indexOf(fr.BatchInfo.EndSequenceNumber),
		Size:          fr.BatchInfo.BatchSize,
		Invokes:       fr.RequestContext.ApproximateInvokeCount,
		FunctionError: fr.ResponseContext.FunctionError,
	}
}

type invokerFunc func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error)

func (f invokerFunc) Invoke(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	return f(ctx, ev)
}

var errBoom = errors.New("boom")

func TestMappingDelivery(t *testing.T) {
	inserts := func(n int) func(*fakeStreams) {
		return func(f *fakeStreams) { f.inserts("s", n) }
	}
	mixed := func(f *fakeStreams) { f.put("s", insert, modify, insert, remove, insert) }
	failWhenHas := func(poison int) func(context.Context, int, []int) (events.DynamoDBEventResponse, error) {
		return func(_ context.Context, _ int, batch []int) (events.DynamoDBEventResponse, error) {
			if slices.Contains(batch, poison) {
				return events.DynamoDBEventResponse{}, errBoom
			}
			return events.DynamoDBEventResponse{}, nil
		}
	}
	onFirstCall := func(resp events.DynamoDBEventResponse, err error) func(context.Context, int, []int) (events.DynamoDBEventResponse, error) {
		return func(_ context.Context, call int, _ []int) (events.DynamoDBEventResponse, error) {
			if call == 1 {
				return resp, err
			}
			return events.DynamoDBEventResponse{}, nil
		}
	}

	cases := []struct {
		name         string
		opts         []Opt
		inProcess    []InProcessOpt
		invoker      func(r *recorder) Invoker // default InProcess(r.handle)
		setup        func(*fakeStreams)
		respond      func(ctx context.Context, call int, batch []int) (events.DynamoDBEventResponse, error)
		want         [][]int
		wantStats    Stats
		wantFailures []failureSummary
	}{
		{
			name:      "batches of BatchSize",
			opts:      []Opt{BatchSize(10)},
			setup:     inserts(25),
			want:      [][]int{span(0, 9), span(10, 19), span(20, 24)},
			wantStats: Stats{RecordsSeen: 25, Invocations: 3},
		},
		{
			name:      "default filter keeps inserts only",
			setup:     mixed,
			want:      [][]int{{0, 2, 4}},
			wantStats: Stats{RecordsSeen: 5, RecordsFiltered: 2, Invocations: 1},
		},
		{
			name:      "AllRecords keeps every record",
			opts:      []Opt{Filter(AllRecords)},
			setup:     mixed,
			want:      [][]int{span(0, 4)},
			wantStats: Stats{RecordsSeen: 5, Invocations: 1},
		},
		{
			name:      "filtered records do not count towards BatchSize",
			opts:      []Opt{BatchSize(2)},
			setup:     func(f *fakeStreams) { f.put("s", insert, modify, modify, insert, insert) },
			want:      [][]int{{0, 3}, {4}},
			wantStats: Stats{RecordsSeen: 5, RecordsFiltered: 2, Invocations: 2},
		},
		{
			name:      "item failures resume from the lowest reported sequence number",
			setup:     inserts(5),
			respond:   onFirstCall(failed(3, 1), nil),
			want:      [][]int{span(0, 4), span(1, 4)},
			wantStats: Stats{RecordsSeen: 5, Invocations: 2, Retries: 1},
		},
		{
			name:  "an unknown itemIdentifier fails the whole batch",
			setup: inserts(3),
			respond: onFirstCall(events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{
				{ItemIdentifier: seqOf(1)}, {ItemIdentifier: "not-in-batch"}}}, nil),
			want:      [][]int{span(0, 2), span(0, 2)},
			wantStats: Stats{RecordsSeen: 3, Invocations: 2, Retries: 1},
		},
		{
			name:  "an empty itemIdentifier fails the whole batch",
			setup: inserts(3),
			respond: onFirstCall(events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{
				{ItemIdentifier: ""}}}, nil),
			want:      [][]int{span(0, 2), span(0, 2)},
			wantStats: Stats{RecordsSeen: 3, Invocations: 2, Retries: 1},
		},
		{
			name:      "item failures are ignored without ReportBatchItemFailures",
			opts:      []Opt{ReportBatchItemFailures(false)},
			setup:     inserts(3),
			respond:   onFirstCall(failed(1), nil),
			want:      [][]int{span(0, 2)},
			wantStats: Stats{RecordsSeen: 3, Invocations: 1},
		},
		{
			name:      "retries exhausted go to OnFailure and the shard moves on",
			opts:      []Opt{BatchSize(3), MaximumRetryAttempts(2)},
			setup:     inserts(5),
			respond:   failWhenHas(1),
			want:      [][]int{span(0, 2), span(0, 2), span(0, 2), {3, 4}},
			wantStats: Stats{RecordsSeen: 5, Invocations: 4, Retries: 2, RecordsDropped: 3},
			wantFailures: []failureSummary{
				{Condition: ConditionRetriesExhausted, First: 0, Last: 2, Size: 3, Invokes: 3, FunctionError: "Unhandled"}},
		},
		{
			name:  "MaximumRetryAttempts 0 drops after one invocation",
			opts:  []Opt{MaximumRetryAttempts(0)},
			setup: inserts(2),
			respond: func(context.Context, int, []int) (events.DynamoDBEventResponse, error) {
				return events.DynamoDBEventResponse{}, errBoom
			},
			want:      [][]int{{0, 1}},
			wantStats: Stats{RecordsSeen: 2, Invocations: 1, RecordsDropped: 2},
			wantFailures: []failureSummary{
				{Condition: ConditionRetriesExhausted, First: 0, Last: 1, Size: 2, Invokes: 1, FunctionError: "Unhandled"}},
		},
		{
			name:  "infinite retries outlast the default",
			opts:  []Opt{MaximumRetryAttempts(-1)},
			setup: inserts(2),
			respond: func(_ context.Context, call int, _ []int) (events.DynamoDBEventResponse, error) {
				if call <= 5 {
					return events.DynamoDBEventResponse{}, errBoom
				}
				return events.DynamoDBEventResponse{}, nil
			},
			want:      slices.Repeat([][]int{{0, 1}}, 6),
			wantStats: Stats{RecordsSeen: 2, Invocations: 6, Retries: 5},
		},
		{
			name:  "exhausted item failures drop the rest of the batch",
			opts:  []Opt{MaximumRetryAttempts(1)},
			setup: inserts(4),
			respond: func(_ context.Context, _ int, batch []int) (events.DynamoDBEventResponse, error) {
				return failed(1), nil
			},
			want:      [][]int{span(0, 3), span(1, 3)},
			wantStats: Stats{RecordsSeen: 4, Invocations: 2, Retries: 1, RecordsDropped: 3},
			wantFailures: []failureSummary{
				{Condition: ConditionRetriesExhausted, First: 1, Last: 3, Size: 3, Invokes: 2}},
		},
		{
			name:      "bisection isolates a poison record",
			opts:      []Opt{BisectBatchOnFunctionError(true), MaximumRetryAttempts(1)},
			setup:     inserts(4),
			respond:   failWhenHas(2),
			want:      [][]int{span(0, 3), {0, 1}, {2, 3}, {2}, {2}, {3}},
			wantStats: Stats{RecordsSeen: 4, Invocations: 6, Retries: 1, Bisections: 2, RecordsDropped: 1},
			wantFailures: []failureSummary{
				{Condition: ConditionRetriesExhausted, First: 2, Last: 2, Size: 1, Invokes: 4, FunctionError: "Unhandled"}},
		},
		{
			name:      "item failures are not bisected",
			opts:      []Opt{BisectBatchOnFunctionError(true)},
			setup:     inserts(4),
			respond:   onFirstCall(failed(2), nil),
			want:      [][]int{span(0, 3), {2, 3}},
			wantStats: Stats{RecordsSeen: 4, Invocations: 2, Retries: 1},
		},
		{
			name:      "a function error retries the whole batch",
			setup:     inserts(2),
			respond:   onFirstCall(failed(1), errBoom),
			want:      [][]int{{0, 1}, {0, 1}},
			wantStats: Stats{RecordsSeen: 2, Invocations: 2, Retries: 1},
		},
		{
			name:      "a timeout is a function error",
			inProcess: []InProcessOpt{Timeout(20 * time.Millisecond)},
			setup:     inserts(2),
			respond: func(ctx context.Context, call int, _ []int) (events.DynamoDBEventResponse, error) {
				if call == 1 {
					<-ctx.Done()
				}
				return events.DynamoDBEventResponse{}, nil
			},
			want:      [][]int{{0, 1}, {0, 1}},
			wantStats: Stats{RecordsSeen: 2, Invocations: 2, Retries: 1},
		},
		{
			name:  "a panic is a function error",
			setup: inserts(2),
			respond: func(_ context.Context, call int, _ []int) (events.DynamoDBEventResponse, error) {
				if call == 1 {
					panic("nil map")
				}
				return events.DynamoDBEventResponse{}, nil
			},
			want:      [][]int{{0, 1}, {0, 1}},
			wantStats: Stats{RecordsSeen: 2, Invocations: 2, Retries: 1},
		},
		{
			name: "an invalid response fails the batch when item failures are reported",
			invoker: func(r *recorder) Invoker {
				return invokerFunc(func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
					r.handle(ctx, ev)
					if len(r.got()) == 1 {
						return events.DynamoDBEventResponse{}, &ResponseError{Body: []byte("ok"), Err: errBoom}
					}
					return events.DynamoDBEventResponse{}, nil
				})
			},
			setup:     inserts(2),
			want:      [][]int{{0, 1}, {0, 1}},
			wantStats: Stats{RecordsSeen: 2, Invocations: 2, Retries: 1},
		},
		{
			name: "an invalid response is ignored without ReportBatchItemFailures",
			opts: []Opt{ReportBatchItemFailures(false)},
			invoker: func(r *recorder) Invoker {
				return invokerFunc(func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
					r.handle(ctx, ev)
					return events.DynamoDBEventResponse{}, &ResponseError{Body: []byte("ok"), Err: errBoom}
				})
			},
			setup:     inserts(2),
			want:      [][]int{{0, 1}},
			wantStats: Stats{RecordsSeen: 2, Invocations: 1},
		},
		{
			name: "records older than MaximumRecordAge are dropped without an invocation",
			opts: []Opt{MaximumRecordAge(time.Hour)},
			setup: func(f *fakeStreams) {
				f.putAt("s", time.Now().Add(-2*time.Hour), insert, insert)
				f.put("s", insert)
			},
			want:      [][]int{{2}},
			wantStats: Stats{RecordsSeen: 3, Invocations: 1, RecordsDropped: 2},
			wantFailures: []failureSummary{
				{Condition: ConditionRecordAge, First: 0, Last: 1, Size: 2, Invokes: 0}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeStreams("s")
			tc.setup(f)
			f.close("s")
			rec := &recorder{respond: tc.respond}
			var inv Invoker = InProcess(rec.handle, tc.inProcess...)
			if tc.invoker != nil {
				inv = tc.invoker(rec)
			}
			var (
				mu       sync.Mutex
				failures []failureSummary
			)
			opts := append(fast(OnFailure(func(_ context.Context, fr FailureRecord) {
				mu.Lock()
				defer mu.Unlock()
				failures = append(failures, summarize(fr))
			})), tc.opts...)
			m, err := New(f, fakeARN, inv, opts...)
			if err != nil {
				t.Fatal(err)
			}
			run(t, m)
			waitFor(t, "the shard to be read and delivered", func() bool { return m.Stats().ShardsExhausted == 1 })

			if got := rec.got(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("invocations\n got: %v\nwant: %v", got, tc.want)
			}
			tc.wantStats.ShardsExhausted = 1
			if got := m.Stats(); got != tc.wantStats {
				t.Errorf("stats\n got: %+v\nwant: %+v", got, tc.wantStats)
			}
			mu.Lock()
			defer mu.Unlock()
			if !reflect.DeepEqual(failures, tc.wantFailures) {
				t.Errorf("OnFailure\n got: %+v\nwant: %+v", failures, tc.wantFailures)
			}
		})
	}
}

func TestFailureRecordJSON(t *testing.T) {
	f := newFakeStreams("shardId-0001")
	created := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	f.putAt("shardId-0001", created, insert)
	f.putAt("shardId-0001", created.Add(time.Second), insert)
	f.close("shardId-0001")
	got := make(chan FailureRecord, 1)
	m, err := New(f, fakeARN, InProcess(func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		return events.DynamoDBEventResponse{}, errBoom
	}), fast(MaximumRetryAttempts(1), FunctionARN("arn:aws:lambda:us-east-1:000000000000:function:relay"),
		OnFailure(func(_ context.Context, fr FailureRecord) { got <- fr }))...)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	var fr FailureRecord
	select {
	case fr = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no failure record")
	}
	if !errors.Is(fr.Err, errBoom) || len(fr.Records) != 2 {
		t.Errorf("Err %v and %d records, want boom and 2", fr.Err, len(fr.Records))
	}
	if fr.RequestContext.RequestID == "" {
		t.Error("no requestId")
	}
	b, err := json.Marshal(fr)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	// The volatile fields, checked above, aside, the document is Lambda's.
	doc["timestamp"] = "T"
	doc["requestContext"].(map[string]any)["requestId"] = "R"
	want := `{
	  "requestContext": {"requestId": "R", "functionArn": "arn:aws:lambda:us-east-1:000000000000:function:relay",
	    "condition": "RetryAttemptsExhausted", "approximateInvokeCount": 2},
	  "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
	  "version": "1.0",
	  "timestamp": "T",
	  "DDBStreamBatchInfo": {"shardId": "shardId-0001", "startSequenceNumber": "` + seqOf(0) + `",
	    "endSequenceNumber": "` + seqOf(1) + `", "approximateArrivalOfFirstRecord": "2024-06-01T12:00:00Z",
	    "approximateArrivalOfLastRecord": "2024-06-01T12:00:01Z", "batchSize": 2, "streamArn": "` + fakeARN + `"}
	}`
	var wantDoc map[string]any
	if err := json.Unmarshal([]byte(want), &wantDoc); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(doc, wantDoc) {
		t.Errorf("failure record\n got: %s\nwant: %s", b, want)
	}
	if _, err := time.Parse(time.RFC3339Nano, fr.Timestamp); err != nil {
		t.Errorf("timestamp %q: %v", fr.Timestamp, err)
	}
}

func TestBatchingWindowGathersRecords(t *testing.T) {
	const window = time.Second
	f := newFakeStreams("s")
	rec := &recorder{}
	m, err := New(f, fakeARN, InProcess(rec.handle), fast(MaximumBatchingWindow(window))...)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	start := time.Now()
	f.inserts("s", 3)
	waitFor(t, "the first records to be read", func() bool { return m.Stats().RecordsSeen == 3 })
	f.inserts("s", 3)
	waitFor(t, "an invocation", func() bool { return rec.calls() > 0 })
	waited := time.Since(start)
	if got, want := rec.got(), [][]int{span(0, 5)}; !reflect.DeepEqual(got, want) {
		t.Errorf("invocations %v, want %v: records read within the window belong to one batch", got, want)
	}
	if waited < window {
		t.Errorf("invoked after %v, before the %v window was over", waited, window)
	}
}

func TestBatchingWindowEndsEarlyWhenBatchIsFull(t *testing.T) {
	f := newFakeStreams("s")
	rec := &recorder{}
	m, err := New(f, fakeARN, InProcess(rec.handle), fast(BatchSize(4), MaximumBatchingWindow(time.Minute))...)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	f.inserts("s", 5)
	waitFor(t, "a full batch", func() bool { return rec.calls() == 1 })
	if got, want := rec.got(), [][]int{span(0, 3)}; !reflect.DeepEqual(got, want) {
		t.Errorf("invocations %v, want %v", got, want)
	}
}

func TestShardLineage(t *testing.T) {
	// The child is listed before its parent, on another DescribeStream page.
	f := newFakeStreams()
	f.pageSize = 1
	f.addShard("child", "parent")
	f.addShard("parent", "")
	f.addShard("orphan", "trimmed-long-ago") // its parent is no longer listed
	f.inserts("parent", 3)
	f.inserts("child", 2)
	f.inserts("orphan", 1)
	f.close("parent")

	rec := &recorder{}
	m, err := New(f, fakeARN, InProcess(rec.handle), fast()...)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	waitFor(t, "all records", func() bool { return m.Stats().RecordsSeen == 6 })
	waitFor(t, "all invocations", func() bool { return len(slices.Concat(rec.got()...)) == 6 })

	var order []int
	for _, b := range rec.got() {
		order = append(order, b...)
	}
	pos := func(i int) int { return slices.Index(order, i) }
	for _, c := range []int{3, 4} {
		for _, p := range []int{0, 1, 2} {
			if pos(c) < pos(p) {
				t.Errorf("child record %d delivered before parent record %d: %v", c, p, order)
			}
		}
	}
	reads, _ := f.log()
	lastParent := slices.Index(reads, "child") - 1
	if lastParent < 0 || slices.Contains(reads[lastParent+1:], "parent") {
		t.Errorf("the child shard was read before its parent was exhausted: %v", reads)
	}
}

func TestChildShardFoundWhenParentEnds(t *testing.T) {
	// Periodic discovery is off (an hour): the child must be found because
	// its parent ended.
	f := newFakeStreams("parent")
	rec := &recorder{}
	m, err := New(f, fakeARN, InProcess(rec.handle), PollInterval(2*time.Millisecond), DiscoveryInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	f.inserts("parent", 1)
	waitFor(t, "the parent's record", func() bool { return rec.calls() == 1 })

	f.addShard("child", "parent")
	f.inserts("child", 2)
	f.close("parent")
	waitFor(t, "the child's records", func() bool { return rec.calls() == 2 })
	if got, want := rec.got(), [][]int{{0}, {1, 2}}; !reflect.DeepEqual(got, want) {
		t.Errorf("invocations %v, want %v", got, want)
	}
	_, iters := f.log()
	if !slices.Contains(iters, "child TRIM_HORIZON") {
		t.Errorf("a new child shard must be read from its start: iterators %v", iters)
	}
}

func TestNewShardFoundByPeriodicDiscovery(t *testing.T) {
	f := newFakeStreams("a")
	rec := &recorder{}
	m, err := New(f, fakeARN, InProcess(rec.handle), fast()...)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	waitFor(t, "shard a to be polled", func() bool { r, _ := f.log(); return len(r) > 0 })
	f.addShard("b", "")
	f.inserts("b", 2)
	waitFor(t, "the new shard's records", func() bool { return rec.calls() == 1 })
	if got, want := rec.got(), [][]int{{0, 1}}; !reflect.DeepEqual(got, want) {
		t.Errorf("invocations %v, want %v", got, want)
	}
}

func TestGetRecordsErrors(t *testing.T) {
	expired := &types.ExpiredIteratorException{Message: ptr("Iterator expired")}
	cases := []struct {
		name          string
		faults        map[int]error // GetRecords call -> error
		want          [][]int
		wantIterators []string
	}{
		// Before anything was read, the shard is started again.
		{"expired before the first read", map[int]error{1: expired},
			[][]int{{0, 1}, {2}}, []string{"s TRIM_HORIZON", "s TRIM_HORIZON"}},
		// After a read, reading resumes right after the last record read.
		{"expired after a read", map[int]error{2: expired},
			[][]int{{0, 1}, {2}}, []string{"s TRIM_HORIZON", "s AFTER_SEQUENCE_NUMBER " + seqOf(1)}},
		{"expired twice in a row", map[int]error{2: expired, 3: expired},
			[][]int{{0, 1}, {2}}, []string{"s TRIM_HORIZON", "s AFTER_SEQUENCE_NUMBER " + seqOf(1), "s AFTER_SEQUENCE_NUMBER " + seqOf(1)}},
		// Trimmed: what follows the last read is gone, so reading restarts at
		// the oldest record left (the fake trims nothing, so it redelivers).
		{"trimmed", map[int]error{2: &types.TrimmedDataAccessException{Message: ptr("trimmed")}},
			[][]int{{0, 1}, {0, 1}, {2}}, []string{"s TRIM_HORIZON", "s TRIM_HORIZON"}},
		// Any other error is retried with the same iterator.
		{"throttled", map[int]error{2: &types.LimitExceededException{Message: ptr("slow down")}, 3: errors.New("connection reset")},
			[][]int{{0, 1}, {2}}, []string{"s TRIM_HORIZON"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeStreams("s")
			f.inserts("s", 3)
			f.close("s")
			f.faults["s"] = tc.faults
			rec := &recorder{}
			m, err := New(f, fakeARN, InProcess(rec.handle), fast(BatchSize(2))...)
			if err != nil {
				t.Fatal(err)
			}
			run(t, m)
			waitFor(t, "the shard", func() bool { return m.Stats().ShardsExhausted == 1 })
			if got := rec.got(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("invocations %v, want %v", got, tc.want)
			}
			if _, iters := f.log(); !reflect.DeepEqual(iters, tc.wantIterators) {
				t.Errorf("GetShardIterator calls\n got: %v\nwant: %v", iters, tc.wantIterators)
			}
		})
	}
}

func TestStartPositionLatest(t *testing.T) {
	f := newFakeStreams("closed", "open")
	f.inserts("closed", 1)
	f.close("closed")
	f.inserts("open", 2)
	rec := &recorder{}
	m, err := New(f, fakeARN, InProcess(rec.handle), fast(StartPosition(Latest))...)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	waitFor(t, "the open shard to be polled", func() bool { r, _ := f.log(); return len(r) > 0 })
	f.inserts("open", 1)
	waitFor(t, "the new record", func() bool { return rec.calls() == 1 })
	if got, want := rec.got(), [][]int{{3}}; !reflect.DeepEqual(got, want) {
		t.Errorf("invocations %v, want %v: only records written after start", got, want)
	}
	if _, iters := f.log(); !reflect.DeepEqual(iters, []string{"open LATEST"}) {
		t.Errorf("iterators %v, want only the open shard at LATEST", iters)
	}
}

func TestRunStopsMidInvocation(t *testing.T) {
	f := newFakeStreams("s")
	f.inserts("s", 1)
	entered := make(chan struct{})
	m, err := New(f, fakeARN, InProcess(func(ctx context.Context, _ events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		close(entered)
		<-ctx.Done()
		return events.DynamoDBEventResponse{}, ctx.Err()
	}, Timeout(time.Minute)), fast()...)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, m)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("not invoked")
	}
	stop()
	if s := m.Stats(); s.Retries != 0 || s.RecordsDropped != 0 {
		t.Errorf("a stopped invocation must be neither retried nor dropped: %+v", s)
	}
}

func TestRunErrors(t *testing.T) {
	t.Run("stream not found", func(t *testing.T) {
		f := newFakeStreams("s")
		f.missing = true
		m, err := New(f, fakeARN, InProcess((&recorder{}).handle), fast()...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = m.Run(ctx)
		var nf *types.ResourceNotFoundException
		if !errors.As(err, &nf) {
			t.Errorf("Run = %v, want a ResourceNotFoundException", err)
		}
	})
	t.Run("already running", func(t *testing.T) {
		m, err := New(newFakeStreams("s"), fakeARN, InProcess((&recorder{}).handle), fast()...)
		if err != nil {
			t.Fatal(err)
		}
		run(t, m)
		waitFor(t, "Run to start", m.running.Load)
		if err := m.Run(context.Background()); !errors.Is(err, ErrRunning) {
			t.Errorf("second Run = %v, want ErrRunning", err)
		}
	})
}

func TestInvocationContext(t *testing.T) {
	f := newFakeStreams("s")
	f.inserts("s", 1)
	f.close("s")
	type seen struct {
		lc       *lambdacontext.LambdaContext
		deadline time.Duration
	}
	got := make(chan seen, 1)
	m, err := New(f, fakeARN, InProcess(func(ctx context.Context, _ events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		lc, _ := lambdacontext.FromContext(ctx)
		d, _ := ctx.Deadline()
		got <- seen{lc, time.Until(d)}
		return events.DynamoDBEventResponse{}, nil
	}, Timeout(7*time.Second)), fast(FunctionARN("arn:aws:lambda:us-east-1:000000000000:function:relay"))...)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	s := <-got
	if s.lc == nil || s.lc.AwsRequestID == "" || s.lc.InvokedFunctionArn != "arn:aws:lambda:us-east-1:000000000000:function:relay" {
		t.Errorf("Lambda context %+v, want a request id and the function ARN", s.lc)
	}
	if s.deadline <= 6*time.Second || s.deadline > 7*time.Second {
		t.Errorf("deadline in %v, want just under the 7s timeout", s.deadline)
	}
}

func TestNewValidates(t *testing.T) {
	h := InProcess((&recorder{}).handle)
	f := newFakeStreams("s")
	cases := []struct {
		name   string
		target Invoker
		opts   []Opt
		field  string // "" for valid
	}{
		{"defaults", h, nil, ""},
		{"all valid", h, []Opt{BatchSize(10000), MaximumBatchingWindow(300 * time.Second), StartPosition(Latest),
			MaximumRetryAttempts(-1), MaximumRecordAge(time.Second), Filter(AllRecords)}, ""},
		{"batch size 0", h, []Opt{BatchSize(0)}, "esm.BatchSize"},
		{"batch size too big", h, []Opt{BatchSize(10001)}, "esm.BatchSize"},
		{"negative window", h, []Opt{MaximumBatchingWindow(-time.Second)}, "esm.MaximumBatchingWindow"},
		{"window too long", h, []Opt{MaximumBatchingWindow(301 * time.Second)}, "esm.MaximumBatchingWindow"},
		{"unknown start", h, []Opt{StartPosition("AT_TIMESTAMP")}, "esm.StartPosition"},
		{"nil filter", h, []Opt{Filter(nil)}, "esm.Filter"},
		{"retries below -1", h, []Opt{MaximumRetryAttempts(-2)}, "esm.MaximumRetryAttempts"},
		{"retries too many", h, []Opt{MaximumRetryAttempts(10001)}, "esm.MaximumRetryAttempts"},
		{"zero record age", h, []Opt{MaximumRecordAge(0)}, "esm.MaximumRecordAge"},
		{"nil OnFailure", h, []Opt{OnFailure(nil)}, "esm.OnFailure"},
		{"zero poll interval", h, []Opt{PollInterval(0)}, "esm.PollInterval"},
		{"zero discovery interval", h, []Opt{DiscoveryInterval(0)}, "esm.DiscoveryInterval"},
		{"empty function ARN", h, []Opt{FunctionARN("")}, "esm.FunctionARN"},
		{"nil logger", h, []Opt{Logger(nil)}, "esm.Logger"},
		{"nil target", nil, nil, "esm.New(target)"},
		{"nil handler", InProcess(nil), nil, "esm.InProcess"},
		{"bad timeout", InProcess((&recorder{}).handle, Timeout(0)), nil, "esm.Timeout"},
		{"timeout over 15 minutes", InProcess((&recorder{}).handle, Timeout(901*time.Second)), nil, "esm.Timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(f, fakeARN, tc.target, tc.opts...)
			if tc.field == "" {
				if err != nil || m == nil {
					t.Fatalf("New = %v, %v; want a mapping", m, err)
				}
				return
			}
			var oe *outbox.OptionError
			if !errors.As(err, &oe) || oe.Option != tc.field {
				t.Fatalf("New error = %v, want an *outbox.OptionError for %s", err, tc.field)
			}
			if oe.Reason == "" || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name the field and the fix", err)
			}
		})
	}
	t.Run("errors are reported together", func(t *testing.T) {
		_, err := New(nil, "", h, BatchSize(0))
		for _, field := range []string{"esm.New(streams)", "esm.New(streamARN)", "esm.BatchSize"} {
			if !strings.Contains(fmt.Sprint(err), field) {
				t.Errorf("error %v does not mention %s", err, field)
			}
		}
	})
}
