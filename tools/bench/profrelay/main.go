// Command profrelay is the relay bootstrap (lambda/relay) with heap
// profiles: the footprint stage builds it instead of the release bootstrap
// with -footprint-pprof DIR, to see where the drain's memory goes. It runs
// the same init and handler; a sampler writes DIR/heap-peak.pprof each time
// the heap in use reaches a new high (by 1 MiB), and DIR/allocs.pprof after
// every invocation. Not for deployment.
package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/dynakafka/outbox/lambda/wiring"
)

func main() {
	dir := os.Getenv("OUTBOX_PROFILE_DIR")
	runtime.MemProfileRate = 64 << 10
	h, ok := wiring.SetupRelay(os.Getenv, wiring.Stdout())
	if !ok {
		os.Exit(2)
	}
	go sample(dir)
	lambda.Start(func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		resp, err := h.Handle(ctx, ev)
		write(filepath.Join(dir, "allocs.pprof"), "allocs")
		return resp, err
	})
}

func sample(dir string) {
	var peak uint64
	var ms runtime.MemStats
	for range time.Tick(5 * time.Millisecond) {
		runtime.ReadMemStats(&ms)
		if ms.HeapInuse > peak+1<<20 {
			peak = ms.HeapInuse
			write(filepath.Join(dir, "heap-peak.pprof"), "heap")
		}
	}
}

func write(path, profile string) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.Lookup(profile).WriteTo(f, 0)
}
