package outbox_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// CONTRIBUTING.md is where a newcomer learns to run the lanes: it names
// every test lane of the Makefile and every environment variable
// internal/testenv reads, and every test it cites by name exists.
func TestContributingNamesTheLanes(t *testing.T) {
	b, err := os.ReadFile("CONTRIBUTING.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, lane := range []string{"make test", "make test-short", "make sim", "make soak", "make bench", "make fuzz", "make lint"} {
		if !strings.Contains(doc, "`"+lane+"`") {
			t.Errorf("CONTRIBUTING.md does not name `%s`", lane)
		}
	}
	env, err := os.ReadFile("internal/testenv/doc.go")
	if err != nil {
		t.Fatal(err)
	}
	vars := regexp.MustCompile(`OUTBOX_TEST_[A-Z_]+`).FindAllString(string(env), -1)
	if len(vars) < 3 {
		t.Fatalf("internal/testenv/doc.go names only %v", vars)
	}
	for _, v := range vars {
		if !strings.Contains(doc, v) {
			t.Errorf("CONTRIBUTING.md does not name %s, which internal/testenv reads", v)
		}
	}

	cited := regexp.MustCompile("`(Test[A-Za-z0-9_]+)`").FindAllStringSubmatch(doc, -1)
	if len(cited) < 5 {
		t.Fatalf("CONTRIBUTING.md cites only %d tests", len(cited))
	}
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	err = walkRepo([]string{"_test.go"}, func(_ string, src []byte) error {
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cited {
		if !defined[m[1]] {
			t.Errorf("CONTRIBUTING.md cites %s, which no test file defines", m[1])
		}
	}
}
