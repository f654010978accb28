package soak

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// brokerStops bounds the nodes killed per round: a node takes long to start
// again on a busy machine, and the drain waits for it.
const brokerStops = 2

// brokerChaos kills a node of the real cluster a few seconds into the
// round, one at a time, and starts it again a few seconds later, up to
// brokerStops times or until the returned function is called; that
// function waits until every node runs again. A
// node that cannot start again fails nothing here: the drain that follows
// cannot finish without the cluster, and the round reports that.
func brokerChaos(ctx context.Context, cfg Config, intn func(int) int, tl *tally) (stop func()) {
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for range brokerStops {
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

// waitCoordinators waits until the cluster names a coordinator for every
// transactional id and group: a fresh cluster creates __transaction_state
// and __consumer_offsets on their first use, with the replication factor of
// every node, so none may be down until then (a node killed first left
// every transactional producer and consumer group without a coordinator
// until it came back, about 70 s on a busy machine).
func waitCoordinators(ctx context.Context, brokers, txnIDs, groups []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		var failed error
		for _, rs := range []kadm.FindCoordinatorResponses{adm.FindTxnCoordinators(ctx, txnIDs...), adm.FindGroupCoordinators(ctx, groups...)} {
			for _, r := range rs {
				if r.Err != nil {
					failed = fmt.Errorf("coordinator of %s: %w", r.Name, r.Err)
				}
			}
		}
		if failed == nil {
			return nil
		}
		if ctx.Err() != nil {
			return failed
		}
		sleep(ctx, 200*time.Millisecond)
	}
}
