package outboxtest

import (
	"testing"

	"github.com/dynakafka/outbox/internal/readmecheck"
)

// TestReadmeQuickstartTest ties the quickstart's test step to
// TestPlaceOrder.
func TestReadmeQuickstartTest(t *testing.T) {
	readmecheck.Snippet(t, "../README.md", "### 5. Test it\n", "quickstart_test.go", "TestPlaceOrder")
}
