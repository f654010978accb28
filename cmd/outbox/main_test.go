package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/dynakafka/outbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestInitAndDeadLetterCommands(t *testing.T) {
	d := testenv.DynamoDB(t)
	if d.Endpoint == "" {
		t.Skip("needs an endpoint")
	}
	m, c := testenv.Name(t, "m"), testenv.Name(t, "c")
	ctx := context.Background()
	var out bytes.Buffer
	args := func(cmd string, extra ...string) []string {
		return append([]string{cmd, "-messages", m, "-control", c, "-endpoint", d.Endpoint, "-region", d.Config.Region}, extra...)
	}
	for range 2 { // idempotent
		out.Reset()
		if err := run(ctx, args("init", "-buckets", "4"), &out); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(out.String(), "buckets=4") {
		t.Fatalf("init said %q", out.String())
	}
	if err := run(ctx, args("init", "-buckets", "8"), &out); err == nil || !strings.Contains(err.Error(), "BucketCount") {
		t.Fatalf("init with another bucket count: %v", err)
	}
	out.Reset()
	if err := run(ctx, args("parked", "-bucket", "0"), &out); err != nil || out.Len() != 0 {
		t.Fatalf("parked: %q %v", out.String(), err)
	}
	if err := run(ctx, args("drop", "-bucket", "0", "-seq", "1"), &out); err == nil || !strings.Contains(err.Error(), "no parked message") {
		t.Fatalf("drop of nothing: %v", err)
	}
	if err := run(ctx, []string{"init"}, &out); err == nil {
		t.Fatal("init without tables passed")
	}
}
