package deploy

import (
	"testing"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// TestMain stops the DynamoDB Local that the permission tests start.
func TestMain(m *testing.M) { testenv.Main(m) }
