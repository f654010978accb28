// Package pipeline runs an outbox's serverless half on this machine, as
// template.yaml deploys it: the relay function's handler behind a local
// event-source mapping on the messages table's stream, and the sweeper
// function's handler on its one-minute schedule, both built by the same
// wiring the Lambda bootstraps use. `make demo` (cmd/demo) and
// `outbox local` run it.
package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/lambda/wiring"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/local/esm"
	"github.com/dynakafka/outbox/local/schedule"
	"github.com/dynakafka/outbox/store/dynamo"
)

// Options say where the outbox is. AWS, Endpoint, Tables, Brokers and Topics
// are required.
type Options struct {
	// AWS is the configuration of every client (credentials, region).
	AWS aws.Config
	// Endpoint is DynamoDB's (DynamoDB Local's) URL.
	Endpoint string
	Tables   dynamo.Tables
	// Brokers are the Kafka bootstrap servers (no authentication); Topics
	// the topics the relay checks at start.
	Brokers []string
	Topics  []string
	// Logger receives the functions' logs. Default: nothing is logged.
	Logger *slog.Logger
	// SweeperError is called with each failed sweep. Default: ignored.
	SweeperError func(error)
	// Name prefixes the relay ids in leases ("<name>-relay",
	// "<name>-sweeper"). Default "local".
	Name string
}

// Pipeline is a running relay mapping and sweeper schedule.
type Pipeline struct {
	// StreamARN is the messages table's stream the relay reads.
	StreamARN string

	mapping *esm.Mapping
	sweeps  atomic.Int64
	stop    context.CancelFunc
	bg      sync.WaitGroup
	closers []func()
}

// Start builds both functions and starts the mapping and the schedule.
// Invocations run detached from ctx (an invocation in flight when Stop is
// called runs to its end, as under the Lambda service) until hard ends,
// which cancels them at once (Ctrl-C).
func Start(ctx, hard context.Context, o Options) (_ *Pipeline, err error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Name == "" {
		o.Name = "local"
	}
	if o.SweeperError == nil {
		o.SweeperError = func(error) {}
	}
	db := dynamolocal.NewClient(o.AWS, o.Endpoint)
	desc, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(o.Tables.Messages)})
	if err != nil {
		return nil, err
	}
	streamARN := aws.ToString(desc.Table.LatestStreamArn)
	if streamARN == "" {
		return nil, errors.New("pipeline: table " + o.Tables.Messages + " has no stream (create it with dynamo.CreateTables or outbox init)")
	}
	p := &Pipeline{StreamARN: streamARN}
	defer func() {
		if err != nil {
			p.Stop()
		}
	}()
	// As template.yaml configures the functions.
	cfg := config.Config{
		MessagesTable: o.Tables.Messages, ControlTable: o.Tables.Control, BatchSize: 500, Topics: o.Topics,
		LeaseDuration: 30 * time.Second, GapTimeout: 10 * time.Second,
		Concurrency: 8, Brokers: o.Brokers, Auth: config.AuthNone, Region: o.AWS.Region, DynamoEndpoint: o.Endpoint,
	}
	relayParts, err := wiring.BuildWith(ctx, cfg, o.AWS, o.Logger, o.Name+"-relay")
	if err != nil {
		return nil, err
	}
	p.closers = append(p.closers, relayParts.Close)
	sweeperParts, err := wiring.BuildWith(ctx, cfg, o.AWS, o.Logger, o.Name+"-sweeper")
	if err != nil {
		return nil, err
	}
	p.closers = append(p.closers, sweeperParts.Close)
	relayFn := handler.NewRelay(relayParts.Relay, cfg.Concurrency, o.Logger)
	sweeperFn, err := handler.NewSweeper(sweeperParts.Relay, o.Logger)
	if err != nil {
		return nil, err
	}
	relay := func(ictx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		ictx, cancel := Detach(ictx, hard)
		defer cancel()
		return relayFn.Handle(ictx, ev)
	}
	p.mapping, err = esm.New(dynamolocal.NewStreamsClient(o.AWS, o.Endpoint), streamARN, esm.InProcess(relay, esm.Timeout(2*time.Minute)),
		// As template.yaml deploys it.
		esm.BatchSize(1000), esm.MaximumBatchingWindow(0), esm.Filter(esm.InsertsOnly),
		esm.MaximumRetryAttempts(5), esm.BisectBatchOnFunctionError(true), esm.ReportBatchItemFailures(true),
		esm.MaximumRecordAge(time.Hour),
		esm.Logger(o.Logger))
	if err != nil {
		return nil, err
	}
	var pipeCtx context.Context
	pipeCtx, p.stop = context.WithCancel(context.Background())
	p.bg.Add(2)
	go func() { defer p.bg.Done(); _ = p.mapping.Run(pipeCtx) }()
	go func() {
		defer p.bg.Done()
		_ = schedule.Run(pipeCtx, schedule.Options{Rate: time.Minute, Region: o.AWS.Region, Timeout: time.Minute},
			func(ictx context.Context, ev events.CloudWatchEvent) error {
				p.sweeps.Add(1)
				ictx, cancel := Detach(ictx, hard)
				defer cancel()
				_, err := sweeperFn.Handle(ictx, ev)
				return err
			}, o.SweeperError)
	}()
	return p, nil
}

// Stats are the mapping's counts.
func (p *Pipeline) Stats() esm.Stats { return p.mapping.Stats() }

// Sweeps is how many sweeps have started.
func (p *Pipeline) Sweeps() int64 { return p.sweeps.Load() }

// Stop stops taking new invocations, waits for those in flight, and closes
// the functions' clients. Safe to call more than once.
func (p *Pipeline) Stop() {
	if p.stop != nil {
		p.stop()
	}
	p.bg.Wait()
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}

// Detach returns a context with ctx's values and deadline that ends only at
// that deadline or when hard ends, not when ctx is cancelled.
func Detach(ctx, hard context.Context) (context.Context, context.CancelFunc) {
	d, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if deadline, ok := ctx.Deadline(); ok {
		var cancelDeadline context.CancelFunc
		d, cancelDeadline = context.WithDeadline(d, deadline)
		prev := cancel
		cancel = func() { cancelDeadline(); prev() }
	}
	stop := context.AfterFunc(hard, cancel)
	return d, func() { stop(); cancel() }
}
