package testenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

var (
	pythonOnce sync.Once
	pythonPath string
	pythonErr  error
)

// RepoRoot is the repository's root directory (where go.mod is).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Python returns the interpreter of the Python test venv (boto3, pytest and
// jsonschema, pinned), installing it on first use with
// scripts/install-python-deps.sh (make deps does the same). It fails the
// test, never skips it, when the venv cannot be installed: the Python
// writer's checks must not look like a passing suite.
func Python(t testing.TB) string {
	t.Helper()
	pythonOnce.Do(func() {
		root := RepoRoot()
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "install-python-deps.sh"))
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			pythonErr = fmt.Errorf("scripts/install-python-deps.sh: %v: %s", err, strings.TrimSpace(stderr.String()))
			return
		}
		pythonPath = strings.TrimSpace(string(out))
	})
	if pythonErr != nil {
		t.Fatalf("testenv.Python: %v", pythonErr)
	}
	return pythonPath
}

// PythonEnv is the environment for a Python process that talks to d: the
// same access key and region as d.Config (DynamoDB Local keeps the tables of
// each apart), with PYTHONPATH set to the reference writer
// (clients/python).
func PythonEnv(ctx context.Context, t testing.TB, d *Dynamo) []string {
	t.Helper()
	creds, err := d.Config.Credentials.Retrieve(ctx)
	if err != nil {
		t.Fatalf("testenv.PythonEnv: credentials: %v", err)
	}
	env := append(os.Environ(),
		"AWS_ACCESS_KEY_ID="+creds.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+creds.SecretAccessKey,
		"AWS_REGION="+d.Config.Region, "AWS_DEFAULT_REGION="+d.Config.Region,
		"PYTHONPATH="+filepath.Join(RepoRoot(), "clients", "python"), "PYTHONDONTWRITEBYTECODE=1")
	if creds.SessionToken != "" {
		env = append(env, "AWS_SESSION_TOKEN="+creds.SessionToken)
	}
	return env
}

// PythonTx is one transaction for the Python writer's CLI (python -m
// outbox_writer --json-batch): the caller's items in DynamoDB JSON, the
// messages in the CLI's JSON shape (clients/python/README.md), an optional
// ClientRequestToken, and, for tests, AbandonAfterReserve (the writer
// reserves and stops without committing, as a crashed writer would).
type PythonTx struct {
	Items               []any  `json:"items,omitempty"`
	Messages            []any  `json:"messages"`
	Token               string `json:"token,omitempty"`
	AbandonAfterReserve bool   `json:"abandon_after_reserve,omitempty"`
}

// PythonResult is the CLI's line for one transaction.
type PythonResult struct {
	OK           bool       `json:"ok"`
	Error        string     `json:"error"` // Outbox.ConditionFailed, Outbox.Config, Abandoned, ...
	Message      string     `json:"message"`
	Unknown      bool       `json:"unknown"` // Outbox.Config: a version or mode the writer does not understand
	Token        string     `json:"token"`
	Attempts     int        `json:"attempts"`
	Reservations int        `json:"reservations"`
	Released     [][2]int64 `json:"released"` // (bucket, sequence) fenced after a failure
	Reserved     [][2]int64 `json:"reserved"` // Abandoned: what it reserved
	Messages     []struct {
		ID        string `json:"id"`
		Topic     string `json:"topic"`
		Bucket    int    `json:"bucket"`
		Sequence  int64  `json:"sequence"`
		CreatedMs int64  `json:"created_ms"`
	} `json:"messages"`
}

// RunPythonWriter runs the reference Python writer on d's tables, one
// transaction per entry of txs, in order, and returns one result per
// transaction and the CLI's exit status (0 when all committed; see
// clients/python/README.md for the others). args are added to its command
// line (a later --region replaces d's). It fails the test only when the CLI
// cannot run or prints something else than its result lines.
func RunPythonWriter(ctx context.Context, t testing.TB, d *Dynamo, messagesTable, controlTable string, txs []PythonTx, args ...string) ([]PythonResult, int) {
	t.Helper()
	batch, err := json.Marshal(txs)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "batch.json")
	if err := os.WriteFile(path, batch, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, Python(t), append([]string{"-m", "outbox_writer", "--endpoint", d.Endpoint, "--region", d.Config.Region,
		"--messages-table", messagesTable, "--control-table", controlTable, "--json-batch", path}, args...)...)
	cmd.Env = PythonEnv(ctx, t, d)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("python -m outbox_writer: %v: %s", err, stderr.String())
	}
	var results []PythonResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r PythonResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("python -m outbox_writer printed %q (%v); stderr: %s", sc.Text(), err, stderr.String())
		}
		results = append(results, r)
	}
	if code == 1 || code == 2 { // an uncaught exception, a bad command line
		t.Fatalf("python -m outbox_writer exited %d: %s", code, stderr.String())
	}
	return results, code
}

// SchemaRow is one stored item for ValidateSchemas: Table is "messages" or
// "control".
type SchemaRow struct {
	Table string
	Item  map[string]types.AttributeValue
}

// ValidateSchemas checks rows with schema/validate.py (the schemas of
// schema/, and unless itemsOnly the cross-item rules: buckets, placement,
// counters, TTLs), printing and returning its summary line ("schema: LABEL
// items=..."); it fails the test when an item is invalid.
func ValidateSchemas(ctx context.Context, t testing.TB, label string, itemsOnly bool, rows []SchemaRow) string {
	t.Helper()
	var dump bytes.Buffer
	for _, r := range rows {
		line, err := json.Marshal(map[string]any{"table": r.Table, "item": DynamoJSON(r.Item)})
		if err != nil {
			t.Fatal(err)
		}
		dump.Write(append(line, '\n'))
	}
	path := filepath.Join(t.TempDir(), "items.jsonl")
	if err := os.WriteFile(path, dump.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{filepath.Join(RepoRoot(), "schema", "validate.py"), path, "--label", label}
	if itemsOnly {
		args = append(args, "--items-only")
	}
	cmd := exec.CommandContext(ctx, Python(t), args...)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	fmt.Print(string(out))
	if err != nil {
		t.Fatalf("schema/validate.py %s: %v\n%s", label, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}
