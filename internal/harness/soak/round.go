package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/attrib"
	"github.com/dynakafka/outbox/internal/harness/checker"
	"github.com/dynakafka/outbox/internal/harness/faults"
	"github.com/dynakafka/outbox/internal/seam"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/local/esm"
	"github.com/dynakafka/outbox/local/schedule"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
)

// runRound runs one round on a fresh DynamoDB and Kafka and returns how many
// messages it committed. The phases, in order: start DynamoDB and Kafka,
// create the tables and the topic, build the relay's parts, start the
// pipeline (the stream mapping, the sweeper, the stream chaos) and the
// consumer, turn the faults on, write, turn the faults off, wait until
// everything drained, and check what the round left behind.
func runRound(ctx context.Context, cfg Config, round, target int, chk *checker.Checker, tl *tally, rolledBack *atomic.Int64, view *viewResult, txnv *txnVerdict) (int, error) {
	r := newRound(cfg, round, target, chk, tl, rolledBack)
	defer r.close()
	for _, phase := range []func(context.Context) error{
		r.startDynamo, r.startKafka, r.createResources, r.buildRelays, r.startPipeline, r.startConsumer, r.faultsOn,
	} {
		if err := phase(ctx); err != nil {
			return 0, err
		}
	}
	err := r.write(ctx)
	if err == nil {
		r.faultsOff(ctx)
		err = r.drain(ctx)
	}
	r.stopProgress()
	if err != nil {
		return 0, err
	}
	if err := r.check(ctx, view, txnv); err != nil {
		return 0, err
	}
	return int(r.committed.Load()), nil
}

// round is the state that one round's phases share.
type round struct {
	cfg           Config
	round, target int
	chk           *checker.Checker
	tl            *tally
	rolledBack    *atomic.Int64
	dice          *dice // decides every fault kind (dice.fires)
	intn          func(n int) int
	cleanups      []func() // run last first by close

	// DynamoDB and Kafka.
	endpoint       string
	inj            *faults.Injector
	clean, faulty  *dynamodb.Client
	streams        esm.StreamsAPI
	cluster        *kfake.Cluster // nil on a real cluster
	brokers        []string
	name, aggTable string
	topic          string
	tables         dynamo.Tables
	streamARN      string
	rm             *readModel

	// The relay's parts.
	store                *dynamo.Store
	txns                 *txnOracle // nil without transactions
	closers              []func()
	pub                  outbox.Publisher
	at                   *attrib.Attribution
	crash                *crasher
	sweepRelay           *relay.Relay
	relayFn, relayFn2    *handler.Relay
	sweepFn              *handler.Sweeper
	pipeCtx              context.Context
	stopPipe             context.CancelFunc
	bg                   sync.WaitGroup
	sweeps, sweptBuckets atomic.Int64
	sweepErr             atomic.Value
	faultPhase           atomic.Int64 // see startPipeline
	faultsOffAt          atomic.Int64 // UnixNano: when faultsOff removed the faults
	chaosOn              atomic.Bool
	consumed             chan struct{}
	kafkaFaults          []kafkaFault
	stopChaos            func()
	committed            atomic.Int64
	stopProgress         func()
}

func newRound(cfg Config, n, target int, chk *checker.Checker, tl *tally, rolledBack *atomic.Int64) *round {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(n)))
	var rngMu sync.Mutex
	intn := func(n int) int {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.IntN(n)
	}
	return &round{
		cfg: cfg, round: n, target: target, chk: chk, tl: tl, rolledBack: rolledBack,
		dice:         &dice{intn: intn, rate: cfg.FaultRate},
		intn:         intn,
		stopChaos:    func() {},
		stopProgress: func() {},
	}
}

// onClose adds f to what close runs, last first.
func (r *round) onClose(f func()) { r.cleanups = append(r.cleanups, f) }

func (r *round) close() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// startDynamo starts a fresh DynamoDB Local (or uses the given endpoint)
// and builds the clients: one clean, one through the fault injector.
func (r *round) startDynamo(ctx context.Context) error {
	r.endpoint = os.Getenv("OUTBOX_TEST_DYNAMODB_ENDPOINT")
	if r.endpoint == "" {
		inst, err := dynamolocal.Start(ctx, dynamolocal.Options{LeanJVM: true})
		if err != nil {
			return err
		}
		r.onClose(func() { _ = inst.Stop() })
		r.endpoint = inst.Endpoint
	}
	awsCfg, err := dynamolocal.NewConfig(ctx, r.endpoint, os.Getenv("AWS_REGION"))
	if err != nil {
		return err
	}
	cfg, round := r.cfg, r.round
	r.inj, err = faults.New(faults.Seed(cfg.Seed*1000+uint64(round)), faults.Disabled(),
		faults.For("TransactWriteItems", scale(faults.Policy{Throttling: 0.02, ServerError: 0.02, Timeout: 0.01, ResponseLost: 0.04}, cfg.FaultRate)),
		faults.For("UpdateItem", scale(faults.Policy{Throttle: 0.01, ServerError: 0.01, Timeout: 0.005, ResponseLost: 0.01}, cfg.FaultRate)),
		faults.For("PutItem", scale(faults.Policy{Throttle: 0.01, ServerError: 0.01, ResponseLost: 0.01}, cfg.FaultRate)),
		faults.For("Query", scale(faults.Policy{Throttle: 0.01, ServerError: 0.01, Timeout: 0.01}, cfg.FaultRate)),
		faults.For("BatchWriteItem", scale(faults.Policy{Unprocessed: 0.2, ServerError: 0.01, Timeout: 0.01, ResponseLost: 0.01}, cfg.FaultRate)),
		faults.For("GetItem", scale(faults.Policy{ServerError: 0.005}, cfg.FaultRate)),
	)
	if err != nil {
		return err
	}
	r.clean = dynamolocal.NewClient(awsCfg, r.endpoint)
	r.faulty = dynamolocal.NewClient(awsCfg, r.endpoint, r.inj.Install)
	r.streams = dynamolocal.NewStreamsClient(awsCfg, r.endpoint)
	return nil
}

// startKafka starts an in-process kfake (its faults need it), or takes the
// real cluster's brokers.
func (r *round) startKafka(context.Context) error {
	if r.cfg.Kafka != nil {
		r.brokers = r.cfg.Kafka.Brokers()
		return nil
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		return err
	}
	r.onClose(cluster.Close)
	r.cluster, r.brokers = cluster, cluster.ListenAddrs()
	return nil
}

// createResources creates the round's tables, aggregates and topic, and
// starts the read model.
func (r *round) createResources(ctx context.Context) error {
	cfg := r.cfg
	r.name = fmt.Sprintf("soak-%d-%d", time.Now().UnixNano()%1_000_000_000, r.round)
	r.tables = dynamo.Tables{Messages: r.name + "-msgs", Control: r.name + "-ctl"}
	r.aggTable, r.topic = r.name+"-aggs", r.name
	topts := []dynamo.TablesOption{dynamo.BucketCount(cfg.Buckets), dynamo.WithMode(cfg.Mode)}
	if cfg.Mode == outbox.WatermarkMode && cfg.Retention != 0 {
		topts = append(topts, dynamo.Retention(cfg.Retention))
	}
	if err := dynamo.CreateTables(ctx, r.clean, r.tables, topts...); err != nil {
		return err
	}
	if err := createAggregates(ctx, r.clean, r.aggTable, r.round, cfg.Aggregates); err != nil {
		return err
	}
	if err := createTopic(ctx, r.brokers, r.topic, int32(cfg.Buckets)); err != nil {
		return err
	}
	desc, err := r.clean.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(r.tables.Messages)})
	if err != nil {
		return err
	}
	r.streamARN = aws.ToString(desc.Table.LatestStreamArn)
	r.rm, err = startReadModel(ctx, r.faulty, r.clean, r.cluster, r.brokers, r.name, r.topic, cfg.Seed*1000+uint64(r.round), r.dice, r.tl)
	if err != nil {
		return err
	}
	r.onClose(r.rm.stop)
	return nil
}

// newPublisher returns who's publisher. With transactions each process has
// its own publisher, so its own producer per bucket under the bucket's
// transactional id, as the relay function's containers and the sweeper
// have; without, they share one.
func (r *round) newPublisher(ctx context.Context, who string) (outbox.Publisher, error) {
	popts := []kafka.Option{kafka.Topics(r.topic), kafka.LeaseDuration(leaseDuration)}
	if r.txns == nil {
		if r.pub != nil {
			return r.pub, nil
		}
		p, err := kafka.NewPublisher(ctx, r.brokers, popts...)
		if err != nil {
			return nil, err
		}
		r.closers = append(r.closers, p.Close)
		return p, nil
	}
	p, err := kafka.NewTxnPublisher(ctx, r.brokers, r.tables.Messages, popts...)
	if err != nil {
		return nil, err
	}
	r.closers = append(r.closers, p.Close)
	return r.txns.publisher(who, p), nil
}

// relayOptions are the options of every relay of the round.
func (r *round) relayOptions(id string) []relay.Option {
	return []relay.Option{relay.RelayID(id), relay.LeaseDuration(leaseDuration), relay.LeaseRenewInterval(time.Second),
		relay.LeaseMargin(time.Second), relay.MaxClockSkew(500 * time.Millisecond), relay.ResumeWindow(2 * time.Second), relay.GapTimeout(gapTimeout), relay.GapPollInterval(20 * time.Millisecond),
		relay.RetryBackoff(20*time.Millisecond, 500*time.Millisecond), relay.DeadlineMargin(500 * time.Millisecond),
		// Small batches: more batches, so more chances for every fault.
		relay.BatchSize(25), seam.With(seam.Hooks{Faults: r.crash}).(relay.Option)}
}

// buildRelays builds the relay's parts, wrapped to attribute duplicates to
// faults: the store, the publishers, and the relay function's and the
// sweeper's handlers.
func (r *round) buildRelays(ctx context.Context) error {
	var err error
	if r.store, err = dynamo.NewStore(ctx, r.faulty, r.tables); err != nil {
		return err
	}
	r.onClose(func() {
		for _, c := range r.closers {
			c()
		}
	})
	if r.cfg.Txn {
		r.txns = newTxnOracle()
	}
	pub, err := r.newPublisher(ctx, "relay")
	if err != nil {
		return err
	}
	r.pub = pub
	r.at = attrib.New(r.store, pub, r.chk)
	r.at.Watermark = r.cfg.Mode == outbox.WatermarkMode
	if r.cfg.Txn {
		// An aborted transaction publishes nothing: only a commit whose
		// outcome is unknown puts its messages at risk.
		r.at.PublishRisk = func(err error) string {
			if errors.Is(err, kafka.ErrCommitUnknown) {
				return "commit-unknown"
			}
			return ""
		}
		// An acquirer fences the releaser instead of waiting out its
		// resume (docs/design.md §4.3.5): a publish whose producer a
		// newer fence made stale is excused from I4, and what the
		// releaser had in flight is at risk of handover-fenced.
		r.at.Fenced = r.at.FencedByRecord
	}
	pubs := map[string]outbox.Publisher{}
	for _, who := range []string{"stream-container-1", "stream-container-2", "sweeper"} {
		if pubs[who], err = r.newPublisher(ctx, who); err != nil {
			return err
		}
	}
	traces.mu.Lock()
	traces.at = append(traces.at, r.at)
	traces.mu.Unlock()
	r.crash = &crasher{dice: r.dice, stall: r.cfg.StallChance, tl: r.tl, at: r.at}
	// The relay function as deployed: containers that share one owner id
	// (lambda/wiring), each its own process. The mapping invokes the first;
	// the stream chaos (duplicated and redelivered batches, as from a
	// concurrent invocation) goes to the second, so two invocations with one
	// owner id may drain a bucket at once. Each process publishes through
	// its own probe: the I4 check compares their publish intervals.
	streamID := fmt.Sprint("stream-relay-", r.round)
	streamRelay, err := relay.New(ctx, r.at, r.at.ViaAs("stream-container-1", pubs["stream-container-1"]), r.relayOptions(streamID)...)
	if err != nil {
		return err
	}
	streamRelay2, err := relay.New(ctx, r.at, r.at.ViaAs("stream-container-2", pubs["stream-container-2"]), r.relayOptions(streamID)...)
	if err != nil {
		return err
	}
	r.sweepRelay, err = relay.New(ctx, r.at, r.at.ViaAs("sweeper", pubs["sweeper"]), r.relayOptions(fmt.Sprint("sweeper-", r.round))...)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.DiscardHandler)
	r.relayFn = handler.NewRelay(streamRelay, 8, quiet)
	r.relayFn2 = handler.NewRelay(streamRelay2, 8, quiet)
	r.sweepFn, err = handler.NewSweeper(r.sweepRelay, quiet)
	return err
}

// startPipeline starts the stream path (the event source mapping), the
// sweeper on a fast schedule, and the chaos on the stream.
func (r *round) startPipeline(ctx context.Context) error {
	r.pipeCtx, r.stopPipe = context.WithCancel(ctx)
	r.onClose(r.stopPipe)
	// The stream path; the invoker keeps past events for the chaos hinter.
	seen := &eventLog{}
	invoker := esm.InProcess(func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		seen.add(ev)
		return r.relayFn.Handle(ctx, ev)
	}, esm.Timeout(30*time.Second))
	invoker2 := esm.InProcess(r.relayFn2.Handle, esm.Timeout(30*time.Second))
	mapping, err := esm.New(r.streams, r.streamARN, invoker,
		esm.BatchSize(500), esm.Filter(esm.InsertsOnly), esm.MaximumRetryAttempts(5), esm.BisectBatchOnFunctionError(true),
		esm.ReportBatchItemFailures(true), esm.PollInterval(50*time.Millisecond))
	if err != nil {
		return err
	}
	r.bg.Add(1)
	go func() { defer r.bg.Done(); _ = mapping.Run(r.pipeCtx) }()
	r.startSweeper()
	r.startStreamChaos(seen, invoker2)
	return nil
}

// startSweeper runs the sweeper on a manual clock fired every 700ms.
// faultPhase is even while no fault can fire (before the faults are on, and
// once every injector is off), odd in between. A sweep that meets an
// injected fatal Kafka error fails (its bucket cannot be drained), so a
// sweep is held to "must not fail" only if it ran entirely within one
// fault-free phase.
func (r *round) startSweeper() {
	clk := schedule.NewManualClock(time.Now())
	r.bg.Add(2)
	go func() {
		defer r.bg.Done()
		_ = schedule.Run(r.pipeCtx, schedule.Options{Clock: clk, Timeout: 30 * time.Second}, func(ctx context.Context, ev events.CloudWatchEvent) error {
			phase := r.faultPhase.Load()
			began := time.Now()
			s, err := r.sweepFn.Handle(ctx, ev)
			r.sweeps.Add(1)
			// Drained, or found held and woke its holder: either way the
			// sweeper saw the bucket's work and acted on it (how often it
			// gets there before the stream path depends on the load).
			r.sweptBuckets.Add(int64(len(s.Drained) + len(s.Held)))
			if err != nil && phase%2 == 0 && r.faultPhase.Load() == phase && ctx.Err() == nil {
				if off := time.Unix(0, r.faultsOffAt.Load()); stoppedBeforeOff(s.Failed, s.Skipped, began.Sub(off)) {
					// The sweeper's own drain stopped these buckets on an
					// injected fatal error before the faults went off, and
					// it leaves them alone for stoppedRetry, naming them:
					// no publish was tried with the faults off.
					r.cfg.logf("sweep %v after the faults went off left buckets %v alone, stopped by its drain before: excused (%v)",
						began.Sub(off).Round(time.Millisecond), s.Failed, err)
				} else {
					// With the faults off, a sweep must not fail.
					r.sweepErr.Store(err)
				}
			}
			return err
		}, nil)
	}()
	go func() {
		defer r.bg.Done()
		for r.pipeCtx.Err() == nil {
			if clk.Fire(r.pipeCtx, time.Minute) != nil {
				return
			}
			sleep(r.pipeCtx, 700*time.Millisecond)
		}
	}()
}

// startStreamChaos replays past stream events through the second container,
// like a concurrent invocation with a duplicated or redelivered batch; at
// most a few at once, while chaosOn.
func (r *round) startStreamChaos(seen *eventLog, invoker2 esm.Invoker) {
	r.chaosOn.Store(true)
	chaosSlots := make(chan struct{}, 3)
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		for r.pipeCtx.Err() == nil {
			sleep(r.pipeCtx, 100*time.Millisecond)
			if !r.chaosOn.Load() {
				continue
			}
			// A replay is reached only with a slot free: a reach that
			// could not fire would count towards dice's floor.
			select {
			case chaosSlots <- struct{}{}:
			default:
				continue
			}
			var ev events.DynamoDBEvent
			var kind string
			var ok bool
			switch {
			case r.dice.fires("stream:duplicate", 0.3):
				ev, ok = seen.latest()
				kind = "stream:duplicate"
			case r.dice.fires("stream:redelivery", 0.3):
				ev, ok = seen.random(r.intn)
				kind = "stream:redelivery"
			}
			if !ok {
				<-chaosSlots
				continue
			}
			r.tl.add(kind, 1)
			r.bg.Add(1)
			go func() {
				defer func() { <-chaosSlots; r.bg.Done() }()
				_, _ = invoker2.Invoke(r.pipeCtx, ev)
			}()
		}
	}()
}

// startConsumer reads the topic from the start (read_committed with
// transactions) into the checker until the pipeline stops.
func (r *round) startConsumer(context.Context) error {
	r.consumed = make(chan struct{})
	copts := []kgo.Opt{kgo.SeedBrokers(r.brokers...), kgo.ConsumeTopics(r.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50 * time.Millisecond)}
	if r.txns != nil {
		copts = append(copts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(copts...)
	if err != nil {
		return err
	}
	go func() {
		defer close(r.consumed)
		defer cl.Close()
		for r.pipeCtx.Err() == nil {
			cl.PollFetches(r.pipeCtx).EachRecord(func(rec *kgo.Record) {
				var p payload
				_ = json.Unmarshal(rec.Value, &p)
				id := ""
				for _, h := range rec.Headers {
					if h.Key == outbox.DefaultMessageIDHeader {
						id = string(h.Value)
					}
				}
				r.chk.Delivered(id, p.ID, string(rec.Key), p.order())
				if r.txns != nil {
					r.txns.delivered(rec, id, p.order())
				}
				traceDelivery(id, rec)
			})
		}
	}()
	return nil
}

// faultsOn turns every fault on: kfake's, the real brokers' chaos, the
// DynamoDB injector and the crash points.
func (r *round) faultsOn(ctx context.Context) error {
	r.faultPhase.Add(1)
	if r.cluster != nil {
		r.kafkaFaults = installKafkaFaults(r.cluster, r.topic, r.dice, r.chk, r.txns != nil)
	}
	if r.cfg.Kafka != nil {
		var txnIDs []string
		for b := range r.cfg.buckets() {
			txnIDs = append(txnIDs, kafka.TransactionalID(r.tables.Messages, b))
		}
		if err := waitCoordinators(ctx, r.brokers, txnIDs, []string{r.name + "-view"}); err != nil {
			return err
		}
		r.stopChaos = brokerChaos(ctx, r.cfg, r.intn, r.tl)
	}
	r.inj.Enable()
	r.crash.on.Store(true)
	r.cfg.logf("round %d: %d messages, endpoint %s, topic %s", r.round, r.target, r.endpoint, r.topic)
	return nil
}

// write runs the writers until target messages are committed, with the
// online BucketCount change half-way through if asked, and logs the
// progress (until stopProgress).
func (r *round) write(ctx context.Context) error {
	cfg := r.cfg
	w, err := dynamo.NewWriter(ctx, &crashableClient{Client: r.faulty}, r.tables, dynamo.MaxAttempts(8))
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	werrs := make(chan error, cfg.Writers)
	for i := range cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r.committed.Load() < int64(r.target) && ctx.Err() == nil {
				n, err := writeOne(ctx, w, r.clean, r.aggTable, r.topic, r.round, cfg, r.dice, r.intn, r.chk, r.tl, r.rolledBack)
				if err != nil {
					werrs <- fmt.Errorf("writer %d: %w", i, err)
					return
				}
				r.committed.Add(int64(n))
			}
		}()
	}
	rebucketDone := make(chan error, 1)
	if cfg.Rebucket != 0 {
		go func() { rebucketDone <- r.rebucket(ctx) }()
	} else {
		rebucketDone <- nil
	}
	progressDone := make(chan struct{})
	r.stopProgress = sync.OnceFunc(func() { close(progressDone) })
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-t.C:
				cfg.logf("round %d: committed=%d missing=%d faults=%d", r.round, r.committed.Load(), r.chk.Missing(), r.inj.Total())
			}
		}
	}()
	wg.Wait()
	close(werrs)
	if err := <-werrs; err != nil {
		return err
	}
	if err := <-rebucketDone; err != nil {
		return fmt.Errorf("online BucketCount change to %d: %w", cfg.Rebucket, err)
	}
	return nil
}

// rebucket changes BucketCount online once half the target is committed.
// A change aborted before its flip (a previous change's old epoch still
// draining at ChangeTimeout) wrote nothing: try again, so that how fast the
// machine drains decides only how long the round takes. After the flip the
// change stands; an old epoch still draining at ChangeTimeout is ended by
// the sweeps.
func (r *round) rebucket(ctx context.Context) error {
	cfg := r.cfg
	for r.committed.Load() < int64(r.target/2) && ctx.Err() == nil {
		sleep(ctx, 20*time.Millisecond)
	}
	var res dynamo.ChangeResult
	var err error
	cstart := time.Now()
	defer func() { r.tl.ran(&r.tl.changes, cstart, time.Now()) }()
	for {
		res, err = dynamo.ChangeBucketCount(ctx, r.faulty, r.tables, cfg.Rebucket, dynamo.ChangeTimeout(2*time.Minute), dynamo.ChangeGapTimeout(gapTimeout))
		if !errors.As(err, new(*dynamo.ChangeAbortedError)) || ctx.Err() != nil {
			break
		}
		r.tl.add("rebucket:aborted", 1)
		cfg.logf("round %d: BucketCount change to %d aborted before its flip (%v); trying again", r.round, cfg.Rebucket, err)
	}
	if err == nil {
		cfg.logf("round %d: BucketCount %d → %d online at %d committed; flip and cut %v, old epoch watched %v (ended %v, still draining %v)",
			r.round, res.From, res.To, r.committed.Load(), res.Flip.Round(time.Millisecond), res.Watched.Round(time.Millisecond), res.Ended, res.Draining)
		r.tl.add("rebucket:change", 1)
	}
	return err
}

// sweeperStopMemory is how long a relay leaves a bucket its own drain
// stopped with a Fatal error (relay's stoppedRetry, 5 s), with a second of
// slack for the sweep's own start.
const sweeperStopMemory = 6 * time.Second

// stoppedBeforeOff reports whether a sweep that began since after the
// faults went off failed only on buckets it left alone as stopped
// recently (Skipped): stops its own drains made on an injected fault
// before then, which the relay remembers for stoppedRetry.
func stoppedBeforeOff(failed, skipped []int, since time.Duration) bool {
	if len(failed) == 0 || since < 0 || since > sweeperStopMemory {
		return false
	}
	for _, b := range failed {
		if !slices.Contains(skipped, b) {
			return false
		}
	}
	return true
}

// faultsOff waits until the relay, which lags the writers, has caught up
// with most of the backlog (so the relay's faults get their share), then
// turns every fault off and counts what fired.
func (r *round) faultsOff(ctx context.Context) {
	for catchUp := time.Now().Add(2 * time.Minute); r.chk.Missing() > r.target/20 && time.Now().Before(catchUp); {
		sleep(ctx, 200*time.Millisecond)
	}
	r.inj.Disable()
	r.crash.on.Store(false)
	r.chaosOn.Store(false)
	r.stopChaos()
	for _, h := range r.kafkaFaults {
		r.tl.add(h.kind, h.h.Hits())
		h.h.Remove()
	}
	r.faultsOffAt.Store(time.Now().UnixNano())
	r.faultPhase.Add(1)
	for k, n := range r.inj.Counts() {
		r.tl.add("dynamo:"+k.Kind.String(), int(n))
	}
}

// drain waits, with the faults off, until the table holds no pending
// message and every committed message was delivered; after 3 minutes it
// fails with a diagnosis.
func (r *round) drain(ctx context.Context) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pending, err := pendingMessages(ctx, r.store, r.cfg.buckets())
		if err != nil {
			return err
		}
		if pending == 0 && r.chk.Missing() == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			r.stopProgress()
			return r.notDrained(ctx, pending)
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// notDrained is drain's error: what is pending, a sweep and a fresh drain of
// every bucket now, and the goroutines' stacks in a file.
func (r *round) notDrained(ctx context.Context, pending int) error {
	buf := make([]byte, 1<<22)
	_ = os.WriteFile(os.TempDir()+"/soak-stacks.txt", buf[:runtime.Stack(buf, true)], 0o644)
	diag := describePending(ctx, r.store, r.cfg.buckets())
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	rep, serr := r.sweepRelay.Sweep(sctx)
	scancel()
	diag += fmt.Sprintf("the sweeper's sweep now: %+v %v; ", rep, serr)
	fresh, ferr := relay.New(ctx, r.store, r.pub, relay.RelayID("diagnosis"), relay.DeadlineMargin(0))
	if ferr == nil {
		dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		for b := range r.cfg.buckets() {
			st, err := fresh.DrainBucket(dctx, b)
			diag += fmt.Sprintf("fresh drain of %d: %+v %v; ", b, st, err)
		}
		cancel()
	}
	return fmt.Errorf("not drained after the faults stopped: %d pending in the table, %d committed messages not delivered; %s (goroutines in %s/soak-stacks.txt)",
		pending, r.chk.Missing(), diag, os.TempDir())
}

// check runs once everything drained: the sweeper worked and never failed
// with the faults off, the read model holds every message, the dead letters
// are exactly the parked messages, and (with transactions) the
// transactions' verdict.
func (r *round) check(ctx context.Context, view *viewResult, txnv *txnVerdict) error {
	if err, _ := r.sweepErr.Load().(error); err != nil {
		return fmt.Errorf("a sweep failed with the faults off: %w", err)
	}
	if r.sweptBuckets.Load() == 0 {
		return fmt.Errorf("the sweeper drained or woke no bucket in %d sweeps", r.sweeps.Load())
	}
	sleep(ctx, 500*time.Millisecond) // late duplicates
	r.stopPipe()
	r.bg.Wait()
	<-r.consumed
	if err := view.add(ctx, r.rm, r.clean, r.chk.Expected(fmt.Sprintf("r%d-", r.round)), r.tl); err != nil {
		return err
	}
	// Every message the relay parked is in the dead letters, and only those.
	var inDeadLetters []string
	for b := range r.cfg.buckets() {
		ps, err := r.store.ListParked(ctx, b, 0)
		if err != nil {
			return err
		}
		for _, p := range ps {
			inDeadLetters = append(inDeadLetters, p.Message.ID)
		}
	}
	sort.Strings(inDeadLetters)
	parkedIDs := r.at.ParkedIDs()
	if fmt.Sprint(inDeadLetters) != fmt.Sprint(parkedIDs) {
		return fmt.Errorf("dead letters %v differ from the messages the relay parked %v", inDeadLetters, parkedIDs)
	}
	if r.txns != nil {
		parked := map[string]bool{}
		for _, id := range parkedIDs {
			parked[id] = true
		}
		v := r.txns.verdict(r.chk, parked, r.at.MarkSent)
		txnv.Add(v)
		r.cfg.logf("round %d transactions: %s", r.round, v)
	}
	r.cfg.logf("round %d done: committed=%d parked=%d", r.round, r.committed.Load(), len(parkedIDs))
	return nil
}
