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

// Option configures New, NewConsumer and NewHandler: the package's one
// option type (docs/design.md, "Options"). Each option's comment says its
// default and which constructors it applies to; giving one to a constructor
// it does not apply to is an *outbox.OptionError naming it.
type Option func(*config)

// ConsumerOption is the former name of an Option for NewConsumer and
// NewHandler.
//
// Deprecated: use Option.
type ConsumerOption = Option

// The constructors an option applies to.
const (
	forInbox = 1 << iota
	forConsumer
	forHandler
	forConsumers = forConsumer | forHandler
)

// set runs change when the constructor being configured is one of to, and
// otherwise records option name as misplaced.
func (c *config) set(name string, to int, change func()) {
	if c.target != 0 && c.target&to == 0 {
		where := "inbox.New"
		if to&forInbox == 0 {
			where = "NewConsumer and NewHandler"
		}
		c.misplaced = append(c.misplaced, &outbox.OptionError{Option: name, Value: nil,
			Reason: "applies to " + where + " only; give it there"})
		return
	}
	change()
}

// apply applies opts for the constructor target.
func (c *config) apply(target int, opts []Option) error {
	c.target = target
	for _, o := range opts {
		if o == nil {
			return &outbox.OptionError{Option: "opts", Value: nil, Reason: "an option must not be nil"}
		}
		o(c)
	}
	if len(c.misplaced) > 0 {
		return c.misplaced[0]
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
	// stored: the outbox's config item (OutboxConfig); givenHeaders: what
	// Headers said, checked against it.
	stored       *outbox.Config
	givenHeaders outbox.HeaderNames
	// consumer holds the options of NewConsumer and NewHandler.
	consumer consumerConfig
	// target: the constructor being configured; misplaced: options given
	// to a constructor they do not apply to.
	target    int
	misplaced []error
}

func defaultConfig() config {
	return config{
		retention:   DefaultRetention,
		headers:     outbox.HeaderNames{}.WithDefaults(),
		maxAttempts: DefaultMaxAttempts,
		clock:       outbox.SystemClock,
		metrics:     noMetrics{},
		consumer:    defaultConsumerConfig(),
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
	return func(c *config) { c.set("InOrder", forInbox, func() { c.inOrder = true }) }
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
	return func(c *config) { c.set("Retention", forInbox, func() { c.retention = d }) }
}

// Headers names the stamped headers the inbox reads: the message id, bucket
// and sequence (empty names take their defaults). They must match the
// relay's (kafka.MessageIDHeader, BucketHeader, SequenceHeader). Default
// outbox.DefaultMessageIDHeader, DefaultBucketHeader, DefaultSequenceHeader.
func Headers(h outbox.HeaderNames) Option {
	return func(c *config) {
		c.set("Headers", forInbox, func() { c.headers, c.givenHeaders = h.WithDefaults(), h })
	}
}

// OutboxConfig gives the inbox the config item of the outbox its records
// come from (dynamo.ReadConfig, with read access to that outbox's control
// table), whose header names it then reads. A Headers name that differs
// from the stored one is an *outbox.MisconfigurationError naming it and
// both values; an equal one is fine. Default: none (Headers, or the
// default names, which must then match the outbox's by hand). inbox.New.
func OutboxConfig(stored outbox.Config) Option {
	return func(c *config) { c.set("OutboxConfig", forInbox, func() { c.stored = &stored }) }
}

// MaxAttempts is the most TransactWriteItems requests one Process sends,
// counting the first: retries of a lost or failed response (same client
// request token and items) and of a conflicting or throttled transaction
// (after a backoff). Process is the one layer that retries them: the
// client's retryer is switched off for these calls, whatever the client was
// configured with, as the writer does. Default DefaultMaxAttempts (6); 1..20.
func MaxAttempts(n int) Option {
	return func(c *config) { c.set("MaxAttempts", forInbox, func() { c.maxAttempts = n }) }
}

// WithClock sets the clock for TTLs and processing times. Default
// outbox.SystemClock.
func WithClock(clk outbox.Clock) Option {
	return func(c *config) { c.set("WithClock", forInbox, func() { c.clock = clk }) }
}

// WithTracer traces every Process as a consumer span ("process <topic>"),
// a child of the trace context the record carries (the writer's enqueue
// span, when the writer traces), so one trace runs from the writer to the
// consumer. Tx.Context carries the span. Default: none.
// github.com/dynakafka/outbox/otel provides an OpenTelemetry Tracer.
func WithTracer(t outbox.Tracer) Option {
	return func(c *config) { c.set("WithTracer", forInbox, func() { c.tracer = t }) }
}

// WithMetrics receives one call per Process. Default: none.
// github.com/dynakafka/outbox/otel provides an OpenTelemetry adapter.
func WithMetrics(m Metrics) Option {
	return func(c *config) { c.set("WithMetrics", forInbox, func() { c.metrics = m }) }
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
		var err error
		if _, c.headers, err = outbox.ResolveShared(*c.stored, 0, c.givenHeaders); err != nil {
			return err
		}
	}
	return c.headers.Check()
}
