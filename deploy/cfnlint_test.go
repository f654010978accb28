package deploy

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"
)

// cfn-lint's exit status is a bit mask of what it found: 2 errors,
// 4 warnings, 8 informational findings; 0 nothing. Anything else (1 for a
// crash or a bad command line) means it did not lint.
const (
	cfnLintErrors   = 2
	cfnLintWarnings = 4
	cfnLintInfo     = 8
)

// TestCfnLint runs cfn-lint, which applies the SAM transform and checks the
// result against CloudFormation's resource schemas, when it is installed:
// no error and no warning.
func TestCfnLint(t *testing.T) {
	cfnLint(t, "template.yaml")
}

// cfnLint runs cfn-lint on path (relative to the repository root): no error
// and no warning.
func cfnLint(t *testing.T, path string) {
	t.Helper()
	bin, err := exec.LookPath("cfn-lint")
	if err != nil {
		t.Skipf("cfn-lint is not on PATH, so %s was not linted (pip install cfn-lint)", path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, path)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return
	case !errors.As(err, &exit):
		t.Fatalf("cfn-lint did not run: %v\n%s", err, out)
	}
	code := exit.ExitCode()
	switch {
	case code&^(cfnLintErrors|cfnLintWarnings|cfnLintInfo) != 0:
		t.Fatalf("cfn-lint failed (exit %d) without linting %s:\n%s", code, path, out)
	case code&(cfnLintErrors|cfnLintWarnings) != 0:
		t.Fatalf("cfn-lint found errors or warnings in %s (exit %d); it must have neither:\n%s", path, code, out)
	default:
		t.Logf("cfn-lint found informational notes only in %s (exit %d):\n%s", path, code, out)
	}
}
