// Command outbox administers an outbox's DynamoDB tables.
//
//	outbox init   -messages T -control T [-buckets 8] [-endpoint URL]
//	outbox parked -messages T -control T -bucket B
//	outbox replay -messages T -control T -bucket B -seq S
//	outbox drop   -messages T -control T -bucket B -seq S
//
// init creates both tables if they are missing (or checks the ones
// template.yaml created) and writes the config item every writer and relay
// reads at start; it is idempotent. parked lists a bucket's dead letters,
// replay re-enqueues one at its bucket's tail with its original message id,
// drop deletes one for good. AWS credentials and region come from the usual
// environment; -endpoint points at DynamoDB Local or LocalStack.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/store/dynamo"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(1)
	}
}

const usage = "usage: outbox init|parked|replay|drop -messages TABLE -control TABLE [flags]"

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	cmd := args[0]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	messages := fs.String("messages", "", "messages table (required)")
	control := fs.String("control", "", "control table (required)")
	buckets := fs.Int("buckets", outbox.DefaultBucketCount, "BucketCount (init)")
	bucket := fs.Int("bucket", -1, "bucket (parked, replay, drop)")
	seq := fs.Int64("seq", 0, "sequence of the parked message (replay, drop)")
	endpoint := fs.String("endpoint", "", "DynamoDB endpoint (DynamoDB Local, LocalStack); default AWS")
	region := fs.String("region", "", "AWS region (default from the environment)")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%s: %w (%s)", cmd, err, usage)
	}
	if *messages == "" || *control == "" {
		return fmt.Errorf("%s: -messages and -control are required (%s)", cmd, usage)
	}
	db, err := client(ctx, *endpoint, *region)
	if err != nil {
		return err
	}
	tables := dynamo.Tables{Messages: *messages, Control: *control}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if cmd == "init" {
		if err := dynamo.CreateTables(ctx, db, tables, dynamo.BucketCount(*buckets)); err != nil {
			return err
		}
		fmt.Fprintf(out, "outbox ready: messages=%s control=%s buckets=%d\n", *messages, *control, *buckets)
		return nil
	}
	if *bucket < 0 {
		return fmt.Errorf("%s: -bucket is required", cmd)
	}
	store, err := dynamo.NewStore(ctx, db, tables)
	if err != nil {
		return err
	}
	switch cmd {
	case "parked":
		items, err := store.ListParked(ctx, *bucket, 0)
		if err != nil {
			return err
		}
		for _, p := range items {
			fmt.Fprintf(out, "bucket=%d seq=%d id=%s topic=%s attempts=%d parked_at=%s reason=%q decode_error=%v\n",
				p.Bucket, p.Sequence, p.Message.ID, p.Message.Topic, p.Attempts, p.ParkedAt.Format(time.RFC3339), p.Reason, p.Err)
		}
		return nil
	case "replay":
		m, err := store.ReplayParked(ctx, *bucket, *seq, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "replayed id=%s at bucket=%d seq=%d\n", m.ID, m.Bucket, m.Sequence)
		return nil
	case "drop":
		if err := store.DropParked(ctx, *bucket, *seq); err != nil {
			return err
		}
		fmt.Fprintf(out, "dropped bucket=%d seq=%d\n", *bucket, *seq)
		return nil
	}
	return fmt.Errorf("unknown command %q (%s)", cmd, usage)
}

func client(ctx context.Context, endpoint, region string) (*dynamodb.Client, error) {
	if endpoint != "" {
		cfg, err := dynamolocal.NewConfig(ctx, endpoint, region)
		if err != nil {
			return nil, err
		}
		return dynamolocal.NewClient(cfg, endpoint), nil
	}
	var opts []func(*awsconfig.LoadOptions) error
	if region != "" {
		opts = append(opts, awsconfig.WithRegion(region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return dynamodb.NewFromConfig(cfg), nil
}
