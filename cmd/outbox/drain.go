package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/lambda/wiring"
	"github.com/dynakafka/outbox/relay"
)

var drainCommand = &command{
	name:    "drain",
	args:    "BUCKET",
	summary: "publish one bucket's pending messages to Kafka now",
	description: `Drains one bucket now, as the relay Lambda would: it takes the bucket's
lease, publishes its pending messages in sequence order, deletes what Kafka
acknowledged and hands the lease back (it removes its name from it, so the
relay's next drain of the bucket starts at once rather than after its
ResumeWindow). Use it when a bucket is stuck after the
cause was fixed, without waiting for the sweeper.

The relay is configured exactly like the relay Lambda: from the variables it
reads (KAFKA_BOOTSTRAP_SERVERS, KAFKA_AUTH, KAFKA_SASL_SECRET_ARN,
OUTBOX_TOPICS, OUTBOX_LEASE_DURATION, OUTBOX_GAP_TIMEOUT, ...;
docs/deploy.md lists them), and a flag wins over its variable; BucketCount,
the mode, MaxMessageBytes and the header names are the outbox's config
item's. Kafka authentication uses the same credentials as DynamoDB.

If another relay holds the bucket, drain leaves it a wake-up (it drains again
before it lets go) and exits with 4. A gap is waited on for GapTimeout and
then fenced, as the relays do.`,
	example: `outbox drain 3 --brokers b-1.msk:9098,b-2.msk:9098 --auth msk-iam \
  --messages orders-outbox --control orders-outbox-control`,
	timeout: 5 * time.Minute,
	bind: func(fs *flag.FlagSet) func(*app, *connection, []string) (action, error) {
		env := kafkaFlags(fs, "(env KAFKA_AUTH; required)")
		verbose := fs.Bool("verbose", false, "log the relay's progress on standard error (default: warnings only)")
		return func(a *app, c *connection, args []string) (action, error) {
			// Every bad argument and setting at once.
			bucket, berr := bucketArg(args)
			cfg, err := config.Load(overlay(a.getenv, c, env))
			switch {
			case err != nil && berr != nil:
				return nil, usagef("%v\n%v", berr, configError(err))
			case berr != nil:
				return nil, berr
			case err != nil:
				return nil, configError(err)
			}
			return func(ctx context.Context, a *app, s *session) error {
				level := slog.LevelWarn
				if *verbose {
					level = slog.LevelInfo
				}
				logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
				return drain(ctx, a, s, cfg, logger, bucket)
			}, nil
		}
	},
}

// kafkaFlags registers the flags that stand for the relay's Kafka variables
// and returns them by variable; authNote ends the --auth help.
func kafkaFlags(fs *flag.FlagSet, authNote string) map[string]*string {
	return map[string]*string{
		"KAFKA_BOOTSTRAP_SERVERS": fs.String("brokers", "", "Kafka bootstrap `HOST:PORT,...` (env KAFKA_BOOTSTRAP_SERVERS)"),
		"KAFKA_AUTH":              fs.String("auth", "", "Kafka authentication `MODE`: none, tls, mtls, sasl-scram-sha-256, sasl-scram-sha-512 or msk-iam "+authNote),
		"KAFKA_SASL_SECRET_ARN":   fs.String("sasl-secret-arn", "", "Secrets Manager secret `ARN` with the SCRAM username and password (env KAFKA_SASL_SECRET_ARN)"),
		"KAFKA_TLS_CA_SECRET_ARN": fs.String("tls-ca-secret-arn", "", "Secrets Manager secret `ARN` with a PEM CA bundle for the brokers' certificates (env KAFKA_TLS_CA_SECRET_ARN)"),
		"KAFKA_TLS_CLIENT_CERT_SECRET_ARN": fs.String("tls-client-cert-secret-arn", "",
			"Secrets Manager secret `ARN` with the client certificate and key for mtls (env KAFKA_TLS_CLIENT_CERT_SECRET_ARN)"),
		"OUTBOX_TOPICS": fs.String("topics", "", "`TOPICS` to check at start, comma-separated (env OUTBOX_TOPICS)"),
	}
}

// flagOf names the flag that sets a relay variable.
var flagOf = map[string]string{
	"KAFKA_BOOTSTRAP_SERVERS": "brokers", "KAFKA_AUTH": "auth", "KAFKA_SASL_SECRET_ARN": "sasl-secret-arn", "OUTBOX_TOPICS": "topics",
	"KAFKA_TLS_CA_SECRET_ARN": "tls-ca-secret-arn", "KAFKA_TLS_CLIENT_CERT_SECRET_ARN": "tls-client-cert-secret-arn",
	"OUTBOX_MESSAGES_TABLE": "messages", "OUTBOX_CONTROL_TABLE": "control",
}

// configError restates every relay configuration error (config.Load joins
// one per variable) with the flag that sets the variable, if there is one:
// one line each, so one run lists every fix.
func configError(err error) error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var lines []string
	for _, e := range errs {
		var ce *config.Error
		switch {
		case !errors.As(e, &ce):
			lines = append(lines, e.Error())
		case flagOf[ce.Variable] != "":
			lines = append(lines, fmt.Sprintf("--%s (or %s) %q: %s", flagOf[ce.Variable], ce.Variable, ce.Value, ce.Reason))
		default:
			lines = append(lines, fmt.Sprintf("%s=%q: %s", ce.Variable, ce.Value, ce.Reason))
		}
	}
	return &usageError{strings.Join(lines, "\n")}
}

func bucketArg(args []string) (int, error) {
	switch len(args) {
	case 0:
		return 0, usagef("BUCKET is required: the bucket to drain (outbox status shows them)")
	case 1:
	default:
		return 0, usagef("unexpected argument %q after BUCKET", args[1])
	}
	b, err := strconv.Atoi(args[0])
	if err != nil || b < 0 || b >= outbox.MaxBucketCount {
		return 0, usagef("BUCKET %q: must be a bucket number 0..%d", args[0], outbox.MaxBucketCount-1)
	}
	return b, nil
}

// overlay is the environment the relay Lambda would see: the variables,
// with the flags that were given on top. The DynamoDB endpoint is always
// --endpoint's, so drain talks to the same tables as the other commands.
func overlay(getenv func(string) string, c *connection, flags map[string]*string) func(string) string {
	set := map[string]string{"OUTBOX_MESSAGES_TABLE": c.messages, "OUTBOX_CONTROL_TABLE": c.control, "AWS_REGION": c.region}
	for name, v := range flags {
		set[name] = *v
	}
	return func(name string) string {
		if name == "OUTBOX_DYNAMODB_ENDPOINT" {
			return c.endpoint
		}
		if v := set[name]; v != "" {
			return v
		}
		return getenv(name)
	}
}

func drain(ctx context.Context, a *app, s *session, cfg config.Config, logger *slog.Logger, bucket int) error {
	// The tables and the bucket are checked before Kafka is contacted.
	_, oc, _, err := s.buckets(ctx, bucket)
	var ue *usageError
	if errors.As(err, &ue) {
		return usagef("BUCKET %d: the outbox has buckets 0..%d (BucketCount %d)", bucket, oc.BucketCount-1, oc.BucketCount)
	}
	if err != nil {
		return err
	}
	// An operator wants an answer now: a held bucket is woken, not waited on.
	// This process never resumes a bucket it released (it ends after the
	// drain), so it hands the lease back when done: the relay's next drain
	// need not wait ResumeWindow for it.
	parts, err := wiring.BuildWith(ctx, cfg, s.aws, logger, a.relayID(), relay.HolderWait(0), relay.ResumeReleased(false))
	if err != nil {
		return err
	}
	defer parts.Close()
	defer func() {
		tk := parts.Relay.HoldToken(bucket)
		if tk == "" {
			return // never acquired it: nothing of ours to hand back
		}
		if derr := parts.Store.Disown(context.WithoutCancel(ctx), bucket, parts.Relay.ID(), tk); derr != nil {
			logger.Warn("outbox drain: lease not handed back; the relay's next drain waits ResumeWindow", "bucket", bucket, "err", derr)
		}
	}()
	st, err := parts.Relay.DrainBucket(ctx, bucket)
	fmt.Fprintf(a.stdout, "bucket %d: published %d, fenced %d, parked %d, leftovers deleted %d; head %d (relay %s)\n",
		bucket, st.Published, st.Fenced, st.Parked, st.Leftovers, st.Head, parts.Relay.ID())
	switch {
	case err == nil:
		return nil
	case errors.Is(err, outbox.ErrLeaseHeld):
		return &notDrainedError{fmt.Errorf("another relay holds bucket %d; it was woken and drains the bucket again before it lets go: %w", bucket, err)}
	case errors.Is(err, outbox.ErrGapPending), errors.Is(err, outbox.ErrDeadline):
		return &notDrainedError{fmt.Errorf("bucket %d is not drained yet (run again, or raise --timeout): %w", bucket, err)}
	}
	return err
}
