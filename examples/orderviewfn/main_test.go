package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The function refuses a missing table name at init, naming every problem.
func TestSetupRefusesAMissingTable(t *testing.T) {
	env := map[string]string{"PARTIAL_BATCH": "yes"}
	_, err := setup(context.Background(), func(k string) string { return env[k] }, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "VIEW_TABLE") || !strings.Contains(err.Error(), "INBOX_TABLE") || !strings.Contains(err.Error(), "PARTIAL_BATCH") {
		t.Fatalf("setup = %v, want the three problems named", err)
	}
}

// TestDeployDocSnippet: the SAM resource in docs/deploy.md builds this
// function, sets exactly the variables setup reads, and pairs
// PARTIAL_BATCH with the mapping's FunctionResponseTypes, with retries
// that never discard a batch.
func TestDeployDocSnippet(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "## Serverless consumers")
	_, block, ok2 := strings.Cut(sec, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/deploy.md has no yaml block under \"## Serverless consumers\"")
	}
	type event struct {
		Type       string               `yaml:"Type"`
		Properties map[string]yaml.Node `yaml:"Properties"`
	}
	var res map[string]struct {
		Type       string `yaml:"Type"`
		Properties struct {
			CodeUri     string `yaml:"CodeUri"`
			Environment struct {
				Variables map[string]yaml.Node `yaml:"Variables"`
			} `yaml:"Environment"`
			Events map[string]event `yaml:"Events"`
		} `yaml:"Properties"`
	}
	if err := yaml.Unmarshal([]byte(block), &res); err != nil {
		t.Fatalf("the snippet does not parse: %v", err)
	}
	fn, ok := res["OrderViewFunction"]
	if !ok || fn.Type != "AWS::Serverless::Function" || fn.Properties.CodeUri != "examples/orderviewfn" {
		t.Fatalf("snippet: %+v", res)
	}
	read := map[string]bool{}
	setup(context.Background(), func(k string) string { read[k] = true; return "" }, slog.New(slog.DiscardHandler))
	for k := range fn.Properties.Environment.Variables {
		if !read[k] {
			t.Errorf("the snippet sets %s, which the function does not read", k)
		}
	}
	for _, k := range []string{"VIEW_TABLE", "INBOX_TABLE"} {
		if _, ok := fn.Properties.Environment.Variables[k]; !ok {
			t.Errorf("the snippet does not set %s", k)
		}
	}
	partial := fn.Properties.Environment.Variables["PARTIAL_BATCH"]
	for name, ev := range fn.Properties.Events {
		if ev.Type != "MSK" && ev.Type != "SelfManagedKafka" {
			t.Errorf("event %s is %s", name, ev.Type)
		}
		types := ev.Properties["FunctionResponseTypes"]
		reports := strings.Contains(fmt.Sprint(nodeStrings(&types)), "ReportBatchItemFailures")
		if reports != (partial.Value == "true") {
			t.Errorf("event %s: FunctionResponseTypes %v with PARTIAL_BATCH=%q: set both or neither", name, nodeStrings(&types), partial.Value)
		}
		if r := ev.Properties["MaximumRetryAttempts"]; r.Value != "" && r.Value != "-1" {
			t.Errorf("event %s: MaximumRetryAttempts %s discards batches", name, r.Value)
		}
		if b := ev.Properties["BisectBatchOnFunctionError"]; b.Value == "true" {
			t.Errorf("event %s bisects batches", name)
		}
		if _, ok := ev.Properties["ProvisionedPollerConfig"]; reports && !ok {
			t.Errorf("event %s: the error handling controls need provisioned mode (ProvisionedPollerConfig)", name)
		}
	}
	if _, err := os.Stat("main.go"); err != nil {
		t.Fatal(err)
	}
}

func nodeStrings(n *yaml.Node) []string {
	var out []string
	for _, c := range n.Content {
		out = append(out, c.Value)
	}
	return out
}
