package dynamo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Every attribute letter the store writes or reads is named in
// docs/contract.md's "Every attribute at a glance", which is where the
// package documentation sends a reader of the tables.
func TestEveryAttributeIsInTheContract(t *testing.T) {
	doc, err := os.ReadFile("../../docs/contract.md")
	if err != nil {
		t.Fatal(err)
	}
	_, glance, ok := strings.Cut(string(doc), "\n## 11. Every attribute at a glance\n")
	if !ok {
		t.Fatal(`docs/contract.md has no section "## 11. Every attribute at a glance"`)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "attr") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					letter, _ := strconv.Unquote(lit.Value)
					n++
					if !strings.Contains(glance, "`"+letter+"`") {
						t.Errorf("%s: %s = %q is not in docs/contract.md's attribute table", fset.Position(id.Pos()), id.Name, letter)
					}
				}
			}
		}
	}
	if n < 40 {
		t.Errorf("found only %d attribute constants", n)
	}
}
