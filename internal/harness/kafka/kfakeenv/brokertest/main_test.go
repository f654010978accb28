package brokertest

import (
	"testing"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// TestMain stops the real Apache Kafka cluster that the real-broker tests
// (OUTBOX_TEST_KAFKA=real) start.
func TestMain(m *testing.M) { testenv.Main(m) }
