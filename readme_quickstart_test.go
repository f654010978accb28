package outbox_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeQuickstartIsShort holds the README's "Use it in your service"
// to its promise (issue 18): at most 80 lines of Go, blank lines not
// counted, over all of its go blocks. Each block is a compiled example
// (TestReadmeQuickstart* in store/dynamo, kafka and outboxtest).
func TestReadmeQuickstartIsShort(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "\n## Use it in your service\n")
	if start < 0 {
		t.Fatal(`README.md has no "## Use it in your service" section`)
	}
	section := s[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	lines, blocks, in := 0, 0, false
	for _, l := range strings.Split(section, "\n") {
		switch {
		case !in && l == "```go":
			in, blocks = true, blocks+1
		case in && l == "```":
			in = false
		case in && strings.TrimSpace(l) != "":
			lines++
		}
	}
	if blocks < 3 {
		t.Errorf("the quickstart has %d go blocks; want its setup, relay and test steps", blocks)
	}
	if lines > 80 {
		t.Errorf("the quickstart has %d lines of Go (blank lines not counted); the promise is at most 80", lines)
	}
	t.Logf("quickstart: go_blocks=%d go_lines=%d", blocks, lines)
}
