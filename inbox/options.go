package inbox

import (
	"fmt"
	"time"

	"github.com/dynakafka/outbox"
)

// DefaultRetention is how long a processed message id is remembered by
// default: 15 days, Kafka's default retention.ms (7 days) plus its default
// segment.ms (7 days: a record lives until its whole segment is older than
// retention.ms) plus a day for the relay's late duplicates. See Retention.
const DefaultRetention = 15 * 24 * time.Hour

// MinRetention is the shortest Retention accepted.
const MinRetention = time.Hour

// DefaultMaxAttempts is the default number of TransactWriteItems calls one
// Process makes at most.
const DefaultMaxAttempts = 6

// Option configures New, the Inbox. NewConsumer and NewHandler take their
// own kinds, ConsumerOption and HandlerOption: an option given to a
// constructor it does not serve does not compile (docs/design.md §11, after
// franz-go's kgo.ProducerOpt and kgo.ConsumerOpt). Each option's comment
// states its default.
type Option interface{ applyInbox(*config) }

// ConsumerOption configures NewConsumer: the Kafka client's options
// (ClientOptions, MaxPollRecords, Concurrency), and every HandlerOption.
type ConsumerOption interface{ applyConsumer(*consumerConfig) }

// HandlerOption configures NewHandler and NewConsumer both (a Consumer is a
// Handler with a Kafka client of its own): OnPoison, RecordRetries,
// WithLogger.
type HandlerOption interface {
	ConsumerOption
	handlerOption()
}

type (
	inboxOpt    func(*config)
	consumerOpt func(*consumerConfig)
	handlerOpt  func(*consumerConfig)
)

func (o inboxOpt) applyInbox(c *config)               { o(c) }
func (o consumerOpt) applyConsumer(c *consumerConfig) { o(c) }
func (o handlerOpt) applyConsumer(c *consumerConfig)  { o(c) }
func (handlerOpt) handlerOption()                     {}

// errNilOption is a nil option given to a constructor.
var errNilOption = &outbox.OptionError{Option: "opts", Value: nil, Reason: "an option must not be nil"}

// applyConsumer applies opts, which are ConsumerOptions or HandlerOptions,
// to c.
func applyConsumer[O ConsumerOption](c *consumerConfig, opts []O) error {
	for _, o := range opts {
		if ConsumerOption(o) == nil {
			return errNilOption
		}
		o.applyConsumer(c)
	}
	return nil
}

type config struct {
	inOrder     bool
	retention   time.Duration
	headers     outbox.HeaderNames
	maxAttempts int
	clock       outbox.Clock
	tracer      outbox.Tracer
	metrics     Metrics
	// stored: the outbox's config item (OutboxConfig), whose header
	// names are headers.
	stored *outbox.Config
}

func defaultConfig() config {
	return config{
		retention:   DefaultRetention,
		headers:     outbox.HeaderNames{}.WithDefaults(),
		maxAttempts: DefaultMaxAttempts,
		clock:       outbox.SystemClock,
		metrics:     noMetrics{},
	}
}

// InOrder turns on in-order mode: besides the message id, the inbox keeps,
// per (topic, partition, bucket), the highest sequence number applied, in
// the same transaction, and skips (Stale) a record whose sequence is not
// above it, so a stale copy arriving after a newer record is dropped rather
// than applied out of order. Sequence gaps are legal (fences, parked
// messages, the bucket's messages on other topics) and reported as
// Result.Gap. It needs every record of a topic to come from one outbox (one
// messages table): two outboxes number their buckets independently. Records
// without the bucket and sequence headers are deduplicated by id only.
// Default off (id-only mode). docs/inbox.md states what each mode guarantees.
func InOrder() Option {
	return inboxOpt(func(c *config) { c.inOrder = true })
}

// Retention is how long a processed message id is remembered (the id item's
// TTL). A copy of a message arriving later than this after the message was
// processed is applied again (in id-only mode; in-order mode skips it by its
// sequence). Size it to the longest time Kafka can deliver a copy again:
// the topic's retention.ms plus its segment.ms (a consumer group that resets
// to the earliest offset reads everything still stored), plus margin.
// Default DefaultRetention (15 days); at least MinRetention. Storage is the
// only cost: about 150 bytes per message id for the whole window.
func Retention(d time.Duration) Option {
	return inboxOpt(func(c *config) { c.retention = d })
}

// OutboxConfig gives the inbox the config item of the outbox its records
// come from (dynamo.ReadConfig, with read access to that outbox's control
// table), whose names of the stamped headers (message id, bucket, sequence)
// it then reads records with. They are set nowhere else (docs/design.md
// §12). Default: none, which is the names of a config item that states
// none: outbox.DefaultMessageIDHeader, DefaultBucketHeader and
// DefaultSequenceHeader.
func OutboxConfig(stored outbox.Config) Option {
	return inboxOpt(func(c *config) { c.stored = &stored })
}

// MaxAttempts is the most TransactWriteItems requests one Process sends,
// counting the first: retries of a lost or failed response (same client
// request token and items) and of a conflicting or throttled transaction
// (after a backoff). Process is the one layer that retries them: the
// client's retryer is switched off for these calls, whatever the client was
// configured with, as the writer does. Default DefaultMaxAttempts (6); 1..20.
func MaxAttempts(n int) Option {
	return inboxOpt(func(c *config) { c.maxAttempts = n })
}

// WithClock sets the clock for TTLs and processing times. Default
// outbox.SystemClock.
func WithClock(clk outbox.Clock) Option {
	return inboxOpt(func(c *config) { c.clock = clk })
}

// WithTracer traces every Process as a consumer span ("process <topic>"),
// a child of the trace context the record carries (the writer's enqueue
// span, when the writer traces), so one trace runs from the writer to the
// consumer. Tx.Context carries the span. Default: none.
// github.com/dynakafka/outbox/otel provides an OpenTelemetry Tracer.
func WithTracer(t outbox.Tracer) Option {
	return inboxOpt(func(c *config) { c.tracer = t })
}

// WithMetrics receives one call per Process. Default: none.
// github.com/dynakafka/outbox/otel provides an OpenTelemetry adapter.
func WithMetrics(m Metrics) Option {
	return inboxOpt(func(c *config) { c.metrics = m })
}

// Metrics receives the outcome of every Process: its Result (Status, Gap,
// Attempts, Duration) and error. Implementations must be fast and safe for
// concurrent use.
type Metrics interface {
	Processed(Result, error)
}

type noMetrics struct{}

func (noMetrics) Processed(Result, error) {}

func (c *config) validate() error {
	bad := func(opt string, v any, why string) error {
		return &outbox.OptionError{Option: opt, Value: v, Reason: why}
	}
	switch {
	case c.retention < MinRetention:
		return bad("Retention", c.retention, fmt.Sprintf("must be at least %v; size it to the topic's retention.ms plus segment.ms (default %v)", MinRetention, DefaultRetention))
	case c.maxAttempts < 1 || c.maxAttempts > 20:
		return bad("MaxAttempts", c.maxAttempts, "must be 1..20")
	case c.clock == nil:
		return bad("WithClock", nil, "must not be nil")
	case c.metrics == nil:
		return bad("WithMetrics", nil, "must not be nil")
	}
	if c.stored != nil {
		c.headers = c.stored.SharedHeaders()
	}
	return c.headers.Check()
}
