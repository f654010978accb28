// Package wiring builds the Lambda functions' parts from their validated
// configuration: AWS clients (once per container, reused across
// invocations), the DynamoDB store, the Kafka publisher with its
// authentication, and the relay engine. Any failure is an init failure with
// a message naming what to fix.
package wiring

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/twmb/franz-go/pkg/sasl"
	saslaws "github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/store/dynamo"
)

// Parts are what a function needs.
type Parts struct {
	Config    config.Config
	AWS       aws.Config
	Dynamo    *dynamodb.Client
	Store     *dynamo.Store
	Publisher *kafka.Publisher
	Relay     *outbox.Relay
}

// Close releases the publisher's connections.
func (p *Parts) Close() {
	if p.Publisher != nil {
		p.Publisher.Close()
	}
}

// Build builds every part from cfg. relayID names this container's relay in
// leases and heartbeats; extra relay options come last (tests use them).
func Build(ctx context.Context, cfg config.Config, logger *slog.Logger, relayID string, extra ...outbox.Option) (*Parts, error) {
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(cfg.Region))
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	return BuildWith(ctx, cfg, awsCfg, logger, relayID, extra...)
}

// BuildWith is Build with a given AWS configuration.
func BuildWith(ctx context.Context, cfg config.Config, awsCfg aws.Config, logger *slog.Logger, relayID string, extra ...outbox.Option) (*Parts, error) {
	p := &Parts{Config: cfg, AWS: awsCfg}
	// Up to Concurrency buckets x the store's concurrent deletes are in
	// flight; keep that many idle connections (the SDK keeps 10 per host),
	// so busy drains do not open a new TLS connection per call.
	p.Dynamo = dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		o.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.MaxIdleConnsPerHost = 64
		})
		if cfg.DynamoEndpoint != "" {
			o.BaseEndpoint = aws.String(cfg.DynamoEndpoint)
			o.DisableValidateResponseChecksum = true // DynamoDB Local sends no CRC on errors
		}
	})
	tables := dynamo.Tables{Messages: cfg.MessagesTable, Control: cfg.ControlTable}
	var err error
	if p.Store, err = dynamo.NewStore(ctx, p.Dynamo, tables); err != nil {
		return nil, fmt.Errorf("outbox store (OUTBOX_MESSAGES_TABLE=%s, OUTBOX_CONTROL_TABLE=%s): %w", cfg.MessagesTable, cfg.ControlTable, err)
	}
	kopts := []kafka.Opt{
		kafka.MaxMessageBytes(cfg.MaxMessageBytes),
		kafka.LeaseDuration(cfg.LeaseDuration),
		kafka.Logger(logger),
	}
	if len(cfg.Topics) > 0 {
		kopts = append(kopts, kafka.Topics(cfg.Topics...))
	}
	auth, err := authOptions(ctx, cfg, awsCfg)
	if err != nil {
		return nil, err
	}
	kopts = append(kopts, auth...)
	if p.Publisher, err = kafka.NewPublisher(ctx, cfg.Brokers, kopts...); err != nil {
		return nil, fmt.Errorf("kafka publisher (KAFKA_BOOTSTRAP_SERVERS=%v, OUTBOX_TOPICS=%v): %w", cfg.Brokers, cfg.Topics, err)
	}
	ropts := []outbox.Option{
		outbox.BucketCount(cfg.BucketCount),
		outbox.BatchSize(cfg.BatchSize),
		outbox.LeaseDuration(cfg.LeaseDuration),
		outbox.LeaseRenewInterval(cfg.RenewInterval()),
		outbox.GapTimeout(cfg.GapTimeout),
		outbox.MaxMessageBytes(cfg.MaxMessageBytes),
		outbox.Concurrency(cfg.Concurrency),
		outbox.WithLogger(logger),
	}
	if relayID != "" {
		ropts = append(ropts, outbox.RelayID(relayID))
	}
	if p.Relay, err = outbox.NewRelay(ctx, p.Store, p.Publisher, append(ropts, extra...)...); err != nil {
		p.Close()
		return nil, fmt.Errorf("relay (OUTBOX_BUCKET_COUNT=%d): %w", cfg.BucketCount, err)
	}
	return p, nil
}

// secretAPI is the Secrets Manager call the SCRAM mode makes.
type secretAPI interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, o ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

var newSecrets = func(cfg aws.Config) secretAPI { return secretsmanager.NewFromConfig(cfg) }

func authOptions(ctx context.Context, cfg config.Config, awsCfg aws.Config) ([]kafka.Opt, error) {
	switch cfg.Auth {
	case config.AuthNone:
		return nil, nil
	case config.AuthTLS:
		return []kafka.Opt{kafka.TLS(nil)}, nil
	case config.AuthSCRAM:
		mech, err := scramFromSecret(ctx, newSecrets(awsCfg), cfg.SASLSecretARN)
		if err != nil {
			return nil, err
		}
		return []kafka.Opt{kafka.TLS(nil), kafka.SASL(mech)}, nil
	case config.AuthMSKIAM:
		return []kafka.Opt{kafka.TLS(nil), kafka.SASL(mskIAM(awsCfg.Credentials))}, nil
	}
	return nil, &config.Error{Variable: "KAFKA_AUTH", Value: cfg.Auth, Reason: "unknown mode"}
}

// scramFromSecret reads {"username": ..., "password": ...} (the shape MSK's
// SCRAM secrets use) and returns a SCRAM-SHA-512 mechanism.
func scramFromSecret(ctx context.Context, sm secretAPI, arn string) (sasl.Mechanism, error) {
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	if err != nil {
		return nil, fmt.Errorf("read KAFKA_SASL_SECRET_ARN=%s: %w", arn, err)
	}
	var s struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if out.SecretString == nil || json.Unmarshal([]byte(*out.SecretString), &s) != nil || s.Username == "" || s.Password == "" {
		return nil, &config.Error{Variable: "KAFKA_SASL_SECRET_ARN", Value: arn, Reason: `the secret must be a JSON string {"username": "...", "password": "..."}`}
	}
	return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism(), nil
}

// mskIAM signs the MSK IAM handshake with the function's own credentials,
// refreshed by the SDK's provider chain.
func mskIAM(creds aws.CredentialsProvider) sasl.Mechanism {
	return saslaws.ManagedStreamingIAM(func(ctx context.Context) (saslaws.Auth, error) {
		c, err := creds.Retrieve(ctx)
		if err != nil {
			return saslaws.Auth{}, fmt.Errorf("MSK IAM: retrieve the function's AWS credentials: %w", err)
		}
		return saslaws.Auth{AccessKey: c.AccessKeyID, SecretKey: c.SecretAccessKey, SessionToken: c.SessionToken, UserAgent: "dynakafka-outbox"}, nil
	})
}

// ContainerID names this execution environment: the log stream is unique per
// Lambda container; elsewhere the host name and pid.
func ContainerID(function string) string {
	if s := os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME"); s != "" {
		id := function + "/" + s
		if len(id) > 128 {
			id = id[len(id)-128:]
		}
		return id
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%s-%d", function, host, os.Getpid())
}
