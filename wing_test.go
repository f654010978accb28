package outbox_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The test machinery lives in one wing, internal/harness: the simulator,
// the soak, the checkers, the fault injection, the test environment and
// the Kafka fakes. No production package imports it (test files may), so
// that a reader of the production code never meets it and no binary we
// ship carries it. The one exception is cmd/soak, the soak's runner
// (make soak).
func TestProductionImportsNoHarness(t *testing.T) {
	const harness = "github.com/dynakafka/outbox/internal/harness"
	allowed := map[string]bool{"github.com/dynakafka/outbox/cmd/soak": true}
	// The modules with production packages; each module's own go.mod, as
	// its users build it.
	var checked int
	for _, dir := range []string{".", "cmd", "lambda", "local/esm", "local/schedule", "inbox/lambdakafka", "examples/orderviewfn", "outboxtest"} {
		cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list in %s: %v\n%s", dir, err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || strings.HasPrefix(f[0], harness+"/") || allowed[f[0]] {
				continue
			}
			checked++
			for _, imp := range f[1:] {
				if imp == harness || strings.HasPrefix(imp, harness+"/") {
					t.Errorf("%s (not a test file) imports %s: test machinery belongs in internal/harness or in _test.go files", f[0], imp)
				}
			}
		}
	}
	if checked < 30 {
		t.Fatalf("go list listed only %d production packages", checked)
	}
}
