// Command soak runs the fault-injection soak (internal/harness/soak) and prints its
// one-line verdict:
//
//	soak: mode=delete messages=N lost=0 phantom=0 read_model_mismatches=0 duplicates=D unexplained=0 overlaps=O overlaps_admitted=A admitted_by=cancelled:C,fenced:F reorders=R parked=P faults=F duplicates_by_cause=cause:n,...
//
//	make soak N=100000
//	cd cmd && go run ./soak -n 20000 -mode watermark
//	make soak TXN=1     (-txn: Kafka transactions, a read_committed consumer;
//	                     the line adds stale_visible=0 interleavings=0 txns=... dup_txns=...)
//
// A long run is split into rounds of -per-round messages, each on a fresh
// DynamoDB Local instance (the emulator slows down as stream records pile
// up). It exits 1 when a promise was broken or the harness failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/soak"
)

func main() {
	var cfg soak.Config
	flag.IntVar(&cfg.Messages, "n", 100000, "committed messages to reach")
	flag.IntVar(&cfg.PerRound, "per-round", 20000, "messages per fresh DynamoDB Local instance")
	flag.IntVar(&cfg.Writers, "writers", 8, "concurrent writers")
	flag.Float64Var(&cfg.FaultRate, "fault-rate", 1, "multiplies every fault probability")
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()), "random seed")
	minEach := flag.Int("min-each-fault", 5, "fail unless every fault kind fired at least this often")
	timeout := flag.Duration("timeout", 80*time.Minute, "give up after this long")
	mode := flag.String("mode", "delete", "the outbox's mode: delete or watermark")
	flag.DurationVar(&cfg.Retention, "retention", 0, "watermark mode: the messages' retention (default 24h)")
	flag.IntVar(&cfg.Rebucket, "rebucket", 0, "change BucketCount online to this count half-way through each round, with the faults on (0: no change)")
	flag.BoolVar(&cfg.Txn, "txn", false, "publish with Kafka transactions and check with a read_committed consumer (stale_visible, interleavings, duplicates as whole transactions)")
	flag.Parse()
	var err error
	if cfg.Mode, err = outbox.ParseMode(*mode); err != nil {
		fmt.Fprintln(os.Stderr, "soak: -mode:", err)
		os.Exit(2)
	}
	cfg.Seed, cfg.MinEachFault, cfg.Progress = *seed, *minEach, os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	fmt.Fprintf(os.Stderr, "soak: seed %d\n", cfg.Seed)
	res, err := soak.Run(ctx, cfg)
	fmt.Fprintf(os.Stderr, "soak: %d rounds in %v; faults by kind: %s\n", res.Rounds, res.Elapsed.Round(time.Second), res.Kinds())
	fmt.Fprintf(os.Stderr, "soak: read model %s\n", res.ReadModel)
	fmt.Println(res.Line())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if !res.OK() {
		fmt.Fprintf(os.Stderr, "soak: broken promises: %s\n", res.Details())
		os.Exit(1)
	}
}
