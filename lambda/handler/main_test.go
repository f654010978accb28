package handler

import (
	"testing"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// TestMain stops the Kafka (kfake's process, or the real Apache Kafka
// cluster with OUTBOX_TEST_KAFKA=real) that TestTopicDeletedUnderTheRelayFunction
// starts.
func TestMain(m *testing.M) { testenv.Main(m) }
