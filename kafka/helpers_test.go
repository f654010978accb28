package kafka

import (
	"testing"

	"github.com/dynakafka/outbox/internal/harness/kafka/kafkatest"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// The suite's helpers live in internal/harness/kafka/kafkatest, shared with
// internal/harness/kafka/kfakeenv/brokertest (the tests that need kfake in process or kadm).
const testTimeout = kafkatest.Timeout

type publishResult = kafkatest.PublishResult

var (
	testCtx      = kafkatest.Ctx
	newTopic     = kafkatest.NewTopic
	messages     = kafkatest.Messages
	sameKey      = kafkatest.SameKey
	consumeAll   = kafkatest.ConsumeAll
	ids          = kafkatest.IDs
	msgIDs       = kafkatest.MsgIDs
	publishErr   = kafkatest.PublishErr
	publishAsync = kafkatest.PublishAsync
	await        = kafkatest.Await
	recordID     = kafkatest.RecordID
)

func newPublisher(t *testing.T, k *testenv.KafkaCluster, opts ...Option) *Publisher {
	t.Helper()
	p, err := NewPublisher(testCtx(t), k.Brokers, opts...)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}
