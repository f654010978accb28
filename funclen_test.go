package outbox_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFuncLines is the longest a non-test function may be, from its func
// line to its closing brace: past it, a reader cannot hold the function,
// and it is split into named phases (docs/design.md's words: read,
// classify, publish, advance, delete), each tested.
const maxFuncLines = 80

// shortFuncTrees are the trees (each directory below it too) whose
// non-test functions are all at most maxFuncLines long. Add a tree when
// its long functions are split; the rest of the repository is listed by
// go test -run TestFunctionLength -v.
var shortFuncTrees = []string{".", "kafka", "inbox", "lambda", "store", "cmd/demo", "relay"}

// longFuncExceptions are functions in shortFuncTrees still over the
// limit, as "dir/file.go:Func", each with the reason. Do not add to it.
var longFuncExceptions = map[string]string{}

// TestFunctionLength fails for a function over maxFuncLines lines in
// shortFuncTrees and logs every other one in the repository (with -v), so
// that the next split has its list.
func TestFunctionLength(t *testing.T) {
	long, err := longFuncs()
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]bool{}
	for _, f := range long {
		if !inShortTree(f.file) {
			t.Logf("%s: %s is %d lines (not checked)", f.file, f.name, f.lines)
			continue
		}
		key := f.file + ":" + f.name
		checked[key] = true
		if why, ok := longFuncExceptions[key]; ok {
			t.Logf("%s: %s is %d lines (excepted: %s)", f.file, f.name, f.lines, why)
			continue
		}
		t.Errorf("%s: %s is %d lines, over %d: split it into named phases", f.file, f.name, f.lines, maxFuncLines)
	}
	for key := range longFuncExceptions {
		if !checked[key] {
			t.Errorf("longFuncExceptions lists %s, which is no longer over %d lines (or gone): remove it", key, maxFuncLines)
		}
	}
}

func inShortTree(file string) bool {
	dir := filepath.ToSlash(filepath.Dir(file))
	return slices.ContainsFunc(shortFuncTrees, func(tree string) bool {
		return dir == tree || strings.HasPrefix(dir, tree+"/")
	})
}

type longFunc struct {
	file, name string
	lines      int
}

// longFuncs lists the non-test functions over maxFuncLines lines in the
// repository's Go files (walkRepo's), in file order.
func longFuncs() ([]longFunc, error) {
	var long []longFunc
	err := walkRepo([]string{".go"}, func(path string, src []byte) error {
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if n > maxFuncLines {
				long = append(long, longFunc{file: filepath.ToSlash(path), name: funcName(fn), lines: n})
			}
		}
		return nil
	})
	return long, err
}

// funcName is Func, or (Recv).Method / (*Recv).Method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	star := ""
	if s, ok := typ.(*ast.StarExpr); ok {
		star, typ = "*", s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	return fmt.Sprintf("(%s%s).%s", star, typ.(*ast.Ident).Name, fn.Name.Name)
}
