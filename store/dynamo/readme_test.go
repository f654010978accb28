package dynamo

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestReadmeExample checks that the README's enqueue snippet is the import
// block of readme_example_test.go followed by the body of ExampleWriter_Write,
// so that the snippet users copy is code that compiles. The only
// normalisation: the body loses the one tab of indentation that gofmt gives
// a function body.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	snippet, ok := goBlockAfter(string(readme), "## Enqueue\n")
	if !ok {
		t.Fatal("README.md has no ```go block under \"## Enqueue\"")
	}

	const file = "readme_example_test.go"
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
			if d.Name.Name == "ExampleWriter_Write" {
				body = unindent(strings.Trim(text(d.Body.Lbrace+1, d.Body.Rbrace), "\n"))
			}
		}
	}
	if imports == "" || body == "" {
		t.Fatalf("%s lacks the import block or ExampleWriter_Write", file)
	}
	want := imports + "\n\n" + body + "\n"
	if snippet != want {
		t.Errorf("README.md's enqueue snippet differs from %s (imports, then the body of ExampleWriter_Write):\n%s",
			file, firstDifference(snippet, want))
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
