package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
	fn  func(*Tx) error
	cl  *kgo.Client
	cfg consumerConfig

	mu     sync.Mutex
	failed error
}

// ConsumerOption configures NewConsumer.
type ConsumerOption func(*consumerConfig)

type consumerConfig struct {
	clientOpts  []kgo.Opt
	maxPoll     int
	concurrency int
	logger      *slog.Logger
}

// Consumer defaults.
const (
	DefaultMaxPollRecords = 1000
	DefaultConcurrency    = 16
)

// closeTimeout bounds the final offset commit in Close.
const closeTimeout = 10 * time.Second

// ClientOptions are the kgo client's options: at least the seed brokers
// (kgo.SeedBrokers), the group (kgo.ConsumerGroup) and the topics
// (kgo.ConsumeTopics or kgo.ConsumeRegex); anything else kgo offers (TLS,
// SASL, kgo.FetchMaxWait, a balancer, ...). The Consumer adds
// kgo.AutoCommitMarks (only processed records are committed) and
// kgo.BlockRebalanceOnPoll (a rebalance waits for the polled records to be
// processed and marked), and refuses kgo.DisableAutoCommit and
// kgo.GreedyAutoCommit (which would commit records before their
// transaction) with an *outbox.OptionError. Default: none (required).
func ClientOptions(opts ...kgo.Opt) ConsumerOption {
	return func(c *consumerConfig) { c.clientOpts = append(c.clientOpts, opts...) }
}

// MaxPollRecords bounds the records one poll returns, so a poll's records
// are processed well within the group's rebalance timeout (kgo's default
// 60s; rebalances wait for them). Default DefaultMaxPollRecords (1000);
// at least 1.
func MaxPollRecords(n int) ConsumerOption { return func(c *consumerConfig) { c.maxPoll = n } }

// Concurrency is how many partitions are processed at once. Default
// DefaultConcurrency (16); at least 1.
func Concurrency(n int) ConsumerOption { return func(c *consumerConfig) { c.concurrency = n } }

// Logger receives the consumer's logs (fetch errors, failures) and the kgo
// client's. Default: nothing is logged.
func Logger(l *slog.Logger) ConsumerOption { return func(c *consumerConfig) { c.logger = l } }

// NewConsumer builds the group consumer: fn is called for every record, as
// in Inbox.Process. It joins the group in the background; Run processes.
func NewConsumer(ib *Inbox, fn func(tx *Tx) error, opts ...ConsumerOption) (*Consumer, error) {
	c := consumerConfig{maxPoll: DefaultMaxPollRecords, concurrency: DefaultConcurrency}
	for _, o := range opts {
		o(&c)
	}
	bad := func(opt string, v any, why string) error {
		return &outbox.OptionError{Option: opt, Value: v, Reason: why}
	}
	switch {
	case ib == nil:
		return nil, bad("ib", nil, "an *Inbox is required (inbox.New)")
	case fn == nil:
		return nil, bad("fn", nil, "a function that adds the record's business operations is required")
	case c.maxPoll < 1:
		return nil, bad("MaxPollRecords", c.maxPoll, "must be at least 1")
	case c.concurrency < 1:
		return nil, bad("Concurrency", c.concurrency, "must be at least 1")
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if err := checkClientOptions(c.clientOpts); err != nil {
		return nil, err
	}
	kopts := append([]kgo.Opt{kgo.WithLogger(kafka.KgoLogger(c.logger))}, c.clientOpts...)
	cl, err := kgo.NewClient(append(kopts, kgo.AutoCommitMarks(), kgo.BlockRebalanceOnPoll())...)
	if err != nil {
		return nil, fmt.Errorf("inbox: kafka client: %w", err)
	}
	return &Consumer{ib: ib, fn: fn, cl: cl, cfg: c}, nil
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

// Run polls and processes records until ctx is done (it returns nil) or a
// record cannot be processed: then it returns that error (a *RecordError,
// fn's error, a *TransactionError, ...) and the Consumer stays failed, with
// the records before the failed one marked for commit. Close it and build a
// new Consumer to resume, from the failed record. (Retrying the record
// belongs to whoever restarts: the inbox's own retries are spent.)
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.failure(); err != nil {
		return err
	}
	for {
		fs := c.cl.PollRecords(ctx, c.cfg.maxPoll)
		if fs.IsClientClosed() {
			return ErrClosed
		}
		if ctx.Err() != nil {
			c.cl.AllowRebalance()
			return nil
		}
		fs.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) {
				c.cfg.logger.WarnContext(ctx, "inbox: fetch error", "topic", topic, "partition", partition, "err", err)
			}
		})
		var parts []kgo.FetchTopicPartition
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 {
				parts = append(parts, p)
			}
		})
		err := c.process(ctx, parts)
		c.cl.AllowRebalance()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.mu.Lock()
			c.failed = err
			c.mu.Unlock()
			c.cfg.logger.ErrorContext(ctx, "inbox: consumer stopped", "err", err)
			return err
		}
	}
}

// ErrClosed: the Consumer was closed.
var ErrClosed = errors.New("inbox: consumer closed")

func (c *Consumer) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// process processes each partition's records in order, partitions in
// parallel, marking each record for commit once Process returned, and
// returns the first error (a partition stops at its first failure).
func (c *Consumer) process(ctx context.Context, parts []kgo.FetchTopicPartition) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, c.cfg.concurrency)
	)
	for _, p := range parts {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			for _, r := range p.Records {
				if ctx.Err() != nil {
					return
				}
				if _, err := c.ib.Process(ctx, r, c.fn); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				c.cl.MarkCommitRecords(r)
			}
		})
	}
	wg.Wait()
	return first
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
