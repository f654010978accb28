// Package wiring builds the Lambda functions' parts from their validated
// configuration: AWS clients (once per container, reused across
// invocations), the DynamoDB store, the Kafka publisher with its
// authentication, and the relay engine. Any failure is an init failure with
// a message naming what to fix.
package wiring

import (
	"context"
	"fmt"
	"github.com/dynakafka/outbox/internal/ownerid"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/dynamo"
)

// Parts are what a function needs.
type Parts struct {
	Config    config.Config
	AWS       aws.Config
	Dynamo    *dynamodb.Client
	Store     *dynamo.Store
	Publisher Publisher // *kafka.Publisher, or *kafka.TxnPublisher when OUTBOX_KAFKA_TRANSACTIONAL=true
	Relay     *relay.Relay
	// Init is how long each step of Build took (the init phase's share of
	// a cold start); the functions log it with "ready".
	Init InitTimes
}

// InitTimes are the steps of Build, in order.
type InitTimes struct {
	AWSConfig time.Duration // awsconfig.LoadDefaultConfig (Build only)
	Store     time.Duration // dynamo.NewStore: the config item and the tables' checks
	Publisher time.Duration // the Kafka client and its topic check
	Relay     time.Duration // relay.New: the config item NewStore read, checked
}

// LogAttrs are t as log attributes, in milliseconds.
func (t InitTimes) LogAttrs() []any {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return []any{"init_aws_config_ms", ms(t.AWSConfig), "init_store_ms", ms(t.Store),
		"init_publisher_ms", ms(t.Publisher), "init_relay_ms", ms(t.Relay)}
}

// Publisher is the relay's publisher with its Close.
type Publisher interface {
	outbox.Publisher
	Close()
}

// Close releases the publisher's connections.
func (p *Parts) Close() {
	if p.Publisher != nil {
		p.Publisher.Close()
	}
}

// NewPublisher builds the Kafka publisher from cfg, authenticated as
// KAFKA_AUTH says, and checks the brokers before anything is published: the
// topics in OUTBOX_TOPICS must exist and admit the outbox's MaxMessageBytes
// (its config item's, given in extra as kafka.OutboxConfig; Build does), and
// without topics a broker must answer. An error names the variables to fix.
// Options in extra come last (tests use them).
func NewPublisher(ctx context.Context, cfg config.Config, awsCfg aws.Config, logger *slog.Logger, extra ...kafka.Option) (*kafka.Publisher, error) {
	kopts, err := publisherOptions(ctx, cfg, awsCfg, logger)
	if err != nil {
		return nil, err
	}
	p, err := kafka.NewPublisher(ctx, cfg.Brokers, append(kopts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka publisher (KAFKA_BOOTSTRAP_SERVERS=%v, OUTBOX_TOPICS=%v, KAFKA_AUTH=%s): %w", cfg.Brokers, cfg.Topics, cfg.Auth, err)
	}
	if len(cfg.Topics) == 0 {
		if err := p.Ping(ctx); err != nil {
			p.Close()
			return nil, fmt.Errorf("kafka (KAFKA_BOOTSTRAP_SERVERS=%v, KAFKA_AUTH=%s): %w", cfg.Brokers, cfg.Auth, err)
		}
	}
	return p, nil
}

// TxnPrefix is the transactional-id prefix of cfg's outbox: its messages
// table's name, one per outbox, shared by the relay and the sweeper so that
// either one's new producer for a bucket fences the other's.
func TxnPrefix(cfg config.Config) string { return cfg.MessagesTable }

// NewTxnPublisher is NewPublisher for OUTBOX_KAFKA_TRANSACTIONAL=true: a
// kafka.TxnPublisher under TxnPrefix(cfg), checked the same way.
func NewTxnPublisher(ctx context.Context, cfg config.Config, awsCfg aws.Config, logger *slog.Logger, extra ...kafka.Option) (*kafka.TxnPublisher, error) {
	kopts, err := publisherOptions(ctx, cfg, awsCfg, logger)
	if err != nil {
		return nil, err
	}
	p, err := kafka.NewTxnPublisher(ctx, cfg.Brokers, TxnPrefix(cfg), append(kopts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka transactional publisher (OUTBOX_KAFKA_TRANSACTIONAL=true, KAFKA_BOOTSTRAP_SERVERS=%v, OUTBOX_TOPICS=%v, KAFKA_AUTH=%s): %w", cfg.Brokers, cfg.Topics, cfg.Auth, err)
	}
	if len(cfg.Topics) == 0 {
		if err := p.Ping(ctx); err != nil {
			p.Close()
			return nil, fmt.Errorf("kafka (KAFKA_BOOTSTRAP_SERVERS=%v, KAFKA_AUTH=%s): %w", cfg.Brokers, cfg.Auth, err)
		}
	}
	return p, nil
}

// publisherOptions are the kafka options cfg sets, authentication included.
func publisherOptions(ctx context.Context, cfg config.Config, awsCfg aws.Config, logger *slog.Logger) ([]kafka.Option, error) {
	kopts := []kafka.Option{
		kafka.LeaseDuration(cfg.LeaseDuration),
		kafka.WithLogger(logger),
	}
	if len(cfg.Topics) > 0 {
		kopts = append(kopts, kafka.Topics(cfg.Topics...))
	}
	auth, err := authOptions(ctx, cfg, awsCfg)
	if err != nil {
		return nil, err
	}
	return append(kopts, auth...), nil
}

// Build builds every part from cfg. relayID names this container's relay in
// leases and heartbeats; extra relay options come last (tests use them).
func Build(ctx context.Context, cfg config.Config, logger *slog.Logger, relayID string, extra ...relay.Option) (*Parts, error) {
	start := time.Now()
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(cfg.Region))
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	loaded := time.Since(start)
	p, err := BuildWith(ctx, cfg, awsCfg, logger, relayID, extra...)
	if p != nil {
		p.Init.AWSConfig = loaded
	}
	return p, err
}

// BuildWith is Build with a given AWS configuration.
func BuildWith(ctx context.Context, cfg config.Config, awsCfg aws.Config, logger *slog.Logger, relayID string, extra ...relay.Option) (*Parts, error) {
	p := &Parts{Config: cfg, AWS: awsCfg}
	step := time.Now()
	took := func() time.Duration { now := time.Now(); d := now.Sub(step); step = now; return d }
	p.Dynamo = DynamoClient(awsCfg, cfg.DynamoEndpoint)
	tables := dynamo.Tables{Messages: cfg.MessagesTable, Control: cfg.ControlTable}
	var err error
	p.Store, err = dynamo.NewStore(ctx, p.Dynamo, tables)
	p.Init.Store = took()
	if err != nil {
		return nil, fmt.Errorf("outbox store (OUTBOX_MESSAGES_TABLE=%s, OUTBOX_CONTROL_TABLE=%s): %w", cfg.MessagesTable, cfg.ControlTable, err)
	}
	// The shared settings (BucketCount, the mode, MaxMessageBytes, the
	// header names) are the config item's, for the store, the publisher
	// and the relay: as NewStore read it, without a second read.
	stored := p.Store.Opened()
	if cfg.Transactional {
		p.Publisher, err = NewTxnPublisher(ctx, cfg, awsCfg, logger, kafka.OutboxConfig(stored))
	} else {
		p.Publisher, err = NewPublisher(ctx, cfg, awsCfg, logger, kafka.OutboxConfig(stored))
	}
	p.Init.Publisher = took()
	if err != nil {
		return nil, err
	}
	ropts := []relay.Option{
		relay.BatchSize(cfg.BatchSize),
		relay.LeaseDuration(cfg.LeaseDuration),
		relay.ResumeWindow(cfg.ResumeWindow()),
		relay.LeaseRenewInterval(cfg.RenewInterval()),
		relay.LeaseMargin(cfg.LeaseMargin()),
		relay.MaxClockSkew(cfg.MaxClockSkew()),
		relay.GapTimeout(cfg.GapTimeout),
		relay.SweepMinAge(cfg.SweepMinAge),
		relay.ParkStuckAfter(cfg.ParkStuckAfter),
		relay.Concurrency(cfg.Concurrency),
		relay.WithLogger(logger),
		// As NewStore read it: no second read of the config item on the
		// init's path.
		relay.StoredConfig(stored),
	}
	if relayID != "" {
		ropts = append(ropts, relay.RelayID(relayID))
	}
	if cfg.OutboxRegion != "" {
		ropts = append(ropts, relay.Region(cfg.OutboxRegion))
	}
	p.Relay, err = relay.New(ctx, p.Store, p.Publisher, append(ropts, extra...)...)
	p.Init.Relay = took()
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("relay: %w", err)
	}
	return p, nil
}

// DynamoClient is the functions' DynamoDB client; endpoint overrides AWS's
// (OUTBOX_DYNAMODB_ENDPOINT: DynamoDB Local, LocalStack) when set.
func DynamoClient(awsCfg aws.Config, endpoint string) *dynamodb.Client {
	// Many buckets' drains (Concurrency 0: every bucket of a batch) x the
	// store's concurrent deletes are in flight; keep that many idle
	// connections (the SDK keeps 10 per host), so busy drains do not open
	// a new TLS connection per call.
	return dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		o.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConnsPerHost = 64
		})
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			o.DisableValidateResponseChecksum = true // DynamoDB Local sends no CRC on errors
		}
	})
}

// StreamOwnerID is the lease owner id of the relay function (ownerid.Stream
// says why it is one name for all of its containers).
func StreamOwnerID() string { return ownerid.Stream() }

// ContainerID names this execution environment (ownerid.Container).
func ContainerID(function string) string { return ownerid.Container(function) }
