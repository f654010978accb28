// Package readmecheck checks that a README's code snippet is code that
// compiles: the import block of an example file followed by the body of one
// of its example functions.
package readmecheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// Snippet checks that the first ```go block after heading in readme is the
// import block of file followed by the body of its function fn, less the one
// tab of indentation gofmt gives a function body.
func Snippet(t *testing.T, readme, heading, file, fn string) {
	t.Helper()
	doc, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	snippet, ok := goBlockAfter(string(doc), heading)
	if !ok {
		t.Fatalf("%s has no ```go block under %q", readme, heading)
	}
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	text := func(from, to token.Pos) string {
		return string(src[fset.Position(from).Offset:fset.Position(to).Offset])
	}
	var imports, body string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			if d.Tok == token.IMPORT {
				imports = text(d.Pos(), d.End())
			}
		case *ast.FuncDecl:
			if d.Name.Name == fn {
				body = unindent(strings.Trim(text(d.Body.Lbrace+1, d.Body.Rbrace), "\n"))
			}
		}
	}
	if imports == "" || body == "" {
		t.Fatalf("%s lacks the import block or %s", file, fn)
	}
	want := imports + "\n\n" + body + "\n"
	if snippet != want {
		t.Errorf("%s's snippet under %q differs from %s (imports, then the body of %s):\n%s",
			readme, strings.TrimSpace(heading), file, fn, firstDifference(snippet, want))
	}
}

// goBlockAfter returns the contents of the first ```go block after heading.
func goBlockAfter(doc, heading string) (string, bool) {
	_, rest, ok := strings.Cut(doc, heading)
	if !ok {
		return "", false
	}
	_, rest, ok = strings.Cut(rest, "```go\n")
	if !ok {
		return "", false
	}
	block, _, ok := strings.Cut(rest, "```\n")
	return block, ok
}

// unindent removes one leading tab from every line.
func unindent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "\t")
	}
	return strings.Join(lines, "\n")
}

// firstDifference shows the first line where got and want differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d of the snippet:\n  README:  %s\n  example: %s", i+1, gl, wl)
		}
	}
	return "(same lines)"
}
