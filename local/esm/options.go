package esm

import (
	"context"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/dynakafka/outbox"
)

// StartingPosition is where a mapping starts reading the shards it finds at
// start.
type StartingPosition string

const (
	// TrimHorizon reads every record still in the stream (24 hours on AWS).
	TrimHorizon StartingPosition = "TRIM_HORIZON"
	// Latest reads only records written after the mapping started.
	Latest StartingPosition = "LATEST"
)

// Opt configures a Mapping.
type Opt func(*cfg)

type cfg struct {
	batchSize      int
	window         time.Duration
	start          StartingPosition
	filter         func(events.DynamoDBEventRecord) bool
	maxRetries     int
	bisect         bool
	reportFailures bool
	maxAge         time.Duration
	onFailure      func(context.Context, FailureRecord)
	pollInterval   time.Duration
	discovery      time.Duration
	functionARN    string
	logger         *slog.Logger

	errs []error
}

func defaults() cfg {
	return cfg{
		batchSize:      100,
		start:          TrimHorizon,
		filter:         InsertsOnly,
		maxRetries:     3,
		reportFailures: true,
		pollInterval:   250 * time.Millisecond,
		discovery:      5 * time.Second,
		logger:         slog.New(slog.DiscardHandler),
	}
}

func (c *cfg) invalid(option string, value any, reason string) {
	c.errs = append(c.errs, &outbox.OptionError{Option: "esm." + option, Value: value, Reason: reason})
}

// BatchSize is the most records in one invocation. Default 100 (Lambda's
// default for DynamoDB Streams); 1 to 10000.
func BatchSize(n int) Opt {
	return func(c *cfg) {
		if n < 1 || n > 10000 {
			c.invalid("BatchSize", n, "must be 1..10000 (Lambda's limits)")
			return
		}
		c.batchSize = n
	}
}

// MaximumBatchingWindow is how long records are gathered before the function
// is invoked with fewer than BatchSize of them. Default 0: invoke as soon as
// the records waiting have been read (a GetRecords call returned fewer than
// it asked for). 0 to 300s (Lambda's limits).
func MaximumBatchingWindow(d time.Duration) Opt {
	return func(c *cfg) {
		if d < 0 || d > 300*time.Second {
			c.invalid("MaximumBatchingWindow", d, "must be 0..300s (Lambda's limits)")
			return
		}
		c.window = d
	}
}

// StartPosition is where the shards found at start are read from. Shards that
// appear later (children of closed shards) are always read from their start,
// as Lambda does.
//
// Lambda has no default: CreateEventSourceMapping requires it. The default
// here is TrimHorizon, so that items written before Run (or racing with its
// first GetShardIterator) are not silently skipped in demos and tests. With
// Latest, shards already closed at start are skipped entirely.
func StartPosition(p StartingPosition) Opt {
	return func(c *cfg) {
		if p != TrimHorizon && p != Latest {
			c.invalid("StartPosition", p, "must be esm.TrimHorizon or esm.Latest")
			return
		}
		c.start = p
	}
}

// InsertsOnly is the default filter: the Go form of the Lambda FilterCriteria
// pattern {"eventName":["INSERT"]}. The outbox only ever needs to react to new
// messages; deletes by the relay and TTL expiries are filtered out.
func InsertsOnly(r events.DynamoDBEventRecord) bool { return r.EventName == "INSERT" }

// AllRecords is a filter that keeps every record (a mapping without
// FilterCriteria).
func AllRecords(events.DynamoDBEventRecord) bool { return true }

// Filter keeps the records for which keep returns true, with Lambda's
// FilterCriteria semantics: records that do not match are discarded before
// batching (they never reach the function and do not count towards
// BatchSize), and a poll whose records are all discarded invokes nothing.
// Default InsertsOnly.
func Filter(keep func(events.DynamoDBEventRecord) bool) Opt {
	return func(c *cfg) {
		if keep == nil {
			c.invalid("Filter", "nil", "pass esm.AllRecords to keep every record")
			return
		}
		c.filter = keep
	}
}

// MaximumRetryAttempts is how often a failed batch is retried before its
// records are dropped and sent to OnFailure. Default 3; 0 to 10000, or -1 for
// infinite.
//
// Lambda's default is -1 (retry until the record expires from the stream, 24
// hours). A local mapping defaults to a finite value so that a failing
// function shows up as dropped records in seconds instead of blocking its
// shard silently for a day; pass -1 to reproduce Lambda's default.
func MaximumRetryAttempts(n int) Opt {
	return func(c *cfg) {
		if n < -1 || n > 10000 {
			c.invalid("MaximumRetryAttempts", n, "must be -1 (infinite) or 0..10000")
			return
		}
		c.maxRetries = n
	}
}

// BisectBatchOnFunctionError splits a batch in two when the function returns
// an error (or times out) and delivers the halves in order, recursively, so
// that a poison record is isolated. Splitting does not count as a retry.
// Default false (Lambda's default).
func BisectBatchOnFunctionError(on bool) Opt {
	return func(c *cfg) { c.bisect = on }
}

// ReportBatchItemFailures makes the mapping honour the batchItemFailures the
// function returns: it resumes from the lowest reported sequence number and
// redelivers that record and every later record of the batch.
//
// Lambda's default is off (FunctionResponseTypes empty: the response is
// ignored and a batch that did not return an error counts as a complete
// success). The default here is on, because the outbox's functions report item
// failures and their deployed mappings enable it; ignoring a reported failure
// would lose messages silently. Pass false to reproduce Lambda's default.
func ReportBatchItemFailures(on bool) Opt {
	return func(c *cfg) { c.reportFailures = on }
}

// MaximumRecordAge drops records older than d (by their
// ApproximateCreationDateTime) before each invocation attempt and sends them to
// OnFailure. Default: no limit (Lambda's -1). Lambda accepts 60s..7 days; any
// positive value is accepted here so tests need not wait a minute.
func MaximumRecordAge(d time.Duration) Opt {
	return func(c *cfg) {
		if d <= 0 {
			c.invalid("MaximumRecordAge", d, "must be positive; omit the option for no limit")
			return
		}
		c.maxAge = d
	}
}

// OnFailure is the failure destination: it is called, on the shard's
// goroutine before the shard moves on, with a description of every batch of
// records the mapping gives up on (retries exhausted, or too old). Default:
// none, the records are dropped and counted in Stats.RecordsDropped.
func OnFailure(f func(context.Context, FailureRecord)) Opt {
	return func(c *cfg) {
		if f == nil {
			c.invalid("OnFailure", "nil", "omit the option to drop failed records")
			return
		}
		c.onFailure = f
	}
}

// PollInterval is how long a shard reader waits after a GetRecords call that
// returned nothing. Default 250ms: Lambda polls DynamoDB Streams four times a
// second per shard. Must be positive.
func PollInterval(d time.Duration) Opt {
	return func(c *cfg) {
		if d <= 0 {
			c.invalid("PollInterval", d, "must be positive")
			return
		}
		c.pollInterval = d
	}
}

// DiscoveryInterval is how often DescribeStream is called to find new shards.
// A shard that ends also triggers a discovery at once, so children of a closed
// shard are found without waiting. Default 5s. Must be positive.
func DiscoveryInterval(d time.Duration) Opt {
	return func(c *cfg) {
		if d <= 0 {
			c.invalid("DiscoveryInterval", d, "must be positive")
			return
		}
		c.discovery = d
	}
}

// FunctionARN is the function's ARN, put in the Lambda context of every
// invocation and in failure records. Default
// arn:aws:lambda:<stream region>:000000000000:function:local.
func FunctionARN(arn string) Opt {
	return func(c *cfg) {
		if arn == "" {
			c.invalid("FunctionARN", `""`, "omit the option for the default")
			return
		}
		c.functionARN = arn
	}
}

// Logger receives the mapping's diagnostics (shard discovery, stream errors,
// retries, drops). Default: silent.
func Logger(l *slog.Logger) Opt {
	return func(c *cfg) {
		if l == nil {
			c.invalid("Logger", "nil", "omit the option to stay silent")
			return
		}
		c.logger = l
	}
}
