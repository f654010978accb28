package outbox_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docs/design.md is read by number: its contents list and file map are
// what a newcomer opens first, and code comments, tests and the other docs
// cite its sections as "§4.3". This keeps the numbers whole:
//
//  1. numbered headings (## 1., ### 1.1, #### 1.1.1) count from 1 without
//     a gap at every level, each under its parent;
//  2. the Contents section lists every heading, in order, with the anchor
//     GitHub gives it;
//  3. every path in the File map exists;
//  4. every "§N.M" in the repository's Go, Markdown and YAML files names a
//     section that exists, and every link to design.md#<anchor> a heading.
func TestDesignDocMap(t *testing.T) {
	raw, err := os.ReadFile("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	heads := designHeadings(doc)
	if len(heads) < 20 {
		t.Fatalf("found only %d headings in docs/design.md", len(heads))
	}

	sections := map[string]bool{}
	next := map[string]int{} // parent number -> the next child number expected
	for _, h := range heads {
		if h.num == "" {
			continue
		}
		sections[h.num] = true
		parent, last := "", h.num
		if i := strings.LastIndex(h.num, "."); i >= 0 {
			parent, last = h.num[:i], h.num[i+1:]
		}
		if parent != "" && !sections[parent] {
			t.Errorf("§%s (%q) is under no §%s", h.num, h.text, parent)
		}
		if want := strconv.Itoa(next[parent] + 1); last != want {
			t.Errorf("§%s (%q): want §%s, numbering without gaps", h.num, h.text, strings.TrimPrefix(parent+"."+want, "."))
		}
		next[parent], _ = strconv.Atoi(last)
		if strings.Count(h.num, ".") != h.level-2 {
			t.Errorf("§%s (%q) is a level-%d heading; its number says level %d", h.num, h.text, h.level, strings.Count(h.num, ".")+2)
		}
	}

	var want []string
	anchors := map[string]bool{}
	for _, h := range heads {
		anchors[githubAnchor(h.text)] = true
		if h.text != "Contents" {
			want = append(want, strings.Repeat("  ", h.level-2)+"- ["+h.text+"](#"+githubAnchor(h.text)+")")
		}
	}
	if got := contentsList(doc); !slices.Equal(got, want) {
		t.Errorf("docs/design.md's Contents does not list its headings; want:\n%s\n\ngot:\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}

	for _, p := range fileMapPaths(t, doc) {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("docs/design.md's File map names %s: %v", p, err)
		}
	}

	ref := regexp.MustCompile(`§(\d+(?:\.\d+)*)`)
	link := regexp.MustCompile(`design\.md#([\w-]+)`)
	refs := 0
	err = walkRepo([]string{".go", ".md", ".yaml"}, func(path string, b []byte) error {
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range ref.FindAllStringSubmatch(line, -1) {
				refs++
				if !sections[m[1]] {
					t.Errorf("%s:%d: §%s names no section of docs/design.md", path, i+1, m[1])
				}
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				if !anchors[m[1]] {
					t.Errorf("%s:%d: design.md#%s names no heading of docs/design.md", path, i+1, m[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if refs < 50 {
		t.Errorf("found only %d § references in the repository; the walk is broken", refs)
	}
}

type designHeading struct {
	level     int
	num, text string
}

// designHeadings are doc's headings of levels 2 to 4, outside code blocks.
func designHeadings(doc string) []designHeading {
	var hs []designHeading
	fence := false
	head := regexp.MustCompile(`^(#{2,4}) ((?:(\d+(?:\.\d+)*)\.? )?.*)$`)
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if m := head.FindStringSubmatch(line); m != nil && !fence {
			hs = append(hs, designHeading{level: len(m[1]), num: m[3], text: m[2]})
		}
	}
	return hs
}

// githubAnchor is the anchor GitHub gives a heading: lower case, with
// everything but letters, digits, spaces, hyphens and underscores dropped
// and spaces made hyphens.
func githubAnchor(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// contentsList is the list under doc's "## Contents" heading.
func contentsList(doc string) []string {
	_, after, ok := strings.Cut(doc, "\n## Contents\n")
	if !ok {
		return nil
	}
	var items []string
	for _, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(line, "#") {
			break
		}
		if strings.TrimSpace(line) != "" {
			items = append(items, line)
		}
	}
	return items
}

// fileMapPaths are the paths in the code and test columns of doc's File
// map table: a `name` with a slash is a path from the repository root
// (`dir/` a directory), and a bare `file.go` is in the directory of the
// path before it in its group (the part of a cell between semicolons), or
// the root.
func fileMapPaths(t *testing.T, doc string) []string {
	_, after, ok := strings.Cut(doc, "\n## File map\n")
	if !ok {
		t.Error("docs/design.md has no File map section")
		return nil
	}
	tick := regexp.MustCompile("`([^`]+)`")
	var paths []string
	rows := 0
	for _, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(line, "#") {
			break
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 || strings.HasPrefix(strings.TrimSpace(cells[1]), "-") || strings.TrimSpace(cells[1]) == "§" {
			continue
		}
		rows++
		for _, group := range strings.Split(cells[3]+";"+cells[4], ";") {
			dir := ""
			for _, m := range tick.FindAllStringSubmatch(group, -1) {
				name := m[1]
				switch {
				case strings.Contains(name, "*"):
					continue
				case strings.Contains(name, "/"):
					paths = append(paths, name)
					dir = strings.TrimSuffix(name, "/") + "/"
					if strings.HasSuffix(name, ".go") {
						dir = filepath.Dir(name) + "/"
					}
				case strings.HasSuffix(name, ".go"):
					paths = append(paths, dir+name)
				}
			}
		}
	}
	if rows < 10 {
		t.Errorf("docs/design.md's File map has %d rows", rows)
	}
	return paths
}
