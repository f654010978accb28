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
