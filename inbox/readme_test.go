package inbox

import (
	"testing"

	"github.com/dynakafka/outbox/internal/harness/readmecheck"
)

// TestReadmeExample checks that the README's inbox snippet is the import
// block of readme_example_test.go followed by the body of Example.
func TestReadmeExample(t *testing.T) {
	readmecheck.Snippet(t, "../README.md", "## Consume effectively once (the inbox)\n", "readme_example_test.go", "Example")
}
