package outbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// BucketCount, the mode, MaxMessageBytes and the stamped header names are
// set in the outbox's config item and nowhere else (docs/design.md §12):
// dynamo.CreateTables (behind outbox init) and dynamo.Configure (behind the
// stack's setup) write it, and each holds the one expected-value guard of
// its path. TestSharedSettingsHaveOneSource walks every module of the
// repository and fails on any other way to state one of them: an option, a
// field of a configuration struct, an environment variable, a CLI flag.
// (The Python writer's arguments: clients/python's
// test_the_shared_settings_come_from_the_config_item_only; the template's
// parameters reach only the setup: deploy's
// TestSharedParametersReachOnlyTheSetup.)

// sharedName matches the names of the shared settings' options, fields and
// flags.
var sharedName = regexp.MustCompile(`^(With)?(BucketCount|Buckets|Mode|OutboxMode|MaxMessageBytes|Headers|StampedHeaders|[A-Za-z]*Header)$`)

// sharedTypes are argument types that carry a shared setting.
var sharedTypes = []string{"Mode", "HeaderNames"}

// sharedOptionPlaces are the options that may state a shared setting, each
// with the one option type it must be (the constructor it goes to) and the
// reason: they write the config item.
var sharedOptionPlaces = map[string]struct{ kind, why string }{
	"store/dynamo.BucketCount":     {"TablesOption", "CreateTables writes the config item (outbox init's guard on an existing one)"},
	"store/dynamo.WithMode":        {"TablesOption", "CreateTables"},
	"store/dynamo.MaxMessageBytes": {"TablesOption", "CreateTables"},
	"store/dynamo.MessageIDHeader": {"TablesOption", "CreateTables"},
	"store/dynamo.BucketHeader":    {"TablesOption", "CreateTables"},
	"store/dynamo.SequenceHeader":  {"TablesOption", "CreateTables"},
	"outboxtest.BucketCount":       {"Option", "outboxtest.New creates the test's outbox with dynamo.CreateTables (or memory.New)"},
}

// sharedStructPlaces are configuration structs that may have a field for a
// shared setting, with the reason.
var sharedStructPlaces = map[string]string{
	"outbox.Config":        "the config item's contents",
	"cdk.Props":            "the stack's parameters, which only the setup reads (template.yaml's, likewise)",
	"internal/sim.Config":  "the simulator creates the outboxes it runs (internal, not API)",
	"internal/soak.Config": "the soak creates the outbox it runs (internal, not API)",
}

// sharedFlagFiles are the commands' files that may define a flag for a
// shared setting: outbox init (the guard), and the commands that create an
// outbox of their own with dynamo.CreateTables (outbox local, the demo, the
// soak).
var sharedFlagFiles = []string{"cmd/outbox/initcmd.go", "cmd/outbox/local.go", "cmd/demo/main.go", "cmd/soak/main.go"}

// sharedVariable matches an environment variable for a shared setting.
var sharedVariable = regexp.MustCompile(`OUTBOX_(BUCKET_COUNT|BUCKETS|MODE|MAX_MESSAGE_BYTES|[A-Z_]*HEADERS?)\b`)

func TestSharedSettingsHaveOneSource(t *testing.T) {
	var options, variables int
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" || name == "cdk.out" || name == "bin" || name == "docs") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(name, "_test.go"), strings.HasSuffix(name, "_test.py"), strings.HasPrefix(name, "test_"):
		case strings.HasSuffix(name, ".go"):
			files = append(files, path)
			fallthrough
		case strings.HasSuffix(name, ".py"), strings.HasSuffix(name, ".yaml"), strings.HasSuffix(name, ".yml"),
			strings.HasSuffix(name, ".json"), strings.HasSuffix(name, ".sh"), name == "Makefile":
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			variables++
			for _, m := range sharedVariable.FindAllString(string(src), -1) {
				t.Errorf("%s: %s: the shared settings are not variables; every process reads them from the config item", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		where := func(n ast.Node) string { return path + ":" + strconv.Itoa(fset.Position(n.Pos()).Line) }
		// The package by its directory; the root's is outbox.
		pkg := filepath.ToSlash(filepath.Dir(path))
		if pkg == "." {
			pkg = "outbox"
		}
		options += checkSharedOptions(t, f, pkg, where)
		checkSharedFields(t, f, pkg, where)
		if strings.HasPrefix(path, "cmd/") {
			checkSharedFlags(t, f, path, where)
		}
	}
	// The walk found what it is about: the allowed options, and the
	// sources the variables would be read in.
	if options < len(sharedOptionPlaces) || variables < 200 {
		t.Fatalf("found %d of the %d allowed options and read %d files for variables; is the walk broken?", options, len(sharedOptionPlaces), variables)
	}
	t.Logf("shared-settings: go_files=%d files_scanned=%d allowed_options=%d", len(files), variables, options)
}

// checkSharedOptions fails on an exported option constructor (a function
// returning a …Option or …Opt) that states a shared setting outside
// sharedOptionPlaces, and returns how many allowed ones it found.
func checkSharedOptions(t *testing.T, f *ast.File, pkg string, where func(ast.Node) string) (allowed int) {
	t.Helper()
	for _, decl := range f.Decls {
		d, ok := decl.(*ast.FuncDecl)
		if !ok || !d.Name.IsExported() || d.Recv != nil || d.Type.Results == nil || len(d.Type.Results.List) != 1 {
			continue
		}
		if !isOptionName(typeName(d.Type.Results.List[0].Type)) {
			continue
		}
		states := sharedName.MatchString(d.Name.Name)
		for _, p := range d.Type.Params.List {
			states = states || slices.Contains(sharedTypes, typeName(p.Type))
		}
		if !states {
			continue
		}
		if place, ok := sharedOptionPlaces[pkg+"."+d.Name.Name]; ok {
			if kind := typeName(d.Type.Results.List[0].Type); kind != place.kind {
				t.Errorf("%s: option %s.%s is a %s; it must be a %s only (%s)", where(d), pkg, d.Name.Name, kind, place.kind, place.why)
			}
			allowed++
			continue
		}
		t.Errorf("%s: option %s.%s states a shared setting; it lives in the config item only (dynamo.CreateTables, dynamo.Configure): read it there", where(d), pkg, d.Name.Name)
	}
	return allowed
}

// checkSharedFields fails on an exported configuration struct (…Config,
// …Options, …Opts, …Settings, …Props, …Params) with an exported field for
// a shared setting, outside sharedStructPlaces. (Unexported structs hold
// what a constructor read from the config item.)
func checkSharedFields(t *testing.T, f *ast.File, pkg string, where func(ast.Node) string) {
	t.Helper()
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok || !ts.Name.IsExported() || !isSettingsName(ts.Name.Name) {
			return true
		}
		if _, ok := sharedStructPlaces[pkg+"."+ts.Name.Name]; ok {
			return true
		}
		for _, fl := range st.Fields.List {
			for _, name := range fl.Names {
				if name.IsExported() && (sharedName.MatchString(name.Name) || slices.Contains(sharedTypes, typeName(fl.Type))) {
					t.Errorf("%s: %s.%s has a field %s for a shared setting; it lives in the config item only: read it there", where(name), pkg, ts.Name.Name, name.Name)
				}
			}
		}
		return true
	})
}

func isSettingsName(name string) bool {
	for _, s := range []string{"Config", "Options", "Opts", "Settings", "Props", "Params"} {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// sharedFlag matches a CLI flag for a shared setting.
var sharedFlag = regexp.MustCompile(`^(buckets|bucket-count|mode|max-message-bytes|[a-z-]*header)$`)

// checkSharedFlags fails on a flag for a shared setting defined outside
// sharedFlagFiles (fs.Int("buckets", …), fs.IntVar(&n, "buckets", …)).
func checkSharedFlags(t *testing.T, f *ast.File, path string, where func(ast.Node) string) {
	t.Helper()
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !slices.Contains([]string{"Int", "IntVar", "String", "StringVar", "Bool", "BoolVar", "Duration", "DurationVar", "Var", "Func", "Uint", "UintVar", "Int64", "Int64Var"}, sel.Sel.Name) {
			return true
		}
		arg := 0
		if strings.HasSuffix(sel.Sel.Name, "Var") {
			arg = 1
		}
		if len(call.Args) <= arg {
			return true
		}
		lit, ok := call.Args[arg].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		name, _ := strconv.Unquote(lit.Value)
		if sharedFlag.MatchString(name) && !slices.Contains(sharedFlagFiles, filepath.ToSlash(path)) {
			t.Errorf("%s: flag --%s states a shared setting outside outbox init (the guard) and the commands that create their outbox: read it from the config item", where(call), name)
		}
		return true
	})
}
