package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/cmd/internal/pipeline"
	"github.com/dynakafka/outbox/internal/proc"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/local/kafkalocal"
	"github.com/dynakafka/outbox/store/dynamo"
)

var localCommand = &command{
	name:       "local",
	summary:    "run an outbox for your service on this machine: DynamoDB Local, Kafka, the relay; prints the settings",
	standalone: true,
	description: `Starts what a service needs to run against an outbox on this machine, and
keeps it running until Ctrl-C (then it stops all of it; the data lives in
memory and goes with it):

  - DynamoDB Local with the outbox's tables (--messages, --control) and its
    config item (--buckets, --topics), started with -sharedDb: one database
    for every access key and region, so your service, this CLI, the Python
    writer and the AWS CLI all see the same tables whatever credentials they
    carry;
  - Kafka with your topics (one partition per bucket): kfake, in this process,
    or with --real a one-node Apache Kafka (the one make installs into .cache);
  - the relay function's handler behind a local event-source mapping on the
    messages table's stream, and the sweeper on its one-minute schedule,
    as the stack deploys them: what your service writes reaches the topics.

When ready it prints, on standard output, the settings as shell lines to
paste (the endpoints, the test credentials, the region, the table names and
topics, the brokers; also written to --env-file) and how to run your service,
the CLI, the enqueue function, the Python writer and the AWS CLI with them.
Progress and the functions' warnings go to standard error.`,
	example: `outbox local --topics order-events,payments
outbox local --messages shop-outbox --topics shop-events --real --env-file .outbox-local.env`,
	bind: func(fs *flag.FlagSet) func(*app, *connection, []string) (action, error) {
		o := localOptions{}
		fs.StringVar(&o.tables.Messages, "messages", "orders-outbox", "the messages `TABLE` to create")
		fs.StringVar(&o.tables.Control, "control", "", "the control `TABLE` to create (default: the messages table's name + \"-control\")")
		topics := fs.String("topics", "order-events", "the `TOPICS` to create, comma-separated; writers refuse any other")
		fs.IntVar(&o.buckets, "buckets", outbox.DefaultBucketCount, "the outbox's BucketCount `N`; each topic gets N partitions")
		fs.BoolVar(&o.real, "real", false, "run a one-node Apache Kafka (installed into .cache by scripts/install-kafka.sh; needs Java 17+ and Maven) instead of kfake")
		fs.IntVar(&o.dynamoPort, "dynamodb-port", 8000, "DynamoDB Local's `PORT` (0: a free one)")
		fs.IntVar(&o.kafkaPort, "kafka-port", 9092, "kfake's `PORT` (0: a free one; with --real the broker's port is picked free)")
		fs.StringVar(&o.envFile, "env-file", "", "also write the settings to `FILE` (source it in another shell); removed at exit")
		fs.BoolVar(&o.verbose, "verbose", false, "log every relay invocation and sweep on standard error (default: warnings only)")
		return func(a *app, _ *connection, args []string) (action, error) {
			if err := noArgs(args); err != nil {
				return nil, err
			}
			if o.tables.Control == "" {
				o.tables.Control = o.tables.Messages + "-control"
			}
			o.topics = pipeline.SplitList(*topics)
			switch {
			case o.tables.Messages == "" || o.tables.Messages == o.tables.Control:
				return nil, usagef("--messages %q, --control %q: name two different tables", o.tables.Messages, o.tables.Control)
			case len(o.topics) == 0:
				return nil, usagef("--topics is required: the topics your service writes to, comma-separated")
			case o.buckets < 1 || o.buckets > outbox.MaxBucketCount:
				return nil, usagef("--buckets %d: must be 1..%d", o.buckets, outbox.MaxBucketCount)
			case o.dynamoPort < 0 || o.dynamoPort > 65535:
				return nil, usagef("--dynamodb-port %d: must be a TCP port, or 0 for a free one", o.dynamoPort)
			case o.kafkaPort < 0 || o.kafkaPort > 65535:
				return nil, usagef("--kafka-port %d: must be a TCP port, or 0 for a free one", o.kafkaPort)
			}
			return func(ctx context.Context, a *app, _ *session) error { return runLocal(ctx, a, o) }, nil
		}
	},
}

type localOptions struct {
	tables                dynamo.Tables
	topics                []string
	buckets               int
	real, verbose         bool
	dynamoPort, kafkaPort int
	envFile               string
}

// localKafka is the Kafka `outbox local` runs.
type localKafka struct {
	brokers []string
	what    string // for the banner
	stop    func()
}

// runLocal runs until ctx ends (Ctrl-C), then stops everything it started.
func runLocal(ctx context.Context, a *app, o localOptions) error {
	progress := func(format string, args ...any) { fmt.Fprintf(a.stderr, "outbox local: "+format+"\n", args...) }
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
	start := a.now()

	// DynamoDB Local and Kafka start at once (each takes seconds).
	progress("starting DynamoDB Local and %s (installing them into .cache on first use)…", map[bool]string{false: "kfake", true: "Apache Kafka"}[o.real])
	var (
		wg         sync.WaitGroup
		inst       *dynamolocal.Instance
		kafka      *localKafka
		derr, kerr error
	)
	wg.Go(func() {
		inst, derr = dynamolocal.Start(ctx, dynamolocal.Options{Port: o.dynamoPort, SharedDB: true, StartTimeout: 3 * time.Minute}) // a busy laptop
		if derr != nil && o.dynamoPort != 0 && portInUse(derr) {
			derr = fmt.Errorf("port %d is taken (another DynamoDB Local, or outbox local, is running): stop it, or pass --dynamodb-port 0 for a free port: %w", o.dynamoPort, derr)
		}
	})
	wg.Go(func() { kafka, kerr = startLocalKafka(ctx, o) })
	wg.Wait()
	if inst != nil {
		defer func() { _ = inst.Stop() }()
	}
	if kafka != nil {
		defer kafka.stop()
	}
	if err := errors.Join(derr, kerr); err != nil {
		return err
	}

	awsCfg, err := dynamolocal.NewConfig(ctx, inst.Endpoint, dynamolocal.DefaultRegion)
	if err != nil {
		return err
	}
	db := dynamolocal.NewClient(awsCfg, inst.Endpoint)
	if err := dynamo.CreateTables(ctx, db, o.tables, dynamo.BucketCount(o.buckets), dynamo.Topics(o.topics...)); err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka.brokers...))
	if err != nil {
		return err
	}
	err = pipeline.CreateTopics(ctx, cl, o.topics, int32(o.buckets))
	cl.Close()
	if err != nil {
		return err
	}
	pipe, err := pipeline.Start(ctx, ctx, pipeline.Options{AWS: awsCfg, Endpoint: inst.Endpoint, Tables: o.tables,
		Brokers: kafka.brokers, Topics: o.topics, Logger: logger, SweeperError: func(err error) { progress("sweeper: %v", err) }})
	if err != nil {
		return err
	}
	defer pipe.Stop()

	env := localEnv(inst.Endpoint, awsCfg.Region, o, kafka.brokers)
	if o.envFile != "" {
		if err := os.WriteFile(o.envFile, []byte(env), 0o644); err != nil {
			return err
		}
		defer os.Remove(o.envFile)
	}
	fmt.Fprintf(a.stdout, "# outbox local: DynamoDB Local %s (one database for every access key and region) with tables %s and %s,\n"+
		"# %s with topics %s, and the relay and the sweeper on the messages table's stream: what your service writes\n"+
		"# reaches the topics. Ctrl-C stops all of it (the data lives in memory).\n",
		inst.Version, o.tables.Messages, o.tables.Control, kafka.what, strings.Join(o.topics, ","))
	if o.envFile != "" {
		fmt.Fprintf(a.stdout, "# Paste these lines into the shell you run your service or a tool in (or: source %s):\n", o.envFile)
	} else {
		fmt.Fprint(a.stdout, "# Paste these lines into the shell you run your service or a tool in:\n")
	}
	fmt.Fprint(a.stdout, env)
	fmt.Fprint(a.stdout, localUsage())
	fmt.Fprintln(a.stdout, "# outbox local: ready")
	progress("ready in %.1fs; Ctrl-C stops it", a.now().Sub(start).Seconds())

	<-ctx.Done()
	progress("stopping…")
	return nil
}

// localEnv is the settings, as shell lines.
func localEnv(endpoint, region string, o localOptions, brokers []string) string {
	var b strings.Builder
	for _, kv := range [][2]string{
		{"AWS_ACCESS_KEY_ID", dynamolocal.AccessKeyID},
		{"AWS_SECRET_ACCESS_KEY", dynamolocal.SecretAccessKey},
		{"AWS_REGION", region},
		{"AWS_DEFAULT_REGION", region},
		{"AWS_ENDPOINT_URL_DYNAMODB", endpoint},
		{"OUTBOX_MESSAGES_TABLE", o.tables.Messages},
		{"OUTBOX_CONTROL_TABLE", o.tables.Control},
		{"OUTBOX_TOPICS", strings.Join(o.topics, ",")},
		{"KAFKA_BOOTSTRAP_SERVERS", strings.Join(brokers, ",")},
		{"KAFKA_AUTH", "none"},
	} {
		fmt.Fprintf(&b, "export %s=%s\n", kv[0], kv[1])
	}
	return b.String()
}

// localUsage says how to run each client with the settings, with this
// checkout's paths.
func localUsage() string {
	cli := "outbox"
	if exe, err := os.Executable(); err == nil {
		cli = exe
	}
	python := "clients/python"
	if p, err := proc.FindUp("clients/python"); err == nil {
		python = p
	}
	return `# With them:
#   your Go service    cfg, err := config.LoadDefaultConfig(ctx) reads all of them (AWS_ENDPOINT_URL_DYNAMODB included):
#                      dynamo.NewWriter(ctx, dynamodb.NewFromConfig(cfg), dynamo.Tables{Messages: os.Getenv("OUTBOX_MESSAGES_TABLE"),
#                      Control: os.Getenv("OUTBOX_CONTROL_TABLE")}); a consumer: kgo.SeedBrokers(os.Getenv("KAFKA_BOOTSTRAP_SERVERS"))
#   the CLI            ` + cli + ` status
#   the enqueue fn     ` + cli + ` enqueue request.json
#   the Python writer  PYTHONPATH=` + python + ` python3 -m outbox_writer --messages-table "$OUTBOX_MESSAGES_TABLE" \
#                        --control-table "$OUTBOX_CONTROL_TABLE" --json-messages messages.json     (boto3 needed)
#   the AWS CLI        aws dynamodb scan --table-name "$OUTBOX_MESSAGES_TABLE"
`
}

// startLocalKafka starts kfake in process, or with --real a one-node
// Apache Kafka.
func startLocalKafka(ctx context.Context, o localOptions) (*localKafka, error) {
	if o.real {
		start, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		c, err := kafkalocal.Start(start, 1)
		if err != nil {
			return nil, fmt.Errorf("start Apache Kafka: %w", err)
		}
		return &localKafka{brokers: c.Plain, what: "Apache Kafka " + c.Version + " (one node)", stop: c.Stop}, nil
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(o.kafkaPort))
	if err != nil {
		if o.kafkaPort != 0 && portInUse(err) {
			return nil, fmt.Errorf("start kfake: port %d is taken (another Kafka, or outbox local, is running): stop it, or pass --kafka-port 0 for a free port: %w", o.kafkaPort, err)
		}
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	return &localKafka{brokers: c.ListenAddrs(), what: "kfake (in this process)", stop: c.Close}, nil
}

func portInUse(err error) bool {
	s := err.Error()
	return strings.Contains(s, "address already in use") || strings.Contains(s, "Address already in use") || strings.Contains(s, "BindException")
}
