package dynamo

import (
	"testing"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/storetest"
)

func TestConformance(t *testing.T) {
	stores := map[outbox.Store]*env{}
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, bucketCount int) outbox.Store {
			e := newEnv(t, bucketCount)
			stores[e.store] = e
			return e.store
		},
		Put: func(t *testing.T, s outbox.Store, msgs ...outbox.Message) error {
			return stores[s].put(ctxT(t), msgs...)
		},
	})
}
