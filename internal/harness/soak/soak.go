// Package soak runs the outbox under random faults at every layer and checks
// its promises with an invariant checker that links every message id to what
// happened to it.
//
// Writers update version-checked aggregates (5 % with a stale version, so
// their business condition fails; some crash between reserving sequence
// numbers and committing). The relay runs as the Lambda handler behind a
// local event-source mapping, next to the sweeper on a fast schedule, while
// faults are injected into Kafka (kfake faults on produce), DynamoDB (an SDK
// middleware: throttling, 5xx, timeouts, unprocessed items, responses lost
// after the write committed), the relay (crashes at every named crash point,
// stalled lease holders) and the stream (duplicated and redelivered hints).
// Then the faults stop, everything drains, and the checker verifies: every
// committed message delivered at least once or parked (lost=0), no rolled
// back message delivered (phantom=0), every duplicate attributed to an
// injected fault (unexplained=0), and no first delivery of a key out of
// aggregate-version order (reorders=0). On the consuming side, inbox
// consumers (inbox.go) keep a read model under the same faults plus their
// own (member restarts, failed offset commits); it must equal the committed
// writes exactly (read_model_mismatches=0).
//
// With Config.Txn the relay publishes with Kafka transactions and a
// read_committed consumer's view is checked for records of aborted
// transactions, interleaved transactions and duplicates that are not whole
// transactions (txn.go). With Config.Kafka it runs on a real cluster, whose
// faults are nodes killed and started again (real.go) instead of kfake's.
//
// DynamoDB Local slows down as stream records pile up, so a long run is
// split into rounds, each on a fresh instance.
package soak

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/attrib"
	"github.com/dynakafka/outbox/internal/harness/checker"
	"github.com/dynakafka/outbox/internal/harness/faults"
	"github.com/dynakafka/outbox/internal/seam"
	"github.com/dynakafka/outbox/store/dynamo"
)

// Config sizes a run. Zero fields take the defaults in brackets.
type Config struct {
	Messages   int // committed messages to reach over all rounds [5000]
	PerRound   int // messages per fresh DynamoDB Local instance [20000]
	Writers    int // concurrent writers [8]
	Aggregates int // version-checked aggregates per round [300]
	Buckets    int // BucketCount [8]
	// Rebucket, when set, changes BucketCount to it online (dynamo.
	// ChangeBucketCount, through the faulty client) when half of a round's
	// messages are committed, with the faults on and the writers writing.
	Rebucket  int
	FaultRate float64 // multiplies every fault probability [1]
	Seed      uint64  // [1]
	// Mode is the outbox's mode [outbox.DeleteMode]; Retention its message
	// retention in WatermarkMode [dynamo.DefaultRetention].
	Mode      outbox.Mode
	Retention time.Duration
	// Txn publishes with Kafka transactions (kafka.TxnPublisher, one per
	// process, so that the processes' producers of a bucket fence each
	// other) and checks with a read_committed consumer that nothing of an
	// aborted transaction is visible and that duplicates come only as whole
	// transactions (txn.go).
	Txn bool
	// Kafka, when set, is a real Kafka cluster to run on instead of an
	// in-process kfake: the kfake faults (kafka:*, the read model's failed
	// offset commits) are not injected; a node is killed and started again
	// instead (kafka:broker-stopped), one at a time, while the faults are on.
	Kafka RealCluster
	// StallChance is the probability that a drain, after a publish, stalls
	// past its lease so that it is taken over [0.05].
	StallChance float64
	// MinEachFault fails the run unless every fault kind fired at least
	// this often (0: not checked).
	MinEachFault int
	// Progress receives progress lines (nil: none).
	Progress io.Writer
}

// RealCluster is a real Kafka cluster the soak may kill nodes of
// (internal/harness/testenv.RealCluster).
type RealCluster interface {
	Brokers() []string
	Nodes() int
	// StopBroker kills node i; StartBroker starts it again and waits
	// until the cluster lists it.
	StopBroker(i int)
	StartBroker(ctx context.Context, i int) error
}

// buckets is how many buckets a round may use: both counts of a change.
func (c *Config) buckets() int { return max(c.Buckets, c.Rebucket) }

func (c *Config) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Messages, 5000)
	def(&c.PerRound, 20000)
	def(&c.Writers, 8)
	def(&c.Aggregates, 300)
	def(&c.Buckets, 8)
	if c.FaultRate <= 0 {
		c.FaultRate = 1
	}
	if c.StallChance <= 0 {
		c.StallChance = 0.05
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
}

// Result is the verdict of a run.
type Result struct {
	Mode        outbox.Mode
	Messages    int // committed messages
	RolledBack  int
	Lost        int
	Phantom     int
	Duplicates  int
	Unexplained int
	// ByCause: the duplicates by the recorded event that explains each
	// (internal/harness/attrib), "cause:n,..." ("none": no duplicates).
	ByCause string
	// Overlaps is the I4 check on the Kafka side: publishes of one bucket
	// by two processes at once, and how many of them a documented window
	// admits.
	Overlaps attrib.OverlapReport
	Reorders int
	Parked   int
	Mismatch int // id header different from the stored id
	Faults   int
	ByKind   map[string]int
	Rounds   int
	Elapsed  time.Duration
	// LongestWriteDuringChange and LongestWriteOutside: the longest
	// committed write in flight while an online BucketCount change ran
	// (Config.Rebucket), and the longest other one.
	LongestWriteDuringChange, LongestWriteOutside time.Duration
	// Examples of problems.
	LostIDs, PhantomIDs, UnexplainedIDs []string
	Violations                          []checker.Violation

	// ReadModelMismatches counts the read model's aggregates that differ
	// from the committed writes (inbox.go); ReadModel says what it did.
	ReadModelMismatches int
	ReadModel           string

	// Txn: the transactional mode's verdict (txn.go).
	Txn *txnVerdict
}

// Line is the run's one-line summary.
func (r Result) Line() string {
	if r.Txn != nil {
		return fmt.Sprintf("soak: mode=%s publish=txn messages=%d lost=%d phantom=%d %s read_model_mismatches=%d duplicates=%d unexplained=%d %s reorders=%d parked=%d faults=%d duplicates_by_cause=%s",
			r.Mode, r.Messages, r.Lost, r.Phantom, r.Txn, r.ReadModelMismatches, r.Duplicates, r.Unexplained+r.Txn.Unexplained(), r.Overlaps, r.Reorders, r.Parked, r.Faults, r.ByCause)
	}
	return fmt.Sprintf("soak: mode=%s messages=%d lost=%d phantom=%d read_model_mismatches=%d duplicates=%d unexplained=%d %s reorders=%d parked=%d faults=%d duplicates_by_cause=%s",
		r.Mode, r.Messages, r.Lost, r.Phantom, r.ReadModelMismatches, r.Duplicates, r.Unexplained, r.Overlaps, r.Reorders, r.Parked, r.Faults, r.ByCause)
}

// OK reports whether every promise held.
func (r Result) OK() bool {
	if t := r.Txn; t != nil && (t.StaleVisible != 0 || t.Interleavings != 0 || t.Unexplained() != 0) {
		return false
	}
	return r.Lost == 0 && r.Phantom == 0 && r.Unexplained == 0 && r.Reorders == 0 && r.Mismatch == 0 && r.ReadModelMismatches == 0 &&
		r.Overlaps.UnadmittedCount() == 0
}

// Details lists examples of what failed, for a failure message.
func (r Result) Details() string {
	d := fmt.Sprintf("lost %v phantom %v unexplained %v reorders %+v overlaps %s", r.LostIDs, r.PhantomIDs, r.UnexplainedIDs, r.Violations, r.Overlaps.Details())
	if r.Txn != nil {
		d += "; transactions: " + r.Txn.details()
	}
	return d
}

// Kinds returns the fault kinds in a stable order with their counts.
func (r Result) Kinds() string {
	var ks []string
	for k := range r.ByKind {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "%s=%d ", k, r.ByKind[k])
	}
	return strings.TrimSpace(b.String())
}

// tally counts injected faults by kind.
type tally struct {
	mu sync.Mutex
	n  map[string]int
	// writes and changes: when each committed write and each online
	// BucketCount change ran (the longest write during a change is the
	// pause a change puts on writers).
	writes, changes [][2]time.Time
}

// ran records a committed write's or a change's span.
func (t *tally) ran(to *[][2]time.Time, start, end time.Time) {
	t.mu.Lock()
	*to = append(*to, [2]time.Time{start, end})
	t.mu.Unlock()
}

// longestWrites returns the longest committed write that overlapped a
// change, and the longest other one.
func (t *tally) longestWrites() (during, outside time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.writes {
		d, in := w[1].Sub(w[0]), false
		for _, c := range t.changes {
			in = in || w[0].Before(c[1]) && c[0].Before(w[1])
		}
		if in {
			during = max(during, d)
		} else {
			outside = max(outside, d)
		}
	}
	return during, outside
}

func (t *tally) add(kind string, n int) {
	if n == 0 {
		return
	}
	t.mu.Lock()
	t.n[kind] += n
	t.mu.Unlock()
}

// ExpectedKinds are the fault kinds every run injects in mode: all of them
// in DeleteMode; in WatermarkMode the relay writes nothing per message, so
// no BatchWriteItem can come back unprocessed and no crash can fall in the
// middle of one.
func ExpectedKinds(mode outbox.Mode) []string {
	return expectedKinds(mode, false)
}

// expectedKinds: on a real cluster (real) no kfake fault is injected, and
// a node is stopped instead.
func expectedKinds(mode outbox.Mode, real bool) []string {
	if real {
		k := []string{"kafka:broker-stopped"}
		for _, kind := range expectedKinds(mode, false) {
			if !strings.HasPrefix(kind, "kafka:") {
				k = append(k, kind)
			}
		}
		sort.Strings(k)
		return k
	}
	if mode != outbox.WatermarkMode {
		return allKinds
	}
	var k []string
	for _, kind := range allKinds {
		if kind != "dynamo:unprocessed" && kind != "crash:"+string(seam.MidDelete) {
			k = append(k, kind)
		}
	}
	return k
}

// allKinds are the fault kinds a DeleteMode run injects.
var allKinds = func() []string {
	k := []string{
		"kafka:not-leader", "kafka:request-timed-out", "kafka:not-enough-replicas", "kafka:message-too-large", "kafka:topic-authorization-failed",
		"dynamo:throttle", "dynamo:throttling", "dynamo:server-error", "dynamo:timeout", "dynamo:response-lost", "dynamo:unprocessed",
		"relay:stall", "stream:duplicate", "stream:redelivery", "writer:crash",
		"consumer:restart", "kafka:offset-commit",
	}
	for _, p := range seam.CrashPoints {
		k = append(k, "crash:"+string(p))
	}
	sort.Strings(k)
	return k
}()

// traces collects, per message id, the relay's publishes and head updates
// and the consumer's deliveries, to explain a failed run.
var traces struct {
	mu   sync.Mutex
	at   []*attrib.Attribution
	recv map[string][]string
}

func traceDelivery(id string, r *kgo.Record) {
	traces.mu.Lock()
	defer traces.mu.Unlock()
	if traces.recv == nil {
		traces.recv = map[string][]string{}
	}
	traces.recv[id] = append(traces.recv[id], fmt.Sprintf("%s delivered p%d@%d", time.Now().Format("15:04:05.000"), r.Partition, r.Offset))
}

// Trace returns what happened to message id in the runs of this process.
func Trace(id string) []string {
	traces.mu.Lock()
	defer traces.mu.Unlock()
	var out []string
	for _, a := range traces.at {
		out = append(out, a.Trace(id)...)
	}
	out = append(out, traces.recv[id]...)
	sort.Strings(out)
	return out
}

// Run runs the soak and returns its verdict. An error means the harness
// itself failed (a round could not be set up or never drained); broken
// promises are in the Result.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.defaults()
	start := time.Now()
	chk := checker.New()
	tl := &tally{n: map[string]int{}}
	var rolledBack atomic.Int64
	res := Result{Mode: cfg.Mode}
	view := &viewResult{}
	if cfg.Txn {
		res.Txn = &txnVerdict{}
	}
	for round, done := 0, 0; done < cfg.Messages; round++ {
		target := min(cfg.PerRound, cfg.Messages-done)
		n, err := runRound(ctx, cfg, round, target, chk, tl, &rolledBack, view, res.Txn)
		if err != nil {
			return res, fmt.Errorf("soak round %d: %w", round, err)
		}
		done += n
		res.Rounds++
	}
	r := chk.Result()
	res.Messages, res.RolledBack = r.Committed, int(rolledBack.Load())
	res.Lost, res.Phantom, res.Duplicates, res.Unexplained = r.Lost, r.Phantom, r.Duplicates, r.Unexplained
	res.ByCause = r.Causes()
	traces.mu.Lock()
	for _, a := range traces.at[len(traces.at)-res.Rounds:] {
		res.Overlaps.Add(a.Overlaps())
	}
	traces.mu.Unlock()
	res.Reorders, res.Parked, res.Mismatch = r.OrderViolations, r.Parked, r.HeaderMismatch
	res.LostIDs, res.PhantomIDs, res.UnexplainedIDs, res.Violations = first(r.LostIDs), first(r.PhantomIDs), first(r.UnexplainedIDs), r.Violations[:min(5, len(r.Violations))]
	res.ReadModelMismatches = view.mismatches
	res.ReadModel = fmt.Sprintf("applied=%d skipped=%d examples=%v", view.applied, view.skipped, view.examples)
	res.LongestWriteDuringChange, res.LongestWriteOutside = tl.longestWrites()
	if len(tl.changes) > 0 {
		cfg.logf("longest write during the BucketCount change %v, outside it %v", res.LongestWriteDuringChange.Round(time.Millisecond),
			res.LongestWriteOutside.Round(time.Millisecond))
	}
	res.ByKind = tl.n
	for _, n := range tl.n {
		res.Faults += n
	}
	res.Elapsed = time.Since(start)
	if cfg.MinEachFault > 0 {
		var short []string
		for _, k := range expectedKinds(cfg.Mode, cfg.Kafka != nil) {
			if tl.n[k] < cfg.MinEachFault {
				short = append(short, fmt.Sprintf("%s=%d", k, tl.n[k]))
			}
		}
		if len(short) > 0 {
			return res, fmt.Errorf("soak: these fault kinds fired fewer than %d times: %s", cfg.MinEachFault, strings.Join(short, " "))
		}
	}
	return res, nil
}

func first(s []string) []string { return s[:min(5, len(s))] }

func (c *Config) logf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "soak: "+format+"\n", args...)
	}
}

// payload is what writers put in a message's value.
type payload struct {
	ID      string `json:"id"`
	Agg     string `json:"agg"`
	Version int64  `json:"ver"`
	Index   int    `json:"idx"`
}

func (p payload) order() int64 { return p.Version*1000 + int64(p.Index) }

const (
	leaseDuration = 4 * time.Second
	gapTimeout    = time.Second
)

func scale(p faults.Policy, f float64) faults.Policy {
	c := func(v float64) float64 { return min(v*f, 0.5) }
	return faults.Policy{Throttle: c(p.Throttle), Throttling: c(p.Throttling), ServerError: c(p.ServerError), Timeout: c(p.Timeout),
		ResponseLost: c(p.ResponseLost), Unprocessed: c(p.Unprocessed)}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// dice decides whether a fault fires where it is reached: once in every
// block of n = ⌈1/(chance × FaultRate)⌉ reaches of its kind, at a reach
// drawn at random within the block. A kind fires at its chance on average,
// at random places, and one reached k times fires at least ⌊k/n⌋ times.
// How often a kind is reached depends on the machine (a busy one drains in
// fewer, larger batches, and its stream chaos finds fewer free slots), and a
// draw per reach could leave a kind that was reached often enough short of
// MinEachFault (a writer's crash, at 2 % of about 600 transactions, fired
// 4 or 5 times in runs here): the run then failed on the draw, not on the
// relay. Every fault kind the soak injects, but DynamoDB's (faults.Policy,
// hundreds per run), is decided here.
type dice struct {
	intn func(int) int // the round's seeded draw
	rate float64       // Config.FaultRate, which scales every chance

	mu     sync.Mutex
	blocks map[string]*block
}

// block is a fault kind's current block of reaches.
type block struct {
	n, at, reached int // fires at reach at (from 0) of n
}

// fires decides whether fault kind, reached once more, fires there.
func (d *dice) fires(kind string, chance float64) bool {
	p := chance * d.rate
	switch {
	case p <= 0:
		return false
	case p >= 1:
		return true
	}
	n := int(math.Ceil(1/p - 1e-9))
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.blocks == nil {
		d.blocks = map[string]*block{}
	}
	b := d.blocks[kind]
	if b == nil || b.reached == b.n || b.n != n {
		b = &block{n: n, at: d.intn(n)}
		d.blocks[kind] = b
	}
	fire := b.reached == b.at
	b.reached++
	return fire
}

// crasher injects crashes at the relay's crash points, and stalls.
type crasher struct {
	*dice
	on    atomic.Bool
	stall float64
	tl    *tally
	at    *attrib.Attribution // told of every crash and stall, to explain their duplicates
}

// crashes decides whether a drain that reached p crashes there (fires).
func (c *crasher) crashes(p seam.CrashPoint) bool {
	return c.fires("crash:"+string(p), crashChance[p])
}

var errKilled = errors.New("soak: killed")

// crashChance is the probability of a crash each time a drain reaches a
// point: points reached rarely (a fence needs an abandoned reservation) get a
// higher one, so every point fires in a small run.
var crashChance = map[seam.CrashPoint]float64{
	seam.AfterAcquire:    0.08,
	seam.DuringRenewal:   0.10,
	seam.AfterProduce:    0.06,
	seam.AfterHeadUpdate: 0.06,
	seam.MidDelete:       0.06,
	seam.DuringFence:     0.40,
}

func (c *crasher) At(ctx context.Context, p seam.CrashPoint, bucket int) error {
	if !c.on.Load() {
		return nil
	}
	if p == seam.AfterProduce && c.fires("relay:stall", c.stall) {
		// A stalled holder: it sleeps past its lease, then carries on.
		c.tl.add("relay:stall", 1)
		c.at.Stalled(bucket, string(p))
		sleep(ctx, leaseDuration+time.Second)
		return nil
	}
	if c.crashes(p) {
		c.tl.add("crash:"+string(p), 1)
		c.at.Crashed(bucket, string(p))
		return errKilled
	}
	return nil
}

// eventLog keeps the last stream events the relay was invoked with.
type eventLog struct {
	mu  sync.Mutex
	evs []events.DynamoDBEvent
}

func (l *eventLog) add(ev events.DynamoDBEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, ev)
	if len(l.evs) > 200 {
		l.evs = l.evs[len(l.evs)-200:]
	}
}

func (l *eventLog) latest() (events.DynamoDBEvent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.evs) == 0 {
		return events.DynamoDBEvent{}, false
	}
	return l.evs[len(l.evs)-1], true
}

func (l *eventLog) random(intn func(int) int) (events.DynamoDBEvent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.evs) == 0 {
		return events.DynamoDBEvent{}, false
	}
	return l.evs[intn(len(l.evs))], true
}

type kafkaFault struct {
	kind string
	h    *kfake.FaultHandle
}

// installKafkaFaults fails a share of the produce requests to topic with
// each error. REQUEST_TIMED_OUT is answered after the broker appended the
// records (as a real broker does when replication times out): the client's
// retry may write them again, so the records of such a request are put at
// risk of duplication.
func installKafkaFaults(c *kfake.Cluster, topic string, d *dice, chk *checker.Checker, txn bool) []kafkaFault {
	add := func(kind string, err *kerr.Error, p float64) kafkaFault {
		h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: err, Count: -1,
			When: func(req kmsg.Request) bool {
				if !d.fires(kind, p) {
					return false
				}
				if err == kerr.RequestTimedOut && !txn {
					// In a transaction the producer's retry is
					// deduplicated by its sequence numbers, and a
					// failed one aborts the transaction.
					chk.AtRisk("kafka:request-timed-out", produceIDs(req)...)
				}
				return true
			}})
		return kafkaFault{kind, h}
	}
	return []kafkaFault{
		add("kafka:not-leader", kerr.NotLeaderForPartition, 0.05),
		add("kafka:request-timed-out", kerr.RequestTimedOut, 0.05),
		add("kafka:not-enough-replicas", kerr.NotEnoughReplicas, 0.05),
		add("kafka:message-too-large", kerr.MessageTooLarge, 0.04),
		add("kafka:topic-authorization-failed", kerr.TopicAuthorizationFailed, 0.04),
	}
}

// crashableClient lets a writer "crash" between reserving its sequence
// numbers and committing: the commit is never sent and nothing releases the
// reservation.
type crashableClient struct{ *dynamodb.Client }

type crashKey struct{}

func (c *crashableClient) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if kill, ok := ctx.Value(crashKey{}).(context.CancelFunc); ok {
		kill()
		return nil, context.Canceled
	}
	return c.Client.TransactWriteItems(ctx, in, o...)
}

// writeOne runs one writer transaction: bump an aggregate's version (stale
// on purpose 5 % of the time), record the transaction, enqueue 1..10
// messages. It records the outcome in chk and returns how many messages
// committed.
func writeOne(ctx context.Context, w *dynamo.Writer, clean *dynamodb.Client, table, topic string, round int, cfg Config,
	d *dice, intn func(int) int, chk *checker.Checker, tl *tally, rolledBack *atomic.Int64) (int, error) {
	// Aggregates are per round (each round starts them at version 0), and
	// so are the keys the checker orders by.
	agg := fmt.Sprintf("r%d-agg-%04d", round, intn(cfg.Aggregates))
	ver, err := readVersion(ctx, clean, table, agg)
	if err != nil {
		return 0, err
	}
	expected := ver
	if intn(100) < 5 {
		expected = ver - 1 // a stale read: the business condition fails
	}
	txID := outbox.NewID()
	n := 1 + intn(10)
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		p := payload{ID: outbox.NewID(), Agg: agg, Version: ver + 1, Index: i}
		v, _ := json.Marshal(p)
		msgs[i] = outbox.Message{ID: p.ID, Topic: topic, Key: []byte(agg), Value: v}
	}
	items := []types.TransactWriteItem{
		{Update: &types.Update{
			TableName: aws.String(table), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: agg}},
			UpdateExpression: aws.String("SET #v = :next"), ConditionExpression: aws.String("#v = :expected"),
			ExpressionAttributeNames:  map[string]string{"#v": "version"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":next": num(expected + 1), ":expected": num(expected)},
		}},
		{Put: &types.Put{TableName: aws.String(table), Item: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "tx#" + txID}}}},
	}
	wctx := ctx
	if d.fires("writer:crash", 0.02) {
		var kill context.CancelFunc
		wctx, kill = context.WithCancel(ctx)
		wctx = context.WithValue(wctx, crashKey{}, kill)
		tl.add("writer:crash", 1)
	}
	wstart := time.Now()
	_, werr := w.Write(wctx, items, msgs...)
	committed := werr == nil
	if committed {
		tl.ran(&tl.writes, wstart, time.Now())
	}
	if werr != nil && ctx.Err() == nil {
		switch {
		case errors.Is(werr, outbox.ErrConditionFailed), errors.Is(werr, outbox.ErrConflict),
			errors.Is(werr, outbox.ErrThrottled), errors.Is(werr, outbox.ErrSequenceFenced):
			// Definitely not written.
		default:
			// Ambiguous (outcome unknown, a crashed writer, ...): the
			// transaction record says whether it committed.
			exists, err := txExists(ctx, clean, table, txID)
			if err != nil {
				return 0, err
			}
			committed = exists
		}
	}
	for _, m := range msgs {
		if committed {
			var p payload
			_ = json.Unmarshal(m.Value, &p)
			chk.Committed(m.ID, agg, p.order())
		} else {
			chk.RolledBack(m.ID)
		}
	}
	if !committed {
		rolledBack.Add(int64(n))
		return 0, nil
	}
	return n, nil
}

func num(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: fmt.Sprint(n)}
}

func readVersion(ctx context.Context, db *dynamodb.Client, table, agg string) (int64, error) {
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: agg}}})
	if err != nil {
		return 0, err
	}
	v, ok := out.Item["version"].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("aggregate %s has no version", agg)
	}
	var n int64
	_, err = fmt.Sscan(v.Value, &n)
	return n, err
}

func txExists(ctx context.Context, db *dynamodb.Client, table, txID string) (bool, error) {
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "tx#" + txID}}})
	if err != nil {
		return false, err
	}
	return out.Item != nil, nil
}

func createAggregates(ctx context.Context, db *dynamodb.Client, table string, round, n int) error {
	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		return err
	}
	if err := dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, time.Minute); err != nil {
		return err
	}
	for start := 0; start < n; start += 25 {
		var reqs []types.WriteRequest
		for i := start; i < min(start+25, n); i++ {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
				"id": &types.AttributeValueMemberS{Value: fmt.Sprintf("r%d-agg-%04d", round, i)}, "version": num(0)}}})
		}
		for len(reqs) > 0 {
			out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
			if err != nil {
				return err
			}
			reqs = out.UnprocessedItems[table]
		}
	}
	return nil
}

func createTopic(ctx context.Context, brokers []string, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	return err
}

// pendingMessages counts the messages still pending in the outbox (bounded
// per bucket), through the store's probe.
func pendingMessages(ctx context.Context, s *dynamo.Store, buckets int) (int, error) {
	n := 0
	for b := range buckets {
		l, err := s.ReadLease(ctx, b)
		if err != nil {
			return 0, err
		}
		p, _, err := s.Peek(ctx, b, l.Cleaned, 1000)
		if err != nil {
			return 0, err
		}
		n += p
	}
	return n, nil
}

// produceIDs returns the outbox message ids carried by a produce request's
// records (the message-id header of each record).
func produceIDs(req kmsg.Request) []string {
	pr, ok := req.(*kmsg.ProduceRequest)
	if !ok {
		return nil
	}
	dec := kgo.DefaultDecompressor()
	var out []string
	for _, t := range pr.Topics {
		for _, p := range t.Partitions {
			raw := p.Records
			for len(raw) > 0 {
				var batch kmsg.RecordBatch
				if err := batch.ReadFrom(raw); err != nil {
					break
				}
				size := int(batch.Length) + 12 // FirstOffset and Length precede the counted bytes
				data := batch.Records
				if codec := batch.Attributes & 0x07; codec != 0 {
					d, err := dec.Decompress(data, kgo.CompressionCodecType(codec))
					if err != nil {
						break
					}
					data = d
				}
				for range batch.NumRecords {
					n, w := binary.Varint(data)
					if w <= 0 || int(n)+w > len(data) {
						break
					}
					var r kmsg.Record
					if r.ReadFrom(data[:w+int(n)]) == nil {
						for _, h := range r.Headers {
							if h.Key == outbox.DefaultMessageIDHeader {
								out = append(out, string(h.Value))
							}
						}
					}
					data = data[w+int(n):]
				}
				if size <= 0 || size > len(raw) {
					break
				}
				raw = raw[size:]
			}
		}
	}
	return out
}

// describePending says, for a failed run, what is left in each bucket.
func describePending(ctx context.Context, s *dynamo.Store, buckets int) string {
	var b strings.Builder
	for bucket := range buckets {
		l, err := s.ReadLease(ctx, bucket)
		if err != nil {
			fmt.Fprintf(&b, "bucket %d: %v; ", bucket, err)
			continue
		}
		entries, _, err := s.Pending(ctx, bucket, l.Cleaned, 20)
		if err != nil || len(entries) == 0 {
			continue
		}
		fmt.Fprintf(&b, "bucket %d lease{owner=%q expires=%s head=%d cleaned=%d gap=%d wake=%d}: ", bucket, l.Owner,
			l.Expires.Format("15:04:05.000"), l.Head, l.Cleaned, l.Gap, l.Wake)
		for _, e := range entries {
			fmt.Fprintf(&b, "%d(fence=%v err=%v id=%s) ", e.Sequence, e.Fence, e.Err, e.Message.ID)
		}
		b.WriteString("; ")
	}
	return b.String()
}
