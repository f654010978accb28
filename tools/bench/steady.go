package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/lambda/wiring"
	"github.com/dynakafka/outbox/local/esm"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
)

// The steady stage offers a load to the whole pipeline as a service would,
// one message per writer transaction, and measures what each message costs
// and how long it takes from commit to a consumer: through the table's
// stream, the local event-source mapping configured as template.yaml
// configures Lambda's, and a handler invoked in process as the Lambda Go
// runtime invokes it. The handler is the relay Lambda's (handlerRelay), or
// the floor (handlerFloor, floor.go).
const (
	handlerRelay = "relay"
	handlerFloor = "floor"
)

// relayMode is a way of running the relay that the bench measures: a name
// and the options its outbox is created with (the relay takes its mode from
// the config item). The default mode, which replaces the acknowledged
// prefix by tombstones, has none.
type relayMode struct {
	Name   string
	Tables []dynamo.TablesOption
	// Transactional publishes through kafka.TxnPublisher
	// (OUTBOX_KAFKA_TRANSACTIONAL=true).
	Transactional bool
}

var (
	// modeDelete is the relay's default mode.
	modeDelete = relayMode{Name: "delete"}
	// modeWatermark writes nothing per message: the messages carry a TTL
	// (the writer's, from the config item) and stay until it passes.
	modeWatermark = relayMode{Name: "watermark", Tables: []dynamo.TablesOption{dynamo.WithMode(outbox.WatermarkMode)}}
)

// profile is a load offered to the steady stage: Rate messages per second
// for Seconds after the warm-up and, when BurstRate is set, BurstRate
// instead from BurstAt for BurstFor seconds.
type profile struct {
	Name      string  `json:"name"`
	Rate      float64 `json:"msgs_per_s"`
	Seconds   float64 `json:"seconds"`
	BurstRate float64 `json:"burst_msgs_per_s,omitempty"`
	BurstAt   float64 `json:"burst_at_s,omitempty"`
	BurstFor  float64 `json:"burst_for_s,omitempty"`
}

func (p profile) String() string {
	if p.BurstRate == 0 {
		return fmt.Sprintf("%g msgs/s for %gs", p.Rate, p.Seconds)
	}
	return fmt.Sprintf("%g msgs/s for %gs, %g msgs/s from %gs to %gs", p.Rate, p.Seconds, p.BurstRate, p.BurstAt, p.BurstAt+p.BurstFor)
}

// inBurst tells whether t seconds after the warm-up falls in the burst.
func (p profile) inBurst(t float64) bool {
	return p.BurstRate > 0 && t >= p.BurstAt && t < p.BurstAt+p.BurstFor
}

func (p profile) rateAt(t float64) float64 {
	if p.inBurst(t) {
		return p.BurstRate
	}
	return p.Rate
}

func (p profile) peak() float64 { return max(p.Rate, p.BurstRate) }

// schedule is when each message is offered, in seconds from the end of the
// warm-up (the warm-up's messages, at the base rate, have negative times).
func (p profile) schedule(warmup time.Duration) []float64 {
	var at []float64
	for t := -warmup.Seconds(); t < p.Seconds; t += 1 / p.rateAt(t) {
		at = append(at, t)
	}
	return at
}

// steadyRun is one run of the steady stage.
type steadyRun struct {
	profile profile
	window  time.Duration // the mapping's MaximumBatchingWindow
	warmup  time.Duration // offered at the base rate, left out of every figure
	handler string        // handlerRelay or handlerFloor
	mode    relayMode     // the relay's; ignored by the floor
	// itemBytes is the size of the message items: the AWS-rule cost of a
	// delete (a delete request does not carry the item).
	itemBytes int
	// containers: how many containers of the relay function run the
	// relay's invocations (0 or 1: one warm container, as consecutive
	// invocations of a shard usually find). Each is its own process — its
	// own relay, clients and memory — with the owner id the function's
	// containers share. switchEvery: the invocations go to one container
	// until this much time has passed, then to the next (0: every
	// invocation to the next container, the worst case).
	containers  int
	switchEvery time.Duration
	// writers offer the load (0: steadyWriters of the profile).
	writers int
	// change, when set, runs once changeAt seconds after the warm-up,
	// beside the writers (the rebucket stage: an online BucketCount
	// change); its outcome and span land in steadyResult.Change.
	change   func(context.Context) error
	changeAt float64
	// child runs the handler in a process of its own (child.go), on the
	// stage's model; cpuProfile, if set, is where it writes a CPU profile.
	child      bool
	cpuProfile string
	// settle bounds the wait for every committed message to be consumed
	// (0: 2 minutes); with partial, messages still unconsumed then are
	// counted (Unconsumed) instead of failing the run.
	settle  time.Duration
	partial bool
	// began, if set, is told when the writers begin (the warm-up's
	// first message).
	began func(time.Time)
}

// steadyResult is one run's figures. Per-message figures divide by
// Messages: the messages published by the invocations that started after
// the warm-up, counted until the stream was idle again; the writer's by
// WriterMessages, every message it committed.
type steadyResult struct {
	Profile profile `json:"profile"`
	Handler string  `json:"handler"`
	Mode    string  `json:"mode,omitempty"`
	WindowS float64 `json:"batching_window_s"`
	WarmupS float64 `json:"warmup_s"`
	Writers int     `json:"writers"`

	// The messages offered after the warm-up.
	Offered       int   `json:"offered"`
	Committed     int   `json:"committed"`
	Consumed      int   `json:"consumed"`
	Late          int   `json:"sends_behind_schedule"`
	WriteFailures int64 `json:"write_failures"`
	Duplicates    int   `json:"duplicate_records"` // records consumed more than once (all messages)
	// Unconsumed is how many committed messages were not consumed when
	// the run stopped waiting (only runs with partial stop so).
	Unconsumed   int     `json:"unconsumed,omitempty"`
	Seconds      float64 `json:"seconds"`
	AchievedPerS float64 `json:"committed_msgs_per_s"`
	P50ms        float64 `json:"p50_ms"`
	P90ms        float64 `json:"p90_ms"`
	P99ms        float64 `json:"p99_ms"`
	MaxMs        float64 `json:"max_ms"`
	BurstP99ms   float64 `json:"burst_p99_ms,omitempty"` // the messages offered during the burst
	CommitP50ms  float64 `json:"commit_p50_ms"`
	CommitP99ms  float64 `json:"commit_p99_ms"`

	// The handler's side, from the first invocation after the warm-up
	// until the stream was idle.
	Invocations     int64    `json:"invocations"`
	Messages        int64    `json:"messages_published"`
	MeasuredSeconds float64  `json:"measured_seconds"`
	ESM             esmStats `json:"esm"`

	MsgsPerInvocation   float64 `json:"msgs_per_invocation"`
	InvocationsPerMsg   float64 `json:"invocations_per_msg"`
	CallsPerMsg         float64 `json:"handler_dynamodb_calls_per_msg"`
	ControlWritesPerMsg float64 `json:"handler_control_writes_per_msg"`
	// Capacity per message by AWS's rules: the handler's, the writer's and
	// both; DynamoDB Local's own report of both beside them.
	HandlerWCU    float64 `json:"handler_wcu_per_msg"`
	HandlerRCU    float64 `json:"handler_rcu_per_msg"`
	WriterWCU     float64 `json:"writer_wcu_per_msg"`
	WriterRCU     float64 `json:"writer_rcu_per_msg"`
	WCU           float64 `json:"wcu_per_msg"`
	RCU           float64 `json:"rcu_per_msg"`
	LocalWCU      float64 `json:"dynamodb_local_wcu_per_msg"`
	LocalRCU      float64 `json:"dynamodb_local_rcu_per_msg"`
	USDPerMillion float64 `json:"usd_per_million_messages"`
	// The handler's mean time per invocation (in process: a Lambda's time
	// differs by its network and CPU) and the Lambda cost it implies per
	// million messages (requests + duration at the relay's memory), and the
	// DynamoDB and Lambda costs together.
	InvocationMs        float64 `json:"handler_ms_per_invocation"`
	LambdaUSDPerMillion float64 `json:"lambda_usd_per_million_messages"`
	TotalUSDPerMillion  float64 `json:"total_usd_per_million_messages"`

	// Set on relay runs from the floor run of the same profile and window.
	FloorP99ms float64 `json:"floor_p99_ms,omitempty"`
	VsFloorP99 float64 `json:"steady_vs_floor_p99,omitempty"`

	HandlerDynamo  snapshot `json:"handler_dynamodb"`
	WriterDynamo   snapshot `json:"writer_dynamodb"`
	WriterMessages int      `json:"writer_messages"`
	Load           string   `json:"loadavg_after"`
	// Switches is what the drains of the relay's containers did (one
	// container: the drains of the warm one).
	Switches *switchStats `json:"container_switches,omitempty"`
	// Change: what the writers saw of run.change (rebucket.go).
	Change *changeStats `json:"change,omitempty"`

	// Set when the handler ran in a process of its own (the modelled
	// stage): its CPU time (user and system) from the first measured
	// invocation until the stream was idle, per 1,000 messages published;
	// its peak RSS; and the calls of the handler and of the writers that
	// the model refused for a partition key's capacity (whole or in part).
	HandlerCPUSeconds   float64 `json:"handler_cpu_seconds,omitempty"`
	HandlerCPUMsPer1000 float64 `json:"handler_cpu_ms_per_1000_msgs,omitempty"`
	HandlerPeakRSSBytes int64   `json:"handler_peak_rss_bytes,omitempty"`
	HandlerThrottled    int64   `json:"handler_throttled_calls,omitempty"`
	WriterThrottled     int64   `json:"writer_throttled_calls,omitempty"`
	// MachineBusy is the share of the machine's CPU time (all cores) that
	// was not idle while the run offered its load and settled; BenchCPUs
	// the cores this process (writers, model, kfake, mapping, consumer)
	// kept busy on average meanwhile.
	MachineBusy float64 `json:"machine_cpu_busy,omitempty"`
	BenchCPUs   float64 `json:"bench_process_cpus,omitempty"`

	handlerSeconds float64 // the measured invocations' total time
}

// esmStats are the mapping's counters over the whole run.
type esmStats struct {
	Retries    int64 `json:"retries"`
	Bisections int64 `json:"bisections"`
	Dropped    int64 `json:"records_dropped"`
	Shards     int   `json:"shards"`
}

// mappingOptions are the relay's event-source mapping in template.yaml:
// BatchSize 1000 (StreamBatchSize's default), the batching window given,
// INSERT records only, ReportBatchItemFailures, BisectBatchOnFunctionError,
// MaximumRetryAttempts 5, MaximumRecordAge 1 h; ParallelizationFactor 1 is
// the local mapping's only mode (one batch at a time per shard). Each run
// has a fresh table, so the mapping reads its stream from the start.
func mappingOptions(window time.Duration) []esm.Opt {
	return []esm.Opt{
		esm.BatchSize(1000), esm.MaximumBatchingWindow(window), esm.Filter(esm.InsertsOnly), esm.StartPosition(esm.TrimHorizon),
		esm.ReportBatchItemFailures(true), esm.BisectBatchOnFunctionError(true), esm.MaximumRetryAttempts(5), esm.MaximumRecordAge(time.Hour),
	}
}

// steadyWriters is how many writers offer a profile: enough that commits
// taking half a second (DynamoDB Local on a loaded machine) still keep up
// with its peak rate.
func steadyWriters(p profile) int { return max(32, int(math.Ceil(p.peak()/2))) }

// steady runs the pipeline with run's handler under run's load, in the
// phases below: start the handler, the mapping and a consumer; offer the
// load (writers commit on schedule); settle (wait until everything is
// consumed and the stream is idle); tally.
func steady(ctx context.Context, st *stage, g *gen, run steadyRun) (steadyResult, error) {
	res := steadyResult{Profile: run.profile, Handler: run.handler, WindowS: run.window.Seconds(), WarmupS: run.warmup.Seconds(),
		Writers: cmp.Or(run.writers, steadyWriters(run.profile))}
	if run.handler == handlerRelay {
		res.Mode = run.mode.Name
	}
	desc, err := st.plain.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(st.tables.Messages)})
	if err != nil {
		return res, err
	}
	arn := aws.ToString(desc.Table.LatestStreamArn)
	st.meter.deletedBytes = run.itemBytes
	switches := &drainLog{}
	var (
		handle       esm.Handler
		published    func() int64
		closeHandler func()
		child        *childProc
	)
	if run.child {
		if child, err = startChild(ctx, st, run.handler, run.cpuProfile); err != nil {
			return res, err
		}
		handle, published, closeHandler = child.handle, child.published, child.close
	} else if handle, published, closeHandler, err = startHandler(ctx, st, run, switches); err != nil {
		return res, err
	}
	defer closeHandler()
	gt := &gate{next: handle, published: published, reset: st.meter.reset, snap: func() snapshot { return st.meter.snapshot(st.roles()) }}
	invoker := esm.InProcess(gt.handle, esm.Timeout(time.Minute))
	if child != nil {
		// The child decodes the event itself; the model counts its calls.
		invoker = invokerFunc(gt.handle)
		gt.reset = func() {
			st.model.ResetCounts(roleHandler)
			child.mark()
		}
		gt.snap = func() snapshot { return modelSnapshot(st.model.Counts(roleHandler), st.roles()) }
	}
	mapping, err := esm.New(st.streams, arn, invoker, mappingOptions(run.window)...)
	if err != nil {
		return res, err
	}
	pipe, stop := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer bg.Wait()
	defer stop()
	mapErr := make(chan error, 1)
	bg.Go(func() { mapErr <- mapping.Run(pipe) })
	cons, err := newConsumer(pipe, st)
	if err != nil {
		return res, err
	}
	bg.Go(cons.run)

	busy0, self0 := machineCPU(), processCPU()
	load, err := offer(ctx, st, g, run, res.Writers, gt)
	if err != nil {
		return res, err
	}
	// Settle: every committed message consumed, every hint delivered, no
	// invocation running (a relay releases its leases after producing).
	deadline := time.Now().Add(cmp.Or(run.settle, 2*time.Minute))
	for !(cons.seenAll(load.commits) && gt.idle(int64(len(load.commits)))) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	var inv, pub int64
	var measured time.Duration
	res.HandlerDynamo, inv, pub, measured = gt.counts()
	if child != nil {
		res.HandlerCPUSeconds, res.HandlerPeakRSSBytes = child.cpuSinceMark().Seconds(), child.peakRSS()
		res.HandlerThrottled, res.WriterThrottled = throttledCalls(st.model, roleHandler), throttledCalls(st.model, roleWriter)
		if pub > 0 {
			res.HandlerCPUMsPer1000 = res.HandlerCPUSeconds * 1e6 / float64(pub)
		}
	}
	res.MachineBusy = machineCPU().busySince(busy0)
	res.BenchCPUs = (processCPU() - self0).Seconds() / max(time.Since(busy0.at).Seconds(), 1e-9)
	stats := mapping.Stats()
	stop()
	bg.Wait()

	res.Invocations, res.Messages, res.MeasuredSeconds = inv, pub, measured.Seconds()
	res.handlerSeconds = gt.busySeconds()
	res.ESM = esmStats{Retries: stats.Retries, Bisections: stats.Bisections, Dropped: stats.RecordsDropped}
	if out, err := st.streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arn)}); err == nil && out.StreamDescription != nil {
		res.ESM.Shards = len(out.StreamDescription.Shards)
	}
	res.Load = loadavg()
	res.Switches = switches.result(run)
	if run.change != nil {
		res.Change = changeResult(load)
	}
	consumed, dups := cons.result()
	missing := res.tally(load, consumed, dups)
	res.Unconsumed = missing
	switch {
	case missing > 0 && run.partial:
	case missing > 0:
		return res, fmt.Errorf("steady %s: %d of %d committed messages were not consumed within 2 minutes (event-source mapping: %v)",
			run.handler, missing, len(load.commits), <-mapErr)
	case res.Messages == 0 || res.Invocations == 0:
		return res, fmt.Errorf("steady %s: no invocation after the warm-up published anything", run.handler)
	}
	return res, nil
}

// startHandler builds run's handler, once per container as Lambda would:
// the relay Lambda's handler over the relay the Lambda wiring builds (its
// DynamoDB client metered through the AWS config's API options, so every
// call of the relay is counted), or the floor on the stage's metered
// client. It returns the handler, its running count of messages published
// and what closes it.
func startHandler(ctx context.Context, st *stage, run steadyRun, drains *drainLog) (esm.Handler, func() int64, func(), error) {
	switch run.handler {
	case handlerRelay:
		if run.containers > 1 {
			return startContainers(ctx, st, run, drains)
		}
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg := config.Config{
			MessagesTable: st.tables.Messages, ControlTable: st.tables.Control, BatchSize: relayBatch, Topics: []string{st.topic},
			LeaseDuration: 30 * time.Second, GapTimeout: 10 * time.Second,
			Brokers: st.brokers, Auth: config.AuthNone, Region: st.awsCfg.Region, DynamoEndpoint: st.endpoint,
			Transactional: run.mode.Transactional,
		}
		relayAWS := st.awsCfg.Copy()
		relayAWS.APIOptions = append(relayAWS.APIOptions, st.meter.register)
		parts, err := wiring.BuildWith(ctx, cfg, relayAWS, quiet, "bench-relay", relay.WithMetrics(drains))
		if err != nil {
			return nil, nil, nil, err
		}
		h := handler.NewRelay(parts.Relay, cfg.Concurrency, quiet)
		return h.Handle, h.Counters().Published.Load, parts.Close, nil
	case handlerFloor:
		f, err := newFloor(st)
		if err != nil {
			return nil, nil, nil, err
		}
		return f.Handle, f.published.Load, f.close, nil
	}
	return nil, nil, nil, fmt.Errorf("steady: unknown handler %q", run.handler)
}

// commit is a message the writers committed: when Write returned, and
// whether it was offered after the warm-up and during the burst.
type commit struct {
	at              time.Time
	measured, burst bool
}

// offered is what the writers did.
type offered struct {
	commits   map[string]commit // by message id
	commitLat []float64         // ms, the messages offered after the warm-up
	spans     []span            // every write after the warm-up: when it began and returned
	change    *span             // run.change's, when it ran
	changeErr error
	count     int // messages offered after the warm-up
	late      int
	failures  int64
	seconds   float64 // from the scheduled end of the warm-up until the last write returned
	writer    snapshot
}

// offer runs the writers (dynamo.Writer, one message per transaction,
// bucket after bucket, with a meter of their own: their cost is the same
// with any handler) on run's schedule, and tells gt when the warm-up is
// over.
func offer(ctx context.Context, st *stage, g *gen, run steadyRun, writers int, gt *gate) (*offered, error) {
	client, snap, reset := st.writerClient(writers)
	w, err := dynamo.NewWriter(ctx, client, st.tables)
	if err != nil {
		return nil, err
	}
	reset() // not the writer's check of the table
	p := run.profile
	sched := p.schedule(run.warmup)
	o := &offered{commits: map[string]commit{}}
	var (
		mu       sync.Mutex
		failures atomic.Int64
		wg       sync.WaitGroup
		jobs     = make(chan int, writers)
	)
	for range writers {
		wg.Go(func() {
			for i := range jobs {
				start := time.Now()
				r, err := w.Write(ctx, nil, g.input(st.topic, i%st.buckets))
				done := time.Now()
				if err != nil {
					failures.Add(1)
					continue
				}
				measured := sched[i] >= 0
				mu.Lock()
				o.commits[r.Messages[0].ID] = commit{done, measured, p.inBurst(sched[i])}
				if measured {
					o.commitLat = append(o.commitLat, ms(done.Sub(start)))
					o.spans = append(o.spans, span{start, done})
				}
				mu.Unlock()
			}
		})
	}
	begin := time.Now()
	if run.began != nil {
		run.began(begin)
	}
	measureStart := begin.Add(run.warmup) // as scheduled: a send loop running late does not shorten the period
	if run.change != nil {
		wg.Go(func() {
			time.Sleep(time.Until(measureStart.Add(time.Duration(run.changeAt * float64(time.Second)))))
			start := time.Now()
			err := run.change(ctx)
			mu.Lock()
			o.change, o.changeErr = &span{start, time.Now()}, err
			mu.Unlock()
		})
	}
	for i, at := range sched {
		time.Sleep(time.Until(begin.Add(time.Duration((at + run.warmup.Seconds()) * float64(time.Second)))))
		if at >= 0 {
			if o.count == 0 {
				gt.measure() // the next invocation starts the count
			}
			o.count++
		}
		select {
		case jobs <- i:
		default:
			o.late++ // every writer busy: the offered rate is above what commits sustain
			jobs <- i
		}
	}
	close(jobs)
	wg.Wait()
	o.seconds = time.Since(measureStart).Seconds()
	o.failures = failures.Load()
	o.writer = snap()
	return o, nil
}

// tally fills in the figures from the writers' commits and the consumer's
// polls, and returns how many committed messages were never consumed.
func (r *steadyResult) tally(o *offered, consumed map[string]time.Time, dups int) (missing int) {
	r.Offered, r.Late, r.WriteFailures, r.Seconds, r.Duplicates = o.count, o.late, o.failures, o.seconds, dups
	r.WriterDynamo, r.WriterMessages = o.writer, len(o.commits)
	var lat, burst []float64
	for id, c := range o.commits {
		t, ok := consumed[id]
		if !ok {
			missing++
		}
		if !c.measured {
			continue
		}
		r.Committed++
		if !ok {
			continue
		}
		d := max(0, ms(t.Sub(c.at)))
		lat = append(lat, d)
		if c.burst {
			burst = append(burst, d)
		}
	}
	r.Consumed = len(lat)
	if r.Seconds > 0 {
		r.AchievedPerS = float64(r.Committed) / r.Seconds
	}
	r.P50ms, r.P90ms, r.P99ms, r.MaxMs = pct(lat, 0.50), pct(lat, 0.90), pct(lat, 0.99), pct(lat, 1)
	r.BurstP99ms = pct(burst, 0.99)
	r.CommitP50ms, r.CommitP99ms = pct(o.commitLat, 0.50), pct(o.commitLat, 0.99)
	r.perMessage()
	return missing
}

// offeredPerS is the rate offered after the warm-up, on average.
func (r steadyResult) offeredPerS() float64 {
	if r.Profile.Seconds == 0 {
		return 0
	}
	return float64(r.Offered) / r.Profile.Seconds
}

// sustained tells whether the writers committed at least 95 % of the
// offered rate.
func (r steadyResult) sustained() bool { return r.AchievedPerS >= 0.95*r.offeredPerS() }

// perMessage derives the per-message figures from the counts.
func (r *steadyResult) perMessage() {
	if r.Messages == 0 {
		return
	}
	n := float64(r.Messages)
	calls, _ := r.HandlerDynamo.calls()
	r.CallsPerMsg = float64(calls) / n
	r.InvocationsPerMsg = float64(r.Invocations) / n
	r.MsgsPerInvocation = n / float64(max(1, r.Invocations))
	for k, v := range r.HandlerDynamo.Ops {
		if op, table := splitKey(k); table == "control" && !isRead(op) {
			r.ControlWritesPerMsg += float64(v.Calls) / n
		}
	}
	write := func(op, _ string) bool { return !isRead(op) }
	read := func(op, _ string) bool { return isRead(op) }
	lw, hw := r.HandlerDynamo.capacity(write)
	lr, hr := r.HandlerDynamo.capacity(read)
	r.HandlerWCU, r.HandlerRCU = hw/n, hr/n
	if r.WriterMessages > 0 {
		wn := float64(r.WriterMessages)
		wlw, ww := r.WriterDynamo.capacity(write)
		wlr, wr := r.WriterDynamo.capacity(read)
		r.WriterWCU, r.WriterRCU = ww/wn, wr/wn
		r.LocalWCU, r.LocalRCU = wlw/wn, wlr/wn
	}
	r.WCU, r.RCU = r.HandlerWCU+r.WriterWCU, r.HandlerRCU+r.WriterRCU
	r.LocalWCU += lw / n
	r.LocalRCU += lr / n
	r.USDPerMillion = r.WCU*pricePerMillionWRU + r.RCU*pricePerMillionRRU
	if r.Invocations > 0 {
		r.InvocationMs = r.handlerSeconds * 1000 / float64(r.Invocations)
	}
	r.LambdaUSDPerMillion = r.InvocationsPerMsg * (lambdaPricePerMillionRequests + 1e6*relayMemoryGB*r.InvocationMs/1000*lambdaPricePerGBSecond)
	r.TotalUSDPerMillion = r.USDPerMillion + r.LambdaUSDPerMillion
}

// gate wraps the handler: it counts the hints delivered and the invocations
// in flight, and from the first invocation that starts after measure, the
// invocations and the messages published, with the handler's meter reset
// at that moment. Lambda delivers one batch of a shard at a time, so no
// invocation is cut in two on a one-shard stream.
type gate struct {
	next      esm.Handler
	published func() int64 // the handler's running count of messages published
	reset     func()       // resets the handler's meter
	snap      func() snapshot

	mu          sync.Mutex
	requested   bool
	started     time.Time
	inflight    int
	hints       int64 // INSERT records delivered, since the start
	invocations int64 // since started
	busy        time.Duration
	published0  int64
}

func (g *gate) measure() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.requested = true
}

func (g *gate) handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	g.mu.Lock()
	if g.requested && g.started.IsZero() {
		g.started = time.Now()
		g.reset()
		g.published0 = g.published()
	}
	measured := !g.started.IsZero()
	if measured {
		g.invocations++
	}
	g.inflight++
	for _, r := range ev.Records {
		if r.EventName == string(events.DynamoDBOperationTypeInsert) {
			g.hints++
		}
	}
	g.mu.Unlock()
	start := time.Now()
	defer func() {
		g.mu.Lock()
		g.inflight--
		if measured {
			g.busy += time.Since(start)
		}
		g.mu.Unlock()
	}()
	return g.next(ctx, ev)
}

// idle tells whether at least hints INSERT records were delivered and no
// invocation is running.
func (g *gate) idle(hints int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.hints >= hints && g.inflight == 0
}

// counts returns the handler's meter, the
// invocations and messages published since the measurement started, and
// how long ago it started.
func (g *gate) counts() (snapshot, int64, int64, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started.IsZero() {
		return snapshot{}, 0, 0, 0
	}
	return g.snap(), g.invocations, g.published() - g.published0, time.Since(g.started)
}

// busySeconds is the measured invocations' total time.
func (g *gate) busySeconds() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.busy.Seconds()
}

// consumer reads the stage's topic from the start and records when each
// message id (the x-outbox-message-id header) was first polled.
type consumer struct {
	ctx      context.Context
	cl       *kgo.Client
	mu       sync.Mutex
	consumed map[string]time.Time
	dups     int
}

func newConsumer(ctx context.Context, st *stage) (*consumer, error) {
	// read_committed, as consumers of the transactional mode must read (the
	// inbox's default): a record counts as consumed when it is visible to
	// them. Without transactions it changes nothing (the last stable offset
	// is the high watermark).
	cl, err := kgo.NewClient(kgo.SeedBrokers(st.brokers...), kgo.ConsumeTopics(st.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	return &consumer{ctx: ctx, cl: cl, consumed: map[string]time.Time{}}, nil
}

func (c *consumer) run() {
	defer c.cl.Close()
	for c.ctx.Err() == nil {
		fs := c.cl.PollFetches(c.ctx)
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key != outbox.DefaultMessageIDHeader {
					continue
				}
				c.mu.Lock()
				if _, dup := c.consumed[string(h.Value)]; dup {
					c.dups++
				} else {
					c.consumed[string(h.Value)] = now
				}
				c.mu.Unlock()
			}
		})
	}
}

// seenAll tells whether every id in commits was consumed.
func (c *consumer) seenAll(commits map[string]commit) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range commits {
		if _, ok := c.consumed[id]; !ok {
			return false
		}
	}
	return true
}

func (c *consumer) result() (map[string]time.Time, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consumed, c.dups
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pct is the q-quantile (nearest rank) of xs; 0 when empty.
func pct(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
