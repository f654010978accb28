package soak

import (
	"context"
	"sync"
	"time"
)

// brokerChaos kills a node of the real cluster every few seconds, one at a
// time, and starts it again a few seconds later, until the returned
// function is called; that function waits until every node runs again. A
// node that cannot start again fails nothing here: the drain that follows
// cannot finish without the cluster, and the round reports that.
func brokerChaos(ctx context.Context, cfg Config, intn func(int) int, tl *tally) (stop func()) {
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			sleep(cctx, time.Duration(1500+intn(2000))*time.Millisecond)
			if cctx.Err() != nil {
				return
			}
			i := intn(cfg.Kafka.Nodes())
			cfg.Kafka.StopBroker(i)
			tl.add("kafka:broker-stopped", 1)
			cfg.logf("node %d of %d stopped", i+1, cfg.Kafka.Nodes())
			sleep(cctx, time.Duration(2000+intn(3000))*time.Millisecond)
			sctx, scancel := context.WithTimeout(ctx, 3*time.Minute)
			err := cfg.Kafka.StartBroker(sctx, i)
			scancel()
			cfg.logf("node %d started again: %v", i+1, err)
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}
