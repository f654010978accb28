package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/kafka"
)

// Consumer is a franz-go group consumer that processes every record through
// an Inbox and commits a record's offset only after its transaction: a
// crash at any point makes Kafka deliver the record again, and the inbox
// skips it if it was applied. Records of one partition are processed in
// offset order; partitions in parallel.
//
// It works in any consumer group, next to members that are not Consumers:
// the inbox table, not the group, decides what was applied, so a rebalance
// (even one that hands a partition over in the middle of a batch) can cause
// duplicate deliveries but not duplicate effects.
type Consumer struct {
	ib  *Inbox
	h   *Handler
	cl  *kgo.Client
	cfg consumerConfig

	running atomic.Bool
	mu      sync.Mutex
	failed  error
}

type consumerConfig struct {
	clientOpts  []kgo.Opt
	maxPoll     int
	concurrency int
	logger      *slog.Logger
	policy      Policy
	policySet   int
	retries     int
	retryBase   time.Duration
}

func defaultConsumerConfig() consumerConfig {
	return consumerConfig{maxPoll: DefaultMaxPollRecords, concurrency: DefaultConcurrency,
		retries: DefaultRecordRetries, retryBase: DefaultRecordBackoff}
}

// Consumer defaults.
const (
	DefaultMaxPollRecords = 1000
	DefaultConcurrency    = 16
	// DefaultRecordRetries and DefaultRecordBackoff: a record failing
	// transiently is processed again 3 times, after at most 0.5s, 1s and
	// 2s (full jitter), then goes to the poison policy.
	DefaultRecordRetries = 3
	DefaultRecordBackoff = 500 * time.Millisecond
)

const (
	maxRecordRetries = 10
	maxRecordBackoff = 10 * time.Second
)

// closeTimeout bounds the final offset commit in Close.
const closeTimeout = 10 * time.Second

// ClientOptions are the kgo client's options: at least the seed brokers
// (kgo.SeedBrokers), the group (kgo.ConsumerGroup) and the topics
// (kgo.ConsumeTopics or kgo.ConsumeRegex); anything else kgo offers (TLS,
// SASL, kgo.FetchMaxWait, a balancer, ...). The Consumer reads
// read_committed (kgo.FetchIsolationLevel(kgo.ReadCommitted())): records of
// aborted Kafka transactions, such as a fenced transactional publish, are
// never processed; a kgo.FetchIsolationLevel here overrides it. It adds
// kgo.AutoCommitMarks (only processed records are committed) and
// kgo.BlockRebalanceOnPoll (a rebalance waits for the polled records to be
// processed and marked), and refuses kgo.DisableAutoCommit and
// kgo.GreedyAutoCommit (which would commit records before their
// transaction) with an *outbox.OptionError. Default: none (required).
func ClientOptions(opts ...kgo.Opt) ConsumerOption {
	return consumerOpt(func(c *consumerConfig) { c.clientOpts = append(c.clientOpts, opts...) })
}

// MaxPollRecords bounds the records one poll returns, so a poll's records
// are processed well within the group's rebalance timeout (kgo's default
// 60s; rebalances wait for them). Default DefaultMaxPollRecords (1000);
// at least 1.
func MaxPollRecords(n int) ConsumerOption {
	return consumerOpt(func(c *consumerConfig) { c.maxPoll = n })
}

// Concurrency is how many partitions are processed at once. Default
// DefaultConcurrency (16); at least 1.
func Concurrency(n int) ConsumerOption {
	return consumerOpt(func(c *consumerConfig) { c.concurrency = n })
}

// OnPoison sets what is done with a record that cannot be processed: a
// permanent error (a *RecordError: a record not from the outbox, with
// missing or invalid stamped headers; an *outbox.ValidationError; a
// callback error wrapped with Permanent), or a transient one still failing
// after RecordRetries. Stop, Skip or DeadLetterTo(DeadLetterTopic(...) or
// DeadLetterTable(...)). Default Stop(): the consumer stops at the record.
// Given once.
func OnPoison(p Policy) HandlerOption {
	return handlerOpt(func(c *consumerConfig) { c.policy, c.policySet = p, c.policySet+1 })
}

// RecordRetries is how many times a record whose processing failed with a
// transient error (the callback's error, or a *TransactionError once
// Process spent its MaxAttempts) is processed again before it goes to the
// poison policy, after a full-jitter exponential backoff from backoff
// (doubling, each wait at most 10s). Rebalances wait while a record is
// retried, so keep the total well under the group's rebalance timeout.
// Each retry is a whole Process: up to MaxAttempts DynamoDB calls, so a
// record makes at most MaxAttempts × (1 + n) of them. Default
// DefaultRecordRetries (3) from DefaultRecordBackoff (500ms); n 0..10,
// backoff 1ms..1m.
func RecordRetries(n int, backoff time.Duration) HandlerOption {
	return handlerOpt(func(c *consumerConfig) { c.retries, c.retryBase = n, backoff })
}

// WithLogger sets the logger that receives the consumer's logs (fetch
// errors, failures) and the kgo client's. Default: nothing is logged.
func WithLogger(l *slog.Logger) HandlerOption {
	return handlerOpt(func(c *consumerConfig) { c.logger = l })
}

// NewConsumer builds the group consumer: fn is called for every record, as
// in Inbox.Process. It joins the group in the background; Run processes.
func NewConsumer(ib *Inbox, fn func(tx *Tx) error, opts ...ConsumerOption) (*Consumer, error) {
	c := defaultConsumerConfig()
	if err := applyConsumer(&c, opts); err != nil {
		return nil, err
	}
	bad := func(opt string, v any, why string) error {
		return &outbox.OptionError{Option: opt, Value: v, Reason: why}
	}
	switch {
	case c.maxPoll < 1:
		return nil, bad("MaxPollRecords", c.maxPoll, "must be at least 1")
	case c.concurrency < 1:
		return nil, bad("Concurrency", c.concurrency, "must be at least 1")
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	// The handler checks ib, fn and the policy before any client is built.
	h, err := newHandler(ib, fn, c)
	if err != nil {
		return nil, err
	}
	if err := checkClientOptions(c.clientOpts); err != nil {
		return nil, err
	}
	kopts := append([]kgo.Opt{kgo.WithLogger(kafka.KgoLogger(c.logger)), kgo.FetchIsolationLevel(kgo.ReadCommitted())}, c.clientOpts...)
	cl, err := kgo.NewClient(append(kopts, kgo.AutoCommitMarks(), kgo.BlockRebalanceOnPoll())...)
	if err != nil {
		return nil, fmt.Errorf("inbox: kafka client: %w", err)
	}
	if ts, ok := c.policy.sink.(*topicSink); ok && ts.cl == nil {
		h.cfg.policy.sink = &topicSink{topic: ts.topic, cl: cl}
	}
	return &Consumer{ib: ib, h: h, cl: cl, cfg: c}, nil
}

// checkClientOptions refuses options that commit records before their
// transaction, or no group. It reads them from a throwaway client built
// from them alone (kgo options are opaque).
func checkClientOptions(opts []kgo.Opt) error {
	probe, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("inbox: ClientOptions: %w", err)
	}
	defer probe.Close()
	bad := func(v, why string) error { return &outbox.OptionError{Option: "ClientOptions", Value: v, Reason: why} }
	switch {
	case probe.OptValue(kgo.ConsumerGroup) == "":
		return bad("no kgo.ConsumerGroup", "name the consumer group: offsets are committed to it")
	case probe.OptValue(kgo.DisableAutoCommit) == true:
		return bad("kgo.DisableAutoCommit", "the Consumer commits the records it processed (AutoCommitMarks); remove the option")
	case probe.OptValue(kgo.GreedyAutoCommit) == true:
		return bad("kgo.GreedyAutoCommit", "it commits polled records before their transaction, which loses them on a crash; remove the option")
	}
	return nil
}

// Run polls and processes records (each as Handler.Handle does: retries of
// transient errors, then the poison policy) until ctx is done (it returns
// nil) or a record stops it (policy Stop, or a dead letter not written):
// then it returns a *StoppedError naming the record, which wraps that
// record's error (a *RecordError, fn's error, a *TransactionError, ...;
// errors.Is and errors.As see it), and the Consumer stays failed, with the
// records before the failed one marked for commit: every later Run returns
// the same error. Close it and build a new Consumer to resume, from the
// failed record.
//
// Run may be called again after it returned nil: it resumes at the first
// record it had polled and not processed (each partition's fetch position is
// set back to it before Run returns), so nothing polled is skipped and no
// offset past an unapplied record is ever committed. A Run while another is
// running returns ErrRunning; a Run after Close returns ErrClosed.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	if err := c.failure(); err != nil {
		return err
	}
	for {
		fs := c.cl.PollRecords(ctx, c.cfg.maxPoll)
		if fs.IsClientClosed() {
			return ErrClosed
		}
		var parts []kgo.FetchTopicPartition
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 {
				parts = append(parts, p)
			}
		})
		if ctx.Err() != nil {
			// Records polled as the context ended are not processed:
			// fetch them again on the next Run.
			var first []*kgo.Record
			for _, p := range parts {
				first = append(first, p.Records[0])
			}
			c.rewind(first)
			c.cl.AllowRebalance()
			return nil
		}
		fs.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) {
				c.cfg.logger.WarnContext(ctx, "inbox: fetch error", "topic", topic, "partition", partition, "err", err)
			}
		})
		undone, failed, err := c.process(ctx, parts)
		// Before AllowRebalance: the partitions are still ours.
		c.rewind(undone)
		c.cl.AllowRebalance()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			err = c.stopped(failed, err)
			c.mu.Lock()
			c.failed = err
			c.mu.Unlock()
			c.cfg.logger.ErrorContext(ctx, "inbox: consumer stopped", "err", err)
			return err
		}
	}
}

// StoppedError is what Run returns when a record stopped the Consumer: the
// poison policy is Stop (the default) and the record failed permanently, or
// transiently RecordRetries more times; or the dead letter of a record
// could not be written. Err is the record's last error. The records before
// it are committed at Close; nothing at or after it in its partition was
// processed. The Consumer stays stopped: fix the cause (or choose another
// OnPoison policy), Close it and build a new Consumer, which resumes at the
// record.
type StoppedError struct {
	Topic     string
	Partition int32
	Offset    int64
	// Attempts is how many times the record was processed: 1 for a
	// permanent error, 1 + RecordRetries for a transient one.
	Attempts int
	Err      error
}

func (e *StoppedError) Error() string {
	how := fmt.Sprintf("failed %d times (1 + RecordRetries)", e.Attempts)
	if e.Attempts == 1 {
		how = "failed permanently (not retried)"
	}
	return fmt.Sprintf("inbox: consumer stopped at record %s/%d@%d, which %s: %v. The records before it are committed at Close; "+
		"nothing at or after it in partition %d was processed, and this Consumer stays stopped (Run returns this error again). "+
		"Fix the cause, then Close it and build a new Consumer with NewConsumer: it resumes at this record. "+
		"To go past records that fail instead of stopping, use OnPoison(Skip()) or OnPoison(DeadLetterTo(...))",
		e.Topic, e.Partition, e.Offset, how, e.Err, e.Partition)
}

func (e *StoppedError) Unwrap() error { return e.Err }

// stopped is the error of Run stopped at r by err.
func (c *Consumer) stopped(r *kgo.Record, err error) error {
	if r == nil {
		return err
	}
	attempts := 1 + c.cfg.retries
	if permanent(err) {
		attempts = 1
	}
	return &StoppedError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Attempts: attempts, Err: err}
}

// ErrClosed: the Consumer was closed.
var ErrClosed = errors.New("inbox: consumer closed")

// ErrRunning: Run was called while another Run of the same Consumer was
// running. Run processes every partition itself; call it from one goroutine.
var ErrRunning = errors.New("inbox: Consumer.Run is already running")

func (c *Consumer) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// rewind sets each record's partition's fetch position back to that record,
// the first of its partition not processed: kgo has fetched past it, and
// the next poll would otherwise start after the records polled so far.
// Called while rebalances are blocked, so the partitions are still ours.
func (c *Consumer) rewind(first []*kgo.Record) {
	if len(first) == 0 {
		return
	}
	set := map[string]map[int32]kgo.EpochOffset{}
	for _, r := range first {
		if set[r.Topic] == nil {
			set[r.Topic] = map[int32]kgo.EpochOffset{}
		}
		set[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
	}
	c.cl.SetOffsets(set)
}

// process processes each partition's records in order, partitions in
// parallel, marking each record for commit once Process returned, and
// returns the first error and the record that failed with it (a partition
// stops at its first failure) and, per partition that did not finish, its
// first record not processed.
func (c *Consumer) process(ctx context.Context, parts []kgo.FetchTopicPartition) (undone []*kgo.Record, failed *kgo.Record, first error) {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		sem = make(chan struct{}, c.cfg.concurrency)
	)
	for _, p := range parts {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			for _, r := range p.Records {
				var err error
				if err = ctx.Err(); err == nil {
					_, err = c.h.Handle(ctx, r)
				}
				if err != nil {
					mu.Lock()
					undone = append(undone, r)
					if first == nil {
						first, failed = err, r
					}
					mu.Unlock()
					return
				}
				c.cl.MarkCommitRecords(r)
			}
		})
	}
	wg.Wait()
	return undone, failed, first
}

// Close commits the marked offsets (everything processed), leaves the group
// and closes the client. Call it after Run returned.
func (c *Consumer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	err := c.cl.CommitMarkedOffsets(ctx)
	c.cl.CloseAllowingRebalance()
	if err != nil {
		return fmt.Errorf("inbox: commit offsets on close (the records since the last commit will be delivered again and skipped): %w", err)
	}
	return nil
}
