package outbox_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestMakeHelp: make help lists every target of the Makefile, each with a
// one-line description, and nothing that is not a target.
func TestMakeHelp(t *testing.T) {
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z-]*):(?:[^=]|$)`).FindAllSubmatch(mk, -1) {
		targets = append(targets, string(m[1]))
	}
	if !slices.Contains(targets, "help") || !slices.Contains(targets, "cli") || !slices.Contains(targets, "local") {
		t.Fatalf("the Makefile's targets %v lack help, cli or local", targets)
	}
	cmd := exec.Command("make", "-s", "help")
	var env []string
	for _, kv := range os.Environ() { // not the jobserver of a make test that runs this
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make help: %v", err)
	}
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "make" {
			t.Errorf("make help printed %q; want \"make TARGET  description\"", line)
			continue
		}
		listed[f[1]] = strings.Join(f[2:], " ")
	}
	for _, target := range targets {
		if listed[target] == "" {
			t.Errorf("make help does not list %s", target)
		}
	}
	for target := range listed {
		if !slices.Contains(targets, target) {
			t.Errorf("make help lists %s, which is no target", target)
		}
	}
}

// TestTestFilterNamesFailedSubtests: make test keeps only the lines its
// filter (TEST_FILTER) matches, and a failed subtest's "--- FAIL" line is
// indented under its parent's: the filter keeps it, so a failure in CI's
// log names the subtest, beside its file:line messages and the results.
// A test that passed in 10 s or more keeps its line (its time).
func TestTestFilterNamesFailedSubtests(t *testing.T) {
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TEST_FILTER := '([^']*)'$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no TEST_FILTER := '...' line in the Makefile")
	}
	filter, err := regexp.Compile(string(m[1]))
	if err != nil {
		t.Fatalf("TEST_FILTER does not compile: %v", err)
	}
	for _, c := range []struct {
		line string
		keep bool
	}{
		{"--- FAIL: TestSmallSoak (776.08s)", true},
		{"    --- FAIL: TestSmallSoak/delete (400.10s)", true},
		{"        --- FAIL: TestA/b/c (0.01s)", true},
		{"    soak_test.go:54: soak: these fault kinds fired fewer than 5 times", true},
		{"ok  \tgithub.com/dynakafka/outbox/inbox\t46.557s", true},
		{"FAIL\tgithub.com/dynakafka/outbox/internal/harness/soak\t776.298s", true},
		{"soak: mode=delete messages=3025 lost=0", true},
		{"    --- PASS: TestSmallSoak/delete (157.00s)", false},
		{"--- PASS: TestSmallSoak (776.08s)", true},
		{"--- PASS: TestRebucketCLI (10.02s)", true},
		{"--- PASS: TestQuick (9.99s)", false},
		{"--- PASS: TestQuick (0.01s)", false},
		{"=== RUN   TestSmallSoak/delete", false},
		{"some chatter", false},
	} {
		if got := filter.MatchString(c.line); got != c.keep {
			t.Errorf("TEST_FILTER keeps %q: %v, want %v", c.line, got, c.keep)
		}
	}
}
