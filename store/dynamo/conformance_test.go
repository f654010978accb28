package dynamo

import (
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/storetest"
)

// TestConformance runs the store conformance suite on outboxes in each mode.
func TestConformance(t *testing.T) {
	for _, c := range []struct {
		mode      outbox.Mode
		retention time.Duration
		opts      []TablesOption
	}{
		{outbox.DeleteMode, 0, nil},
		{outbox.WatermarkMode, 6 * time.Hour, []TablesOption{WithMode(outbox.WatermarkMode), Retention(6 * time.Hour)}},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			stores := map[outbox.Store]*env{}
			storetest.Run(t, storetest.Harness{
				Mode: c.mode, Retention: c.retention,
				New: func(t *testing.T, bucketCount int) outbox.Store {
					e := newEnv(t, bucketCount, c.opts...)
					stores[e.store] = e
					return e.store
				},
				Put: func(t *testing.T, s outbox.Store, msgs ...outbox.Message) error {
					return stores[s].put(ctxT(t), msgs...)
				},
			})
		})
	}
}
