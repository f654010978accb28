package kafka

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// FenceHolders gives up waiting for the bucket's publish in progress when
// its context ends (issue 29 item 8's review): an aborting Publish can
// hold the bucket until AbandonGrace or its own deadline, and the relay
// bounds the fence by the lease's cut-off. The bucket's lock is held here
// as that Publish holds it.
func TestFenceHoldersGivesUpWaitingWithItsContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := testenv.Kafka(t)
	p, err := NewTxnPublisher(ctx, k.Brokers, testenv.Name(t, "txn"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	b := p.bucket(3)
	b.lock() // a Publish of bucket 3 in progress
	fctx, fcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.FenceHolders(fctx, 3) }()
	fcancel()
	select {
	case err = <-done:
	case <-ctx.Done():
		b.unlock()
		<-done
		t.Fatal("FenceHolders kept waiting for the bucket's publish after its context was cancelled")
	}
	b.unlock()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("FenceHolders: %v, want its context's cancellation", err)
	}
	if b.cl != nil {
		t.Fatal("a cancelled fence left the bucket a client")
	}
}
