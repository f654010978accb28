package ddbmodel

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// TestStoreSuiteOnModel runs store/dynamo's own tests — its conformance
// suite, the writer's, the store's, the BucketCount change's — on the
// model's HTTP API instead of DynamoDB Local (no latency, no capacity
// limits): the real code's conditional writes, transactions, counters and
// queries, and what it expects back, evaluated by the model. TestTwoRegions
// needs two regions' tables apart, which the model, one region, does not
// keep.
func TestStoreSuiteOnModel(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs store/dynamo's tests")
	}
	root, err := libraryRoot()
	if err != nil {
		t.Fatal(err)
	}
	url, stop, err := New(Config{Latency: Fixed(0), WCUPerKey: -1, RCUPerKey: -1}).Serve("suite")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-skip", "TestTwoRegions", "./store/dynamo")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), testenv.DynamoDBEndpointEnv+"="+url)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("store/dynamo's tests on the model: %v\n%s", err, out.String())
	}
	t.Log(strings.TrimSpace(out.String()))
}

// libraryRoot is the outbox library's module root, above the working
// directory.
func libraryRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/dynakafka/outbox\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
