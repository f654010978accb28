package outboxtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dynakafka/outbox/internal/harness/readmecheck"
)

// TestReadmeQuickstartTest ties the quickstart's test step to
// TestPlaceOrder.
func TestReadmeQuickstartTest(t *testing.T) {
	readmecheck.Snippet(t, "../README.md", "### 5. Test it\n", "quickstart_test.go", "TestPlaceOrder")
}

// TestReadmeModuleInstructions follows the quickstart's test step as a
// user's service would, in a module of its own beside a checkout
// (../outbox): it runs the README's commands for go.mod, then go test on
// TestPlaceOrder. outboxtest is a module of its own, and neither module is
// published, so without them the import of outboxtest does not resolve.
func TestReadmeModuleInstructions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy and go test in a new module")
	}
	doc, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, step, _ := strings.Cut(string(doc), "### 5. Test it\n")
	step, _, _ = strings.Cut(step, "\n### ")
	_, block, _ := strings.Cut(step, "```sh\n")
	block, _, ok := strings.Cut(block, "```\n")
	if !ok || !strings.Contains(block, "outboxtest") {
		t.Fatalf("README's \"5. Test it\" has no sh block that adds outboxtest to a go.mod")
	}

	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(root, filepath.Join(dir, "outbox")); err != nil {
		t.Fatal(err)
	}
	svc := filepath.Join(dir, "svc")
	src, err := os.ReadFile("quickstart_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(svc, 0o755); err != nil {
		t.Fatal(err)
	}
	test := strings.Replace(string(src), "package outboxtest_test", "package svc", 1)
	if err := os.WriteFile(filepath.Join(svc, "place_test.go"), []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	// The service's module as it is before (go mod init), then the README's
	// commands, then its tests. No workspace, no network: what the
	// checkout's modules require is in the module cache (make deps).
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=", "GOPROXY=off")
	for _, line := range append([]string{"go mod init example.com/svc"}, append(strings.Split(strings.TrimSpace(block), "\n"), "go test ./...")...) {
		cmd := exec.Command("bash", "-c", line)
		cmd.Dir, cmd.Env = svc, env
		if out, err := cmd.CombinedOutput(); err != nil {
			gomod, _ := os.ReadFile(filepath.Join(svc, "go.mod"))
			t.Fatalf("%s: %v\n%s\ngo.mod:\n%s", line, err, out, gomod)
		}
	}
}
