package faults_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/faults"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/local/dynamolocal"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newInjector(t *testing.T, opts ...faults.Option) *faults.Injector {
	t.Helper()
	inj, err := faults.New(opts...)
	if err != nil {
		t.Fatalf("faults.New: %v", err)
	}
	return inj
}

// client is a DynamoDB client for the test engine with inj installed.
func client(t *testing.T, inj *faults.Injector, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	d := testenv.DynamoDB(t)
	return dynamolocal.NewClient(d.Config, d.Endpoint, append([]func(*dynamodb.Options){inj.Install}, optFns...)...)
}

// newTable creates a table keyed by pk (S) and returns its name.
func newTable(t *testing.T, name string) string {
	t.Helper()
	d := testenv.DynamoDB(t)
	table := testenv.Name(t, name)
	_, err := d.Client.CreateTable(ctxT(t), &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	return table
}

func key(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}
}

// stored reads pk with a clean client (no faults).
func stored(t *testing.T, table, pk string) bool {
	t.Helper()
	out, err := testenv.DynamoDB(t).Client.GetItem(ctxT(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key(pk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item != nil
}

func scanKeys(t *testing.T, table string) []string {
	t.Helper()
	out, err := testenv.DynamoDB(t).Client.Scan(ctxT(t), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, it := range out.Items {
		keys = append(keys, it["pk"].(*types.AttributeValueMemberS).Value)
	}
	slices.Sort(keys)
	return keys
}

func put(table, pk string) *dynamodb.PutItemInput {
	return &dynamodb.PutItemInput{TableName: aws.String(table), Item: key(pk)}
}

func TestNewRefusesBadPolicies(t *testing.T) {
	cases := []struct {
		name   string
		opt    faults.Option
		option string
	}{
		{"negative", faults.For("PutItem", faults.Policy{Throttle: -0.1}), `For("PutItem").Throttle`},
		{"above one", faults.For("GetItem", faults.Policy{Timeout: 1.5}), `For("GetItem").Timeout`},
		{"not a number", faults.For("GetItem", faults.Policy{ServerError: nan()}), `For("GetItem").ServerError`},
		{"sum above one", faults.For("Query", faults.Policy{Throttle: 0.6, ResponseLost: 0.6}), `For("Query").Throttle+Throttling+ServerError+Timeout+ResponseLost`},
		{"unprocessed elsewhere", faults.For("PutItem", faults.Policy{Unprocessed: 0.5}), `For("PutItem").Unprocessed`},
		{"negative limit", faults.For("PutItem", faults.Policy{Limit: -1}), `For("PutItem").Limit`},
		{"typo", faults.For("Putitem", faults.Policy{Throttle: 0.1}), `For("Putitem")`},
		{"not an operation", faults.For("Options", faults.Policy{Throttle: 0.1}), `For("Options")`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inj, err := faults.New(c.opt)
			var oe *outbox.OptionError
			if !errors.As(err, &oe) || oe.Option != c.option {
				t.Fatalf("New = %v, %v; want an *outbox.OptionError naming %s", inj, err, c.option)
			}
		})
	}
	if _, err := faults.New(faults.For(faults.AllOperations, faults.Policy{Throttle: 0.5, Timeout: 0.5, Unprocessed: 1, Limit: 3})); err != nil {
		t.Fatalf("a valid policy for every operation: %v", err)
	}
}

func nan() float64 { var z float64; return z / z }

// TestMiddlewarePlacement checks where the middlewares sit: the transport
// faults innermost in the deserialize step (around the HTTP round trip,
// under the retry loop of the finalize step), unprocessed items in the
// initialize step, and nothing for operations without a policy.
func TestMiddlewarePlacement(t *testing.T) {
	inj := newInjector(t, faults.For("BatchWriteItem", faults.Policy{Unprocessed: 1, Throttle: 0.1}))
	errStop := errors.New("stack inspected")
	stacks := map[string]*middleware.Stack{}
	inspect := func(stack *middleware.Stack) error { stacks[stack.ID()] = stack; return errStop }
	// Only the endpoint is needed; no request is sent.
	c := dynamolocal.NewClient(aws.Config{Region: "us-east-1", Credentials: aws.AnonymousCredentials{}}, "http://127.0.0.1:1",
		inj.Install, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, inspect) })
	ctx := context.Background()
	if _, err := c.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{}); !errors.Is(err, errStop) {
		t.Fatalf("BatchWriteItem: %v", err)
	}
	if _, err := c.GetItem(ctx, &dynamodb.GetItemInput{}); !errors.Is(err, errStop) {
		t.Fatalf("GetItem: %v", err)
	}
	s := stacks["BatchWriteItem"]
	if l := s.Deserialize.List(); l[len(l)-1] != faults.TransportID {
		t.Errorf("deserialize step %v: %s must be last (innermost)", l, faults.TransportID)
	}
	if !slices.Contains(s.Finalize.List(), "Retry") {
		t.Errorf("finalize step %v has no Retry middleware", s.Finalize.List())
	}
	if l := s.Initialize.List(); l[len(l)-1] != faults.UnprocessedID || l[0] != faults.InputID {
		t.Errorf("initialize step %v: %s must be first, %s last", l, faults.InputID, faults.UnprocessedID)
	}
	g := stacks["GetItem"]
	if slices.Contains(g.Deserialize.List(), faults.TransportID) || slices.Contains(g.Initialize.List(), faults.UnprocessedID) ||
		slices.Contains(g.Initialize.List(), faults.InputID) {
		t.Errorf("GetItem has no policy but got a fault middleware: %v %v", g.Initialize.List(), g.Deserialize.List())
	}
}

// TestFaultsAreTheSDKsOwnErrors injects each per-attempt kind into PutItem
// with SDK retries off and checks what the caller sees: the SDK's own error
// types (so errors.As on *types.ProvisionedThroughputExceededException and
// friends works as on real ones), the SDK retryer's classification of them,
// whether the item was written, and the counters and hook.
func TestFaultsAreTheSDKsOwnErrors(t *testing.T) {
	table := newTable(t, "kinds")
	standard := retry.NewStandard()
	throttles := retry.IsErrorThrottles(retry.DefaultThrottles)
	cases := []struct {
		kind     faults.Kind
		policy   faults.Policy
		typed    func(error) bool
		status   int // HTTP status of the error response; 0: none (transport error)
		throttle bool
		written  bool
	}{
		{faults.Throttle, faults.Policy{Throttle: 1}, isA[*types.ProvisionedThroughputExceededException], 400, true, false},
		{faults.Throttling, faults.Policy{Throttling: 1}, isA[*types.ThrottlingException], 400, true, false},
		{faults.ServerError, faults.Policy{ServerError: 1}, isA[*types.InternalServerError], 500, false, false},
		{faults.Timeout, faults.Policy{Timeout: 1}, isTimeout(faults.Timeout), 0, false, false},
		{faults.ResponseLost, faults.Policy{ResponseLost: 1}, isTimeout(faults.ResponseLost), 0, false, true},
	}
	for _, validate := range []bool{false, true} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/crc=%v", c.kind, validate), func(t *testing.T) {
				var hooked []faults.Fault
				inj := newInjector(t, faults.For("PutItem", c.policy), faults.OnFault(func(f faults.Fault) { hooked = append(hooked, f) }))
				var logged []string // the SDK logs a checksum mismatch when it closes the response body
				cl := client(t, inj, faults.NoRetries, func(o *dynamodb.Options) {
					o.DisableValidateResponseChecksum = !validate
					o.Logger = logging.LoggerFunc(func(_ logging.Classification, format string, v ...any) {
						logged = append(logged, fmt.Sprintf(format, v...))
					})
				})
				pk := fmt.Sprintf("%s-%v", c.kind, validate)
				in := put(table, pk)
				_, err := cl.PutItem(ctxT(t), in)
				if err == nil {
					t.Fatal("PutItem succeeded; want the injected fault")
				}
				if !c.typed(err) {
					t.Fatalf("err = %v (%T); not the expected type", err, err)
				}
				var oe *smithy.OperationError
				if !errors.As(err, &oe) || oe.OperationName != "PutItem" {
					t.Errorf("err = %v; want it wrapped in a *smithy.OperationError for PutItem, as the SDK does", err)
				}
				var re *awshttp.ResponseError
				switch {
				case c.status != 0 && (!errors.As(err, &re) || re.HTTPStatusCode() != c.status || !strings.HasPrefix(re.ServiceRequestID(), "FAULTS")):
					t.Errorf("err = %v; want an *awshttp.ResponseError with status %d and a request id", err, c.status)
				case c.status == 0 && !isA[*smithyhttp.RequestSendError](err):
					t.Errorf("err = %v; want a *smithyhttp.RequestSendError, as a real timeout", err)
				}
				if !standard.IsErrorRetryable(err) {
					t.Errorf("the SDK's standard retryer would not retry %v", err)
				}
				if got := throttles.IsErrorThrottle(err).Bool(); got != c.throttle {
					t.Errorf("the SDK classifies %v as a throttle: %v, want %v", err, got, c.throttle)
				}
				if len(logged) != 0 {
					t.Errorf("the SDK logged %q; a fabricated response must look real (CRC32 header included)", logged)
				}
				if got := stored(t, table, pk); got != c.written {
					t.Errorf("item stored = %v, want %v", got, c.written)
				}
				if n := inj.Count(c.kind, "PutItem"); n != 1 || inj.Total() != 1 {
					t.Errorf("Count(%s, PutItem) = %d, Total = %d; want 1 and 1 (%v)", c.kind, n, inj.Total(), inj.Counts())
				}
				if len(hooked) != 1 || hooked[0].Kind != c.kind || hooked[0].Operation != "PutItem" || hooked[0].Input != in {
					t.Errorf("OnFault saw %+v; want one %s on PutItem with the caller's input", hooked, c.kind)
				}
				if c.kind == faults.ResponseLost && (len(hooked) != 1 || hooked[0].Status != http.StatusOK) {
					t.Errorf("the lost response's status = %+v, want 200", hooked)
				}
			})
		}
	}
}

func isA[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

func isTimeout(k faults.Kind) func(error) bool {
	return func(err error) bool {
		var te *faults.TimeoutError
		var timeout interface{ Timeout() bool }
		return errors.As(err, &te) && te.Kind == k && errors.As(err, &timeout) && timeout.Timeout()
	}
}

// TestUnprocessedItems: BatchWriteItem executes only a proper subset of its
// puts and reports the others unprocessed; together they are the request,
// without overlap. The caller's input is untouched.
func TestUnprocessedItems(t *testing.T) {
	var hooked []faults.Fault
	inj := newInjector(t, faults.Seed(3), faults.For("BatchWriteItem", faults.Policy{Unprocessed: 1}),
		faults.OnFault(func(f faults.Fault) { hooked = append(hooked, f) }))
	cl := client(t, inj, faults.NoRetries)
	calls := int64(0)
	round := func(t *testing.T, want map[string][]string) {
		t.Helper()
		in := &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{}}
		total := 0
		for table, pks := range want {
			for _, pk := range pks {
				in.RequestItems[table] = append(in.RequestItems[table], types.WriteRequest{PutRequest: &types.PutRequest{Item: key(pk)}})
				total++
				if _, err := testenv.DynamoDB(t).Client.DeleteItem(ctxT(t), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key(pk)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		out, err := cl.BatchWriteItem(ctxT(t), in)
		if err != nil {
			t.Fatal(err)
		}
		calls++
		processed, unprocessed := 0, 0
		for table, pks := range want {
			if len(in.RequestItems[table]) != len(pks) {
				t.Fatalf("the caller's input was modified: %d requests for %s, was %d", len(in.RequestItems[table]), table, len(pks))
			}
			got := scanKeys(t, table)
			var back []string
			for _, r := range out.UnprocessedItems[table] {
				back = append(back, r.PutRequest.Item["pk"].(*types.AttributeValueMemberS).Value)
			}
			all := append(append([]string{}, got...), back...)
			slices.Sort(all)
			if !slices.Equal(all, pks) {
				t.Fatalf("table %s: stored %v + unprocessed %v; want exactly %v between them", table, got, back, pks)
			}
			processed += len(got)
			unprocessed += len(back)
		}
		if processed == 0 || unprocessed == 0 {
			t.Fatalf("%d processed, %d unprocessed; want a proper subset processed", processed, unprocessed)
		}
		if f := hooked[len(hooked)-1]; f.Kind != faults.Unprocessed || f.Unprocessed != unprocessed || f.Requests != total || f.Input != in {
			t.Errorf("OnFault saw %+v; want %d of %d held back", f, unprocessed, total)
		}
		if n := inj.Count(faults.Unprocessed, "BatchWriteItem"); n != calls {
			t.Errorf("Count(unprocessed) = %d after %d calls", n, calls)
		}
	}
	t.Run("two tables", func(t *testing.T) {
		a, b := newTable(t, "ua"), newTable(t, "ub")
		for range 3 {
			round(t, map[string][]string{a: {"a0", "a1", "a2", "a3", "a4", "a5"}, b: {"b0", "b1", "b2", "b3"}})
		}
	})
	t.Run("two requests", func(t *testing.T) {
		// Each is held back with probability 1/2: both or neither often,
		// and still exactly one must go.
		a := newTable(t, "u2")
		for range 12 {
			round(t, map[string][]string{a: {"x", "y"}})
		}
	})
	t.Run("one request", func(t *testing.T) {
		// One request cannot be split: DynamoDB would throttle the call
		// instead.
		a := newTable(t, "u1")
		one := &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{a: {{PutRequest: &types.PutRequest{Item: key("single")}}}}}
		out, err := cl.BatchWriteItem(ctxT(t), one)
		if err != nil || len(out.UnprocessedItems) != 0 || !stored(t, a, "single") {
			t.Fatalf("single-request batch: %v, unprocessed %v", err, out.UnprocessedItems)
		}
		if n := inj.Count(faults.Unprocessed, ""); n != calls {
			t.Errorf("Count(unprocessed) = %d after a single-request batch, want still %d", n, calls)
		}
	})
}

// TestSwitch: a disabled injector injects nothing and keeps its counters;
// enabled, it injects again.
func TestSwitch(t *testing.T) {
	table := newTable(t, "switch")
	inj := newInjector(t, faults.Disabled(), faults.For(faults.AllOperations, faults.Policy{ServerError: 1}))
	cl := client(t, inj, faults.NoRetries)
	get := func() error {
		_, err := cl.GetItem(ctxT(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key("x")})
		return err
	}
	steps := []struct {
		do      func()
		enabled bool
		fails   bool
		count   int64
	}{
		{func() {}, false, false, 0},
		{inj.Enable, true, true, 1},
		{inj.Disable, false, false, 1},
		{inj.Enable, true, true, 2},
	}
	for i, s := range steps {
		s.do()
		err := get()
		if inj.Enabled() != s.enabled || (err != nil) != s.fails || inj.Count(faults.ServerError, "GetItem") != s.count {
			t.Fatalf("step %d: enabled %v, err %v, count %d; want %v, failure %v, %d",
				i, inj.Enabled(), err, inj.Count(faults.ServerError, "GetItem"), s.enabled, s.fails, s.count)
		}
	}
	if got, want := inj.String(), "throttle=0 throttling=0 server-error=2 timeout=0 response-lost=0 unprocessed=0"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// TestSDKRetriesInjectedFaults: with the SDK's default retryer (DynamoDB: 4
// attempts), injected faults are retried like real ones. With Limit 2 the
// first two attempts fail and the third succeeds.
func TestSDKRetriesInjectedFaults(t *testing.T) {
	table := newTable(t, "retries")
	cases := []struct {
		kind   faults.Kind
		policy faults.Policy
	}{
		{faults.ServerError, faults.Policy{ServerError: 1, Limit: 2}},
		{faults.Timeout, faults.Policy{Timeout: 1, Limit: 2}},
		{faults.ResponseLost, faults.Policy{ResponseLost: 1, Limit: 2}},
		// Throttles back off from a 1 s base: one is enough here.
		{faults.Throttle, faults.Policy{Throttle: 1, Limit: 1}},
	}
	for _, c := range cases {
		t.Run(c.kind.String(), func(t *testing.T) {
			inj := newInjector(t, faults.For("PutItem", c.policy))
			cl := client(t, inj)
			out, err := cl.PutItem(ctxT(t), put(table, c.kind.String()))
			if err != nil {
				t.Fatalf("PutItem with SDK retries: %v", err)
			}
			results, ok := retry.GetAttemptResults(out.ResultMetadata)
			if !ok || len(results.Results) != c.policy.Limit+1 {
				t.Fatalf("attempts = %+v; want %d", results, c.policy.Limit+1)
			}
			for i, r := range results.Results[:c.policy.Limit] {
				if r.Err == nil || !r.Retryable {
					t.Errorf("attempt %d: err %v retryable %v; want a retried failure", i+1, r.Err, r.Retryable)
				}
			}
			if n := inj.Count(c.kind, "PutItem"); n != int64(c.policy.Limit) {
				t.Errorf("Count = %d, want %d", n, c.policy.Limit)
			}
			if !stored(t, table, c.kind.String()) {
				t.Error("item not stored after the retries")
			}
		})
	}
}

// TestSDKRetryAfterLostResponseFailsItsOwnCondition shows why a lost
// response is dangerous for conditional writes: the SDK's retryer resends
// the put, which now fails its condition against the item the first attempt
// wrote. The caller sees ConditionalCheckFailedException for a write that
// succeeded. (TransactWriteItems with a ClientRequestToken does not have
// this problem; see TestWriterAfterInjectedFaults.)
func TestSDKRetryAfterLostResponseFailsItsOwnCondition(t *testing.T) {
	table := newTable(t, "cond")
	inj := newInjector(t, faults.For("PutItem", faults.Policy{ResponseLost: 1, Limit: 1}))
	cl := client(t, inj)
	in := put(table, "mine")
	in.ConditionExpression = aws.String("attribute_not_exists(pk)")
	_, err := cl.PutItem(ctxT(t), in)
	if !isA[*types.ConditionalCheckFailedException](err) {
		t.Fatalf("PutItem = %v; want ConditionalCheckFailedException from the SDK's retry of the executed put", err)
	}
	if !stored(t, table, "mine") || inj.Count(faults.ResponseLost, "PutItem") != 1 {
		t.Fatalf("stored %v, lost responses %d; want the item stored by the first attempt", stored(t, table, "mine"), inj.Count(faults.ResponseLost, "PutItem"))
	}
}

// TestCountsMatchWhatCallersSee: one injector shared by concurrent callers;
// every failure a caller sees (retries off) is one counted fault.
func TestCountsMatchWhatCallersSee(t *testing.T) {
	table := newTable(t, "shared")
	inj := newInjector(t, faults.Seed(11), faults.For("GetItem", faults.Policy{Throttle: 0.2, ServerError: 0.2, Timeout: 0.1}))
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed = map[faults.Kind]int64{}
	)
	for w := range 4 {
		cl := client(t, inj, faults.NoRetries)
		wg.Go(func() {
			for i := range 25 {
				_, err := cl.GetItem(ctxT(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key(fmt.Sprint(w, i))})
				k, ok := kindOf(err)
				if err != nil && !ok {
					t.Errorf("unexpected error: %v", err)
				}
				if ok {
					mu.Lock()
					failed[k]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	var total int64
	for _, k := range []faults.Kind{faults.Throttle, faults.ServerError, faults.Timeout} {
		if got := inj.Count(k, "GetItem"); got != failed[k] {
			t.Errorf("Count(%s) = %d; callers saw %d", k, got, failed[k])
		}
		if failed[k] == 0 {
			t.Errorf("no %s in 100 calls at probability >= 0.1", k)
		}
		total += failed[k]
	}
	if inj.Total() != total {
		t.Errorf("Total = %d, callers saw %d faults (%v)", inj.Total(), total, inj.Counts())
	}
}

func kindOf(err error) (faults.Kind, bool) {
	var te *faults.TimeoutError
	switch {
	case err == nil:
		return 0, false
	case isA[*types.ProvisionedThroughputExceededException](err):
		return faults.Throttle, true
	case isA[*types.ThrottlingException](err):
		return faults.Throttling, true
	case isA[*types.InternalServerError](err):
		return faults.ServerError, true
	case errors.As(err, &te):
		return te.Kind, true
	}
	return 0, false
}

// TestSeedRepeats: the same seed injects the same faults into the same
// sequence of calls; another seed does not.
func TestSeedRepeats(t *testing.T) {
	table := newTable(t, "seed")
	run := func(seed uint64) string {
		inj := newInjector(t, faults.Seed(seed), faults.For("GetItem", faults.Policy{Throttle: 0.3, Timeout: 0.3}))
		cl := client(t, inj, faults.NoRetries)
		var b strings.Builder
		for range 30 {
			_, err := cl.GetItem(ctxT(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key("k")})
			k, ok := kindOf(err)
			switch {
			case ok:
				b.WriteString(k.String()[:2])
			case err != nil:
				t.Fatal(err)
			default:
				b.WriteString("ok")
			}
			b.WriteByte(' ')
		}
		return b.String()
	}
	first, again, other := run(5), run(5), run(6)
	if first != again {
		t.Errorf("seed 5 twice:\n%s\n%s", first, again)
	}
	if first == other {
		t.Errorf("seeds 5 and 6 inject the same faults: %s", first)
	}
}

// TestSDKRetryQuotaRunsOut documents a property of the SDK's standard
// retryer that a soak must plan for: retries draw on a per-client quota
// (500 tokens; 14 per retry, 5 per throttle retry, refunded only when the
// retry succeeds). Under a sustained fault rate the quota runs dry and the
// SDK stops retrying: calls fail after one attempt with a
// ratelimit.QuotaExceededError joined to the fault. ratelimit.None lifts it.
func TestSDKRetryQuotaRunsOut(t *testing.T) {
	table := newTable(t, "quota")
	fast := func(o *dynamodb.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = 4 // DynamoDB's default
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		})
	}
	inj := newInjector(t, faults.For("GetItem", faults.Policy{ServerError: 1}))
	cl := client(t, inj, fast)
	calls := 0
	for ; calls < 30; calls++ {
		_, err := cl.GetItem(ctxT(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key("k")})
		if !isA[*types.InternalServerError](err) {
			t.Fatalf("call %d: %v; want the injected InternalServerError", calls+1, err)
		}
		if isA[ratelimit.QuotaExceededError](err) {
			break
		}
	}
	// 500 tokens / (3 retries x 14) = 11 calls with all their retries.
	if calls != 11 {
		t.Fatalf("the retry quota ran out at call %d (%d faults injected); want call 12", calls+1, inj.Count(faults.ServerError, ""))
	}
	before := inj.Count(faults.ServerError, "")
	if _, err := cl.GetItem(ctxT(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key("k")}); !isA[ratelimit.QuotaExceededError](err) {
		t.Fatalf("after the quota ran out: %v", err)
	}
	if n := inj.Count(faults.ServerError, "") - before; n != 1 {
		t.Errorf("a call without quota made %d attempts, want 1", n)
	}

	unlimited := func(o *dynamodb.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = 4
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
			so.RateLimiter = ratelimit.None
		})
	}
	cl = client(t, inj, unlimited)
	before = inj.Count(faults.ServerError, "")
	for range 20 {
		_, err := cl.GetItem(ctxT(t), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key("k")})
		var me *retry.MaxAttemptsError
		if !errors.As(err, &me) || me.Attempt != 4 {
			t.Fatalf("with ratelimit.None: %v; want all 4 attempts made", err)
		}
	}
	if n := inj.Count(faults.ServerError, "") - before; n != 80 {
		t.Errorf("20 calls made %d attempts, want 80", n)
	}
}
