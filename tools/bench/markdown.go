package main

import (
	"fmt"
	"slices"
	"strings"
)

// markdown renders docs/benchmarks.md from the results: every figure in it
// comes from this run.
func (r *results) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	s := r.Summary
	m := r.Machine
	c := r.Capacity

	p("# Benchmarks\n\n")
	p("Written by `make bench` (`cd tools && go run ./bench`) on %s; every figure below is from that one run.\n", r.Generated)
	p("Re-run it to refresh this page, `benchmarks.json` (all the numbers, including every DynamoDB\n")
	p("operation's calls and capacity) and `benchmarks.png`.\n\n")
	if r.Smoke {
		p("> **Smoke run** (tiny volumes): these figures only show that every stage ran. Do not quote them.\n\n")
	}
	p("```\n%s\n```\n\n", strings.Join(r.lines(), "\n"))
	p("![throughput](benchmarks.png)\n\n")

	p("## Machine and versions\n\n")
	p("| | |\n|---|---|\n")
	p("| CPU | %s, %d cores (shared with other jobs) |\n", m.CPU, m.Cores)
	p("| load average (1, 5, 15 min) | %s at start, %s at end |\n", m.LoadStart, m.LoadEnd)
	p("| Go | %s %s |\n", m.Go, m.OS)
	p("| DynamoDB | DynamoDB Local %s (in memory, one fresh instance per stage: %d instances) |\n", m.DynamoDBLocal, m.Instances)
	p("| Kafka | %s |\n", m.Kafka)
	p("| clients | franz-go %s, aws-sdk-go-v2 dynamodb %s |\n\n", m.FranzGo, m.AWSSDKDynamoDB)

	p("## Goals\n\n| goal | target | reached | met |\n|---|---|---|---|\n")
	for _, g := range r.Goals {
		met := "no"
		if g.Met {
			met = "yes"
		}
		p("| %s | %s | %.4g | %s |\n", g.Name, g.Target, g.Value, met)
	}
	p("\n")

	p("## Throughput\n\n")
	p("Message items are %d bytes as stored (≤ 1 KB: %d-byte JSON values, a 15-byte key, one header).\n\n", c.MessageItemBytes, valueBytes)
	p("| stage | messages | seconds | msgs/s | DynamoDB calls per msg | TCP connections opened | load average after |\n|---|---:|---:|---:|---:|---:|---|\n")
	row := func(d drainResult) {
		calls, dials := "—", "—"
		if d.Calls > 0 {
			calls, dials = fmt.Sprintf("%.4f", d.CallsPerM), fmt.Sprint(d.Dynamo.Dials)
		}
		p("| %s | %d | %.2f | %.0f | %s | %s | %s |\n", d.Name, d.Messages, d.Seconds, d.MsgsPerS, calls, dials, d.Load)
	}
	row(r.Raw.DynamoDB)
	row(r.Raw.Kafka)
	p("| **raw limit** = min(DynamoDB, Kafka) | | | **%.0f** | |\n", r.Raw.MsgsPerS)
	row(r.Raw.Pipeline)
	row(r.Relay)
	row(r.Naive)
	row(r.NaiveParallel)
	p("\nrelay / raw = **%.2f**, relay / naive = **%.1f**, DynamoDB round trips per relayed message = **%.4f**;\n", s.RelayVsRaw, s.RelayVsNaive, s.RoundTripsPerMsg)
	p("relay / raw pipeline = **%.2f**; relay / naive with 8 loops = **%.1f**.\n\n", s.RelayVsPipeline, s.RelayVsNaiveParallel)
	if len(r.IdleConns) > 0 {
		p("\nThe AWS SDK's HTTP transport keeps at most 10 idle connections per host and closes the rest after use; 8 buckets\n")
		p("with 4 concurrent deletes each keep up to 32 calls in flight, so the client keeps opening connections (on AWS, each\n")
		p("one a TLS handshake). One round each with the measured client keeping %d idle connections per host:\n\n", idleConnsExperiment)
		p("| stage | messages | seconds | msgs/s | DynamoDB calls per msg | TCP connections opened | load average after |\n|---|---:|---:|---:|---:|---:|---|\n")
		for _, d := range r.IdleConns {
			row(d)
		}
	}
	p("\n")
	if len(r.Rounds.Relay) > 1 {
		p("Raw DynamoDB, the raw pipeline and the relay (with 8, and for the per-bucket overhead 32 and 64 buckets) ran in %d\n", len(r.Rounds.Relay))
		p("interleaved rounds, each on a fresh DynamoDB Local; the tables show each one's median round. All rounds, msgs/s\n")
		p("(the 1-minute load average after the round):\n\n| round | raw DynamoDB | raw pipeline | relay |")
		for _, rs := range r.Rounds.Buckets {
			if len(rs) > 0 {
				p(" relay, %d buckets |", rs[0].Backlog.Buckets)
			}
		}
		p("\n|---:|---:|---:|---:|%s\n", strings.Repeat("---:|", len(r.Rounds.Buckets)))
		for i := range r.Rounds.Relay {
			cell := func(ds []drainResult) string {
				if i >= len(ds) {
					return ""
				}
				return fmt.Sprintf("%.0f (%s)", ds[i].MsgsPerS, strings.Fields(ds[i].Load + " ?")[0])
			}
			p("| %d | %s | %s | %s |", i+1, cell(r.Rounds.DynamoDB), cell(r.Rounds.Pipeline), cell(r.Rounds.Relay))
			for _, rs := range r.Rounds.Buckets {
				p(" %s |", cell(rs))
			}
			p("\n")
		}
		p("\n")
	}
	p("The raw limit takes DynamoDB and Kafka one at a time, each with the whole machine; here DynamoDB Local is the\n")
	p("bottleneck by far (Kafka alone: %.0f msgs/s), so the raw limit is raw DynamoDB. The **raw pipeline** does the relay's\n", r.Raw.Kafka.MsgsPerS)
	p("work by hand (Query, produce, delete; no lease, head update, decoding or validation) at the same batch size and\n")
	p("concurrency, so relay / raw pipeline is the engine's own cost. Every round moves by ±30%% with the load that other\n")
	p("jobs put on the two cores (see the rounds)")
	if s.RelayVsRaw > 1 {
		p("; a relay faster than the raw limit is that noise, not the relay beating DynamoDB: within it, the relay\n")
		p("drains as fast as raw DynamoDB and as the hand-written pipeline")
	}
	p(".\n\n")
	p("Relay DynamoDB calls by operation (the drain only; \"Query(empty)\" is a Query that found nothing):\n\n")
	p("| operation table | calls | per batch | mean ms per call | DynamoDB Local units | AWS-rule units |\n|---|---:|---:|---:|---:|---:|\n")
	for _, k := range r.Relay.Dynamo.keys() {
		if v := r.Relay.Dynamo.Ops[k]; v.Calls > 0 {
			p("| %s | %d | %.2f | %.1f | %.1f | %.1f |\n", k, v.Calls, float64(v.Calls)/float64(max(1, r.Relay.Batches)),
				1000*v.Seconds/float64(v.Calls), v.Capacity, v.AWSUnits)
		}
	}
	if r.Relay.Batches > 0 {
		p("\n%d batches; a publish of one batch took %.1f ms on average.\n", r.Relay.Batches, 1000*r.Relay.PublishSeconds/float64(r.Relay.Batches))
	}
	p("\n")

	p("## Capacity units per message\n\n")
	p("Item sizes by AWS's rules: message %d B, counter %d B, lease %d B, fence tombstone %d B.\n\n",
		c.MessageItemBytes, c.CounterItemBytes, c.LeaseItemBytes, c.FenceItemBytes)
	p("**Model** (AWS's rules from the item sizes; see [capacity.md](capacity.md)): the writer puts each message in its\n")
	p("transaction at 2 WCU per KB and reserves its sequence numbers with one counter update per bucket per transaction\n")
	p("(shared by the transaction's messages); the relay deletes each message (1 WCU per KB of the deleted item), updates\n")
	p("the lease's head once per batch, acquires and releases the lease once per drain, and reads with consistent Queries\n")
	p("(1 RCU per 4 KB of the items read, rounded up per Query). **AWS rules on the calls made** applies the same rules\n")
	p("to every call the bench counted; **DynamoDB Local** is what the emulator reported with ReturnConsumedCapacity.\n\n")
	p("| messages per transaction | writer WCU: model | AWS rules on calls | DynamoDB Local | writer calls per msg |\n|---:|---:|---:|---:|---:|\n")
	for _, w := range c.Writer {
		p("| %d | %.4f | %.4f | %.4f | %.3f |\n", w.PerTxn, w.ModelWCU, w.AWSRuleWCU, w.LocalWCU, w.CallsPerMsg)
	}
	p("\n| relay (%d msgs over %d buckets) | model | minimum | AWS rules on calls | DynamoDB Local |\n|---|---:|---:|---:|---:|\n", c.Relay.Messages, c.Relay.Buckets)
	p("| WCU per message | %.4f | %.4f | %.4f | %.4f |\n", c.Relay.ModelWCU, c.Relay.MinWCU, c.Relay.AWSRuleWCU, c.Relay.LocalWCU)
	p("| RCU per message | %.4f | %.4f | %.4f | %.4f |\n", c.Relay.ModelRCU, c.Relay.MinRCU, c.Relay.AWSRuleRCU, c.Relay.LocalRCU)
	p("| naive relay WCU / RCU per message | | | %.4f / %.4f | %.4f / %.4f |\n\n", c.Naive.AWSRuleWCU, c.Naive.AWSRuleRCU, c.Naive.LocalWCU, c.Naive.LocalRCU)
	p("| messages per transaction | total WCU per msg: model | minimum | AWS rules on calls | RCU per msg | USD per million messages |\n|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range c.Total {
		p("| %d | %.4f | %.4f | %.4f | %.4f | %.3f |\n", t.PerTxn, t.ModelWCU, t.MinWCU, t.AWSRuleWCU, t.ModelRCU, t.USDPerMillion)
	}
	p("\nA fence tombstone costs %.0f WCU to write by AWS's rules (DynamoDB Local reported %.1f); the relay never deletes it\n", c.FenceAWSRuleWCU, c.FenceLocalWCU)
	p("(TTL deletes are free). Prices: on-demand, us-east-1, standard table class, $%.3f per million WRU and $%.3f per\n", pricePerMillionWRU, pricePerMillionRRU)
	p("million RRU (published prices since %s) — an assumption to check against the current price list.\n", priceDate)
	p("Stream reads by Lambda's event-source mapping are not charged.\n\n")
	p("Where DynamoDB Local reports differently from AWS:\n\n")
	for _, n := range c.LocalVsAWS {
		p("- %s\n", n)
	}
	p("\n")

	r.watermarkMarkdown(p)
	r.txnMarkdown(p)
	r.steadyMarkdown(p)

	r.runRelayMarkdown(p)
	r.Model.markdown(p)

	f := r.Footprint
	p("## Footprint of the relay Lambda\n\n")
	p("`%s`:\n\n| arch | bootstrap size |\n|---|---:|\n", f.BuildFlags)
	for _, bs := range f.Binaries {
		p("| %s | %.1f MiB (%d bytes) |\n", bs.Arch, float64(bs.Bytes)/(1<<20), bs.Bytes)
	}
	p("\nThe %s bootstrap under the Lambda Runtime Interface Emulator, DynamoDB Local and Kafka in other processes:\n\n", f.RunArch)
	p("| init: request → \"ready\" | cold invocation, as seen by the caller | drained | invocations | drain time | peak RSS (VmHWM) of the bootstrap |\n|---:|---:|---:|---:|---:|---:|\n")
	p("| %.1f ms | %.1f ms | %d msgs | %d | %.1f s | %.1f MiB |\n\n", f.InitMs, f.ColdInvokeMs, f.Messages, f.Invocations, f.DrainSeconds, float64(f.PeakRSSBytes)/(1<<20))
	p("Init is measured from the first invocation's request to the bootstrap's `outbox relay: ready` log line (process start,\n")
	p("Go runtime, configuration, clients, the config-item read and the topic check, against local endpoints), on an empty\n")
	p("outbox created as the drained one was (same schema, bucket count, config item and stream) in a DynamoDB Local of its\n")
	p("own, warmed up with %d of the probes below (`init_on=%s`): DynamoDB Local's DescribeTable slows with every item its\n", initWarmProbes, f.InitOn)
	p("database holds, in any table, which DynamoDB's does not (its ItemCount is refreshed about every six hours), so an init\n")
	p("measured beside the filled tables would time the emulator's scan (below). A last start, on the filled tables, drains\n")
	p("the backlog; the peak RSS is that process's. The emulator's\n")
	p("own REPORT line says `Init Duration: %.2f ms`: it starts the function asynchronously and stops that clock at once, so\n", f.ReportInitMs)
	p("its figure is not an init time. On Lambda, add the sandbox's own start.\n\n")
	if len(f.ColdStarts) > 0 {
		p("Every measured cold start of the stage (a second apart, on the empty outbox), beside the bench's own GetItem of the\n")
		p("config item and DescribeTable of both tables, sent at once as `dynamo.NewStore` sends them, just before the start (the\n")
		p("same probe on the tables filled with %d messages: GetItem %.1f ms, DescribeTable %.1f ms — the emulator counting\n",
			f.Messages, f.ProbeFilled.GetItemMs, f.ProbeFilled.DescribeTableMs)
		p("them; the draining start's init there took %.1f ms):\n\n", f.DrainStart.InitMs)
		p("| start | init | of which `dynamo.NewStore` | the bench's probe | its GetItem | its DescribeTable |\n|---:|---:|---:|---:|---:|---:|\n")
		for i, c := range f.ColdStarts {
			p("| %d | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms |\n", i+1, c.InitMs, c.InitSteps["store"], c.Probe.Ms, c.Probe.GetItemMs, c.Probe.DescribeTableMs)
		}
		p("\n")
	}

	p("## Per-bucket overhead\n\n")
	p("The same backlog drained by the relay with 8, 32 and 64 buckets (the relay at its defaults: every bucket at once, BatchSize 500; the median of the\n")
	p("rounds above; calls per message do not depend on the load, throughput does). On one emulator\n")
	p("this measures the relay's **overhead per bucket** (more leases, more and smaller batches, one empty read per bucket),\n")
	p("**not partition scaling**: DynamoDB Local is one process with no partitions, while on AWS each bucket is its own\n")
	p("partition key with its own write ceiling (see [capacity.md](capacity.md)).\n\n")
	p("| buckets | messages | msgs/s | DynamoDB calls per msg | load average after |\n|---:|---:|---:|---:|---|\n")
	for _, d := range r.Buckets {
		p("| %d | %d | %.0f | %.4f | %s |\n", d.Backlog.Buckets, d.Messages, d.MsgsPerS, d.CallsPerM, d.Load)
	}
	p("\n")

	p("## Method\n\n")
	p("- One run does every stage; each stage gets a fresh DynamoDB Local (it slows down as stream records pile up) and a fresh\n")
	p("  in-process kfake, and creates its tables with `dynamo.CreateTables` (KEYS_ONLY stream on) and a topic with one\n")
	p("  partition per bucket.\n")
	p("- Backlogs are made from a message item written by `dynamo.Writer` and read back, with the per-message attributes\n")
	p("  replaced; sequence numbers are reserved with `sequence.Counter`; items are stored with BatchWriteItem. The relay reads\n")
	p("  the writer's own item format. Pre-filling is not timed.\n")
	p("- **raw DynamoDB**: per bucket, consistent `Query` of 500 items, then their deletes in `BatchWriteItem` calls of 25, 4\n")
	p("  at once (the store's DeleteConcurrency); 8 buckets at once. **raw Kafka**: the same number of records (same sizes,\n")
	p("  keys, headers) produced by kgo with the publisher's settings (acks=all, idempotent, lz4, sticky murmur2 key\n")
	p("  partitioner, batches up to 1 MiB), 8 producers each producing 500 records at once and waiting for them.\n")
	p("- **raw pipeline**: the same per-bucket loop by hand on the same clients: `Query` 500, produce their records and wait,\n")
	p("  delete them as above; 8 buckets at once.\n")
	p("- **relay**: `relay.New` with default options over `dynamo.NewStore` and `kafka.NewPublisher`,\n")
	p("  `DrainBuckets` of every bucket, timed from the first call to the last bucket released; the stage checks that the\n")
	p("  table is empty and the topic holds every message afterwards.\n")
	p("- **naive**: the FAQ's send-then-mark loop on the same clients, `Query Limit 1 ConsistentRead; ProduceSync; DeleteItem`:\n")
	p("  one loop going round the buckets (the FAQ's relay as written; `relay_vs_naive` uses it), and one loop per bucket,\n")
	p("  8 at once (the relay's concurrency, so that ratio measures batching alone). Localhost round trips take about a\n")
	p("  millisecond, which flatters a loop of three round trips per message; on AWS each costs several.\n")
	p("- DynamoDB calls are counted with an SDK middleware on the measured client, which also sets\n")
	p("  ReturnConsumedCapacity=TOTAL (it changes nothing else); \"AWS rules\" applies AWS's published capacity rules to the\n")
	p("  items each counted call sent and received.\n")
	p("- Latency (steady state) is from `Writer.Write` returning to the record being polled by a consumer; footprint builds the bootstrap as\n")
	p("  `make build` does and reads VmHWM from `/proc/<pid>/status` of the bootstrap, the emulator's child process.\n\n")

	p("## Caveats\n\n")
	p("- Two shared cores: DynamoDB Local (Java), kfake, the relay and the bench share them with other jobs, so absolute\n")
	p("  figures are noisy and far below AWS's; compare the ratios, which come from one run. The load average is above.\n")
	p("- DynamoDB Local is not DynamoDB: no partitions, no throttling, no per-partition ceilings, different latencies, and its\n")
	p("  capacity reports differ (listed above). The capacity model, not the emulator, is what [capacity.md](capacity.md) uses.\n")
	p("- kfake is an in-process Kafka without replication or disks; acks=all costs nothing there.\n")
	p("- The steady stage polls the stream as Lambda does (4 times a second), so about 125 ms of the median is the poll\n")
	p("  interval; Lambda's own invocation overhead is not included, nor the sweeper's fixed cost (see capacity.md).\n")
	p("- The local mapping reads DynamoDB Local's stream, whose records become readable at once; on AWS a stream\n")
	p("  record takes its own time to appear, the same for the relay and the floor.\n")
	return b.String()
}

// steadyMarkdown renders the steady stage and the sweep.
// watermarkMarkdown compares the relay's two modes on the same backlog.
func (r *results) watermarkMarkdown(p func(format string, args ...any)) {
	w := r.Watermark
	if w == nil {
		return
	}
	p("## Watermark mode\n\n")
	p("The same backlog drained by the relay in watermark mode, in turns with the other drains of each round (median round\n")
	p("of %d): the relay writes nothing per message, the writer puts a TTL on every message item (%d B by AWS's rules), and\n",
		len(r.Rounds.Watermark), w.MessageItemBytes)
	p("the messages stay in the table (%d after the median drain) until DynamoDB's free TTL deletes remove them.\n\n", w.Retained)
	p("```\nwatermark: relay_msgs_per_s=%.0f delete_mode_msgs_per_s=%.0f wcu_per_msg=%.3f\n```\n\n", w.RelayMsgsPerS, w.DeleteModeMsgsPerS, w.WCUPerMsg)
	p("| mode | drain msgs/s | writer WCU per msg (1 per transaction) | relay WCU per msg | relay RCU per msg | total WCU per msg |\n|---|---:|---:|---:|---:|---:|\n")
	p("| delete | %.0f | %.4f | %.4f | %.4f | %.4f |\n", w.DeleteModeMsgsPerS, w.DeleteModeWCUPerMsg-r.Capacity.Relay.AWSRuleWCU,
		r.Capacity.Relay.AWSRuleWCU, r.Capacity.Relay.AWSRuleRCU, w.DeleteModeWCUPerMsg)
	p("| watermark | %.0f | %.4f | %.4f | %.4f | %.4f |\n\n", w.RelayMsgsPerS, w.WriterWCUPerMsg, w.Relay.AWSRuleWCU, w.Relay.AWSRuleRCU, w.WCUPerMsg)
	p("WCU by AWS's rules on the calls counted. Storage is the price: each message stays for the retention (24 h by\n")
	p("default) instead of until it is published.\n\n")
}

// txnMarkdown compares the transactional publisher with the default on the
// same run.
func (r *results) txnMarkdown(p func(format string, args ...any)) {
	t := r.Txn
	if t == nil {
		return
	}
	p("## Transactional mode\n\n")
	p("The same backlog drained by the relay publishing through `kafka.TxnPublisher` (one Kafka transaction per batch under\n")
	p("the bucket's transactional id), in turns with the other drains of each round (median round of %d), and the steady\n", len(r.Rounds.Txn))
	p("stage at %s msgs/s in both modes (commit to visible to a read_committed consumer). Kafka: %s. Kafka requests are\n", t.Rate, r.Machine.Kafka)
	p("every request the publisher's clients wrote during the drain, counted by a kgo hook.\n\n")
	p("```\n%s\n```\n\n", t.line())
	p("| publisher | drain msgs/s | batches | Kafka requests per batch | requests | p50 ms at %s/s | p99 ms at %s/s |\n|---|---:|---:|---:|---|---:|---:|\n", t.Rate, t.Rate)
	p("| default (idempotent) | %.0f | %d | %.2f | %s | %.1f | %.1f |\n", t.DefaultMsgsPerS, t.DefaultBatches, t.DefaultRoundTripsPerBatch, requestSummary(t.DefaultRequests), t.DefaultP50ms, t.DefaultP99ms)
	p("| transactional | %.0f | %d | %.2f | %s | %.1f | %.1f |\n\n", t.RelayMsgsPerS, t.Batches, t.RoundTripsPerBatch, requestSummary(t.Requests), t.P50ms, t.P99ms)
}

func (r *results) steadyMarkdown(p func(format string, args ...any)) {
	if len(r.Steady) == 0 {
		return
	}
	first := r.Steady[0]
	p("## Steady state: cost and latency at a given rate\n\n")
	p("Messages offered at a rate, one per writer transaction (`dynamo.Writer`, bucket after bucket over 8 buckets, enough\n")
	p("writers to keep up), through the table's stream, the local event-source mapping set as `template.yaml` sets\n")
	p("Lambda's (BatchSize 1000, MaximumBatchingWindowInSeconds %g, INSERT records only, ReportBatchItemFailures,\n", first.WindowS)
	p("BisectBatchOnFunctionError, MaximumRetryAttempts 5, one batch at a time per shard, four polls a second), and a handler\n")
	p("invoked in process as the Lambda Go runtime invokes it (the event through JSON, a Lambda context, a one-minute\n")
	p("timeout), to a Kafka consumer. Every run has a fresh DynamoDB Local and kfake and begins with a %g s warm-up at the\n", first.WarmupS)
	p("base rate that no figure includes.\n\n")
	p("- **relay**: the relay Lambda's handler (`lambda/handler` over the relay that `lambda/wiring` builds; BatchSize 500,\n")
	p("  lease 30 s, the rest at their defaults: Concurrency 0, every hinted bucket at once).\n")
	p("- **floor**: the least this architecture can do: a handler that reads the hinted items (one consistent BatchGetItem\n")
	p("  per invocation, or per 100 hints) and produces them with the publisher's producer settings, with no lease, no order\n")
	p("  and no delete. It produces each item as stored (key, value, message-id header) without decoding it.\n")
	var told []string
	for _, s := range r.Steady {
		if s.Profile.BurstRate > 0 && !slices.Contains(told, s.Profile.Name) {
			told = append(told, s.Profile.Name)
			p("- **%s**: %s — a %gx burst.\n", s.Profile.Name, s.Profile, s.Profile.BurstRate/s.Profile.Rate)
		}
	}
	p("\n```\n")
	for _, s := range r.Steady {
		if s.Handler == handlerRelay {
			p("%s\n", s.steadyLine())
		}
	}
	p("```\n\n")
	p("The mapping polls a shard again at once after an invocation and waits for the next poll (up to 250 ms) only when a\n")
	p("poll finds nothing: a handler that finishes before the next records arrive waits for them, one that is still busy\n")
	p("finds them waiting. So the floor's median can be above the relay's; its p99 is about the poll interval plus its work.\n\n")
	p("Per-message figures divide by the messages published by the invocations that began after the warm-up, counted until\n")
	p("the stream was idle again (so a hint that arrives after its message was published, and finds nothing, is paid for);\n")
	p("the writer's divide by every message it committed. WCU and RCU by AWS's rules on the calls counted; \"total\" is writer\n")
	p("and handler; USD per million at the on-demand prices below. Control-table writes are the handler's (the writer's own\n")
	p("counter update, 1 per transaction, is in the writer's WCU).\n\n")

	name := func(s steadyResult) string {
		n := s.Handler
		if s.Handler == handlerRelay && s.Mode != modeDelete.Name {
			n += " (" + s.Mode + ")"
		}
		return n
	}
	p("| load | handler | offered / committed per s | committed | consumed | p50 | p90 | p99 | max | burst p99 | writer commit p50 / p99 | sends late | load average after |\n")
	p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, s := range r.Steady {
		burst := "—"
		if s.Profile.BurstRate > 0 {
			burst = fmt.Sprintf("%.0f ms", s.BurstP99ms)
		}
		p("| %s | %s | %.0f / %.0f | %d | %d | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %s | %.0f / %.0f ms | %d | %s |\n",
			s.Profile.Name, name(s), s.offeredPerS(), s.AchievedPerS, s.Committed, s.Consumed, s.P50ms, s.P90ms, s.P99ms, s.MaxMs, burst,
			s.CommitP50ms, s.CommitP99ms, s.Late, s.Load)
	}
	for _, s := range r.Steady {
		if !s.sustained() {
			p("\n**Load %s, %s: the offered rate was not sustained.** The writers committed %.0f messages per second of the %.0f\n",
				s.Profile.Name, name(s), s.AchievedPerS, s.offeredPerS())
			p("offered (%d sends behind schedule, commits p50 %.0f ms; the handler's DynamoDB calls took %.0f ms on average):\n",
				s.Late, s.CommitP50ms, s.HandlerDynamo.meanMs())
			p("DynamoDB Local, sharing two loaded cores with the handler and everything else, could not commit faster, and the\n")
			p("relay and the floor did not get the same rate. Compare them at this load with care.\n")
		}
	}
	p("\n| load | handler | invocations | msgs per invocation | invocations per msg | DynamoDB calls per msg | mean ms per call | control writes per msg | handler WCU | writer WCU | total WCU | total RCU | USD per million |\n")
	p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Steady {
		p("| %s | %s | %d | %.1f | %.3f | %.3f | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f |\n",
			s.Profile.Name, name(s), s.Invocations, s.MsgsPerInvocation, s.InvocationsPerMsg, s.CallsPerMsg, s.HandlerDynamo.meanMs(),
			s.ControlWritesPerMsg, s.HandlerWCU, s.WriterWCU, s.WCU, s.RCU, s.USDPerMillion)
	}
	p("\nThe handlers' DynamoDB calls per message by operation (AWS-rule capacity units per message in brackets):\n\n")
	var keys []string
	for _, s := range r.Steady {
		for _, k := range s.HandlerDynamo.keys() {
			if !slices.Contains(keys, k) && s.HandlerDynamo.Ops[k].Calls > 0 {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	p("| load | handler |")
	for _, k := range keys {
		p(" %s |", k)
	}
	p("\n|---|---|%s\n", strings.Repeat("---:|", len(keys)))
	row := func(load, who string, snap snapshot, msgs int64) {
		p("| %s | %s |", load, who)
		for _, k := range keys {
			v, ok := snap.Ops[k]
			if !ok || v.Calls == 0 || msgs == 0 {
				p(" — |")
				continue
			}
			n := float64(msgs)
			p(" %.3f (%.3f) |", float64(v.Calls)/n, v.AWSUnits/n)
		}
		p("\n")
	}
	for _, s := range r.Steady {
		row(s.Profile.Name, name(s), s.HandlerDynamo, s.Messages)
	}
	p("\n")
	if s := r.steadyRelay("50"); s != nil {
		p("The writer, at 50 msgs/s (the same at every load, one message per transaction: the put at twice its size and the\n")
		p("bucket's counter update):\n\n")
		keys = keys[:0]
		for _, k := range s.WriterDynamo.keys() {
			if s.WriterDynamo.Ops[k].Calls > 0 {
				keys = append(keys, k)
			}
		}
		p("| load | |")
		for _, k := range keys {
			p(" %s |", k)
		}
		p("\n|---|---|%s\n", strings.Repeat("---:|", len(keys)))
		row(s.Profile.Name, "writer", s.WriterDynamo, int64(s.WriterMessages))
		p("\n")
	}

	if len(r.Sweep) > 0 {
		p("### Cost and latency by rate and batching window\n\n")
		p("The relay alone, as above, at each rate for each MaximumBatchingWindowInSeconds (%g s warm-up, then the seconds\n", r.Sweep[0].WarmupS)
		p("given):\n\n")
		p("| msgs/s | window | mode | seconds | invocations per msg | ms per invocation | total WCU | total RCU | DynamoDB USD per million | Lambda USD per million | p50 | p99 |\n")
		p("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range r.Sweep {
			p("| %s | %g s | %s | %g | %.3f | %.1f | %.3f | %.3f | %.2f | %.2f | %.0f ms | %.0f ms |\n",
				s.Profile.Name, s.WindowS, s.Mode, s.Profile.Seconds, s.InvocationsPerMsg, s.InvocationMs, s.WCU, s.RCU, s.USDPerMillion, s.LambdaUSDPerMillion, s.P50ms, s.P99ms)
		}
		p("The same as a table with cost beside latency, and a chart, is in [capacity.md](capacity.md).\n")
		p("\n")
	}
}

// runRelayMarkdown is the long-running relay's latency section.
func (r *results) runRelayMarkdown(p func(format string, args ...any)) {
	if len(r.RunRelay) == 0 {
		return
	}
	p("## Long-running relay: commit → Kafka on an idle outbox\n\n")
	p("`Relay.Run` (the container path) with PollInterval %.0f ms, 8 buckets; each message committed alone by a\n", r.RunRelay[0].PollMs)
	p("`dynamo.Writer` at a random phase of the polls, after the one before was consumed; latency from the Write's return\n")
	p("to a consumer fetching with a 10 ms wait. Polling alone, a message waits for the next sweep (up to PollInterval) and\n")
	p("then that sweep's probe and its bucket's drain; with the writer and the relay sharing a `relay.Notifier` the relay\n")
	p("drains the bucket as soon as the commit returns (docs/design.md, \"Commit notifications\"). The drain column is\n")
	p("the relay's own `DrainStats.Duration` of the drains that published (lease read, Pending, produce, marking).\n\n")
	p("| wake-up | messages | p50 | p99 | max | goal for p99 | drain p50 / p99 | load average after |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, rr := range r.RunRelay {
		how := "polling"
		if rr.Notifier {
			how = "notifier"
		}
		p("| %s | %d | %.1f ms | %.1f ms | %.1f ms | %.0f ms | %.1f / %.1f ms | %s |\n", how, rr.Messages, rr.P50ms, rr.P99ms, rr.MaxMs, rr.GoalMs, rr.DrainP50ms, rr.DrainP99ms, rr.Load)
	}
	p("\n")
}
