package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Publisher produces outbox messages to Kafka. It implements
// outbox.Publisher and is safe for concurrent use: the relay drains several
// buckets at once through one Publisher (one client, one set of connections,
// one producer id).
type Publisher struct {
	// cl is the first client: Publish produces through it until a topic
	// is lost (see lostTopic), and topic checks and Ping use it for the
	// Publisher's life.
	cl     *kgo.Client
	cfg    cfg
	log    *slog.Logger
	topics *topicChecker
	closed atomic.Bool

	// prod is the client Publish produces through: cl, or the client that
	// replaced it (see replace). prodMu serializes replacements with
	// Close; retired holds the replaced clients not yet closed.
	prod    atomic.Pointer[prodClient]
	prodMu  sync.Mutex
	retired map[*prodClient]bool
	// kopts built cl; PublishAlone builds its own client from them (see
	// isolation), and so does replace.
	kopts []kgo.Opt
	iso   isolation

	// Strict mode: buckets whose last publish failed, produced one record
	// at a time until a publish succeeds.
	carefulMu sync.Mutex
	careful   map[int]bool

	// testLostTopic, set by tests, runs in lostTopic before the topic is
	// checked again (a slow check).
	testLostTopic func(topic string)
}

var (
	_ outbox.Publisher     = (*Publisher)(nil)
	_ outbox.Isolator      = (*Publisher)(nil)
	_ outbox.ConfigChecker = (*Publisher)(nil)
)

// NewPublisher validates the options, builds the kgo client for seeds (host:port
// of one or more brokers) and, when Topics is given, checks those topics (see
// Topics), which is the only broker I/O it does. Configuration errors are an
// *outbox.OptionError or a *DowngradeError; topic check failures are a
// *TopicError or *TopicLimitError per topic (joined).
func NewPublisher(ctx context.Context, seeds []string, opts ...Option) (*Publisher, error) {
	c := defaultCfg()
	for _, o := range opts {
		o(&c)
	}
	if len(seeds) == 0 {
		return nil, &outbox.OptionError{Option: "seeds", Value: "[]", Reason: "give at least one broker as host:port"}
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if err := checkClientOptions(seeds, c.clientOpts); err != nil {
		return nil, err
	}

	log := c.logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kopts := clientOptions(seeds, &c)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: new client: %w", err)
	}
	if err := fitDeliveryTimeout(cl, &c); err != nil {
		cl.Close()
		return nil, err
	}

	p := &Publisher{
		cl:      cl,
		cfg:     c,
		log:     log,
		topics:  newTopicChecker(cl, c.maxMessageBytes),
		careful: make(map[int]bool),
		kopts:   kopts,
		iso:     newIsolation(),
		retired: make(map[*prodClient]bool),
	}
	p.prod.Store(&prodClient{cl: cl, keep: true})
	if c.strict {
		p.topics.strict, p.topics.maxAge = true, c.strictRecheck
	}
	if err := p.checkTopics(ctx, c.topics); err != nil {
		cl.Close()
		return nil, err
	}
	log.Debug("kafka publisher ready", "seeds", seeds, "topics", c.topics,
		"max_message_bytes", c.maxMessageBytes, "delivery_timeout", c.deliveryTimeout)
	return p, nil
}

// clientOptions are the kgo options of the Publisher's clients: kgo's
// defaults as the Publisher sets them, then ClientOptions, then the
// connection options, then the enforced ones.
func clientOptions(seeds []string, c *cfg) []kgo.Opt {
	// Defaults first, so that ClientOptions can change them.
	kopts := []kgo.Opt{kgo.MetadataMinAge(DefaultMetadataMinAge)}
	kopts = append(kopts, c.clientOpts...)
	kopts = append(kopts, kgo.SeedBrokers(seeds...))
	if c.logger != nil {
		kopts = append(kopts, kgo.WithLogger(kgoLogger{c.logger}))
	}
	if c.tls != nil {
		kopts = append(kopts, kgo.DialTLSConfig(c.tls))
	}
	if len(c.sasl) > 0 {
		kopts = append(kopts, kgo.SASL(c.sasl...))
	}
	// Enforced last so that nothing in ClientOptions overrides them.
	return append(kopts, enforcedOpts(c)...)
}

// fitDeliveryTimeout fits the default DeliveryTimeout into a short lease
// and refuses a DeliveryTimeout that does not fit LeaseDuration with the
// client's MetadataMinAge, or a client that is not idempotent with
// acks=all.
func fitDeliveryTimeout(cl *kgo.Client, c *cfg) error {
	// A record waiting on a retriable error is looked at again (and failed
	// if its context is done) only when kgo retries it, after a metadata
	// refresh, which kgo does at most once per MetadataMinAge; a publish
	// then waits up to AbandonGrace for the results and, when the topic
	// may be lost, up to AbandonGrace more for its check (lostTopic).
	minAge, _ := cl.OptValue(kgo.MetadataMinAge).(time.Duration)
	if fits := c.leaseDuration - minAge - 3*AbandonGrace; c.deliveryTimeoutDefault && fits > 0 && c.deliveryTimeout > fits &&
		c.deliveryTimeout+minAge < c.leaseDuration {
		// The default (LeaseDuration*2/3) leaves a short lease no room for
		// the results' and the lost topic's waits: take what does. (A
		// MetadataMinAge that leaves no room even without them is refused.)
		c.deliveryTimeout = fits
	}
	if c.deliveryTimeout+minAge+2*AbandonGrace >= c.leaseDuration {
		return &outbox.OptionError{Option: "DeliveryTimeout", Value: c.deliveryTimeout,
			Reason: fmt.Sprintf("plus kgo's MetadataMinAge (%v, the longest a waiting record goes unchecked) plus twice AbandonGrace (%v, the wait for results and for a lost topic's check) must be shorter than LeaseDuration=%v; lower either", minAge, AbandonGrace, c.leaseDuration)}
	}
	// checkClientOptions refused any downgrade and kgo has no option that
	// could re-enable one after ours, but verify what the client will do.
	if cl.OptValue(kgo.DisableIdempotentWrite) != false || cl.OptValue(kgo.RequiredAcks) != kgo.AllISRAcks() {
		return errors.New("kafka: internal error: the client is not idempotent with acks=all")
	}
	return nil
}

// checkTopics checks topics (the Topics option) at construction: the
// failures, one per topic in the order given, joined.
func (p *Publisher) checkTopics(ctx context.Context, topics []string) error {
	if len(topics) == 0 {
		return nil
	}
	failed := p.topics.check(ctx, topics)
	if len(failed) == 0 {
		return nil
	}
	var errs []error
	seen := make(map[string]bool)
	for _, t := range topics {
		if err, ok := failed[t]; ok && !seen[t] {
			seen[t] = true
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// enforcedOpts are the kgo settings the Publisher applies after everything
// else. Idempotence has no kgo option to turn it on (it is on unless
// disabled), so checkClientOptions refuses its opt-out instead.
func enforcedOpts(c *cfg) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(newPartitioner()),
		kgo.ProducerBatchMaxBytes(batchMaxBytes(c.maxMessageBytes)),
		// kgo measures RecordDeliveryTimeout from the record's timestamp,
		// which is the message's CreatedAt and may be long past for a
		// backlog: it would fail old messages before sending them.
		// Publish bounds delivery with a deadline on the records' context
		// instead (see DeliveryTimeout), so this stays off.
		kgo.RecordDeliveryTimeout(0),
	}
	opts = append(opts, compressorOpts(c.compression)...)
	if c.strict {
		opts = append(opts, kgo.MaxProduceRequestsInflightPerBroker(1))
	}
	return opts
}

// checkClientOptions refuses kgo options that would weaken delivery. It
// builds a throwaway client from them alone to read their values (kgo options
// are opaque; NewClient does no I/O).
func checkClientOptions(seeds []string, user []kgo.Opt) error {
	if len(user) == 0 {
		return nil
	}
	base := append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, user...)
	probe, err := kgo.NewClient(base...)
	if err != nil {
		// kgo refuses acks other than all while idempotence is on: read
		// the acks with idempotence off to report them as a downgrade.
		if p2, err2 := kgo.NewClient(append(base, kgo.DisableIdempotentWrite())...); err2 == nil {
			acks := p2.OptValue(kgo.RequiredAcks)
			p2.Close()
			if acks != kgo.AllISRAcks() {
				return &DowngradeError{Option: "kgo.RequiredAcks", Value: acksString(acks),
					Reason: "the relay deletes a message once Kafka acknowledges it, so every in-sync replica must have it (acks=all); remove the option"}
			}
		}
		return fmt.Errorf("kafka: ClientOptions: %w", err)
	}
	defer probe.Close()
	switch {
	case probe.OptValue(kgo.DisableIdempotentWrite) == true:
		return &DowngradeError{Option: "kgo.DisableIdempotentWrite", Value: "idempotent writes off",
			Reason: "without idempotence a retried batch can be written twice or reordered within a partition; remove the option (on Kafka before 3.0 grant IdempotentWrite on the cluster)"}
	case probe.OptValue(kgo.RequiredAcks) != kgo.AllISRAcks():
		return &DowngradeError{Option: "kgo.RequiredAcks", Value: acksString(probe.OptValue(kgo.RequiredAcks)),
			Reason: "the relay deletes a message once Kafka acknowledges it, so every in-sync replica must have it (acks=all); remove the option"}
	case probe.OptValue(kgo.AllowIdempotentProduceCancellation) == true:
		return &DowngradeError{Option: "kgo.AllowIdempotentProduceCancellation", Value: "cancellation of in-flight records",
			Reason: "kgo would fail in-flight records, other buckets' sharing their partition included, with a plain context error although Kafka may still write them, and reset the producer epoch each time; Publish already stops waiting for unanswered records (ErrAbandoned) while the client keeps them in their partition's order; remove the option"}
	case probe.OptValue(kgo.TransactionalID) != "":
		return &DowngradeError{Option: "kgo.TransactionalID", Value: fmt.Sprint(probe.OptValue(kgo.TransactionalID)),
			Reason: "the publisher is not transactional (a transactional client fails records produced outside a transaction); remove the option"}
	case probe.OptValue(kgo.ManualFlushing) == true:
		return &DowngradeError{Option: "kgo.ManualFlushing", Value: "manual flushing",
			Reason: "Publish waits for records that the client would never send without Flush; remove the option"}
	case probe.OptValue(kgo.DefaultProduceTopicAlways) == true:
		return &DowngradeError{Option: "kgo.DefaultProduceTopicAlways", Value: "one topic for every record",
			Reason: "every message names its own topic; remove the option"}
	}
	return nil
}

func acksString(v any) string {
	switch v {
	case kgo.NoAck():
		return "acks=0"
	case kgo.LeaderAck():
		return "acks=1"
	case kgo.AllISRAcks():
		return "acks=all"
	}
	return fmt.Sprint(v)
}

// AbandonGrace is how long Publish and PublishAlone keep waiting for results
// once their context is done (or DeliveryTimeout has passed) before they
// return without them. kgo fails the records it can still fail (see
// Publisher.Publish) moments after the context ends, and an answer already on
// its way is worth taking: a record reported acknowledged is not published
// again. A record still without a result after the grace is abandoned
// (ErrAbandoned). The relay keeps min(DeadlineMargin/2, 1s) between the end
// of its work and its caller's deadline for releasing its leases; this grace
// must stay well inside it.
const AbandonGrace = 200 * time.Millisecond

// Publish produces msgs (one bucket's run, in sequence order) and returns how
// many of them, counted from the front, Kafka acknowledged, and the first error
// in message order as an *outbox.PublishError (its Err is a *ProduceError,
// *RecordTooLargeError, *outbox.ValidationError, *TopicError,
// *TopicLimitError, or a context error; see IsRetriable).
//
// Messages are checked before anything is produced; the run is cut before the
// first message that fails a check, so that message and the ones after it are
// not produced. Every other record is started before Publish waits; records
// on the same partition keep their order.
//
// Publish returns at the latest AbandonGrace after ctx is done or
// DeliveryTimeout has passed, whatever the brokers do (twice that after
// DeliveryTimeout when a record failed for its topic, unknown to the broker
// or not taken in time, and Publish looks at the topic again: a deleted
// topic is reported as a *TopicError, Fatal). Records started but
// still without a result then are abandoned: reported as not acknowledged,
// with an error matching ErrAbandoned and the context's error (or
// kgo.ErrRecordTimeout), although Kafka may still write them — a duplicate
// once they are published again, which consumers drop by the message-id
// header. Nothing is reported acknowledged that Kafka did not acknowledge.
// The client stays usable: an abandoned record stays in kgo until the broker
// answers, and later records of its partition queue behind it in order.
//
// Abandoned records, and records of this Publish that kgo had not yet
// written when ctx ended, can be written later: kgo consults a record's
// context only while the record heads its partition's oldest batch and that
// batch is not in flight, and then fails every record buffered for the
// partition, other Publish calls' included (they see
// ErrSharedBatchCancelled). A record in flight, one behind another Publish's
// record in its batch, and one in a batch sent behind a batch in flight are
// not failed by their own context. The package documentation ("Cancellation
// and the lease") has the details. The client is shared by concurrent
// Publish calls, so Publish does not use kgo's AbortBufferedRecords (it
// would abort every bucket's records).
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) (acked int, err error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	pc := p.acquire()
	defer p.release(pc)
	return p.publish(ctx, pc, msgs, false)
}

// publish produces msgs through pc. alone: PublishAlone's single message,
// through the isolation client, which leaves Strict mode's per-bucket state
// alone.
func (p *Publisher) publish(ctx context.Context, pc *prodClient, msgs []outbox.Message, alone bool) (acked int, err error) {
	if p.closed.Load() {
		return 0, wrapMessage(msgs[0], ErrClosed)
	}
	if p.cfg.tracer != nil {
		var end func(error)
		ctx, end = p.cfg.tracer.Start(ctx, "outbox publish", publishSpan(msgs))
		defer func() { end(err) }()
	}

	n, stopErr := p.precheck(ctx, msgs)

	// The records' context: ctx, plus DeliveryTimeout, which is what
	// RecordDeliveryTimeout would do but measured from now rather than from
	// the record timestamp. kgo fails waiting records by it as far as it
	// consults record contexts (see Publish); cancel ends the context when
	// Publish returns, so abandoned records that kgo can still fail do not
	// linger.
	rctx, cancel := context.WithTimeout(ctx, p.cfg.deliveryTimeout)
	defer cancel()
	bucket := msgs[0].Bucket
	careful := false
	if p.cfg.strict && !alone {
		p.carefulMu.Lock()
		careful = p.careful[bucket]
		p.carefulMu.Unlock()
	}
	recs, res, n, stopErr := p.produce(ctx, rctx, pc, msgs, n, stopErr, careful)

	acked, abandoned, failed := res.outcome(n)
	switch {
	case acked < n:
		perr := p.abandonedError(ctx, rctx, &msgs[acked])
		if failed != nil {
			perr = p.produceError(ctx, rctx, recs[acked], failed)
		}
		terr, lost := p.lostTopic(ctx, msgs[acked].Topic, perr)
		if lost {
			p.replace(pc, alone, msgs[acked].Topic)
		}
		if terr != nil {
			perr = terr
		}
		err = wrapMessage(msgs[acked], perr)
	case stopErr != nil:
		err = wrapMessage(msgs[n], stopErr)
	}
	if p.cfg.strict {
		if !alone {
			p.carefulMu.Lock()
			if err != nil {
				p.careful[bucket] = true
			} else {
				delete(p.careful, bucket)
			}
			p.carefulMu.Unlock()
		}
		if err != nil && acked < len(msgs) {
			p.topics.forget(msgs[acked].Topic) // re-read its limit before the next publish
		}
	}
	if err != nil {
		p.log.Debug("kafka publish stopped", "bucket", msgs[0].Bucket, "messages", len(msgs), "alone", alone,
			"produced", n, "acked", acked, "abandoned", abandoned, "unanswered_in_client", pc.unanswered.Load(), "err", err)
	}
	return acked, err
}

// produce produces the first n of msgs through pc and waits for their
// results (see AbandonGrace). careful (Strict mode, after a failure):
// one record at a time, the next produced only once this one is
// acknowledged. It returns how many it produced, n less when rctx ended
// first (stopErr then says so) or a careful record failed or was not
// answered.
func (p *Publisher) produce(ctx, rctx context.Context, pc *prodClient, msgs []outbox.Message, n int, stopErr error, careful bool) ([]*kgo.Record, *results, int, error) {
	recs := make([]*kgo.Record, n)
	res := newResults(n)
	gaveUp := false // a wait ended without the result (see AbandonGrace)
	for i := range n {
		if err := rctx.Err(); err != nil {
			n, stopErr = i, fmt.Errorf("kafka: not produced: %w", p.contextError(ctx, rctx, err))
			break
		}
		recs[i] = p.record(rctx, &msgs[i])
		pc.unanswered.Add(1)
		pc.cl.Produce(rctx, recs[i], func(_ *kgo.Record, err error) {
			res.set(i, err)
			if pc.unanswered.Add(-1) == 0 {
				p.closeIfDone(pc)
			}
		})
		if careful {
			// After a failure, one record at a time: the next is produced
			// only once this one is acknowledged.
			if !res.wait(rctx, func() bool { return res.done[i] }) {
				n, gaveUp = i+1, true
				break
			}
			if res.get(i) != nil {
				n = i + 1
				break
			}
		}
	}
	if !gaveUp {
		res.wait(rctx, func() bool { return res.answered == n })
	}
	return recs, res, n, stopErr
}

// results collects what kgo reports for the records of one publish. kgo may
// report an abandoned record after the publish returned, so results are
// shared with the callbacks under a lock rather than owned by the publish.
type results struct {
	mu       sync.Mutex
	errs     []error
	done     []bool
	answered int
	changed  chan struct{} // closed and replaced on every result
}

func newResults(n int) *results {
	return &results{errs: make([]error, n), done: make([]bool, n), changed: make(chan struct{})}
}

func (r *results) set(i int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs[i], r.done[i] = err, true
	r.answered++
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *results) get(i int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs[i]
}

// wait waits until ready (called under the lock) holds, or until
// AbandonGrace after ctx is done, and reports whether ready held.
func (r *results) wait(ctx context.Context, ready func() bool) bool {
	done := ctx.Done()
	var grace <-chan time.Time
	for {
		r.mu.Lock()
		ok, changed := ready(), r.changed
		r.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-done:
			done = nil
			t := time.NewTimer(AbandonGrace)
			defer t.Stop()
			grace = t.C
		case <-grace:
			return false
		}
	}
}

// outcome returns, for the first n records, the acknowledged prefix, how
// many records have no result, and the error of the record after the prefix
// (nil when that record has no result: it is abandoned).
func (r *results) outcome(n int) (acked, abandoned int, failed error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for acked < n && r.done[acked] && r.errs[acked] == nil {
		acked++
	}
	if acked < n {
		failed = r.errs[acked]
	}
	for i := range n {
		if !r.done[i] {
			abandoned++
		}
	}
	return acked, abandoned, failed
}

// publishSpan describes the span of one Publish: the relay's batch of one
// bucket, linked to the trace context each message carries.
func publishSpan(msgs []outbox.Message) outbox.SpanStart {
	links := make([][]outbox.Header, len(msgs))
	for i := range msgs {
		links[i] = msgs[i].Headers
	}
	attrs := []slog.Attr{
		slog.String("messaging.system", "kafka"),
		slog.Int("messaging.batch.message_count", len(msgs)),
		slog.Int("outbox.bucket", msgs[0].Bucket),
		slog.Int64("outbox.sequence.first", msgs[0].Sequence),
		slog.Int64("outbox.sequence.last", msgs[len(msgs)-1].Sequence),
	}
	if !slices.ContainsFunc(msgs, func(m outbox.Message) bool { return m.Topic != msgs[0].Topic }) {
		attrs = append(attrs, slog.String("messaging.destination.name", msgs[0].Topic))
	}
	return outbox.SpanStart{Kind: outbox.SpanProducer, Links: links, Attributes: attrs}
}

// precheck returns how many messages, from the front, may be produced, and the
// error of the first one that may not.
func (p *Publisher) precheck(ctx context.Context, msgs []outbox.Message) (int, error) {
	n, stopErr := len(msgs), error(nil)
	for i := range msgs {
		if err := p.validate(&msgs[i], i); err != nil {
			n, stopErr = i, err
			break
		}
	}
	var topics []string
	seen := make(map[string]bool)
	for i := range n {
		if t := msgs[i].Topic; !seen[t] {
			seen[t] = true
			topics = append(topics, t)
		}
	}
	if len(topics) == 0 {
		return n, stopErr
	}
	failed := p.topics.check(ctx, topics)
	for i := range n {
		if err, ok := failed[msgs[i].Topic]; ok {
			return i, err
		}
		if p.cfg.strict {
			// Pre-flight: the record, alone in a batch, within the topic's
			// current limit.
			if lim := p.topics.limitOf(msgs[i].Topic); lim > 0 {
				if size := p.cfg.headers.RecordSize(msgs[i]); size > lim {
					return i, &RecordTooLargeError{Size: size, MaxMessageBytes: lim, Topic: msgs[i].Topic}
				}
			}
		}
	}
	return n, stopErr
}

// validate checks what Kafka would reject or what would defeat consumers'
// deduplication. Writers check the same, but the relay may read messages
// written by a writer configured differently.
func (p *Publisher) validate(m *outbox.Message, i int) error {
	if m.ID == "" {
		return &outbox.ValidationError{Index: i, Field: "ID", Reason: "empty; consumers deduplicate on the message id, so every message needs one"}
	}
	if size := p.cfg.headers.RecordSize(*m); size > p.cfg.maxMessageBytes {
		return &RecordTooLargeError{Size: size, MaxMessageBytes: p.cfg.maxMessageBytes}
	}
	return p.cfg.headers.Validate(*m, i, p.cfg.maxMessageBytes)
}

// record converts m to a kgo record: the message's headers then the stamped
// headers (message id, bucket, sequence), the creation time as the record
// timestamp, and the explicit partition (if any) for the partitioner.
func (p *Publisher) record(ctx context.Context, m *outbox.Message) *kgo.Record {
	headers := make([]kgo.RecordHeader, 0, len(m.Headers)+3)
	for _, h := range m.Headers {
		headers = append(headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	headers = append(headers,
		kgo.RecordHeader{Key: p.cfg.headers.MessageID, Value: []byte(m.ID)},
		kgo.RecordHeader{Key: p.cfg.headers.Bucket, Value: strconv.AppendInt(nil, int64(m.Bucket), 10)},
		kgo.RecordHeader{Key: p.cfg.headers.Sequence, Value: strconv.AppendInt(nil, m.Sequence, 10)})
	partition := int32(noPartition)
	if m.Partition != nil {
		partition = *m.Partition
	}
	return &kgo.Record{
		Topic:     m.Topic,
		Key:       m.Key,
		Value:     m.Value,
		Headers:   headers,
		Timestamp: m.CreatedAt, // zero: kgo stamps the produce time
		Partition: partition,
		Context:   ctx,
	}
}

// produceError translates what kgo reported for r.
func (p *Publisher) produceError(ctx, rctx context.Context, r *kgo.Record, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		err = p.contextError(ctx, rctx, err)
	}
	if errors.Is(err, kgo.ErrClientClosed) && p.closed.Load() {
		err = fmt.Errorf("%w: %w", ErrClosed, err)
	}
	partition := r.Partition
	if partition < 0 {
		partition = -1
	}
	return &ProduceError{Topic: r.Topic, Partition: partition, Err: err}
}

// lostTopic looks again at topic, whose record failed with err (as
// produceError translated it), when err says the broker does not know the
// topic (UNKNOWN_TOPIC_OR_PARTITION, or UNKNOWN_TOPIC_ID: produce v13 names
// topics by id) or the record was not delivered within DeliveryTimeout
// (kgo.ErrRecordTimeout: kgo may still be waiting for the topic to appear).
// The topic passed its check earlier, which is kept for the Publisher's
// life, so it may have been deleted, or deleted and created again. The
// check is forgotten and made again, with requests of its own rather than
// kgo's cache, within AbandonGrace and only while ctx lasts. A topic gone
// (or that can no longer be described) returns its *TopicError, Fatal: the
// relay stops the bucket with this reason instead of retrying a message
// that cannot be written until someone acts, and every later Publish fails
// its check until the topic exists again. lost reports that the client
// that failed the record must not produce to the topic again: kgo keeps
// producing to the first instance of a topic it knows and fails a
// recreated one's records with UNKNOWN_TOPIC_ID for the client's life
// (franz-go's README, "Topic recreation"), so on a topic found gone, or
// refused under a new id, the publisher replaces that client (see replace)
// and the next Publish produces to the topic's current instance. A topic
// found present otherwise (metadata settling, a slow partition) is left
// alone and err stands (terr nil), as it does when the check cannot tell.
func (p *Publisher) lostTopic(ctx context.Context, topic string, err error) (terr error, lost bool) {
	recreated := errors.Is(err, kerr.UnknownTopicID)
	if !recreated && !errors.Is(err, kerr.UnknownTopicOrPartition) && !errors.Is(err, kgo.ErrRecordTimeout) || ctx.Err() != nil {
		return nil, recreated
	}
	if p.testLostTopic != nil {
		p.testLostTopic(topic)
	}
	cctx, cancel := context.WithTimeout(ctx, AbandonGrace)
	defer cancel()
	p.topics.forget(topic)
	var te *TopicError
	if cerr := p.topics.check(cctx, []string{topic})[topic]; errors.As(cerr, &te) {
		gone := errors.Is(te.Err, kerr.UnknownTopicOrPartition)
		p.log.Warn("kafka: a topic the publisher produced to failed its check again", "topic", topic,
			"produce_err", err, "exists", !gone, "err", cerr)
		return cerr, gone || recreated
	}
	return nil, recreated
}

// prodClient is a kgo client that Publish produces through, with the count
// of its records kgo has not reported yet (abandoned ones included) and of
// the Publish calls using it.
type prodClient struct {
	cl         *kgo.Client
	unanswered atomic.Int64
	users      atomic.Int64
	retired    atomic.Bool
	keep       bool // Publisher.cl: closed only by Close
	closeOnce  sync.Once
}

// acquire returns the client Publish produces through, counted as used
// until release.
func (p *Publisher) acquire() *prodClient {
	for {
		pc := p.prod.Load()
		pc.users.Add(1)
		if !pc.retired.Load() {
			return pc
		}
		p.release(pc) // replaced meanwhile: take its successor
	}
}

func (p *Publisher) release(pc *prodClient) {
	if pc.users.Add(-1) == 0 {
		p.closeIfDone(pc)
	}
}

// closeIfDone closes a replaced client once nothing uses it and kgo has
// reported every record produced through it.
func (p *Publisher) closeIfDone(pc *prodClient) {
	if !pc.retired.Load() || pc.users.Load() != 0 || pc.unanswered.Load() != 0 {
		return
	}
	p.prodMu.Lock()
	delete(p.retired, pc)
	p.prodMu.Unlock()
	go pc.close() // not from kgo's callback, which Close would wait for
}

// close closes pc's client once, unless it is Publisher.cl.
func (pc *prodClient) close() {
	pc.closeOnce.Do(func() {
		if !pc.keep {
			pc.cl.Close()
		}
	})
}

// replace makes the next Publish calls produce through a new client when pc
// lost topic (see lostTopic), instead of purging the topic from pc.
//
// Purging is not safe on a client shared by concurrent Publish calls: kgo's
// PurgeTopicsFromClient fails every record buffered for the topic, other
// buckets' in flight included (the broker may still write them), and drops
// the partitions' idempotent sequence numbers while the producer id and
// epoch stay. A purge that comes after the client already produced to the
// topic's new instance (another Publish's purge came first, or the check
// was stale) restarts the sequence at 0 there, and a batch whose sequence
// range matches one of the last five the broker keeps for the producer and
// partition is answered as a duplicate, successfully, and not written: the
// relay would delete messages Kafka never stored. A new client has a new
// producer id (a new idempotent session, so no sequence the broker saw is
// used again) and no knowledge of the topic. The replaced client is never
// purged: its records, on any topic, resolve as they would have (in order
// within their partitions), and it is closed once kgo reported them all.
// Only the first failure on pc replaces it; later ones (Publish calls
// that began on pc) find it replaced already. Replacing a client whose
// topic turns out to be live is harmless.
//
// alone: pc is PublishAlone's isolation client, which is replaced on its
// own (the shared client is left alone). Replacing the shared client also
// replaces the isolation client, which knows the lost topic as well.
func (p *Publisher) replace(pc *prodClient, alone bool, topic string) {
	p.dropIsolation(topic)
	if !alone && p.replaceShared(pc, topic) {
		p.closeIfDone(pc)
	}
}

func (p *Publisher) replaceShared(pc *prodClient, topic string) bool {
	p.prodMu.Lock()
	defer p.prodMu.Unlock()
	if p.closed.Load() || p.prod.Load() != pc {
		return false
	}
	cl, err := kgo.NewClient(p.kopts...)
	if err != nil {
		p.log.Error("kafka: replacing the client that lost a topic", "topic", topic, "err", err)
		return false
	}
	p.prod.Store(&prodClient{cl: cl})
	p.retired[pc] = true
	pc.retired.Store(true)
	p.log.Warn("kafka: replaced the client that lost a topic", "topic", topic,
		"unanswered_in_old_client", pc.unanswered.Load())
	return true
}

// abandonedError describes m's record, still without a result when the
// publish stopped waiting for it. kgo owns the record until it reports it, so
// nothing is read from the record itself.
func (p *Publisher) abandonedError(ctx, rctx context.Context, m *outbox.Message) error {
	partition := int32(-1)
	if m.Partition != nil {
		partition = *m.Partition
	}
	return &ProduceError{Topic: m.Topic, Partition: partition,
		Err: fmt.Errorf("%w: %w", ErrAbandoned, p.contextError(ctx, rctx, rctx.Err()))}
}

// contextError tells apart which context failed a record: the caller's ctx
// (err is kept), the DeliveryTimeout deadline on rctx (kgo.ErrRecordTimeout),
// or neither, when the record shared a batch led by another Publish's record
// (ErrSharedBatchCancelled).
func (p *Publisher) contextError(ctx, rctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return err
	case rctx.Err() != nil:
		return fmt.Errorf("%w: not delivered within DeliveryTimeout=%v (%w)", kgo.ErrRecordTimeout, p.cfg.deliveryTimeout, err)
	}
	return fmt.Errorf("%w (%v)", ErrSharedBatchCancelled, err)
}

func wrapMessage(m outbox.Message, err error) error {
	return &outbox.PublishError{Bucket: m.Bucket, Sequence: m.Sequence, MessageID: m.ID, Err: err}
}

// Close fails the records still buffered (their Publish and PublishAlone
// calls return ErrClosed) and closes the clients' connections. Publish and
// PublishAlone return ErrClosed afterwards.
func (p *Publisher) Close() {
	if p.closed.Swap(true) {
		return
	}
	p.prodMu.Lock()
	pcs := []*prodClient{p.prod.Load()}
	for pc := range p.retired {
		pcs = append(pcs, pc)
	}
	p.prodMu.Unlock()
	for _, pc := range pcs {
		pc.close()
	}
	p.cl.Close()
	p.closeIsolation()
}
