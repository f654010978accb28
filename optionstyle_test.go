package outbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The option rule (docs/design.md, "Options"), checked over the exported
// API of the library's packages:
//
//  1. option types: a package whose constructors take the same options has
//     one, Option, a func over a pointer to an unexported config
//     (functional options, as franz-go's kgo); a package whose constructors
//     take different options gives each kind an interface type of its own
//     (…Option) whose methods are unexported markers, so that an option
//     given to a constructor of another kind does not compile (kgo's
//     ProducerOpt and ConsumerOpt). No other exported option types;
//  2. every exported option constructor returns one of its package's option
//     types, and every exported constructor's variadic options are one;
//  3. every option's doc comment states its default;
//  4. an option is named after its setting; when the setting is its
//     argument's type (Mode, Clock, Logger, Tracer, Metrics), the name is
//     With + that type, never the bare type name;
//  5. no exported struct type of options (…Options, …Opts, …Settings,
//     …Config) beyond the ones listed in structConfigExceptions;
//  6. no deprecated declarations: there are no release tags yet, so a
//     former name goes rather than staying as an alias or a wrapper.

// optionPackages are the library packages the rule covers: everything a
// user imports. Left out, with the reason: internal/ (not API), cmd/ and
// tools/ (mains), examples/, integration/ and deploy/ (tests), cdk/ (its
// own module, jsii props structs are CDK's convention), local/ (local
// emulators of AWS services for tests and demos, configured like the
// services they stand in for), lambda/{config,enqueue,relay,setup,sweeper,
// wiring} (the functions' environment wiring: they take no options).
var optionPackages = []string{
	".", "inbox", "inbox/lambdakafka", "kafka", "lambda/emf", "lambda/handler",
	"otel", "outboxtest", "relay", "replay", "sequence", "store/dynamo", "store/memory", "storetest",
}

// optionTypeExceptions are option types outside rule 1, each named with the
// reason it is allowed. Do not add to it.
var optionTypeExceptions = map[string]string{
	// The Lambda handlers' packages: RelayOption and SweeperOption
	// configure two handlers that lambda/relay and lambda/sweeper build
	// from the environment; NewRelay returns no error to refuse the
	// other's options with.
	"handler.RelayOption":   "two handlers, set from the environment",
	"handler.SweeperOption": "two handlers, set from the environment",
}

// structConfigExceptions are exported struct types whose names look like
// option structs but are not options. Do not add to it.
var structConfigExceptions = map[string]string{
	// The contents of the outbox's config item, read from the table.
	"outbox.Config": "the config item's contents, not options",
}

// collaboratorTypes are argument types whose option is With + the type.
var collaboratorTypes = []string{"Mode", "Clock", "Logger", "Tracer", "Metrics", "Hooks"}

func TestOptionStyle(t *testing.T) {
	checked := 0
	for _, dir := range optionPackages {
		fset := token.NewFileSet()
		files := parseDir(t, fset, dir)
		if len(files) == 0 {
			t.Fatalf("%s: no Go files", dir)
		}
		where := func(n ast.Node) string {
			p := fset.Position(n.Pos())
			return filepath.Join(dir, filepath.Base(p.Filename)) + ":" + strconv.Itoa(p.Line)
		}
		kinds := optionKinds(t, dir, files, where)
		for _, f := range files {
			for _, decl := range f.Decls {
				d, ok := decl.(*ast.FuncDecl)
				if !ok || !d.Name.IsExported() {
					continue
				}
				if deprecated(d.Doc) {
					t.Errorf("%s: %s is deprecated: remove it (no release tags yet; docs/design.md §11 rule 6)", where(d), d.Name.Name)
				}
				if d.Recv != nil {
					continue
				}
				checkVariadicOptions(t, where(d), d, kinds)
				res := d.Type.Results
				if res == nil || len(res.List) != 1 || len(res.List[0].Names) > 1 {
					continue
				}
				rt, ok := res.List[0].Type.(*ast.Ident)
				if !ok || !isOptionName(rt.Name) {
					continue
				}
				checked++
				if !kinds[rt.Name] {
					t.Errorf("%s: option %s returns %s, which is not one of the package's option types %v", where(d), d.Name.Name, rt.Name, slices.Sorted(maps.Keys(kinds)))
				}
				if !strings.Contains(d.Doc.Text(), "Default") && !strings.Contains(d.Doc.Text(), "default") {
					t.Errorf("%s: option %s: its doc comment must state its default", where(d), d.Name.Name)
				}
				checkOptionName(t, where(d), d)
			}
		}
	}
	// The check found the options it is about.
	if checked < 80 {
		t.Fatalf("checked only %d option constructors; is the package list stale?", checked)
	}
	t.Logf("optionstyle: packages=%d options=%d", len(optionPackages), checked)
}

// optionKinds applies rules 1 and 5 to a package's exported types and
// returns its option types.
func optionKinds(t *testing.T, dir string, files []*ast.File, where func(ast.Node) string) map[string]bool {
	t.Helper()
	kinds := map[string]bool{}
	var funcs, markers []string
	for _, f := range files {
		for _, decl := range f.Decls {
			d, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range d.Specs {
				if vs, ok := spec.(*ast.ValueSpec); ok && vs.Names[0].IsExported() && (deprecated(vs.Doc) || deprecated(d.Doc)) {
					t.Errorf("%s: %s is deprecated: remove it (no release tags yet; docs/design.md §11 rule 6)", where(vs), vs.Names[0].Name)
				}
				ts, ok := spec.(*ast.TypeSpec)
				if !ok || !ts.Name.IsExported() {
					continue
				}
				doc := ts.Doc
				if doc == nil {
					doc = d.Doc
				}
				name := ts.Name.Name
				if deprecated(doc) {
					t.Errorf("%s: %s is deprecated: remove it (no release tags yet; docs/design.md §11 rule 6)", where(ts), name)
				}
				if st, ok := ts.Type.(*ast.StructType); ok && st != nil && isConfigStructName(name) {
					if _, ok := structConfigExceptions[pkgName(dir)+"."+name]; !ok {
						t.Errorf("%s: struct config type %s: settings are options, not structs", where(ts), name)
					}
				}
				if !isOptionName(name) {
					continue
				}
				if _, ok := optionTypeExceptions[pkgName(dir)+"."+name]; ok {
					kinds[name] = true
					continue
				}
				switch {
				case isFuncOverUnexported(ts.Type):
					funcs = append(funcs, name)
				case isMarkerInterface(ts.Type):
					markers = append(markers, name)
				default:
					t.Errorf("%s: option type %s is neither a func over a pointer to an unexported config nor an interface of unexported marker methods", where(ts), name)
				}
				kinds[name] = true
			}
		}
	}
	switch {
	case len(funcs) > 0 && len(markers) > 0:
		t.Errorf("%s: option types %v (funcs) and %v (marker interfaces): a package uses one style", dir, funcs, markers)
	case len(funcs) > 1:
		t.Errorf("%s: %d option types %v; a package whose constructors take the same options has one, Option (give each kind an interface of its own otherwise)", dir, len(funcs), funcs)
	case len(funcs) == 1 && funcs[0] != "Option":
		t.Errorf("%s: option type %s: a package's one option type is named Option", dir, funcs[0])
	}
	return kinds
}

// isMarkerInterface reports whether e is an interface whose methods are all
// unexported (the markers and the apply method) and whose embedded types
// are identifiers of the same package (other option kinds).
func isMarkerInterface(e ast.Expr) bool {
	it, ok := e.(*ast.InterfaceType)
	if !ok || it.Methods == nil || len(it.Methods.List) == 0 {
		return false
	}
	for _, m := range it.Methods.List {
		switch {
		case len(m.Names) == 0:
			if _, ok := m.Type.(*ast.Ident); !ok {
				return false
			}
		case m.Names[0].IsExported():
			return false
		}
	}
	return true
}

// checkOptionName applies rule 4 to an option constructor.
func checkOptionName(t *testing.T, where string, d *ast.FuncDecl) {
	t.Helper()
	params := d.Type.Params.List
	if len(params) != 1 || len(params[0].Names) > 1 {
		return
	}
	typ := typeName(params[0].Type)
	name := d.Name.Name
	switch {
	case slices.Contains(collaboratorTypes, typ) && name != "With"+typ && name == typ:
		t.Errorf("%s: option %s(%s): name it With%s (an option whose setting is its argument's type is With + the type)", where, name, typ, typ)
	case slices.Contains(collaboratorTypes, strings.TrimPrefix(name, "With")) && strings.HasPrefix(name, "With") && typ != "" && typ != strings.TrimPrefix(name, "With"):
		t.Errorf("%s: option %s takes a %s; With%s takes a %s", where, name, typ, strings.TrimPrefix(name, "With"), strings.TrimPrefix(name, "With"))
	case slices.Contains(collaboratorTypes, name):
		t.Errorf("%s: option %s: name it With%s", where, name, name)
	}
}

// checkVariadicOptions applies rule 2 to a constructor's variadic options.
func checkVariadicOptions(t *testing.T, where string, d *ast.FuncDecl, kinds map[string]bool) {
	t.Helper()
	params := d.Type.Params.List
	if len(params) == 0 {
		return
	}
	el, ok := params[len(params)-1].Type.(*ast.Ellipsis)
	if !ok {
		return
	}
	name, ok := el.Elt.(*ast.Ident)
	// Another package's options (kgo.Opt, func(*dynamodb.Options),
	// relay.Option given through) are that package's.
	if ok && isOptionName(name.Name) && !kinds[name.Name] {
		t.Errorf("%s: %s takes ...%s, which is not one of the package's option types", where, d.Name.Name, name.Name)
	}
}

func isOptionName(name string) bool {
	return strings.HasSuffix(name, "Option") || strings.HasSuffix(name, "Opt")
}

func isConfigStructName(name string) bool {
	for _, s := range []string{"Options", "Opts", "Settings", "Config"} {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

func isFuncOverUnexported(e ast.Expr) bool {
	ft, ok := e.(*ast.FuncType)
	if !ok || ft.Results != nil || len(ft.Params.List) != 1 {
		return false
	}
	star, ok := ft.Params.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	id, ok := star.X.(*ast.Ident)
	return ok && !id.IsExported()
}

// typeName is the bare name of a parameter's type: Clock for outbox.Clock,
// Logger for *slog.Logger.
func typeName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return typeName(x.X)
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.Ident:
		return x.Name
	}
	return ""
}

func deprecated(doc *ast.CommentGroup) bool {
	return doc != nil && strings.Contains(doc.Text(), "\nDeprecated: ") || doc != nil && strings.HasPrefix(doc.Text(), "Deprecated: ")
}

func parseDir(t *testing.T, fset *token.FileSet, dir string) []*ast.File {
	t.Helper()
	var files []*ast.File
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// pkgName is the last element of a package directory, outbox for the root.
func pkgName(dir string) string {
	if dir == "." {
		return "outbox"
	}
	return filepath.Base(dir)
}
