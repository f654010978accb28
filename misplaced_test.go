package outbox_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// An option given to a constructor it does not serve does not compile
// (docs/design.md §11 rule 1): store/dynamo and inbox give each kind of
// constructor an option type of its own, as franz-go's kgo.ProducerOpt and
// ConsumerOpt. TestMisplacedOptionsDoNotCompile builds a program that
// passes each kind to the wrong constructor — a shared setting to a writer
// or a store among them — and expects the type checker to refuse each call,
// naming the option and the type the constructor takes; the same calls with
// options of the right kind must build, so that the refusal is the
// misplacement's and not some other error's. The program is an overlay (go
// build -overlay): nothing is written in the repository.
func TestMisplacedOptionsDoNotCompile(t *testing.T) {
	misplaced := []struct {
		call string // the call, on one line of the program
		opt  string // the misplaced option, as the error quotes it
		want string // the type the constructor takes
	}{
		{`dynamo.NewWriter(ctx, nil, tables, dynamo.BucketCount(8))`, `dynamo.BucketCount(8)`, `dynamo.WriterOption`},
		{`dynamo.NewStore(ctx, nil, tables, dynamo.MaxMessageBytes(2048))`, `dynamo.MaxMessageBytes(2048)`, `dynamo.StoreOption`},
		{`dynamo.NewWriter(ctx, nil, tables, dynamo.MessageIDHeader("id"))`, `dynamo.MessageIDHeader("id")`, `dynamo.WriterOption`},
		{`dynamo.NewStore(ctx, nil, tables, dynamo.WithMode(outbox.WatermarkMode))`, `dynamo.WithMode(outbox.WatermarkMode)`, `dynamo.StoreOption`},
		{`dynamo.NewStore(ctx, nil, tables, dynamo.MaxAttempts(3))`, `dynamo.MaxAttempts(3)`, `dynamo.StoreOption`},
		{`dynamo.CreateTables(ctx, nil, tables, dynamo.TombstoneTTL(time.Hour))`, `dynamo.TombstoneTTL(time.Hour)`, `dynamo.TablesOption`},
		{`dynamo.ChangeBucketCount(ctx, nil, tables, 16, dynamo.FenceTTL(time.Hour))`, `dynamo.FenceTTL(time.Hour)`, `dynamo.ChangeOption`},
		{`inbox.NewHandler(nil, fn, inbox.ClientOptions())`, `inbox.ClientOptions()`, `inbox.HandlerOption`},
		{`inbox.NewConsumer(nil, fn, inbox.InOrder())`, `inbox.InOrder()`, `inbox.ConsumerOption`},
		{`inbox.New(ctx, nil, "t", inbox.OnPoison(inbox.Skip()))`, `inbox.OnPoison(inbox.Skip())`, `inbox.Option`},
	}
	// The same constructors with options of their own kind.
	placed := []string{
		`dynamo.CreateTables(ctx, nil, tables, dynamo.BucketCount(8), dynamo.MaxMessageBytes(2048), dynamo.MessageIDHeader("id"), dynamo.WithMode(outbox.WatermarkMode))`,
		`dynamo.NewWriter(ctx, nil, tables, dynamo.MaxAttempts(3), dynamo.FenceTTL(time.Hour))`,
		`dynamo.NewStore(ctx, nil, tables, dynamo.TombstoneTTL(time.Hour), dynamo.FenceTTL(time.Hour))`,
		`dynamo.ChangeBucketCount(ctx, nil, tables, 16, dynamo.ChangeTimeout(time.Minute))`,
		`inbox.NewHandler(nil, fn, inbox.OnPoison(inbox.Skip()))`,
		`inbox.NewConsumer(nil, fn, inbox.ClientOptions(), inbox.OnPoison(inbox.Skip()))`,
		`inbox.New(ctx, nil, "t", inbox.InOrder())`,
	}
	program := func(calls []string) string {
		var b strings.Builder
		b.WriteString(`package main

import (
	"context"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

var (
	_ = outbox.DeleteMode
	_ = time.Hour
)

func main() {
	ctx := context.Background()
	tables := dynamo.Tables{Messages: "m", Control: "c"}
	fn := func(*inbox.Tx) error { return nil }
	_, _ = tables, fn
`)
		for _, c := range calls {
			b.WriteString("\t_, _ = " + c + "\n")
		}
		b.WriteString("}\n")
		return strings.ReplaceAll(b.String(), "_, _ = dynamo.CreateTables", "_ = dynamo.CreateTables")
	}
	var calls []string
	for _, m := range misplaced {
		calls = append(calls, m.call)
	}
	src := program(calls)
	out, err := buildOverlay(t, src)
	if err == nil {
		t.Fatalf("the misplaced options compiled:\n%s", src)
	}
	lines := strings.Split(src, "\n")
	for _, m := range misplaced {
		at := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, m.call) }) + 1
		refused := regexp.MustCompile(`main\.go:` + strconv.Itoa(at) + `:\d+: cannot use ` + regexp.QuoteMeta(m.opt) + ` .* as ` + regexp.QuoteMeta(m.want) + ` value in argument to `)
		if !refused.MatchString(out) {
			t.Errorf("%s: the build did not refuse %s as not a %s:\n%s", m.call, m.opt, m.want, out)
		}
	}
	if out, err := buildOverlay(t, program(placed)); err != nil {
		t.Fatalf("the same constructors with options of their kind do not build: %v\n%s", err, out)
	}
}

// buildOverlay builds src as a main package in the module, through go
// build's -overlay (the directory exists only there), and returns the
// go command's output.
func buildOverlay(t *testing.T, src string) (string, error) {
	t.Helper()
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	file := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "internal", "misplacedoptions")
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(dir, "main.go"): file}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "overlay.json"), overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	// -gcflags=-e: every error, not the first ten.
	cmd := exec.Command("go", "build", "-buildvcs=false", "-gcflags=-e", "-overlay", filepath.Join(tmp, "overlay.json"), "-o", os.DevNull, "./internal/misplacedoptions")
	cmd.Dir = root
	b, err := cmd.CombinedOutput()
	return string(b), err
}
