package memory_test

import (
	"testing"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/store/memory"
	"github.com/dynakafka/outbox/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, bucketCount int) outbox.Store { return memory.New(bucketCount) },
		Put: func(t *testing.T, s outbox.Store, msgs ...outbox.Message) error {
			return s.(*memory.Store).Put(msgs...)
		},
	})
}
