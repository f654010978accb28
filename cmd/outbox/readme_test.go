package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/store/dynamo"
)

// TestReadmeCommands holds the README's command lines to the CLI: every
// `outbox ...` line of its sh blocks (with the variables its export lines
// set before it) passes the CLI's whole check (flags, required flags and
// variables, arguments) as `outbox` itself runs it, up to the first network
// call; every `outbox COMMAND` it names in the text is a command. Before,
// its drain example lacked the required --auth and exited 2. And the CLI is
// built the one way that works from a checkout, make cli (TestLocal runs
// it): `go run ./cmd/outbox` fails at the root, `go install ...@latest`
// needs a published release.
func TestReadmeCommands(t *testing.T) {
	doc, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(doc)
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir()) // files the examples name are made here

	checked := 0
	for _, block := range shBlocks(readme) {
		env := map[string]string{} // each block is a shell of its own
		for _, line := range block {
			checkLine(t, line, env, &checked)
		}
	}
	if checked < 6 {
		t.Errorf("checked %d outbox command lines in the README's sh blocks; its Operate section alone has 6", checked)
	}

	named := 0
	for _, m := range regexp.MustCompile("`(?:bin/)?outbox ([a-z]+)[^`]*`").FindAllStringSubmatch(readme, -1) {
		if lookup(m[1]) == nil && m[1] != "help" {
			t.Errorf("README names %s, but outbox has no command %q", m[0], m[1])
		}
		named++
	}
	if named < 5 {
		t.Errorf("found %d outbox commands named in the README's text", named)
	}

	if !strings.Contains(readme, "make cli") {
		t.Error("README does not say to build the CLI with make cli")
	}
	for _, wrong := range []string{"go install github.com/dynakafka/outbox/cmd/outbox", "go run ./cmd/outbox"} {
		if strings.Contains(readme, wrong) {
			t.Errorf("README says %q, which does not work from a checkout; make cli does", wrong)
		}
	}
	if !regexp.MustCompile(`(?m)^cli:.*\n\t.* build .*\./outbox$`).Match(mk) {
		t.Error("the Makefile has no cli target that builds ./outbox")
	}
}

// checkLine checks the outbox command lines of one line of a README sh
// block, after its export lines set env.
func checkLine(t *testing.T, line string, env map[string]string, checked *int) {
	t.Helper()
	for _, part := range strings.Split(line, "&&") {
		words := shellWords(part)
		if len(words) == 0 {
			continue
		}
		if words[0] == "export" {
			for _, kv := range words[1:] {
				if k, v, ok := strings.Cut(kv, "="); ok {
					env[k] = v
				}
			}
			continue
		}
		if words[0] != "outbox" && words[0] != "bin/outbox" {
			continue
		}
		for _, w := range words {
			if strings.HasSuffix(w, ".json") {
				if _, err := os.Stat(w); err != nil {
					writeFile(t, w, `{"idempotencyKey": "k", "messages": []}`)
				}
			}
		}
		var stdout, stderr bytes.Buffer
		a := &app{stdout: &stdout, stderr: &stderr, stdin: strings.NewReader(""),
			getenv: func(k string) string { return env[k] }, now: time.Now}
		if _, _, act, code := a.prepare(words[1:]); act == nil && (code != exitOK || !isHelp(words)) {
			t.Errorf("README: %q exits %d:\n%s", strings.TrimSpace(part), code, stderr.String())
		}
		*checked++
	}
}

// isHelp reports whether words ask for help (exit 0 without an action).
func isHelp(words []string) bool {
	for _, w := range words[1:] {
		if w == "--help" || w == "-h" || w == "help" {
			return true
		}
	}
	return false
}

// shBlocks returns the lines of each ```sh block of doc, continuation lines
// joined and comments removed.
func shBlocks(doc string) [][]string {
	var out [][]string
	in, cont := false, ""
	for _, l := range strings.Split(doc, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```sh":
			in = true
			out = append(out, nil)
			continue
		case in && strings.TrimSpace(l) == "```":
			in = false
			continue
		case !in:
			continue
		}
		l = cont + stripComment(l)
		if strings.HasSuffix(strings.TrimSpace(l), `\`) {
			cont = strings.TrimSuffix(strings.TrimSpace(l), `\`) + " "
			continue
		}
		cont = ""
		out[len(out)-1] = append(out[len(out)-1], l)
	}
	return out
}

// stripComment cuts a shell comment: a # that starts a word, outside
// quotes.
func stripComment(l string) string {
	var quote rune
	for i, r := range l {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return l[:i]
		}
	}
	return l
}

// shellWords splits a command line into words as a shell would for these
// examples: quotes, and the line ends at a pipe or a redirection.
func shellWords(s string) []string {
	var (
		words []string
		cur   strings.Builder
		quote rune
		have  bool
	)
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, have = r, true
		case r == ' ' || r == '\t':
			if have {
				words = append(words, cur.String())
				cur.Reset()
				have = false
			}
		case r == '|' || r == '>' || r == '<':
			if have {
				words = append(words, cur.String())
			}
			return words
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		words = append(words, cur.String())
	}
	return words
}

// TestReadmeLocalSettings: the settings the README shows are what
// `make local TOPICS=order-events,payments` prints (its default ports).
func TestReadmeLocalSettings(t *testing.T) {
	doc, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	o := localOptions{tables: dynamo.Tables{Messages: "orders-outbox", Control: "orders-outbox-control"}, topics: []string{"order-events", "payments"}}
	want := localEnv("http://127.0.0.1:8000", dynamolocal.DefaultRegion, o, []string{"127.0.0.1:9092"})
	if !strings.Contains(string(doc), "```sh\n"+want+"```\n") {
		t.Errorf("README's \"Run it locally for your service\" does not show the lines outbox local prints:\n%s", want)
	}
}
