package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestEnqueue sends requests through the enqueue function's handler as
// `outbox enqueue` does: a request commits (ids derived from its key); the
// same request again is a duplicate that writes nothing; one the function
// refuses prints the Lambda's error answer and exits 1; a batch event
// answers its batchItemFailures.
func TestEnqueue(t *testing.T) {
	c, _, _ := outboxEnv(t)
	c.step(exitOK, "init", "--buckets", "4", "--topics", "orders")
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		writeFile(t, path, content)
		c.replace = append(c.replace, path, name)
		return path
	}
	req := file("pay.json", `{"idempotencyKey": "pay-o-1", "messages": [{"topic": "orders", "key": "o-1", "value": {"type": "OrderPaid"}}]}`)
	first := c.step(exitOK, "enqueue", req)
	var answer struct {
		Duplicate bool
		Messages  []struct {
			ID       string
			Sequence int64
		}
	}
	if err := json.Unmarshal([]byte(first), &answer); err != nil || answer.Duplicate || len(answer.Messages) != 1 || answer.Messages[0].Sequence != 1 {
		t.Fatalf("first answer %s (%v)", first, err)
	}
	c.step(exitOK, "enqueue", req)
	c.step(exitFailed, "enqueue", file("other-topic.json", `{"idempotencyKey": "k-2", "messages": [{"topic": "payments", "key": "o-1"}]}`))
	c.stdin = `{"Records": [{"messageId": "m-1", "eventSource": "aws:sqs", "body": "{\"messages\": [{\"topic\": \"orders\", \"key\": \"o-2\"}]}"},
		{"messageId": "m-2", "eventSource": "aws:sqs", "body": "{\"messages\": []}"}]}`
	c.step(exitFailed, "enqueue", "-")
	golden(t, "enqueue.txt", c.normalise(c.out.String()))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
