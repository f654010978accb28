package dynamo

import (
	"testing"

	"github.com/dynakafka/outbox/internal/harness/readmecheck"
)

// TestReadmeExample checks that the README's enqueue snippet is the import
// block of readme_example_test.go followed by the body of ExampleWriter_Write,
// so that the snippet users copy is code that compiles.
func TestReadmeExample(t *testing.T) {
	readmecheck.Snippet(t, "../../README.md", "## Enqueue\n", "readme_example_test.go", "ExampleWriter_Write")
}

// TestReadmeQuickstartSetup ties the quickstart's first step to
// Example_quickstartSetup.
func TestReadmeQuickstartSetup(t *testing.T) {
	readmecheck.Snippet(t, "../../README.md", "### 1. Tables and topics\n", "quickstart_example_test.go", "Example_quickstartSetup")
}
