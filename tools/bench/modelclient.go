package main

import (
	"bufio"
	"context"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/store/dynamo"
	"github.com/dynakafka/outbox/tools/bench/ddbmodel"
)

// Roles the model counts calls under (ddbmodel.WithRole, one HTTP
// listener per role).
const (
	roleHandler = "handler" // the code under measurement: relay or floor
	roleWriter  = "writer"  // the bench's writers (dynamo.Writer)
)

// modelClient is the model in process for one role, with the DynamoDB
// SDK client's retry policy (its standard retryer as the dynamodb client
// configures it: 4 attempts, 25 ms base delay, 1 s for throttling, a retry
// quota), so that callers meet throttling as through the SDK. The writers
// of the modelled stage call the model this way: the real dynamo.Writer,
// without the SDK's serialisation and HTTP, which would take more CPU than
// the two cores have at 10,000 messages per second.
type modelClient struct {
	db   *ddbmodel.DB
	role string
}

var _ interface {
	dynamo.WriterAPI
	dynamo.AdminAPI
} = modelClient{}

// dynamoRetryer is a fresh retryer as the dynamodb client builds it
// (dynamodb.resolveRetryer).
func dynamoRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = 4
		o.BaseDelay = 25 * time.Millisecond
	})
}

// retried runs one call under the retryer r, as the SDK's retry middleware
// does: again after RetryDelay while the error is retryable, the attempts
// last and the retry quota gives a token.
func retried[T any](ctx context.Context, r aws.Retryer, role string, call func(context.Context) (T, error)) (T, error) {
	ctx = ddbmodel.WithRole(ctx, role)
	var release func(error) error
	for attempt := 1; ; attempt++ {
		out, err := call(ctx)
		if release != nil {
			_ = release(err)
		}
		if err == nil || attempt >= r.MaxAttempts() || !r.IsErrorRetryable(err) {
			return out, err
		}
		rel, terr := r.GetRetryToken(ctx, err)
		if terr != nil {
			return out, err
		}
		release = rel
		d, derr := r.RetryDelay(attempt, err)
		if derr != nil {
			return out, err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return out, err
		case <-t.C:
		}
	}
}

// retryingModel is a modelClient that retries as the SDK does, with one
// retryer for all its calls (the SDK's retry quota is per client).
type retryingModel struct {
	modelClient
	r aws.Retryer
}

func newModelClient(db *ddbmodel.DB, role string) retryingModel {
	return retryingModel{modelClient{db, role}, dynamoRetryer()}
}

func (c modelClient) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	return c.db.CreateTable(ddbmodel.WithRole(ctx, c.role), in)
}

func (c modelClient) DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error) {
	return c.db.DescribeTimeToLive(ddbmodel.WithRole(ctx, c.role), in)
}

func (c modelClient) UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	return c.db.UpdateTimeToLive(ddbmodel.WithRole(ctx, c.role), in)
}

func (c modelClient) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	return c.db.DescribeTable(ddbmodel.WithRole(ctx, c.role), in)
}

func (c modelClient) GetItem(ctx context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return c.db.GetItem(ddbmodel.WithRole(ctx, c.role), in)
}

func (c modelClient) PutItem(ctx context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return c.db.PutItem(ddbmodel.WithRole(ctx, c.role), in)
}

func (c modelClient) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return c.db.UpdateItem(ddbmodel.WithRole(ctx, c.role), in)
}

func (c modelClient) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return c.db.TransactWriteItems(ddbmodel.WithRole(ctx, c.role), in)
}

// The writer's calls, retried as the SDK retries them.

func (c retryingModel) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	return retried(ctx, c.r, c.role, func(ctx context.Context) (*dynamodb.DescribeTableOutput, error) { return c.db.DescribeTable(ctx, in) })
}

func (c retryingModel) GetItem(ctx context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return retried(ctx, c.r, c.role, func(ctx context.Context) (*dynamodb.GetItemOutput, error) { return c.db.GetItem(ctx, in) })
}

func (c retryingModel) PutItem(ctx context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return retried(ctx, c.r, c.role, func(ctx context.Context) (*dynamodb.PutItemOutput, error) { return c.db.PutItem(ctx, in) })
}

func (c retryingModel) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return retried(ctx, c.r, c.role, func(ctx context.Context) (*dynamodb.UpdateItemOutput, error) { return c.db.UpdateItem(ctx, in) })
}

func (c retryingModel) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return retried(ctx, c.r, c.role, func(ctx context.Context) (*dynamodb.TransactWriteItemsOutput, error) {
		return c.db.TransactWriteItems(ctx, in)
	})
}

// writerClient is what the writers of a run commit through, what reads
// their calls' counts and what resets them: on a stage with direct
// writers, the model in process (counted by the model under roleWriter);
// otherwise an SDK client of their own with a meter (keeping n idle
// connections).
func (st *stage) writerClient(n int) (dynamo.WriterAPI, func() snapshot, func()) {
	if st.model != nil && st.directWriters {
		return newModelClient(st.model, roleWriter), func() snapshot { return modelSnapshot(st.model.Counts(roleWriter), st.roles()) },
			func() { st.model.ResetCounts(roleWriter) }
	}
	wm := newMeter()
	wm.idleConns = n
	wm.keepSamples = st.meter.keepSamples
	st.writerMeter = wm
	return dynamolocal.NewClient(st.awsCfg, st.endpoint, wm.option), func() snapshot { return wm.snapshot(st.roles()) }, wm.reset
}

// modelSnapshot is the model's counts of one role as a meter snapshot:
// every request the model answered is a call (so a call the SDK retried
// counts once per attempt), its units are DynamoDB's rules' both as
// reported and as computed, and its throttled and failed requests are
// errors.
func modelSnapshot(counts map[ddbmodel.OpTable]ddbmodel.OpCount, roles map[string]string) snapshot {
	s := snapshot{Ops: map[string]opStats{}}
	for k, v := range counts {
		t := k.Table
		if r, ok := roles[t]; ok {
			t = r
		}
		s.add(k.Op+" "+t, opStats{Calls: v.Calls, Attempts: v.Calls, Errors: v.Errors + v.Throttled, Capacity: v.Units,
			Reported: v.Calls, AWSUnits: v.Units, Seconds: v.Seconds})
	}
	return s
}

// throttledCalls is how many of role's calls the model refused, whole or
// in part, for a partition key's capacity.
func throttledCalls(db *ddbmodel.DB, role string) int64 {
	var n int64
	for _, v := range db.Counts(role) {
		n += v.Throttled
	}
	return n
}

// cpuSample is the machine's CPU time, busy and in all, from /proc/stat.
type cpuSample struct {
	at          time.Time
	busy, total int64
}

func machineCPU() cpuSample {
	s := cpuSample{at: time.Now()}
	f, err := os.Open("/proc/stat")
	if err != nil {
		return s
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, v := range fields[1:] {
			var n int64
			for _, c := range v {
				n = n*10 + int64(c-'0')
			}
			s.total += n
			if i != 3 && i != 4 { // idle and iowait
				s.busy += n
			}
		}
	}
	return s
}

// busySince is the share of the machine's CPU time that was busy since
// s0.
func (s cpuSample) busySince(s0 cpuSample) float64 {
	if s.total <= s0.total {
		return 0
	}
	return float64(s.busy-s0.busy) / float64(s.total-s0.total)
}

// processCPU is this process's CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
