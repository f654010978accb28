package kafka

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
)

// Defaults.
const (
	// DefaultLeaseDuration matches the relay's default bucket lease.
	DefaultLeaseDuration = 30 * time.Second

	// DefaultMetadataMinAge is the kgo MetadataMinAge the Publisher sets
	// (kgo's own default is 5s); ClientOptions(kgo.MetadataMinAge(d))
	// changes it. After a retriable produce error (NOT_LEADER,
	// NOT_ENOUGH_REPLICAS, ...) kgo retries the partition only after a
	// metadata refresh, at most once per MetadataMinAge, and that retry is
	// also when it notices a cancelled context or an expired
	// DeliveryTimeout. 1s keeps both within a second and recovery from a
	// leader change quick, for at most one metadata request per second per
	// client during an outage.
	DefaultMetadataMinAge = time.Second

	// batchLengthPrefix is what kgo counts in a record batch's size on top of
	// what the broker counts: the 4-byte length of the records field in the
	// produce request. Kafka measures a batch as 12 bytes (base offset and
	// batch length) plus the batch length; kgo's ProducerBatchMaxBytes bounds
	// the same bytes plus this prefix.
	batchLengthPrefix = 4

	// minMaxMessageBytes is the smallest MaxMessageBytes accepted: kgo refuses
	// a ProducerBatchMaxBytes below 512, and a message with its id header
	// needs about 200 bytes.
	minMaxMessageBytes = 512
	// maxMaxMessageBytes keeps ProducerBatchMaxBytes within kgo's default
	// BrokerMaxWriteBytes of 100 MiB (Kafka's socket.request.max.bytes).
	maxMaxMessageBytes = 100<<20 - batchLengthPrefix
)

// DefaultCompression is the compression preference used unless Compression
// is given: lz4, or none for a broker that does not support it.
//
// lz4 compresses about as fast as snappy (kgo's own default) with a better
// ratio on the JSON-like payloads an outbox typically carries, decompresses
// fastest of all codecs for consumers, and is supported by every broker since
// Kafka 0.10. zstd compresses better but costs several times the CPU per
// byte, which a relay running in a small Lambda pays on every batch; choose it
// with Compression when network or storage costs dominate.
func DefaultCompression() []kgo.CompressionCodec {
	return []kgo.CompressionCodec{kgo.Lz4Compression(), kgo.NoCompression()}
}

// Option configures a Publisher or a TxnPublisher. Every option states its
// default; NewPublisher validates the combination and returns an
// *outbox.OptionError naming the option (docs/design.md, "Options").
type Option func(*cfg)

type cfg struct {
	clientOpts      []kgo.Opt
	topics          []string
	maxMessageBytes int
	headers         outbox.HeaderNames
	tracer          outbox.Tracer
	compression     []kgo.CompressionCodec
	leaseDuration   time.Duration
	deliveryTimeout time.Duration // 0: derived from leaseDuration
	// deliveryTimeoutDefault: DeliveryTimeout was not given, so NewPublisher
	// may lower it to fit a short LeaseDuration (see NewPublisher).
	deliveryTimeoutDefault bool
	logger                 *slog.Logger
	tls                    *tls.Config
	tlsSet                 bool
	sasl                   []sasl.Mechanism
	strict                 bool
	strictRecheck          time.Duration
	// stored: the outbox's config item (OutboxConfig), whose
	// MaxMessageBytes and header names are maxMessageBytes and headers.
	stored *outbox.Config
}

func defaultCfg() cfg {
	return cfg{
		// Those of a config item that states none (takeShared).
		maxMessageBytes: outbox.DefaultMaxMessageBytes,
		headers:         outbox.HeaderNames{}.WithDefaults(),
		compression:     DefaultCompression(),
		leaseDuration:   DefaultLeaseDuration,
		strictRecheck:   DefaultStrictRecheck,
	}
}

// DefaultStrictRecheck is how often Strict mode re-reads a topic's
// max.message.bytes.
const DefaultStrictRecheck = 5 * time.Second

// Strict keeps a bucket's order through failures: no later record of a
// bucket becomes visible in Kafka before every earlier one was acknowledged
// (or parked by the relay). Default off. It does three things:
//
//  1. pre-flight size checks against each topic's current max.message.bytes
//     (re-read every DefaultStrictRecheck and after any failure), so a record
//     the topic would reject is never sent and nothing after it is produced;
//     a topic limit below MaxMessageBytes is then not a start-up error;
//  2. one produce request in flight per broker, so when Kafka rejects a
//     batch the batches queued behind it on that partition fail instead of
//     being written;
//  3. after any failure in a bucket, that bucket's records are produced one
//     at a time, each after the previous was acknowledged, until a whole
//     publish succeeds.
//
// The cost is throughput: see BenchmarkPublish in this package
// (docs/failures.md has the numbers).
func Strict() Option { return func(c *cfg) { c.strict = true } }

// ClientOptions passes options to the kgo client, for example kgo.ClientID,
// kgo.Rack, kgo.Dialer, kgo.ProducerLinger or kgo.MetadataMinAge (which the
// Publisher sets to DefaultMetadataMinAge unless given here).
//
// They are applied before the Publisher's own settings, which therefore win:
// the seed brokers, RecordPartitioner, ProducerBatchMaxBytes,
// RecordDeliveryTimeout (off; see DeliveryTimeout), ProducerBatchCompression
// and WithCompressor (see Compression), RequiredAcks, and, when WithLogger, TLS or SASL are given,
// kgo.WithLogger, DialTLSConfig and SASL. Options that would weaken delivery
// (DisableIdempotentWrite, RequiredAcks other than all,
// AllowIdempotentProduceCancellation, TransactionalID, ManualFlushing,
// DefaultProduceTopicAlways) make NewPublisher fail with a *DowngradeError.
// Default: none.
func ClientOptions(opts ...kgo.Opt) Option {
	return func(c *cfg) { c.clientOpts = append(c.clientOpts, opts...) }
}

// Topics lists topics to check at start: NewPublisher fails unless each
// exists and its max.message.bytes admits MaxMessageBytes. A topic not listed
// is checked the same way the first time a message for it is published, and
// a successful check is remembered for the life of the Publisher, until the
// broker says it does not know the topic (it was deleted): the topic is
// checked again then, and again at every publish until it exists, and a
// recreated topic is produced to without a restart. Default: none.
func Topics(topics ...string) Option {
	return func(c *cfg) { c.topics = append(c.topics, topics...) }
}

// OutboxConfig gives the publisher the outbox's config item (read with
// dynamo.ReadConfig, or a Store's Opened), whose shared settings it then
// uses: MaxMessageBytes, which bounds one message as a Kafka record (as
// measured by outbox.HeaderNames.RecordSize with the stamped headers,
// batch overhead included: a larger message is not produced and fails with
// a *RecordTooLargeError, and each topic's max.message.bytes must admit
// it), and the names of the stamped headers: the message id (consumers
// deduplicate on it), the bucket and the sequence number, stamped after
// the message's own headers. They are set nowhere else (docs/design.md
// §12). A Topics topic outside a non-empty stored topic list is an
// *outbox.MisconfigurationError naming it. The stored topics are not
// checked at start (a missing topic stops its buckets, not the publisher):
// list them with Topics for that. The relay refuses a publisher whose
// settings are not its config item's (CheckConfig). Default: none, which
// is the settings of a config item that states none:
// outbox.DefaultMaxMessageBytes (1 MiB, which Kafka's default topic limit
// admits) and the default header names.
func OutboxConfig(stored outbox.Config) Option {
	return func(c *cfg) { c.stored = &stored }
}

// WithTracer traces every Publish (one bucket's run, the relay's batch) as an
// "outbox publish" span, a child of the Publish context, linked to the trace
// context each message carries in its headers (written by the writer's
// tracer). Records keep the messages' headers, so consumers continue the
// writers' traces. Default: none. github.com/dynakafka/outbox/otel provides
// an OpenTelemetry Tracer.
func WithTracer(t outbox.Tracer) Option {
	return func(c *cfg) { c.tracer = t }
}

// Compression sets the record batch compression, in order of preference (the
// first one the broker supports is used). Default DefaultCompression(): lz4,
// then none. When the first is kgo.Lz4Compression() (the fastest level), the
// Publisher writes lz4 frames of 64 KiB blocks, as Kafka's Java producer
// does, instead of kgo's 4 MiB blocks, whose two buffers cost 8 MiB of
// memory per batch being compressed; any other choice is kgo's own
// compressor.
func Compression(codecs ...kgo.CompressionCodec) Option {
	return func(c *cfg) { c.compression = codecs }
}

// LeaseDuration is the relay's bucket lease duration: a Publish must not
// outlive the lease it runs under, so the client's record delivery timeout is
// kept below it (see DeliveryTimeout). It must equal the relay's
// LeaseDuration. Must be at least 1s. Default 30s (DefaultLeaseDuration).
func LeaseDuration(d time.Duration) Option {
	return func(c *cfg) { c.leaseDuration = d }
}

// DeliveryTimeout bounds how long, from the start of a Publish, a record may
// wait in the client without being written to a broker (for a leader, a
// producer id, a retry or buffer space) before it fails with an error that
// matches kgo.ErrRecordTimeout, as far as kgo fails waiting records (see
// Publisher.Publish). It is what kgo's RecordDeliveryTimeout does, but that
// one counts from the record timestamp (the message's CreatedAt, long past
// for a backlog), so the Publisher sets it as a deadline on the records'
// context instead. A record already written to a broker is not failed by
// it: Publish stops waiting for it AbandonGrace later (ErrAbandoned). It must
// be positive and shorter than LeaseDuration, leaving the relay time to
// record the acknowledged prefix before the lease expires; with kgo's
// MetadataMinAge (see DefaultMetadataMinAge) and twice AbandonGrace added
// (a publish waits that long for results and for a lost topic's check, see
// Publish) it must still be shorter.
// Default LeaseDuration*2/3 (20s with the default lease), lowered for a
// short lease to what fits beside MetadataMinAge and twice AbandonGrace
// (with one AbandonGrace to spare).
func DeliveryTimeout(d time.Duration) Option {
	return func(c *cfg) { c.deliveryTimeout = d }
}

// WithLogger sets the logger that receives the publisher's logs and the kgo
// client's (at the levels the handler enables). Default: nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *cfg) { c.logger = l }
}

// validate checks the options and fills in derived defaults.
func (c *cfg) validate() error {
	if err := c.takeShared(); err != nil {
		return err
	}
	if len(c.compression) == 0 {
		return &outbox.OptionError{Option: "Compression", Value: "none given",
			Reason: "name at least one codec, e.g. kgo.NoCompression(); omit the option for lz4"}
	}
	if c.leaseDuration < time.Second {
		return &outbox.OptionError{Option: "LeaseDuration", Value: c.leaseDuration,
			Reason: "must be at least 1s; set it to the relay's LeaseDuration"}
	}
	if c.deliveryTimeout == 0 {
		c.deliveryTimeout = c.leaseDuration * 2 / 3
		c.deliveryTimeoutDefault = true
	}
	if c.deliveryTimeout < 0 || c.deliveryTimeout >= c.leaseDuration {
		return &outbox.OptionError{Option: "DeliveryTimeout", Value: c.deliveryTimeout,
			Reason: fmt.Sprintf("must be positive and shorter than LeaseDuration=%v so a publish cannot outlive its lease; omit it for LeaseDuration*2/3", c.leaseDuration)}
	}
	for i, t := range c.topics {
		if err := outbox.ValidateTopic(t); err != nil {
			return &outbox.OptionError{Option: fmt.Sprintf("Topics[%d]", i), Value: t, Reason: err.Error()}
		}
	}
	if c.tlsSet && c.tls == nil {
		c.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	for i, m := range c.sasl {
		if m == nil {
			return &outbox.OptionError{Option: fmt.Sprintf("SASL[%d]", i), Value: nil, Reason: "mechanism is nil"}
		}
	}
	return nil
}

// takeShared takes the shared settings from the config item (OutboxConfig;
// without one, those of an item that states none) and checks that the
// publisher can work with them.
func (c *cfg) takeShared() error {
	stored := outbox.Config{}
	if c.stored != nil {
		stored = *c.stored
	}
	c.maxMessageBytes, c.headers = stored.SharedMaxMessageBytes(), stored.SharedHeaders()
	fix := "change the outbox's config item (outbox init on new tables, dynamo.Configure, the stack's MaxMessageBytes)"
	if c.maxMessageBytes < minMaxMessageBytes || c.maxMessageBytes > maxMaxMessageBytes {
		return &outbox.MisconfigurationError{Setting: "MaxMessageBytes", Configured: fmt.Sprintf("%d..%d (what the publisher supports)", minMaxMessageBytes, maxMaxMessageBytes),
			Stored: strconv.Itoa(c.maxMessageBytes), Fix: fix}
	}
	if err := c.headers.Check(); err != nil {
		return err
	}
	if smallest := c.headers.RecordSize(outbox.Message{}); smallest > c.maxMessageBytes {
		return &outbox.MisconfigurationError{Setting: "MaxMessageBytes", Configured: fmt.Sprintf("at least %d (an empty message with the stamped headers %q, %q, %q)", smallest, c.headers.MessageID, c.headers.Bucket, c.headers.Sequence),
			Stored: strconv.Itoa(c.maxMessageBytes), Fix: fix + ", or shorter header names"}
	}
	if c.stored == nil || len(c.stored.Topics) == 0 {
		return nil
	}
	for _, t := range c.topics {
		if !slices.Contains(c.stored.Topics, t) {
			return &outbox.MisconfigurationError{Setting: "Topics", Configured: t, Stored: strings.Join(c.stored.Topics, ","),
				Fix: "the outbox serves only the config item's topics: drop this one from Topics, or add it with outbox init --topics"}
		}
	}
	return nil
}

// CheckConfig implements outbox.ConfigChecker: it returns an
// *outbox.MisconfigurationError unless the publisher's MaxMessageBytes and
// stamped header names are stored's, the config item the relay runs on. A
// publisher built without OutboxConfig has the settings of an item that
// states none, and passes for such an item only.
func (p *Publisher) CheckConfig(stored outbox.Config) error {
	fix := "build the publisher with kafka.OutboxConfig and this outbox's config item (dynamo.ReadConfig, or the store's Opened)"
	if mb := stored.SharedMaxMessageBytes(); mb != p.cfg.maxMessageBytes {
		return &outbox.MisconfigurationError{Setting: "MaxMessageBytes", Configured: strconv.Itoa(p.cfg.maxMessageBytes), Stored: strconv.Itoa(mb), Fix: fix}
	}
	h := stored.SharedHeaders()
	for _, n := range []struct{ setting, mine, stored string }{
		{"MessageIDHeader", p.cfg.headers.MessageID, h.MessageID},
		{"BucketHeader", p.cfg.headers.Bucket, h.Bucket},
		{"SequenceHeader", p.cfg.headers.Sequence, h.Sequence},
	} {
		if n.mine != n.stored {
			return &outbox.MisconfigurationError{Setting: n.setting, Configured: strconv.Quote(n.mine), Stored: strconv.Quote(n.stored), Fix: fix}
		}
	}
	return nil
}

// batchMaxBytes is the kgo ProducerBatchMaxBytes for a MaxMessageBytes: kgo
// counts a 4-byte length prefix that Kafka's max.message.bytes does not, so
// this lets kgo build batches of exactly MaxMessageBytes as Kafka counts them.
// A topic whose max.message.bytes is at least MaxMessageBytes therefore never
// rejects a batch as too large, and a message within MaxMessageBytes always
// fits in a batch of its own.
func batchMaxBytes(maxMessageBytes int) int32 {
	return int32(maxMessageBytes + batchLengthPrefix)
}
