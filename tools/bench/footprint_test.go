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

func TestColdLine(t *testing.T) {
	f := footprintResult{ProbeFilled: probe{Ms: 57, GetItemMs: 1.5, DescribeTableMs: 57}, DrainStart: coldStart{InitMs: 66}, InitOn: "empty-dynamodb-local", ColdStarts: []coldStart{
		{InitMs: 80, InitSteps: map[string]float64{"store": 60}, Probe: probe{Ms: 55, GetItemMs: 2, DescribeTableMs: 55}},
		{InitMs: 50, InitSteps: map[string]float64{"store": 40}, Probe: probe{Ms: 41, GetItemMs: 1, DescribeTableMs: 41}},
		{InitMs: 60, InitSteps: map[string]float64{"store": 45}, Probe: probe{Ms: 44, GetItemMs: 3, DescribeTableMs: 44}},
		{InitMs: 70, InitSteps: map[string]float64{"store": 50}, Probe: probe{Ms: 47, GetItemMs: 2, DescribeTableMs: 47}},
	}}
	want := "footprint-cold: starts=4 init_on=empty-dynamodb-local init_ms_min=50.0 init_ms_median=65.0 store_ms_min=40.0 store_ms_median=47.5 probe_ms_min=41.0 probe_ms_median=45.5 " +
		"probe_get_item_ms_median=2.0 probe_describe_table_ms_median=45.5 filled_probe_get_item_ms=1.5 filled_probe_describe_table_ms=57.0 filled_init_ms=66.0 each_init/store/probe_ms=80.0/60.0/55.0,50.0/40.0/41.0,60.0/45.0/44.0,70.0/50.0/47.0"
	if got := f.coldLine(); got != want {
		t.Fatalf("cold line\n%s\nwant\n%s", got, want)
	}
}
