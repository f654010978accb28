package kafka

import (
	"testing"

	"github.com/dynakafka/outbox/internal/harness/readmecheck"
)

// TestReadmeQuickstartRelay ties the quickstart's relay step to
// Example_runRelay.
func TestReadmeQuickstartRelay(t *testing.T) {
	readmecheck.Snippet(t, "../README.md", "### 3. The relay\n", "quickstart_example_test.go", "Example_runRelay")
}
