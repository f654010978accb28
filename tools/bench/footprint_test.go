package main

import (
	"fmt"
	"testing"
)

func TestInitStepsFromTheReadyLine(t *testing.T) {
	logs := `START RequestId: 1
{"time":"2026-12-02T02:41:00Z","level":"INFO","msg":"outbox relay: ready","relay_id":"r","init_aws_config_ms":1.5,"init_store_ms":12.25,"init_publisher_ms":20.5,"init_relay_ms":2}
END RequestId: 1`
	got := fmt.Sprint(initSteps(logs))
	if want := "map[aws_config:1.5 publisher:20.5 relay:2 store:12.25]"; got != want {
		t.Fatalf("init steps %s, want %s", got, want)
	}
	if s := initSteps("no ready line"); s != nil {
		t.Fatalf("init steps %v without a ready line", s)
	}
}
