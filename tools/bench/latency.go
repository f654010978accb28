package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/lambda/wiring"
	"github.com/dynakafka/outbox/local/esm"
	"github.com/dynakafka/outbox/store/dynamo"
)

type latencyResult struct {
	OfferedPerS   float64 `json:"offered_msgs_per_s"`
	AchievedPerS  float64 `json:"committed_msgs_per_s"`
	Seconds       float64 `json:"seconds"`
	Writers       int     `json:"writers"`
	Committed     int     `json:"committed"`
	Delivered     int     `json:"delivered"`
	Late          int     `json:"sends_behind_schedule"`
	P50ms         float64 `json:"p50_ms"`
	P90ms         float64 `json:"p90_ms"`
	P99ms         float64 `json:"p99_ms"`
	MaxMs         float64 `json:"max_ms"`
	CommitP50ms   float64 `json:"commit_p50_ms"`
	CommitP99ms   float64 `json:"commit_p99_ms"`
	PollInterval  string  `json:"esm_poll_interval"`
	Invocations   int64   `json:"invocations"`
	WriteFailures int64   `json:"write_failures"`
	// The relay handler's DynamoDB calls while the rate was offered.
	RelayCallsPerMsg float64  `json:"relay_dynamodb_calls_per_msg"`
	Dynamo           snapshot `json:"relay_dynamodb"`
}

// latency offers rate messages per second for d, each in its own
// transaction through dynamo.Writer (one message per order, like the demo),
// and measures commit (Write returned) -> consumed from Kafka, through the
// stream, the local event-source mapping (Lambda's defaults: 4 polls a
// second) and the relay Lambda's handler built by the Lambda wiring.
func latency(ctx context.Context, st *stage, g *gen, rate float64, d time.Duration) (latencyResult, error) {
	res := latencyResult{OfferedPerS: rate, Writers: 32, PollInterval: "250ms"}
	desc, err := st.plain.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(st.tables.Messages)})
	if err != nil {
		return res, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := config.Config{
		MessagesTable: st.tables.Messages, ControlTable: st.tables.Control, BatchSize: relayBatch, Topics: []string{st.topic},
		LeaseDuration: 30 * time.Second, GapTimeout: 10 * time.Second, MaxMessageBytes: outbox.DefaultMaxMessageBytes,
		Concurrency: relayConcurrency, Brokers: st.brokers, Auth: config.AuthNone, Region: st.awsCfg.Region, DynamoEndpoint: st.endpoint,
	}
	// The relay's own client is built by the wiring: meter it through the
	// AWS config's API options (the writer uses the unmetered client).
	relayAWS := st.awsCfg.Copy()
	relayAWS.APIOptions = append(relayAWS.APIOptions, st.meter.register)
	parts, err := wiring.BuildWith(ctx, cfg, relayAWS, quiet, "bench-relay")
	if err != nil {
		return res, err
	}
	defer parts.Close()
	fn := handler.NewRelay(parts.Relay, cfg.Concurrency, quiet)
	mapping, err := esm.New(st.streams, aws.ToString(desc.Table.LatestStreamArn), esm.InProcess(fn.Handle, esm.Timeout(time.Minute)),
		esm.BatchSize(1000), esm.MaximumBatchingWindow(0), esm.Filter(esm.InsertsOnly), esm.StartPosition(esm.Latest),
		esm.ReportBatchItemFailures(true), esm.BisectBatchOnFunctionError(true))
	if err != nil {
		return res, err
	}
	pipe, stop := context.WithCancel(ctx)
	defer stop()
	var bg sync.WaitGroup
	bg.Go(func() { _ = mapping.Run(pipe) })

	var (
		mu        sync.Mutex
		commits   = map[string]time.Time{}
		consumed  = map[string]time.Time{}
		commitLat []float64
	)
	cl, err := kgo.NewClient(kgo.SeedBrokers(st.brokers...), kgo.ConsumeTopics(st.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return res, err
	}
	bg.Go(func() {
		defer cl.Close()
		for pipe.Err() == nil {
			fs := cl.PollFetches(pipe)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					if h.Key == outbox.DefaultMessageIDHeader {
						mu.Lock()
						if _, dup := consumed[string(h.Value)]; !dup {
							consumed[string(h.Value)] = now
						}
						mu.Unlock()
					}
				}
			})
		}
	})
	// Let the mapping find the shard before the first commit.
	time.Sleep(time.Second)

	w, err := dynamo.NewWriter(ctx, st.plain, st.tables)
	if err != nil {
		return res, err
	}
	total := int(rate * d.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	jobs := make(chan int, res.Writers)
	var failures atomic.Int64
	var writers sync.WaitGroup
	for range res.Writers {
		writers.Go(func() {
			for i := range jobs {
				m := g.message(st.topic, i%st.buckets)
				start := time.Now()
				r, err := w.Write(ctx, nil, m)
				done := time.Now()
				if err != nil {
					failures.Add(1)
					continue
				}
				mu.Lock()
				commits[r.Messages[0].ID] = done
				commitLat = append(commitLat, ms(done.Sub(start)))
				mu.Unlock()
			}
		})
	}
	st.meter.reset()
	start := time.Now()
	for i := range total {
		next := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(next))
		select {
		case jobs <- i:
		default:
			res.Late++ // every writer busy: the offered rate is above what commits sustain
			jobs <- i
		}
	}
	close(jobs)
	writers.Wait()
	res.Seconds = time.Since(start).Seconds()

	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := 0
		for id := range commits {
			if _, ok := consumed[id]; ok {
				n++
			}
		}
		all := n == len(commits)
		mu.Unlock()
		if all {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	bg.Wait()

	var lat []float64
	for id, c := range commits {
		if t, ok := consumed[id]; ok {
			lat = append(lat, max(0, ms(t.Sub(c))))
		}
	}
	res.Committed, res.Delivered = len(commits), len(lat)
	res.AchievedPerS = float64(res.Committed) / res.Seconds
	res.WriteFailures = failures.Load()
	res.Invocations = mapping.Stats().Invocations
	res.Dynamo = st.meter.snapshot(st.roles())
	calls, _ := res.Dynamo.calls()
	if res.Delivered > 0 {
		res.RelayCallsPerMsg = float64(calls) / float64(res.Delivered)
	}
	res.P50ms, res.P90ms, res.P99ms, res.MaxMs = pct(lat, 0.50), pct(lat, 0.90), pct(lat, 0.99), pct(lat, 1)
	res.CommitP50ms, res.CommitP99ms = pct(commitLat, 0.50), pct(commitLat, 0.99)
	if res.Delivered < res.Committed {
		return res, fmt.Errorf("latency: %d of %d committed messages were not consumed within 60s", res.Committed-res.Delivered, res.Committed)
	}
	return res, nil
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
