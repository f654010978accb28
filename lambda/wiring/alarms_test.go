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
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/faults"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/local/esm"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
)

// alarmClaims reads docs/failures.md's fault table: for each fault (its
// first cell), the alarms its alarm column names, per variant ("park",
// "block": a part of the cell that ends with the variant in parentheses
// applies to it alone; "" is every variant).
func alarmClaims(t *testing.T) map[string]map[string][]string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/failures.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "| fault | what the system does | what you see | alarm |")
	if start < 0 {
		t.Fatal("docs/failures.md: the fault table's header moved; update this test")
	}
	alarm := regexp.MustCompile(`\b[A-Z][A-Za-z]+Alarm\b`)
	variant := regexp.MustCompile(`\((park|block)\)\s*$`)
	claims := map[string]map[string][]string{}
	for _, line := range strings.Split(doc[start:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 5 {
			t.Fatalf("docs/failures.md: a row with %d cells: %s", len(cells), line)
		}
		fault := strings.TrimPrefix(cells[0], "| ")
		byVariant := map[string][]string{}
		for _, part := range strings.Split(cells[3], ";") {
			v := ""
			if m := variant.FindStringSubmatch(part); m != nil {
				v = m[1]
			}
			byVariant[v] = append(byVariant[v], alarm.FindAllString(part, -1)...)
		}
		claims[fault] = byVariant
	}
	return claims
}

// missingBreaches reads template.yaml: the alarms that treat missing data
// as breaching.
func missingBreaches(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	re := regexp.MustCompile(`(?m)^  ([A-Za-z]+Alarm):\n(?:    .*\n|\s*\n)*?      TreatMissingData: (\w+)`)
	for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
		out[m[1]] = m[2] == "breaching"
	}
	if len(out) == 0 {
		t.Fatal("template.yaml: no alarm with TreatMissingData; update this test")
	}
	return out
}

// budget is a relay and a sweeper invocation's deadline, as Lambda gives
// it.
type budget struct{ relay, sweeper time.Duration }

// budgets reads template.yaml: the timeouts the stack gives the relay and
// the sweeper by default (RelayTimeout's and SweeperTimeout's Default) and
// the smallest it lets them have (their MinValue). A scenario's functions
// get the defaults: a healthy drain fits in them with room to spare however
// busy the machine. A fault that holds every call until the deadline gets
// the smallest: what it raises does not depend on how much work fits, and it
// keeps the test short. Anything shorter is not what a deployed function
// gets: below ResponseMargin + DeadlineMargin (6 s) the relay stops claiming
// buckets before it starts, and every hint becomes a batch item failure with
// no fault at all.
func budgets(t *testing.T) (def, least budget) {
	t.Helper()
	raw, err := os.ReadFile("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	value := func(param, field string) time.Duration {
		m := regexp.MustCompile(`(?m)^  ` + param + `:\n(?:    .*\n)*?    ` + field + `: (\d+)\n`).FindSubmatch(raw)
		if m == nil {
			t.Fatalf("template.yaml: no %s for %s; update this test", field, param)
		}
		n, _ := strconv.Atoi(string(m[1]))
		return time.Duration(n) * time.Second
	}
	def = budget{value("RelayTimeout", "Default"), value("SweeperTimeout", "Default")}
	least = budget{value("RelayTimeout", "MinValue"), value("SweeperTimeout", "MinValue")}
	if floor := handler.ResponseMargin + 5*time.Second; least.relay <= floor || least.sweeper <= floor {
		t.Fatalf("template.yaml lets a function time out within %v, before the relay claims anything", floor)
	}
	return def, least
}

// observation is what the functions did about one fault, read as the
// alarms' metrics see it.
type observation struct {
	relayInitFailed, sweeperInitFailed bool
	relayErr                           error
	// relayCrashed: the relay's process died in its invocation (Lambda
	// counts an error, and the stream retries the batch); it wrote no line.
	relayCrashed      bool
	relayItemFailures int
	relayLine         map[string]any // the relay's EMF line
	// failureQueue is what the local event-source mapping sent to its
	// failure destination, when the hint went through one (-1: it did not,
	// and a failure that lasts is assumed to reach it).
	failureQueue int
	sweepErrs    []error          // one per sweep
	sweepLines   []map[string]any // one per sweep; nil when no line was written
}

// alarms are the alarms whose metric the observation drives over their
// thresholds (or, for the backlog alarms, leaves missing: they treat
// missing data as breaching). AWS's own metrics are read through what
// makes them: Errors counts a failed init and an invocation that returns an
// error or crashes; a stream record reported as a batch item failure (or in
// a failed invocation) is retried from there, so the iterator age grows,
// and after MaximumRetryAttempts it goes to the failure queue.
func (o observation) alarms(missingBreaches map[string]bool) []string {
	var out []string
	add := func(on bool, name string) {
		if on {
			out = append(out, name)
		}
	}
	relayFails := o.relayInitFailed || o.relayErr != nil || o.relayCrashed
	add(relayFails, "RelayErrorsAlarm")
	add(relayFails || o.relayItemFailures > 0, "RelayIteratorAgeAlarm")
	if o.failureQueue >= 0 {
		add(o.failureQueue > 0, "RelayFailureQueueAlarm")
	} else {
		add(relayFails || o.relayItemFailures > 0, "RelayFailureQueueAlarm")
	}
	everySweepFails := o.sweeperInitFailed || len(o.sweepErrs) > 0
	for _, err := range o.sweepErrs {
		everySweepFails = everySweepFails && err != nil
	}
	add(everySweepFails, "SweeperErrorsAlarm")
	f := func(m map[string]any, name string) (float64, bool) { v, ok := m[name].(float64); return v, ok }
	fatal, _ := f(o.relayLine, "PublishFailuresFatal")
	add(fatal >= 1, "PublishFailuresFatalAlarm")
	// The oldest pending message ages at every sweep (it will pass any
	// threshold), or the metric is missing.
	ageing := len(o.sweepLines) > 1 || (o.sweeperInitFailed && missingBreaches["OldestPendingAgeAlarm"])
	prev := -1.0
	for _, m := range o.sweepLines {
		age, ok := f(m, "OldestPendingAge")
		pending, counted := f(m, "PendingMessages") // absent: not counted, not 0
		if (ok && ((counted && pending == 0) || age <= prev)) || (!ok && !missingBreaches["OldestPendingAgeAlarm"]) {
			ageing = false
		}
		prev = age
	}
	add(ageing, "OldestPendingAgeAlarm")
	if o.sweeperInitFailed {
		add(missingBreaches["StuckBucketsAlarm"], "StuckBucketsAlarm")
	} else if n := len(o.sweepLines); n > 0 {
		stuck, ok := f(o.sweepLines[n-1], "StuckBuckets")
		add((!ok && missingBreaches["StuckBucketsAlarm"]) || stuck >= 1, "StuckBucketsAlarm")
		parked, _ := f(o.sweepLines[n-1], "ParkedMessages")
		add(parked > 0, "ParkedMessagesAlarm")
	}
	return out
}

// faultRig is one outbox on DynamoDB Local and kfake with a relay and a
// sweeper wired as the functions wire them.
type faultRig struct {
	t       *testing.T
	d       *testenv.Dynamo
	k       *kfakeenv.Cluster
	tables  dynamo.Tables
	topic   string
	env     map[string]string
	extra   []relay.Option // the relay's and the sweeper's
	message dynamo.Result
	// budget is each invocation's deadline (see budgets).
	budget budget
	// relayAWS and sweeperAWS, if set, give each function's AWS
	// configuration (a fault in its DynamoDB client); default the rig's.
	relayAWS, sweeperAWS func(aws.Config) aws.Config
	// afterInit, if set, injects a fault after the functions' init.
	afterInit func()
	// afterRun, if set, runs before the functions' parts are closed.
	afterRun func()
	// crashed, if set, tells whether the relay's process died during its
	// invocation.
	crashed func() bool
	// stream: the hint reaches the relay through a local event-source
	// mapping on the messages table's stream with these options (nil: the
	// rig hands the relay the hint itself).
	stream []esm.Opt
	// overlap runs the relay's invocation beside the sweeps (which follow
	// each other), as they may on AWS; otherwise the sweeps come after it.
	// Only for a fault that fails every attempt at the bucket until the
	// deadline, where every interleaving gives the same metrics: a sweep
	// that finds the relay holding the bucket skips it (Held), one that
	// takes it first fails it retriably, and either way the bucket stays
	// pending at its head with no sweep error; a relay that finds a sweep
	// holding it waits and reports the hint for redelivery.
	overlap bool
	// met, if set, checks that the fault was met by the functions.
	met func() error
}

// run writes nothing itself: the scenario's fault is in place. It invokes
// the relay once for the message's hint and the sweeper sweeps times. It
// runs beside other rigs: a failure of the rig itself is reported with
// Errorf and ends the run.
func (r *faultRig) run(ctx context.Context, sweeps int) (o observation) {
	t := r.t
	o.failureQueue = -1
	cfg, err := config.Load(func(s string) string { return r.env[s] })
	if err != nil {
		o.relayInitFailed, o.sweeperInitFailed = true, true
		return o
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var relayOut, sweeperOut bytes.Buffer
	relayEMF, err := NewEmitter(&relayOut, cfg.MessagesTable, "INFO")
	if err != nil {
		t.Errorf("relay emitter: %v", err)
		return o
	}
	sweeperEMF, err := NewEmitter(&sweeperOut, cfg.MessagesTable, "INFO")
	if err != nil {
		t.Errorf("sweeper emitter: %v", err)
		return o
	}
	awsFor := func(f func(aws.Config) aws.Config) aws.Config {
		if f == nil {
			return r.d.Config
		}
		return f(r.d.Config.Copy())
	}
	metrics := handler.NewRelayMetrics()
	// Both functions' init first, then the fault if it comes after init,
	// then the invocations.
	relayParts, rerr := BuildWith(ctx, cfg, awsFor(r.relayAWS), log, "relay/test", append([]relay.Option{relay.WithMetrics(metrics)}, r.extra...)...)
	o.relayInitFailed = rerr != nil
	if rerr == nil {
		defer relayParts.Close()
	}
	// The sweeper takes over buckets the relay released: with the rig's
	// 12 s lease, a 3 s window (above its 2 s margin) keeps its wait short.
	var window []relay.Option
	if r.env["OUTBOX_LEASE_DURATION"] == "12s" {
		window = []relay.Option{relay.ResumeWindow(3 * time.Second)}
	}
	sweeperParts, serr := BuildWith(ctx, cfg, awsFor(r.sweeperAWS), log, "sweeper/test", append(window, r.extra...)...)
	o.sweeperInitFailed = serr != nil
	if serr == nil {
		defer sweeperParts.Close()
	}
	if r.afterRun != nil {
		defer r.afterRun() // before the parts close
	}
	if r.afterInit != nil {
		r.afterInit()
	}
	relay := func() {
		if rerr != nil {
			return
		}
		h := handler.NewRelay(relayParts.Relay, cfg.Concurrency, log, handler.RelayEMF(relayEMF, metrics))
		if r.stream != nil {
			o.relayErr, o.relayItemFailures, o.failureQueue = r.viaStream(ctx, h)
		} else {
			m := r.message.Messages[0]
			ictx, cancel := context.WithTimeout(ctx, r.budget.relay)
			resp, err := h.Handle(ictx, hint(m.Bucket, m.Sequence))
			cancel()
			o.relayErr, o.relayItemFailures = err, len(resp.BatchItemFailures)
		}
		if relayOut.Len() > 0 {
			o.relayLine = r.line(&relayOut)
		}
		if r.crashed != nil && r.crashed() {
			// The process died: what the handler did after that never
			// happened, and its answer never reached Lambda.
			o.relayErr, o.relayItemFailures, o.relayLine, o.relayCrashed = nil, 0, nil, true
		}
	}
	sweep := func() {
		if serr != nil {
			return
		}
		sw, err := handler.NewSweeper(sweeperParts.Relay, log, handler.SweeperEMF(sweeperEMF), handler.StuckAfter(sweeps),
			handler.SweepProgress(NewProgressStore(sweeperParts.Dynamo, cfg.ControlTable)))
		if err != nil {
			t.Errorf("sweeper: %v", err)
			return
		}
		for range sweeps {
			sweeperOut.Reset()
			ictx, cancel := context.WithTimeout(ctx, r.budget.sweeper)
			_, err := sw.Handle(ictx, events.CloudWatchEvent{})
			cancel()
			o.sweepErrs = append(o.sweepErrs, err)
			var line map[string]any
			if sweeperOut.Len() > 0 {
				line = r.line(&sweeperOut)
			}
			o.sweepLines = append(o.sweepLines, line)
		}
	}
	if !r.overlap {
		relay()
		sweep()
		return o
	}
	var wg sync.WaitGroup
	wg.Go(relay)
	sweep()
	wg.Wait()
	return o
}

// line decodes the last EMF line in buf (lastLine, from a goroutine that
// may not end the test).
func (r *faultRig) line(buf *bytes.Buffer) map[string]any {
	var doc map[string]any
	if err := json.Unmarshal(lastRaw(buf), &doc); err != nil {
		r.t.Errorf("%s: %v", lastRaw(buf), err)
	}
	return doc
}

// viaStream runs a local event-source mapping (configured like
// template.yaml's, with r.stream's options) on the messages table's stream
// until the rig's message was either handled or sent to the failure
// destination, and returns what the invocations answered and how many
// batches the failure destination got.
func (r *faultRig) viaStream(ctx context.Context, h *handler.Relay) (err error, itemFailures, failed int) {
	desc, derr := r.d.Client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(r.tables.Messages)})
	if derr != nil {
		return derr, 0, 0
	}
	var (
		mu   sync.Mutex
		done = make(chan struct{})
		once sync.Once
	)
	finish := func() { once.Do(func() { close(done) }) }
	fn := func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		resp, herr := h.Handle(ctx, ev)
		mu.Lock()
		itemFailures += len(resp.BatchItemFailures)
		err = errors.Join(err, herr)
		mu.Unlock()
		if herr == nil && len(resp.BatchItemFailures) == 0 {
			finish() // handled
		}
		return resp, herr
	}
	opts := append([]esm.Opt{esm.BatchSize(500), esm.Filter(esm.InsertsOnly), esm.BisectBatchOnFunctionError(true),
		esm.ReportBatchItemFailures(true), esm.OnFailure(func(context.Context, esm.FailureRecord) {
			mu.Lock()
			failed++
			mu.Unlock()
			finish()
		})}, r.stream...)
	m, merr := esm.New(r.d.Streams, aws.ToString(desc.Table.LatestStreamArn), esm.InProcess(fn, esm.Timeout(r.budget.relay)), opts...)
	if merr != nil {
		return merr, 0, 0
	}
	mctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = m.Run(mctx) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	cancel()
	<-stopped
	mu.Lock()
	defer mu.Unlock()
	return err, itemFailures, failed
}

// newFaultRig creates the rig's outbox (tables in the mode opts give, and a
// topic) and writes its message. It may run beside other rigs' creation:
// it returns its failure.
func newFaultRig(t *testing.T, ctx context.Context, d *testenv.Dynamo, k *kfakeenv.Cluster, opts ...dynamo.TablesOption) (*faultRig, error) {
	r := &faultRig{t: t, d: d, k: k, tables: dynamo.Tables{Messages: testenv.Name(t, "m"), Control: testenv.Name(t, "c")}, topic: testenv.Name(t, "t")}
	if err := dynamo.CreateTables(ctx, d.Client, r.tables, append([]dynamo.TablesOption{dynamo.BucketCount(4)}, opts...)...); err != nil {
		return nil, err
	}
	if err := r.createTopic(ctx); err != nil {
		return nil, err
	}
	r.env = map[string]string{
		"OUTBOX_MESSAGES_TABLE": r.tables.Messages, "OUTBOX_CONTROL_TABLE": r.tables.Control,
		"OUTBOX_TOPICS": r.topic, "KAFKA_BOOTSTRAP_SERVERS": strings.Join(k.Brokers, ","),
		"OUTBOX_DYNAMODB_ENDPOINT": d.Endpoint, "AWS_REGION": d.Config.Region, "KAFKA_AUTH": "none",
		"OUTBOX_SWEEP_MIN_AGE": "0s", "OUTBOX_LEASE_DURATION": "12s",
	}
	w, err := dynamo.NewWriter(ctx, d.Client, r.tables)
	if err != nil {
		return nil, err
	}
	if r.message, err = w.Write(ctx, nil, outbox.Message{Topic: r.topic, Key: []byte("order-1"), Value: []byte("paid")}); err != nil {
		return nil, err
	}
	return r, nil
}

// createTopic creates the rig's topic (2 partitions) on kfake, which
// answers once it exists.
func (r *faultRig) createTopic(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.k.Brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	_, err = kadm.NewClient(cl).CreateTopic(ctx, 2, -1, nil, r.topic)
	return err
}

// setAttr overwrites one attribute of the rig's message in the table.
func (r *faultRig) setAttr(ctx context.Context, name string, v types.AttributeValue) {
	m := r.message.Messages[0]
	if _, err := r.d.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(r.tables.Messages),
		Key: map[string]types.AttributeValue{
			"b": &types.AttributeValueMemberN{Value: itoa(int64(m.Bucket))}, "s": &types.AttributeValueMemberN{Value: itoa(m.Sequence)},
		},
		UpdateExpression:          aws.String("SET #a = :v"),
		ExpressionAttributeNames:  map[string]string{"#a": name},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": v},
	}); err != nil {
		r.t.Fatal(err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// throttled returns an injector that, once enabled, answers every DynamoDB
// call of the clients it is installed in with
// ProvisionedThroughputExceededException (each attempt: the SDK's retries
// are throttled too), and the AWS configuration that installs it.
func throttled(t *testing.T) (*faults.Injector, func(aws.Config) aws.Config) {
	t.Helper()
	inj, err := faults.New(faults.Disabled(), faults.For(faults.AllOperations, faults.Policy{Throttle: 1}))
	if err != nil {
		t.Fatal(err)
	}
	return inj, func(c aws.Config) aws.Config {
		c.APIOptions = append(c.APIOptions, inj.AddMiddleware)
		return c
	}
}

// errCrashed is every DynamoDB call of a process that crashed.
var errCrashed = errors.New("the process crashed")

// crashAfterAcquire kills a DynamoDB client's process, as far as DynamoDB
// can tell, right after a lease acquisition succeeded: every later call
// fails before it is sent.
type crashAfterAcquire struct{ crashed atomic.Bool }

func (c *crashAfterAcquire) install(cfg aws.Config) aws.Config {
	cfg.APIOptions = append(cfg.APIOptions, func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("test.CrashAfterAcquire",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if c.crashed.Load() {
					return middleware.InitializeOutput{}, middleware.Metadata{}, errCrashed
				}
				out, md, err := next.HandleInitialize(ctx, in)
				// An acquisition is the lease write that counts a new
				// epoch (store/dynamo's Acquire).
				if u, ok := in.Parameters.(*dynamodb.UpdateItemInput); ok && err == nil && strings.Contains(aws.ToString(u.UpdateExpression), "ADD #ep :one") {
					c.crashed.Store(true)
				}
				return out, md, err
			}), middleware.Before)
	})
	return cfg
}

// TestFailuresRaiseTheirAlarms drives each fault of docs/failures.md's
// table whose alarm column names an alarm, on real parts (DynamoDB Local,
// kfake, the relay and sweeper handlers as lambda/relay and lambda/sweeper
// wire them, invoked with the stack's smallest timeouts), and checks that
// the metrics raise exactly the alarms the row claims (observation.alarms):
// a claimed alarm not raised fails, and so does one raised that the row does
// not claim. Two fault-free controls (a delete-mode and a watermark outbox)
// must raise none. A row with an alarm that is neither driven here nor
// listed in notDriven with its reason fails.
func TestFailuresRaiseTheirAlarms(t *testing.T) {
	d := testenv.DynamoDB(t)
	k := kfakeenv.Kafka(t, kfake.NumBrokers(1))
	kfakeenv.RequireKfake(t, k)
	// A cluster of its own for the broker that never answers: it holds
	// every produce request it gets.
	hung := kfakeenv.Kafka(t, kfake.NumBrokers(1))
	claims := alarmClaims(t)
	breaching := missingBreaches(t)
	defaults, least := budgets(t)
	const (
		ttlRow     = "Watermark mode: a message is still pending when its TTL"
		topicAuth  = "Kafka: `TOPIC_AUTHORIZATION_FAILED`"
		throttling = "DynamoDB throttling"
	)
	denyProduce := func(code *kerr.Error) func(*faultRig, context.Context) {
		return func(r *faultRig, _ context.Context) {
			h := r.k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: r.topic, Err: code, Count: -1})
			r.t.Cleanup(h.Remove)
			r.met = func() error {
				if h.Hits() == 0 {
					return fmt.Errorf("no produce request was answered %v", code)
				}
				return nil
			}
		}
	}
	block := []relay.Option{relay.OnRecordError(outbox.Block)}
	watermark := []dynamo.TablesOption{dynamo.WithMode(outbox.WatermarkMode)}
	type scenario struct {
		name           string
		fault, variant string // the row (a prefix of its first cell; "": a control) and the variant
		// cause, if set, is the row whose fault the scenario uses to make
		// this row's condition: its alarms are claimed too.
		cause  string
		setup  func(*faultRig, context.Context)
		extra  []relay.Option
		tables []dynamo.TablesOption
		kafka  *kfakeenv.Cluster // default k
		// lasting: the fault fails every call of the functions at the
		// bucket until the invocation's deadline; they get the smallest
		// budget, and the relay's invocation overlaps the sweeps.
		lasting bool
	}
	scenarios := []scenario{
		{name: "control", setup: func(*faultRig, context.Context) {}},
		{name: "control watermark", setup: func(*faultRig, context.Context) {}, tables: watermark},
		// The smallest budget alone raises nothing either (a healthy drain
		// fits in it many times over).
		{name: "control smallest budget", setup: func(*faultRig, context.Context) {}, lasting: true},
		{fault: "Kafka: `MESSAGE_TOO_LARGE`", variant: "park", setup: denyProduce(kerr.InvalidRecord)},
		{fault: "Kafka: `MESSAGE_TOO_LARGE`", variant: "block", setup: denyProduce(kerr.InvalidRecord), extra: block},
		{fault: topicAuth, setup: denyProduce(kerr.TopicAuthorizationFailed)},
		// Long before its TTL, a message the relay cannot publish (here the
		// topic refuses it) ages in the metric the alarm reads.
		{fault: ttlRow, cause: topicAuth, setup: denyProduce(kerr.TopicAuthorizationFailed), tables: watermark},
		{fault: "Item that cannot be decoded", variant: "park", setup: func(r *faultRig, ctx context.Context) {
			r.setAttr(ctx, "v", &types.AttributeValueMemberS{Value: "one"})
		}},
		{fault: "Item that cannot be decoded", variant: "block", setup: func(r *faultRig, ctx context.Context) {
			r.setAttr(ctx, "v", &types.AttributeValueMemberS{Value: "one"})
		}, extra: block},
		{fault: "Item of a newer format version", setup: func(r *faultRig, ctx context.Context) {
			r.setAttr(ctx, "v", &types.AttributeValueMemberN{Value: "99"})
		}},
		// After init, every DynamoDB call hangs until the invocation's
		// deadline.
		{fault: "DynamoDB stops answering", lasting: true, setup: func(r *faultRig, _ context.Context) {
			f, endpoint := newFreezer(r.t, r.d.Endpoint)
			r.env["OUTBOX_DYNAMODB_ENDPOINT"] = endpoint
			r.afterInit = func() { f.frozen.Store(true) }
			r.met = func() error {
				if f.held.Load() == 0 {
					return errors.New("no DynamoDB request was held")
				}
				return nil
			}
		}},
		// The broker accepts every produce request and answers none until
		// the run is over.
		{fault: "A Kafka broker accepts connections and never answers", kafka: hung, lasting: true, setup: func(r *faultRig, _ context.Context) {
			var held atomic.Int64
			release := make(chan struct{})
			var once sync.Once
			wake := func() { once.Do(func() { close(release) }) }
			r.k.Cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				r.k.Cluster.KeepControl()
				held.Add(1)
				r.k.Cluster.SleepControl(func() { <-release })
				return nil, nil, false // then as usual: the abandoned records may be written after all
			})
			r.afterRun = wake
			r.t.Cleanup(wake)
			r.met = func() error {
				if held.Load() == 0 {
					return errors.New("the broker held no produce request")
				}
				return nil
			}
		}},
		// Every produce to the topic is answered NOT_LEADER_OR_FOLLOWER for
		// the whole run: past franz-go's retries, the relay's and every
		// invocation's deadline.
		{fault: "Kafka: `NOT_LEADER_OR_FOLLOWER`", lasting: true, setup: denyProduce(kerr.NotLeaderForPartition)},
		// After init, every DynamoDB attempt of both functions is
		// throttled: past the SDK's retries.
		{fault: throttling, lasting: true, setup: func(r *faultRig, _ context.Context) {
			relayInj, relayAWS := throttled(r.t)
			sweeperInj, sweeperAWS := throttled(r.t)
			r.relayAWS, r.sweeperAWS = relayAWS, sweeperAWS
			r.afterInit = func() { relayInj.Enable(); sweeperInj.Enable() }
			r.met = func() error {
				if relayInj.Total() == 0 || sweeperInj.Total() == 0 {
					return fmt.Errorf("throttled: relay %d, sweeper %d calls", relayInj.Total(), sweeperInj.Total())
				}
				return nil
			}
		}},
		// The relay's process dies right after its lease write; the lease
		// stays held by the dead process for its duration (300 s here, as
		// the stream's retries of a relay that keeps crashing keep it held;
		// longer than the two sweeps' budgets, so both find it held, and
		// sweeps never wait for a holder).
		{fault: "Relay crashes right after taking a lease", setup: func(r *faultRig, _ context.Context) {
			var c crashAfterAcquire
			r.relayAWS, r.crashed = c.install, c.crashed.Load
			r.env["OUTBOX_LEASE_DURATION"] = "300s"
			r.met = func() error {
				if !c.crashed.Load() {
					return errors.New("the relay never took the lease")
				}
				return nil
			}
		}},
		// The hint reaches the relay through the stream's mapping; the
		// relay cannot drain (its DynamoDB client is throttled), and with
		// no retries left the mapping gives the hint up to its failure
		// destination. The sweeper, unaffected, drains the bucket.
		{fault: "Stream hints dropped", setup: func(r *faultRig, _ context.Context) {
			inj, relayAWS := throttled(r.t)
			r.relayAWS, r.afterInit = relayAWS, inj.Enable
			r.stream = []esm.Opt{esm.MaximumRetryAttempts(0)}
			r.met = func() error {
				if inj.Total() == 0 {
					return errors.New("the relay was never throttled")
				}
				return nil
			}
		}},
		{fault: "Messages in a bucket outside the range", setup: func(r *faultRig, ctx context.Context) {
			if _, err := r.d.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(r.tables.Messages), Item: map[string]types.AttributeValue{
				"b": &types.AttributeValueMemberN{Value: "5"}, "s": &types.AttributeValueMemberN{Value: "1"},
			}}); err != nil {
				r.t.Fatal(err)
			}
		}},
		{fault: "A function's configuration is invalid, Kafka or the config item unreachable at init", setup: func(r *faultRig, _ context.Context) {
			r.env["KAFKA_BOOTSTRAP_SERVERS"] = "127.0.0.1:1" // refuses
			r.env["OUTBOX_TOPICS"] = ""
		}},
		// The config item says a format version above this release's
		// (as an older release meets a watermark or rebucketed outbox).
		{fault: "A release older than the outbox's config item", setup: func(r *faultRig, ctx context.Context) {
			if _, err := r.d.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(r.tables.Control),
				Key: map[string]types.AttributeValue{
					"pk": &types.AttributeValueMemberS{Value: "config"}, "sk": &types.AttributeValueMemberS{Value: "config"},
				},
				UpdateExpression:          aws.String("SET v = :v"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: "99"}},
			}); err != nil {
				r.t.Fatal(err)
			}
		}},
	}
	// The rows whose alarms this test does not drive, why, and the test
	// that covers them instead (file, function): it must exist.
	notDriven := map[string]struct{ why, file, test string }{
		"Kafka: a topic deleted under a running relay": {"the same Fatal publish path as a topic that does not exist (driven here, as TOPIC_AUTHORIZATION_FAILED); " +
			"deleting and recreating a topic under a running relay needs a broker this rig does not delete from: cmd/outbox's TestTopicDeleted drives it " +
			"under Relay.Run (REASON, park, drain, the recreated topic) on kfake and Apache Kafka", "../../cmd/outbox/topicdel_test.go", "TestTopicDeleted"},
		"Region mode: a writer whose DynamoDB client is for another region": {"an init failure, as an invalid configuration (driven here); " +
			"two regions' tables: integration's TestRegionGuard checks the Go and Python writers' refusal and that no counter moved", "../../integration/regionguard_test.go", "TestRegionGuard"},
		"Kafka: a topic that does not exist": {"the same Fatal publish path as TOPIC_AUTHORIZATION_FAILED, driven here; " +
			"cmd/outbox's TestContainment drives the missing topic itself (REASON, park, replay)", "../../cmd/outbox/main_test.go", "TestContainment"},
		"Messages or control table made a global table": {"an init failure, as an invalid configuration (driven here); DynamoDB Local has no replicas, " +
			"store/dynamo's TestGlobalTablesRefused checks the init error with a fake DescribeTable answer", "../../store/dynamo/replicas_test.go", "TestGlobalTablesRefused"},
		// Region mode needs two regions' tables, which this one-stack rig
		// does not have.
		"Region mode: a writer or relay without its region": {"an init failure, as an invalid configuration (driven here); " +
			"store/dynamo's TestRegionModeConfig checks the writer's *MisconfigurationError for Region (the root package's TestCheckRegion the relay's)", "../../store/dynamo/regions_config_test.go", "TestRegionModeConfig"},
		"Region mode: a region fails (outage or partition)": {"two regions (two DynamoDB Local instances and a replication shim): " +
			"store/dynamo's TestTwoRegions runs the outage, the backlog in the failed region's slice, the takeover and the hand-back", "../../store/dynamo/regions_test.go", "TestTwoRegions"},
		"Region mode: a gap in a bucket taken over": {"a slice taken over from another region: the root package's TestRelayRegionMode " +
			"checks that the gap is never fenced and the bucket waits", "../../relay/region_relay_test.go", "TestRelayRegionMode"},
		"Transactional mode: a relay that acquired a bucket cannot initialise": {"this rig publishes without transactions; the root package's " +
			"TestFailedFenceReadsAndPublishesNothing checks that the drain stops before its read with the fence's error and class and gives the lease up: " +
			"a fence that keeps failing leaves the bucket's messages pending, as any drain that keeps failing", "../../relay/fence_test.go", "TestFailedFenceReadsAndPublishesNothing"},
		"The tool that began a `BucketCount` change is killed": {"the change stands after its flip and the sweeper ends its old epoch once " +
			"drained, so RebucketOverdueAlarm fires only when an old bucket does not drain (the next row): integration's TestRebucketCLI drives the " +
			"interrupted tool and the old epoch ended by the sweeper, a relay's sweep and the CLI",
			"../../integration/rebucket_cli_test.go", "TestRebucketCLI"},
		"An old bucket does not drain after a change": {"an old epoch still draining past the change's deadline: the root package's " +
			"TestSweepEndsADrainedOldEpoch drives the sweep's overdue report (ChangeSeen.Overdue, Waiting) that the sweeper turns into " +
			"BucketCountChangeOverdue (lambda/handler's TestSweeperLineGolden, sweeper_change_overdue.json); OldestPendingAge follows the held messages",
			"../../relay/change_test.go", "TestSweepEndsADrainedOldEpoch"},
	}
	for row, nd := range notDriven {
		src, err := os.ReadFile(nd.file)
		if err != nil || !bytes.Contains(src, []byte("func "+nd.test+"(")) {
			t.Errorf("notDriven %q names %s in %s: not there (%v)", row, nd.test, nd.file, err)
		}
	}
	rowOf := func(prefix string) string {
		for fault := range claims {
			if strings.HasPrefix(fault, prefix) {
				return fault
			}
		}
		t.Fatalf("docs/failures.md has no fault %q", prefix)
		return ""
	}
	// Every rig is set up here, then all run at once (most of their time is
	// spent waiting for a deadline), then each is checked.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	setUp := time.Now()
	covered := map[string]bool{}
	rigs := make([]*faultRig, len(scenarios))
	errs := make([]error, len(scenarios))
	var wg sync.WaitGroup
	for i, sc := range scenarios {
		kc := sc.kafka
		if kc == nil {
			kc = k
		}
		wg.Go(func() { rigs[i], errs[i] = newFaultRig(t, ctx, d, kc, sc.tables...) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, sc := range scenarios {
		if sc.fault != "" {
			covered[rowOf(sc.fault)] = true
		}
		r := rigs[i]
		r.extra, r.budget = sc.extra, defaults
		if sc.lasting {
			// A control's relay drains while sweeps would look: it runs
			// before them.
			r.budget, r.overlap = least, sc.fault != ""
		}
		sc.setup(r, ctx)
	}
	ran := time.Now()
	obs := make([]observation, len(scenarios))
	for i, r := range rigs {
		wg.Go(func() { obs[i] = r.run(ctx, 2) })
	}
	wg.Wait()
	t.Logf("set up in %v, ran in %v", ran.Sub(setUp), time.Since(ran))
	for i, sc := range scenarios {
		name := sc.name
		if name == "" {
			name = strings.TrimSpace(sc.fault + " " + sc.variant)
		}
		t.Run(name, func(t *testing.T) {
			var want []string
			if sc.fault != "" {
				row := rowOf(sc.fault)
				want = append(slices.Clone(claims[row][""]), claims[row][sc.variant]...)
			}
			if sc.cause != "" {
				cause := rowOf(sc.cause)
				want = append(want, claims[cause][""]...)
			}
			slices.Sort(want)
			want = slices.Compact(want)
			o := obs[i]
			got := o.alarms(breaching)
			for _, a := range want {
				if !slices.Contains(got, a) {
					t.Errorf("failures.md claims %s; the metrics do not raise it (observed %+v)", a, o)
				}
			}
			for _, a := range got {
				if !slices.Contains(want, a) {
					t.Errorf("the metrics raise %s, which failures.md does not claim (observed %+v)", a, o)
				}
			}
			if m := rigs[i].met; m != nil {
				if err := m(); err != nil {
					t.Errorf("the fault was not met: %v", err)
				}
			}
			t.Logf("claimed %v, raised %v", want, got)
		})
	}
	for fault, byVariant := range claims {
		n := 0
		for _, as := range byVariant {
			n += len(as)
		}
		if n == 0 || covered[fault] {
			continue
		}
		excused := false
		for prefix := range notDriven {
			excused = excused || strings.HasPrefix(fault, prefix)
		}
		if !excused {
			t.Errorf("docs/failures.md's fault %q claims %v; drive it here or say in notDriven why not", fault, byVariant)
		}
	}
}
