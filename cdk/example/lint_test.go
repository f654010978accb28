package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cfn-lint's exit status is a bit mask: 2 errors, 4 warnings, 8
// informational findings. Anything else (1: a crash, a bad command line)
// means it did not lint.
const (
	cfnLintErrors   = 2
	cfnLintWarnings = 4
	cfnLintInfo     = 8
)

// TestCfnLint lints every synthesized template (one cfn-lint process for
// all: its start-up is the slow part) against CloudFormation's resource
// schemas. Errors fail; warnings are reported. cfn-lint is required: the
// synthesized templates are what `cdk deploy` would deploy.
func TestCfnLint(t *testing.T) {
	s := results(t)
	bin, err := exec.LookPath("cfn-lint")
	if err != nil {
		t.Fatal("cfn-lint is not on PATH (pip install cfn-lint); the synthesized templates must be linted")
	}
	args := []string{"--format", "parseable"}
	for _, stack := range s.stacks {
		args = append(args, filepath.Join(s.dir, "cdk.out", stack+".template.json"))
	}
	// A bound on a hung process, not a performance assertion.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return
	case !errors.As(err, &exit):
		t.Fatalf("cfn-lint did not run: %v\n%s", err, out)
	}
	switch code := exit.ExitCode(); {
	case code&^(cfnLintErrors|cfnLintWarnings|cfnLintInfo) != 0:
		t.Fatalf("cfn-lint failed (exit %d) without linting:\n%s", code, out)
	case code&cfnLintErrors != 0:
		t.Errorf("cfn-lint found errors (exit %d):\n%s", code, out)
	}
	// Warnings fail too, unless listed in acceptedLint.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		if why := acceptedFinding(line); why != "" {
			t.Logf("accepted (%s): %s", why, line)
		} else {
			t.Errorf("cfn-lint: %s", line)
		}
	}
}

// acceptedLint are cfn-lint findings that are not the outbox's: rule,
// a text in the finding, and why it is accepted.
var acceptedLint = []struct{ rule, text, why string }{
	{"W3005", "'WriterServiceRole", "the example's placeholder writer is an L2 Function, which adds a DependsOn its role that its GetAtt already implies"},
}

// acceptedFinding returns why a parseable cfn-lint line is accepted, or "".
func acceptedFinding(line string) string {
	for _, a := range acceptedLint {
		if strings.Contains(line, ":"+a.rule+":") && strings.Contains(line, a.text) {
			return a.why
		}
	}
	return ""
}
