package main

import (
	"context"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// meter is an SDK middleware that counts the DynamoDB calls a client makes
// (API calls, and HTTP attempts including the SDK's retries) and adds up the
// capacity DynamoDB reports for them. It asks for the report by setting
// ReturnConsumedCapacity=TOTAL on every input that has the field: that only
// adds ConsumedCapacity to the response, it changes nothing that is written
// or read, so the code under test (store/dynamo, the writer) runs unchanged.
type meter struct {
	mu  sync.Mutex
	ops map[opKey]*opStats
	// dials counts the TCP connections the metered client opened. The SDK's
	// transport keeps at most idleConns idle connections per host (its
	// default, 10, when idleConns is 0) and closes the others after use, so
	// more concurrent calls than that open new connections all the time.
	dials     atomic.Int64
	idleConns int
	// deletedBytes is the size of the items the metered client deletes
	// (a delete request does not carry the item, and AWS charges a delete
	// by the deleted item's size): the backlog's largest item.
	deletedBytes int
	// samples, when keepSamples is set, are the calls (when each began,
	// how long it took) by operation (at most maxSamples each; reset keeps
	// them): the model check calibrates the model's latency with them.
	keepSamples bool
	samples     map[string][]callSample
}

// callSample is one call: when it began and how long it took.
type callSample struct {
	at time.Time
	d  time.Duration
}

const maxSamples = 50_000

type opKey struct{ op, table string }

// opStats are one operation's totals on one table. Capacity is what
// DynamoDB reported in ConsumedCapacity.CapacityUnits; Reported counts the
// calls that reported any.
type opStats struct {
	Calls    int64   `json:"calls"`
	Attempts int64   `json:"attempts"`
	Errors   int64   `json:"errors"`
	Capacity float64 `json:"capacity_units"`
	Reported int64   `json:"calls_reporting_capacity"`
	// AWSUnits is what AWS would charge for the same calls by its
	// published rules (see awsUnits), computed from the items sent and
	// received.
	AWSUnits float64 `json:"aws_rule_units"`
	// Seconds is the calls' summed duration (concurrent calls overlap).
	Seconds float64 `json:"seconds"`
}

func newMeter() *meter { return &meter{ops: map[opKey]*opStats{}} }

// reset forgets everything counted so far.
func (m *meter) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ops = map[opKey]*opStats{}
	m.dials.Store(0)
}

// option is the dynamodb.Options hook that installs the meter: the
// middleware, and the SDK's default HTTP client with its dialer counted
// (and, if idleConns is set, that many idle connections kept per host).
func (m *meter) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, m.register)
	o.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		dial := tr.DialContext
		if dial == nil {
			dial = (&net.Dialer{}).DialContext
		}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			m.dials.Add(1)
			return dial(ctx, network, addr)
		}
		if m.idleConns > 0 {
			tr.MaxIdleConnsPerHost = m.idleConns
		}
	})
}

func (m *meter) register(stack *middleware.Stack) error {
	err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("outboxBenchMeter",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			table := askCapacity(in.Parameters)
			began := time.Now()
			out, md, err := next.HandleInitialize(ctx, in)
			took := time.Since(began)
			units := 0.0
			if err == nil {
				units = awsUnits(in.Parameters, out.Result, m.deletedBytes)
			}
			m.record(awsmiddleware.GetOperationName(ctx), table, out.Result, err, units, began, took)
			return out, md, err
		}), middleware.Before)
	if err != nil {
		return err
	}
	// After the retry middleware: once per HTTP attempt.
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("outboxBenchAttempts",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			m.attempt(awsmiddleware.GetOperationName(ctx))
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}

// askCapacity sets ReturnConsumedCapacity on the input and returns the table
// it names (for the batch operations, the first one; the bench uses one table
// per batch).
func askCapacity(params any) string {
	total := types.ReturnConsumedCapacityTotal
	switch p := params.(type) {
	case *dynamodb.GetItemInput:
		p.ReturnConsumedCapacity = total
		return deref(p.TableName)
	case *dynamodb.PutItemInput:
		p.ReturnConsumedCapacity = total
		return deref(p.TableName)
	case *dynamodb.UpdateItemInput:
		p.ReturnConsumedCapacity = total
		return deref(p.TableName)
	case *dynamodb.DeleteItemInput:
		p.ReturnConsumedCapacity = total
		return deref(p.TableName)
	case *dynamodb.QueryInput:
		p.ReturnConsumedCapacity = total
		return deref(p.TableName)
	case *dynamodb.BatchGetItemInput:
		p.ReturnConsumedCapacity = total
		for t := range p.RequestItems {
			return t
		}
	case *dynamodb.BatchWriteItemInput:
		p.ReturnConsumedCapacity = total
		for t := range p.RequestItems {
			return t
		}
	case *dynamodb.TransactWriteItemsInput:
		p.ReturnConsumedCapacity = total
		for _, it := range p.TransactItems {
			switch {
			case it.Put != nil:
				return deref(it.Put.TableName)
			case it.Update != nil:
				return deref(it.Update.TableName)
			}
		}
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (m *meter) record(op, table string, result any, err error, units float64, began time.Time, took time.Duration) {
	var reported []types.ConsumedCapacity
	one := func(c *types.ConsumedCapacity) {
		if c != nil {
			reported = append(reported, *c)
		}
	}
	switch r := result.(type) {
	case *dynamodb.GetItemOutput:
		one(r.ConsumedCapacity)
	case *dynamodb.PutItemOutput:
		one(r.ConsumedCapacity)
	case *dynamodb.UpdateItemOutput:
		one(r.ConsumedCapacity)
	case *dynamodb.DeleteItemOutput:
		one(r.ConsumedCapacity)
	case *dynamodb.QueryOutput:
		one(r.ConsumedCapacity)
	case *dynamodb.BatchGetItemOutput:
		reported = r.ConsumedCapacity
	case *dynamodb.BatchWriteItemOutput:
		reported = r.ConsumedCapacity
	case *dynamodb.TransactWriteItemsOutput:
		reported = r.ConsumedCapacity
	}
	if q, ok := result.(*dynamodb.QueryOutput); ok && len(q.Items) == 0 {
		// Kept apart: DynamoDB Local charges an empty Query nothing.
		op = "Query(empty)"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keepSamples && err == nil {
		if m.samples == nil {
			m.samples = map[string][]callSample{}
		}
		base, _, _ := strings.Cut(op, "(") // Query(empty) is a Query
		if len(m.samples[base]) < maxSamples {
			m.samples[base] = append(m.samples[base], callSample{began, took})
		}
	}
	m.get(op, table).AWSUnits += units
	m.get(op, table).Seconds += took.Seconds()
	if len(reported) == 0 {
		s := m.get(op, table)
		s.Calls++
		if err != nil {
			s.Errors++
		}
		return
	}
	for i, c := range reported {
		t := table
		if c.TableName != nil {
			t = *c.TableName
		}
		s := m.get(op, t)
		if i == 0 {
			s.Calls++
			s.Reported++
			if err != nil {
				s.Errors++
			}
		}
		if c.CapacityUnits != nil {
			s.Capacity += *c.CapacityUnits
		}
	}
}

func (m *meter) attempt(op string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Attempts are counted per operation only; the table is known at the
	// Initialize step, which runs once per call.
	m.get(op, "*").Attempts++
}

func (m *meter) get(op, table string) *opStats {
	k := opKey{op, table}
	s, ok := m.ops[k]
	if !ok {
		s = &opStats{}
		m.ops[k] = s
	}
	return s
}

// snapshot is a copy of the meter's totals, by operation and table role.
type snapshot struct {
	// Ops maps "Operation table-role" (for example "Query messages") to
	// its totals. Attempts are kept under "Operation *".
	Ops map[string]opStats `json:"ops"`
	// Dials is the number of TCP connections opened.
	Dials int64 `json:"tcp_connections_opened"`
}

// snapshot names tables by role through roles (table name -> role); other
// tables keep their names.
func (m *meter) snapshot(roles map[string]string) snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := snapshot{Ops: map[string]opStats{}, Dials: m.dials.Load()}
	for k, v := range m.ops {
		t := k.table
		if r, ok := roles[t]; ok {
			t = r
		}
		s.add(k.op+" "+t, *v)
	}
	return s
}

// add adds v to the totals of key.
func (s snapshot) add(key string, v opStats) {
	cur := s.Ops[key]
	cur.Calls += v.Calls
	cur.Attempts += v.Attempts
	cur.Errors += v.Errors
	cur.Capacity += v.Capacity
	cur.Reported += v.Reported
	cur.AWSUnits += v.AWSUnits
	cur.Seconds += v.Seconds
	s.Ops[key] = cur
}

// calls is the number of API calls, attempts the number of HTTP requests.
func (s snapshot) calls() (calls, attempts int64) {
	for _, v := range s.Ops {
		calls += v.Calls
		attempts += v.Attempts
	}
	return calls, attempts
}

// meanMs is the mean duration of a call, in milliseconds.
func (s snapshot) meanMs() float64 {
	var calls int64
	var secs float64
	for _, v := range s.Ops {
		calls += v.Calls
		secs += v.Seconds
	}
	if calls == 0 {
		return 0
	}
	return 1000 * secs / float64(calls)
}

// capacity sums the reported capacity and the units by AWS's rules of the
// operations for which keep is true (keep gets the operation and table
// role).
func (s snapshot) capacity(keep func(op, table string) bool) (reported, aws float64) {
	for k, v := range s.Ops {
		op, table := splitKey(k)
		if keep(op, table) {
			reported += v.Capacity
			aws += v.AWSUnits
		}
	}
	return reported, aws
}

// AWS's capacity rules (DynamoDB developer guide, "Read/write capacity
// mode"): a write unit per 1 KB of item size, rounded up per item, doubled
// for items written in a transaction; a delete by the deleted item's size;
// an update by the larger of the item before and after (the control items
// are far below 1 KB, so 1); a strongly consistent read unit per 4 KB,
// rounded up over the whole Query response, at least 1; a BatchGetItem
// reads each key as a GetItem of its own: a unit per 4 KB of each item,
// rounded up per item, and one for a key that names no item. The bench
// reads consistently only.
const (
	writeUnitBytes = 1024
	readUnitBytes  = 4096
)

func writeUnits(bytes int) float64 { return float64(max(1, ceilDiv(bytes, writeUnitBytes))) }

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// awsUnits computes, for one successful call, the units AWS would charge.
func awsUnits(params, result any, deletedBytes int) float64 {
	switch p := params.(type) {
	case *dynamodb.PutItemInput:
		return writeUnits(itemBytes(p.Item))
	case *dynamodb.UpdateItemInput:
		return 1
	case *dynamodb.DeleteItemInput:
		return writeUnits(deletedBytes)
	case *dynamodb.BatchWriteItemInput:
		u := 0.0
		for _, reqs := range p.RequestItems {
			for _, r := range reqs {
				if r.PutRequest != nil {
					u += writeUnits(itemBytes(r.PutRequest.Item))
				} else {
					u += writeUnits(deletedBytes)
				}
			}
		}
		if out, ok := result.(*dynamodb.BatchWriteItemOutput); ok {
			// Unprocessed requests are not charged; they come back.
			for _, reqs := range out.UnprocessedItems {
				for _, r := range reqs {
					if r.PutRequest != nil {
						u -= writeUnits(itemBytes(r.PutRequest.Item))
					} else {
						u -= writeUnits(deletedBytes)
					}
				}
			}
		}
		return u
	case *dynamodb.TransactWriteItemsInput:
		u := 0.0
		for _, it := range p.TransactItems {
			if it.Put != nil {
				u += 2 * writeUnits(itemBytes(it.Put.Item))
			} else {
				u += 2
			}
		}
		return u
	case *dynamodb.QueryInput:
		if out, ok := result.(*dynamodb.QueryOutput); ok {
			bytes := 0
			for _, it := range out.Items {
				bytes += itemBytes(it)
			}
			return float64(max(1, ceilDiv(bytes, readUnitBytes)))
		}
	case *dynamodb.GetItemInput:
		if out, ok := result.(*dynamodb.GetItemOutput); ok {
			return float64(max(1, ceilDiv(itemBytes(out.Item), readUnitBytes)))
		}
	case *dynamodb.BatchGetItemInput:
		if out, ok := result.(*dynamodb.BatchGetItemOutput); ok {
			u := 0.0
			for t, ka := range p.RequestItems {
				// Keys that come back unprocessed are not charged; the
				// others are, found or not.
				missing := len(ka.Keys) - len(out.Responses[t])
				if un, ok := out.UnprocessedKeys[t]; ok {
					missing -= len(un.Keys)
				}
				for _, it := range out.Responses[t] {
					u += float64(ceilDiv(itemBytes(it), readUnitBytes))
				}
				u += float64(max(0, missing))
			}
			return u
		}
	}
	return 0
}

func (s snapshot) keys() []string {
	keys := make([]string, 0, len(s.Ops))
	for k := range s.Ops {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func splitKey(k string) (op, table string) {
	op, table, _ = strings.Cut(k, " ")
	return op, table
}

// isRead tells the read operations.
func isRead(op string) bool {
	return op == "Query" || op == "GetItem" || op == "Scan" || op == "BatchGetItem"
}
