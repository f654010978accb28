// Command outbox is the operator's tool for an outbox's DynamoDB tables.
//
//	outbox status                     every bucket: backlog, oldest age, head, (retained range,) gap, lease, dead letters
//	outbox parked [--bucket B]        dead letters, across all buckets by default
//	outbox replay --bucket B --seq S [--value FILE]
//	outbox replay --bucket B --from S1 --to S2 --brokers HOST:PORT,...   (watermark mode)
//	outbox drop   --bucket B --seq S
//	outbox drain  BUCKET --brokers HOST:PORT,...
//	outbox init   --buckets N [--mode watermark --retention D] [--regions R1,R2]
//	outbox buckets set N [--dry-run]
//	outbox regions [takeover FROM --by REGION | handback REGION]   (region mode)
//	outbox enqueue REQUEST.json       a request through the enqueue function's handler, here
//	outbox local [--topics T1,T2] [--real]   DynamoDB Local, Kafka and the relay for your service, until Ctrl-C
//
// Every command but local takes the two table names (--messages, --control,
// or OUTBOX_MESSAGES_TABLE and OUTBOX_CONTROL_TABLE), and every command
// --help with an example. AWS credentials come from the SDK's default chain,
// also with --endpoint (LocalStack, VPC or FIPS endpoints); only --local
// selects the static credentials of DynamoDB Local. Without credentials the
// command fails before anything is sent, saying how to give them.
//
// Build it with `make cli` (bin/outbox): cmd/ is a module of its own.
//
// The command line is checked completely before anything is sent: a typo
// never half-runs. Exit codes:
//
//	0  done
//	1  failed (DynamoDB, Kafka or AWS said no; nothing parked at that sequence)
//	2  usage: unknown command, bad or missing flag or argument (nothing was sent,
//	   except when a bucket turns out to lie beyond the outbox's BucketCount)
//	3  the outbox disagrees: a missing table, no config item, another
//	   BucketCount or mode, a table of another layout, tables that do not
//	   belong together (swapped or mistyped names)
//	4  drain did not finish: another relay holds the bucket (it was woken and
//	   drains again), a gap is still pending, or the deadline came first;
//	   buckets set was aborted (not drained by --change-timeout, or Ctrl-C):
//	   the count stays
//
// cmd/outbox uses the standard library's flag package rather than cobra: it
// lives in the library's module, whose every user would otherwise download
// cobra and pflag for a tool they may never build.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dynakafka/outbox/lambda/wiring"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	a := &app{
		stdout:  os.Stdout,
		stderr:  os.Stderr,
		stdin:   os.Stdin,
		getenv:  os.Getenv,
		now:     time.Now,
		relayID: func() string { return wiring.ContainerID("outbox-cli") },
		connect: connect,
	}
	code := a.run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
