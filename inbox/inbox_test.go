package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/dynamoerr"
	"github.com/dynakafka/outbox/internal/harness/faults"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/store/dynamo"
)

// step is one delivery: the record of message id (on key k, sequence seq)
// and the status Process must report.
type step struct {
	id   string
	seq  int64
	want Status
}

// Duplicates are skipped without a second business write, whether they
// follow at once or interleave with other messages, in both modes.
func TestDuplicatesAreSkipped(t *testing.T) {
	cases := []struct {
		name  string
		opts  []Option
		steps []step
	}{
		{"same id twice", nil, []step{{"a", 1, Applied}, {"a", 1, Duplicate}}},
		{"interleaved", nil, []step{{"a", 1, Applied}, {"b", 2, Applied}, {"a", 1, Duplicate}, {"c", 3, Applied}, {"b", 2, Duplicate}, {"a", 1, Duplicate}}},
		{"interleaved in order", []Option{InOrder()}, []step{{"a", 1, Applied}, {"b", 2, Applied}, {"a", 1, Duplicate}, {"c", 3, Applied}, {"b", 2, Duplicate}, {"c", 3, Duplicate}}},
		{"no sequence headers", []Option{InOrder()}, []step{{"a", 0, Applied}, {"b", 0, Applied}, {"a", 0, Duplicate}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			ib := e.inbox(t, nil, c.opts...)
			var got []Status
			var seqs []int64
			for i, s := range c.steps {
				res, err := ib.Process(ctxT(t), rec("orders", 0, int64(i), "k", s.id, 3, s.seq), e.apply)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				got = append(got, res.Status)
				if res.Status == Applied {
					seqs = append(seqs, s.seq)
				}
			}
			var want []Status
			for _, s := range c.steps {
				want = append(want, s.want)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("statuses %v, want %v", got, want)
			}
			if n, applied := e.applied(t, "k"); n != int64(len(seqs)) || !slices.Equal(applied, seqs) {
				t.Fatalf("read model applied %d: %v; want %v", n, applied, seqs)
			}
		})
	}
}

// A stale copy after a newer record: in-order mode drops it, id-only mode
// applies it out of order. Two ways to get one: a first delivery that
// arrives late (3 before 2, as after a partial publish failure), and a copy
// of an old message arriving after its id's retention window.
func TestStaleCopyAfterNewerRecord(t *testing.T) {
	cases := []struct {
		name    string
		opts    []Option
		late    []step // after 1 and 3 were applied
		applied []int64
	}{
		{"late first delivery, id-only", nil, []step{{"m2", 2, Applied}}, []int64{1, 3, 2}},
		{"late first delivery, in order", []Option{InOrder()}, []step{{"m2", 2, Stale}}, []int64{1, 3}},
		{"copy after the window, id-only", nil, []step{{"window", 0, Applied}, {"m1", 1, Applied}}, []int64{1, 3, 1}},
		{"copy after the window, in order", []Option{InOrder()}, []step{{"window", 0, Applied}, {"m1", 1, Stale}}, []int64{1, 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			clk := &clock{t: time.Unix(1_700_000_000, 0)}
			ib := e.inbox(t, nil, append(c.opts, WithClock(clk), Retention(time.Hour))...)
			process := func(s step, off int64) Status {
				t.Helper()
				res, err := ib.Process(ctxT(t), rec("orders", 0, off, "k", s.id, 3, s.seq), e.apply)
				if err != nil {
					t.Fatal(err)
				}
				return res.Status
			}
			process(step{id: "m1", seq: 1}, 0)
			process(step{id: "m3", seq: 3}, 1)
			for i, s := range c.late {
				if s.id == "window" {
					clk.add(time.Hour + time.Second)
					continue
				}
				if got := process(s, int64(2+i)); got != s.want {
					t.Fatalf("%s: status %v, want %v", s.id, got, s.want)
				}
			}
			if _, seqs := e.applied(t, "k"); !slices.Equal(seqs, c.applied) {
				t.Fatalf("applied sequences %v, want %v", seqs, c.applied)
			}
		})
	}
}

// Positions are per (topic, partition, bucket): a lower sequence of another
// bucket, partition or topic is not stale.
func TestInOrderPositionsAreIndependent(t *testing.T) {
	e := newEnv(t)
	ib := e.inbox(t, nil, InOrder())
	recs := []*kgo.Record{
		rec("orders", 0, 0, "k", "a", 3, 10),
		rec("orders", 0, 1, "k", "b", 4, 2),  // another bucket
		rec("orders", 1, 0, "k", "c", 3, 5),  // another partition
		rec("refunds", 0, 0, "k", "d", 3, 1), // another topic
	}
	for _, r := range recs {
		if res, err := ib.Process(ctxT(t), r, e.apply); err != nil || res.Status != Applied {
			t.Fatalf("%s/%d: %v %v", r.Topic, r.Partition, res.Status, err)
		}
	}
}

// Gaps in a bucket's sequence are reported, not refused.
func TestGapsAreReported(t *testing.T) {
	for _, opts := range [][]Option{nil, {InOrder()}} {
		e := newEnv(t)
		m := newTally()
		ib := e.inbox(t, nil, append(opts, WithMetrics(m))...)
		var gaps []int64
		for i, seq := range []int64{4, 5, 9, 10, 12} {
			res, err := ib.Process(ctxT(t), rec("orders", 0, int64(i), "k", fmt.Sprint("m", seq), 1, seq), e.apply)
			if err != nil || res.Status != Applied {
				t.Fatalf("seq %d: %v %v", seq, res.Status, err)
			}
			gaps = append(gaps, res.Gap)
		}
		// The first record has no predecessor known to this Inbox.
		if want := []int64{0, 0, 3, 0, 1}; !slices.Equal(gaps, want) {
			t.Fatalf("gaps %v, want %v", gaps, want)
		}
		if m.String() != "applied=5 duplicate=0 stale=0 failed=0 gaps=4" {
			t.Fatalf("metrics %s", m)
		}
	}
}

// lostResponse executes TransactWriteItems and then reports a lost response
// for the first n calls; it records the client request tokens it saw.
type lostResponse struct {
	API
	mu     sync.Mutex
	n      int
	tokens []string
}

func (l *lostResponse) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := l.API.TransactWriteItems(ctx, in, o...)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tokens = append(l.tokens, aws.ToString(in.ClientRequestToken))
	if len(l.tokens) <= l.n {
		return nil, fmt.Errorf("read tcp: i/o timeout (response lost; the call returned %v)", err)
	}
	return out, err
}

// An ambiguous commit is retried with the same client request token: the
// message is applied once and reported Applied (not Duplicate); when the
// attempts run out the outcome is unknown, and processing the record again
// finds it applied.
func TestAmbiguousCommitIsRetriedWithTheSameToken(t *testing.T) {
	cases := []struct {
		name     string
		lost     int
		attempts int
		want     Status
		err      error
	}{
		{"one response lost", 1, 3, Applied, nil},
		{"two responses lost", 2, 3, Applied, nil},
		{"every response lost", 3, 3, Failed, outbox.ErrOutcomeUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, opts := range [][]Option{nil, {InOrder()}} {
				e := newEnv(t)
				lr := &lostResponse{API: e.d.Client, n: c.lost}
				ib := e.inbox(t, lr, append(opts, MaxAttempts(c.attempts))...)
				r := rec("orders", 0, 0, "k", "m1", 0, 1)
				res, err := ib.Process(ctxT(t), r, e.apply)
				if res.Status != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
					t.Fatalf("Process = %v, %v; want %v, %v", res.Status, err, c.want, c.err)
				}
				if len(lr.tokens) != min(c.lost+1, c.attempts) || slices.Compact(slices.Clone(lr.tokens))[0] != lr.tokens[0] || len(slices.Compact(slices.Clone(lr.tokens))) != 1 {
					t.Fatalf("tokens %v: want %d calls with one token", lr.tokens, min(c.lost+1, c.attempts))
				}
				if c.err != nil {
					res, err = ib.Process(ctxT(t), r, e.apply)
					if err != nil || res.Status != Duplicate {
						t.Fatalf("processing again = %v, %v; want duplicate", res.Status, err)
					}
				}
				if n, _ := e.applied(t, "k"); n != 1 {
					t.Fatalf("applied %d times", n)
				}
			}
		})
	}
}

// A failed business condition writes nothing and is reported as
// outbox.ErrConditionFailed with the caller's reasons, unless it failed
// because the message was applied already: then it is a duplicate.
func TestBusinessConditionFailure(t *testing.T) {
	e := newEnv(t)
	ib := e.inbox(t, nil)
	// Create the aggregate only if it does not exist: applying twice would
	// fail this condition.
	create := func(tx *Tx) error {
		tx.Add(types.TransactWriteItem{Put: &types.Put{
			TableName:                aws.String(e.business),
			Item:                     map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: string(tx.Record().Key)}},
			ConditionExpression:      aws.String("attribute_not_exists(#id)"),
			ExpressionAttributeNames: map[string]string{"#id": "id"},
		}})
		return nil
	}
	if res, err := ib.Process(ctxT(t), rec("orders", 0, 0, "agg", "m1", 0, 1), create); err != nil || res.Status != Applied {
		t.Fatalf("first: %v %v", res.Status, err)
	}
	// The same message again: the id put and the business condition both
	// fail; it is a duplicate, not an error.
	if res, err := ib.Process(ctxT(t), rec("orders", 0, 1, "agg", "m1", 0, 1), create); err != nil || res.Status != Duplicate {
		t.Fatalf("duplicate: %v %v", res.Status, err)
	}
	// Another message whose business condition fails.
	res, err := ib.Process(ctxT(t), rec("orders", 0, 2, "agg", "m2", 0, 2), create)
	var te *TransactionError
	if res.Status != Failed || !errors.Is(err, outbox.ErrConditionFailed) || !errors.As(err, &te) ||
		len(te.CallerReasons()) != 1 || aws.ToString(te.CallerReasons()[0].Code) != "ConditionalCheckFailed" {
		t.Fatalf("Process = %v, %v; want ErrConditionFailed with the caller's reason", res.Status, err)
	}
	// One TransactionError shape: the Writer's name matches the inbox's
	// error, and the caller's item follows the inbox's own.
	var dte *dynamo.TransactionError
	if !errors.As(err, &dte) || dte.Op != "inbox: transaction" || dte.CallerFrom < 1 || dte.CallerItems != 1 ||
		len(dte.Reasons) != dte.CallerFrom+1 || !strings.HasPrefix(err.Error(), "inbox: transaction failed after 1 attempt(s)") {
		t.Fatalf("errors.As(*dynamo.TransactionError) = %+v (%v); want the inbox's error, its own items first", dte, err)
	}
	// Nothing was written for m2: it is processed as new next time.
	if res, err := ib.Process(ctxT(t), rec("orders", 0, 2, "other", "m2", 0, 2), create); err != nil || res.Status != Applied {
		t.Fatalf("m2 on another aggregate: %v %v", res.Status, err)
	}
}

// A record without the outbox's headers, an error from the callback and too
// many items fail without writing anything.
func TestProcessRefuses(t *testing.T) {
	e := newEnv(t)
	ib := e.inbox(t, nil)
	noID := &kgo.Record{Topic: "orders", Key: []byte("k")}
	halfSeq := rec("orders", 0, 0, "k", "m", 0, 0)
	halfSeq.Headers = append(halfSeq.Headers, kgo.RecordHeader{Key: outbox.DefaultSequenceHeader, Value: []byte("7")})
	badBucket := rec("orders", 0, 0, "k", "m", 0, 1)
	badBucket.Headers[1].Value = []byte("4096")
	badSeq := rec("orders", 0, 0, "k", "m", 0, 1)
	badSeq.Headers[2].Value = []byte("x")
	boom := errors.New("boom")
	tooMany := func(tx *Tx) error {
		for i := range 100 {
			tx.Add(types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: aws.String(e.business),
				Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: fmt.Sprint(i)}}, ConditionExpression: aws.String("attribute_not_exists(id)")}})
		}
		return nil
	}
	cases := []struct {
		name  string
		r     *kgo.Record
		fn    func(*Tx) error
		check func(error) bool
	}{
		{"no message id", noID, e.apply, func(err error) bool {
			var re *RecordError
			return errors.As(err, &re) && re.Header == outbox.DefaultMessageIDHeader
		}},
		{"sequence without bucket", halfSeq, e.apply, func(err error) bool {
			var re *RecordError
			return errors.As(err, &re) && re.Header == outbox.DefaultBucketHeader
		}},
		{"bucket out of range", badBucket, e.apply, func(err error) bool {
			var re *RecordError
			return errors.As(err, &re) && re.Header == outbox.DefaultBucketHeader
		}},
		{"sequence not a number", badSeq, e.apply, func(err error) bool {
			var re *RecordError
			return errors.As(err, &re) && re.Header == outbox.DefaultSequenceHeader
		}},
		{"callback error", rec("orders", 0, 0, "k", "m", 0, 1), func(*Tx) error { return boom }, func(err error) bool { return errors.Is(err, boom) }},
		{"too many items", rec("orders", 0, 0, "k", "m", 0, 1), tooMany, func(err error) bool {
			var ve *outbox.ValidationError
			return errors.As(err, &ve) && ve.Field == "Transaction"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := ib.Process(ctxT(t), c.r, c.fn)
			if res.Status != Failed || !c.check(err) {
				t.Fatalf("Process = %v, %v", res.Status, err)
			}
		})
	}
	// Nothing was marked processed: the message is applied now.
	if res, err := ib.Process(ctxT(t), rec("orders", 0, 0, "k", "m", 0, 1), e.apply); err != nil || res.Status != Applied {
		t.Fatalf("after the refusals: %v %v", res.Status, err)
	}
}

func TestNewValidates(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name   string
		table  string
		opt    Option
		option string // OptionError's Option; "" for a missing table
	}{
		{"retention", e.table, Retention(time.Minute), "Retention"},
		{"attempts", e.table, MaxAttempts(0), "MaxAttempts"},
		{"clock", e.table, WithClock(nil), "WithClock"},
		{"metrics", e.table, WithMetrics(nil), "WithMetrics"},
		{"the config item's headers", e.table, OutboxConfig(outbox.Config{Headers: outbox.HeaderNames{Bucket: "x", Sequence: "x"}}), "SequenceHeader"},
		{"table name", "a b", InOrder(), "table"},
		{"missing table", e.table + "-missing", InOrder(), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(ctxT(t), e.d.Client, c.table, c.opt)
			var oe *outbox.OptionError
			switch {
			case c.option != "" && (!errors.As(err, &oe) || oe.Option != c.option):
				t.Fatalf("New = %v, want an *OptionError for %s", err, c.option)
			case c.option == "" && (err == nil || errors.As(err, &oe)):
				t.Fatalf("New = %v, want a missing-table error", err)
			}
		})
	}
}

// CreateTable is idempotent and refuses a table of another shape.
func TestCreateTable(t *testing.T) {
	e := newEnv(t)
	if err := CreateTable(ctxT(t), e.d.Client, e.table); err != nil {
		t.Fatalf("again: %v", err)
	}
	var me *outbox.MisconfigurationError
	if err := CreateTable(ctxT(t), e.d.Client, e.business); !errors.As(err, &me) {
		t.Fatalf("on the business table (key id): %v", err)
	}
}

// Cancellations are sorted by the inbox's own items first: an old image
// with this call's token is its own earlier commit (a retry after the token
// window, or an engine that ignores tokens).
func TestClassifyCancellation(t *testing.T) {
	const tok = "token-1"
	ccf := func(item map[string]types.AttributeValue) types.CancellationReason {
		return types.CancellationReason{Code: aws.String(dynamoerr.CodeCondition), Item: item}
	}
	none := types.CancellationReason{Code: aws.String(dynamoerr.CodeNone)}
	code := func(c string) types.CancellationReason { return types.CancellationReason{Code: aws.String(c)} }
	idItem := func(token string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{attrToken: str(token)}
	}
	posItem := func(token string, s int64) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{attrToken: str(token), attrSeq: num(s)}
	}
	cases := []struct {
		name    string
		reasons []types.CancellationReason
		ours    int
		want    outcome
		old     int64
	}{
		{"own commit by id", []types.CancellationReason{ccf(idItem(tok)), none}, 1, outApplied, 0},
		{"own commit by position", []types.CancellationReason{none, ccf(posItem(tok, 7)), none}, 2, outApplied, 7},
		{"duplicate", []types.CancellationReason{ccf(idItem("other")), none}, 1, outDuplicate, 0},
		{"duplicate beats stale", []types.CancellationReason{ccf(idItem("other")), ccf(posItem("other", 9))}, 2, outDuplicate, 9},
		{"stale", []types.CancellationReason{none, ccf(posItem("other", 9)), ccf(nil)}, 2, outStale, 9},
		{"duplicate without an old image", []types.CancellationReason{ccf(nil)}, 1, outDuplicate, 0},
		{"caller's condition", []types.CancellationReason{none, ccf(nil)}, 1, outCallerFailed, 0},
		{"conflict", []types.CancellationReason{code(dynamoerr.CodeConflict), none}, 1, outConflict, 0},
		{"throttled", []types.CancellationReason{none, code(dynamoerr.CodeThrottling)}, 1, outThrottled, 0},
		{"validation", []types.CancellationReason{none, code("ValidationError")}, 1, outRejected, 0},
		{"no reason", []types.CancellationReason{none, none}, 1, outConflict, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cancelled := &types.TransactionCanceledException{CancellationReasons: c.reasons}
			got := classify(cancelled, c.ours, len(c.reasons)-c.ours, tok)
			if got.outcome != c.want || got.old != c.old || !got.cancelled {
				t.Fatalf("outcome %d old %d, want %d old %d", got.outcome, got.old, c.want, c.old)
			}
		})
	}
}

// Process is the one layer that retries its transaction: with the client's
// retryer switched off for the call, each injected failure is one of
// Process's attempts (the SDK would have retried them itself, unseen), and
// a response lost after the commit is recognised by its token.
func TestOneRetryLayer(t *testing.T) {
	cases := []struct {
		name   string
		policy faults.Policy
		kind   faults.Kind
	}{
		{"server error", faults.Policy{ServerError: 1, Limit: 2}, faults.ServerError},
		{"throttling", faults.Policy{Throttling: 1, Limit: 2}, faults.Throttling},
		{"response lost", faults.Policy{ResponseLost: 1, Limit: 2}, faults.ResponseLost},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			inj, err := faults.New(faults.For("TransactWriteItems", c.policy))
			if err != nil {
				t.Fatal(err)
			}
			client := dynamolocal.NewClient(e.d.Config, e.d.Endpoint, inj.Install)
			ib := e.inbox(t, client, InOrder())
			res, err := ib.Process(ctxT(t), rec("orders", 0, 0, "k", "m1", 1, 1), e.apply)
			if err != nil || res.Status != Applied || res.Attempts != 3 || inj.Count(c.kind, "TransactWriteItems") != 2 {
				t.Fatalf("Process = %v after %d attempts, %v; %d faults; want applied on the third attempt after 2 faults",
					res.Status, res.Attempts, err, inj.Count(c.kind, "TransactWriteItems"))
			}
			if n, _ := e.applied(t, "k"); n != 1 {
				t.Fatalf("applied %d times", n)
			}
		})
	}
}

// Process with a nil callback or record returns an *OptionError (it
// panicked before), writes nothing and reports nothing.
func TestProcessRefusesNil(t *testing.T) {
	e := newEnv(t)
	tl := newTally()
	ib := e.inbox(t, nil, WithMetrics(tl))
	r := rec("orders", 0, 1, "key-00", outbox.NewID(), 0, 1)
	for _, c := range []struct {
		name   string
		r      *kgo.Record
		fn     func(*Tx) error
		option string
	}{{"nil callback", r, nil, "fn"}, {"nil record", nil, e.apply, "r"}} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ib.Process(ctxT(t), c.r, c.fn)
			var oe *outbox.OptionError
			if !errors.As(err, &oe) || oe.Option != c.option {
				t.Fatalf("Process = %v, want an *OptionError for %s", err, c.option)
			}
		})
	}
	if tl.total() != 0 {
		t.Fatalf("reported %s", tl)
	}
	if n, _ := e.applied(t, "key-00"); n != 0 {
		t.Fatalf("applied %d", n)
	}
}
