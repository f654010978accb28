package soak

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
)

// TestSmallSoak is the small soak run of `make test`: at least 3,000
// messages through every fault, each kind firing at least 5 times, in
// DeleteMode; 2,000 in WatermarkMode, where the relay writes nothing per
// message (so no unprocessed batch writes and no crash mid-delete), each
// kind firing at least once (the rarest fire about 5 times in 2,000); and
// 1,200 with Kafka transactions. The DeleteMode run changes BucketCount
// 8 → 12 online half-way through, with the faults on (docs/design.md §13).
func TestSmallSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak skipped in -short mode")
	}
	if os.Getenv("OUTBOX_TEST_KAFKA_BROKERS") != "" {
		t.Log("the soak injects Kafka faults through kfake; it runs on kfake even when a broker is given")
	}
	for _, c := range []struct {
		mode         outbox.Mode
		txn          bool
		messages     int
		minEachFault int
		rebucket     int
	}{
		{outbox.DeleteMode, false, 3000, 5, 12},
		{outbox.WatermarkMode, false, 2000, 1, 0},
		// Kafka transactions: a read_committed consumer must see nothing of
		// an aborted or fenced transaction, no two transactions of a bucket
		// interleaved, and duplicates only as whole transactions.
		{outbox.DeleteMode, true, 1200, 1, 0},
	} {
		name := c.mode.String()
		if c.txn {
			name = "txn-" + name
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
			defer cancel()
			res, err := Run(ctx, Config{Messages: c.messages, FaultRate: 1, MinEachFault: c.minEachFault, Mode: c.mode, Txn: c.txn, Rebucket: c.rebucket, Progress: testWriter{t}})
			fmt.Println(res.Line())
			t.Logf("faults by kind: %s", res.Kinds())
			t.Logf("read model: %s", res.ReadModel)
			t.Logf("rolled back %d, elapsed %v", res.RolledBack, res.Elapsed.Round(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			// One log call per line: make test's filter keeps only lines
			// that start with the test file's name.
			for _, id := range res.UnexplainedIDs {
				t.Logf("unexplained duplicate %s:", id)
				for _, line := range Trace(id) {
					t.Logf("  %s %s", id[len(id)-6:], line)
				}
			}
			if !res.OK() {
				t.Fatalf("broken promises: %s; %s", res.Line(), res.Details())
			}
			if res.Messages < c.messages {
				t.Fatalf("only %d messages", res.Messages)
			}
		})
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
