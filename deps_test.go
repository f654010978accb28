package outbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The model and the engine must stay storage- and broker-agnostic:
// nothing the root package or package relay imports, directly or not, may
// come from the AWS SDK or a Kafka client.
func TestRootImportsNoAWSOrKafka(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".", "./relay").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps returned only %v", deps)
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/aws") || strings.HasPrefix(d, "github.com/twmb") {
			t.Errorf("the root package or package relay depends on %s", d)
		}
	}
}

// A service that imports the writer (the root package and store/dynamo) and
// the inbox must get neither the tools' heavy dependencies (plotting, PDF,
// fonts, the CDK, OpenTelemetry) nor what only the Lambda functions and the
// tests need: aws-lambda-go, Secrets Manager, kfake, kadm. With module graph
// pruning a dependent module sees every requirement of the library's go.mod,
// test-only ones included, so these live in the modules beside it (lambda/,
// local/esm, outboxtest, ...; see the Makefile's LIBRARY_MODULES). This
// builds such a consumer module against this checkout, offline, and lists
// its modules.
func TestConsumerModuleGraphIsLean(t *testing.T) {
	if testing.Short() {
		t.Skip("resolves a module graph with the go command")
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module example.com/consumer\n\ngo 1.26.0\n\nrequire github.com/dynakafka/outbox v0.0.0\n\nreplace github.com/dynakafka/outbox => " + root + "\n"
	main := `package main

import (
	_ "github.com/dynakafka/outbox"
	_ "github.com/dynakafka/outbox/inbox"
	_ "github.com/dynakafka/outbox/store/dynamo"
)

func main() {}
`
	for name, body := range map[string]string{"go.mod": gomod, "main.go": main} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The library's go.sum covers every module the consumer can need.
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		// Offline: the library's own modules are in the module cache (make
		// deps downloads them); a module it does not have is an error.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off")
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("go %s: %v\n%s(run make deps, or go mod download in the library, to fill the module cache)", strings.Join(args, " "), err, stderr)
		}
		return string(out)
	}
	run("build", "./...")
	mods := strings.Fields(run("list", "-m", "-f", "{{.Path}}", "all"))
	if len(mods) < 5 {
		t.Fatalf("go list -m all listed only %v", mods)
	}
	banned := []string{
		// what only the Lambda functions and the tests need
		"github.com/aws/aws-lambda-go", "github.com/aws/aws-sdk-go-v2/service/secretsmanager",
		"github.com/twmb/franz-go/pkg/kfake", "github.com/twmb/franz-go/pkg/kadm",
		// the tools' heavy dependencies
		"gonum.org/", "codeberg.org/go-latex", "codeberg.org/go-pdf", "codeberg.org/go-fonts",
		"git.sr.ht/~sbinet", "github.com/ajstarks/svgo", "github.com/golang/freetype", "golang.org/x/image",
		"github.com/aws/aws-cdk-go", "github.com/aws/constructs-go", "github.com/aws/jsii-runtime-go",
		"github.com/dynakafka/outbox/tools", "github.com/dynakafka/outbox/cdk",
		"go.opentelemetry.io/", "github.com/dynakafka/outbox/otel"}
	for _, m := range mods {
		for _, h := range banned {
			if strings.HasPrefix(m, h) {
				t.Errorf("a service importing the writer and the inbox gets %s in its module graph", m)
			}
		}
	}
	t.Logf("%d modules in a writer+inbox consumer's graph", len(mods))
}
