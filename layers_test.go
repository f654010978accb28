package outbox_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The layers, lowest first. A file may use what its own layer and the
// layers below it declare; an up-arrow is a pair (file, identifier) where
// the identifier is declared in a file of a higher layer than the file
// that uses it, counted once per pair, whatever the number of uses. Test
// files are not counted.
//
//	model     the root package's message, bucket, class, errors,
//	          validation and trace context, the Store and Publisher
//	          contracts with their optional capabilities, and the config
//	          item (Config and its methods): layerModel
//	adapters  what implements or extends the contracts without the
//	          engine: store/..., kafka/..., sequence/..., inbox/...,
//	          cloudevent/,
//	          schema/..., internal/... but its harness: layerAdapter
//	engine    the relay (relay, drain, publish, stuck, sweep, notify,
//	          options, gate, change): layerEngine
//	wiring    everything else: the Lambda functions, the CLI, the test
//	          harness, the tools, the examples: layerWiring
//
// Two measures: inside the root package, a model file's use of an engine
// file's name (found with go/types, so methods and fields count too);
// across packages, an adapter's qualified use (outbox.X) of a name the
// root declares in an engine file, or of any name of the engine's own
// package.
const (
	layerModel = iota
	layerAdapter
	layerEngine
	layerWiring
)

// modelFiles are the root package's files of layerModel; its other files
// are layerEngine.
var modelFiles = map[string]bool{
	"doc.go": true, "message.go": true, "bucket.go": true, "class.go": true, "errors.go": true,
	"validate.go": true, "trace.go": true, "json.go": true,
	"store.go": true, "shared.go": true, "region.go": true, "config.go": true,
}

// enginePackages are the directories (below the root) of the engine's own
// packages.
var enginePackages = []string{"relay"}

var adapterTrees = []string{"store", "kafka", "sequence", "inbox", "cloudevent", "schema", "internal"}

// layer is the layer of the non-test file path (slash-separated, relative
// to the repository root).
func layer(path string) int {
	dir, file := filepath.Split(path)
	dir = strings.TrimSuffix(dir, "/")
	switch {
	case dir == "":
		if modelFiles[file] {
			return layerModel
		}
		return layerEngine
	case slices.Contains(enginePackages, dir):
		return layerEngine
	case dir == "internal/harness" || strings.HasPrefix(dir, "internal/harness/"):
		return layerWiring
	}
	for _, tree := range adapterTrees {
		if dir == tree || strings.HasPrefix(dir, tree+"/") {
			return layerAdapter
		}
	}
	return layerWiring
}

type arrow struct{ from, to, name string }

// packageUpArrows type-checks the non-test files of the package in dir
// and returns the up-arrows between its files.
func packageUpArrows(dir string) ([]arrow, error) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	exports, err := exportData(dir)
	if err != nil {
		return nil, err
	}
	lookup := func(path string) (io.ReadCloser, error) { return os.Open(exports[path]) }
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	pkg, err := conf.Check(dir, fset, files, info)
	if err != nil {
		return nil, err
	}
	seen := map[arrow]bool{}
	for id, obj := range info.Uses {
		if obj.Pkg() != pkg || !obj.Pos().IsValid() {
			continue
		}
		if v, ok := obj.(*types.Var); ok && !v.IsField() && obj.Parent() != pkg.Scope() {
			continue // a local variable
		}
		if obj.Parent() != nil && obj.Parent() != pkg.Scope() && obj.Parent() != types.Universe {
			if _, isVar := obj.(*types.Var); !isVar {
				continue // a local type or constant
			}
		}
		from := filepath.ToSlash(filepath.Join(dir, filepath.Base(fset.Position(id.Pos()).Filename)))
		to := filepath.ToSlash(filepath.Join(dir, filepath.Base(fset.Position(obj.Pos()).Filename)))
		if layer(from) < layer(to) {
			seen[arrow{from, to, obj.Name()}] = true
		}
	}
	var out []arrow
	for a := range seen {
		out = append(out, a)
	}
	return out, nil
}

const modulePath = "github.com/dynakafka/outbox"

// importUpArrows returns the up-arrows from the repository's non-test
// files into the root package and the engine's packages through qualified
// names (pkg.Name): found by parsing, without types, so a method called on
// a value does not count; the type it is called on does.
func importUpArrows() ([]arrow, error) {
	// declared maps an import path and an exported name to the file
	// declaring it.
	declared := map[string]string{}
	for _, dir := range append([]string{"."}, enginePackages...) {
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			return nil, err
		}
		path := modulePath
		if dir != "." {
			path += "/" + dir
		}
		for _, n := range names {
			if strings.HasSuffix(n, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), n, nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			for name := range topLevelNames(f) {
				declared[path+"."+name] = filepath.ToSlash(n)
			}
		}
	}
	seen := map[arrow]bool{}
	err := walkRepo([]string{".go"}, func(path string, src []byte) error {
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		from := filepath.ToSlash(path)
		local := map[string]string{} // import name -> path
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			name := p[strings.LastIndex(p, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			local[name] = p
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok || local[x.Name] == "" {
				return true
			}
			if to, ok := declared[local[x.Name]+"."+sel.Sel.Name]; ok && layer(from) < layer(to) {
				seen[arrow{from, to, sel.Sel.Name}] = true
			}
			return true
		})
		return nil
	})
	var out []arrow
	for a := range seen {
		out = append(out, a)
	}
	return out, err
}

// topLevelNames are the exported package-level names f declares.
func topLevelNames(f *ast.File) map[string]bool {
	names := map[string]bool{}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil && d.Name.IsExported() {
				names[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					names[s.Name.Name] = s.Name.IsExported()
				case *ast.ValueSpec:
					for _, n := range s.Names {
						names[n.Name] = n.IsExported()
					}
				}
			}
		}
	}
	maps.DeleteFunc(names, func(_ string, exported bool) bool { return !exported })
	return names
}

// upArrows is every up-arrow of the repository, sorted.
func upArrows() ([]arrow, error) {
	var all []arrow
	for _, dir := range append([]string{"."}, enginePackages...) {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		up, err := packageUpArrows(dir)
		if err != nil {
			return nil, err
		}
		all = append(all, up...)
	}
	up, err := importUpArrows()
	if err != nil {
		return nil, err
	}
	all = append(all, up...)
	slices.SortFunc(all, func(a, b arrow) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	return all, nil
}

// exportData maps each dependency of the package in dir to its export
// data file, built by the go command.
func exportData(dir string) (map[string]string, error) {
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", ".")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %w", err)
	}
	m := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if path, file, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			m[path] = file
		}
	}
	return m, nil
}

// allowedUpArrows are the up-arrows that may stay, each with the reason.
// None: the stores take what they need of the engine (the optional
// capabilities, the bucket arithmetic, DefaultGapTimeout) from the model,
// and store/dynamo's WithNotifier takes an interface of its own. Do not
// add to it; before the engine moved to package relay there were 11.
var allowedUpArrows = map[arrow]string{}

// TestLayerArrows fails on an up-arrow that allowedUpArrows does not name:
// a model file or an adapter that uses the engine.
func TestLayerArrows(t *testing.T) {
	up, err := upArrows()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range up {
		if why, ok := allowedUpArrows[a]; ok {
			t.Logf("%s -> %s: %s (allowed: %s)", a.from, a.to, a.name, why)
			continue
		}
		t.Errorf("%s uses %s, declared in %s: a lower layer uses the engine; move the name down, or declare what it needs where it is used", a.from, a.name, a.to)
	}
	t.Logf("%d up-arrows", len(up))
}
