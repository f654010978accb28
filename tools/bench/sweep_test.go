package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The sweep's table replaces only what is between capacity.md's markers,
// every run of the sweep is a row, and the chart is drawn; a capacity.md
// without the markers is an error, not a silent skip.
func TestWriteCapacityReplacesTheMarkedSection(t *testing.T) {
	var r results
	r.Generated = "2026-11-30T00:00:00Z"
	for _, mode := range []string{"delete", "watermark"} {
		for _, w := range []float64{0, 1, 5} {
			for _, rate := range []float64{1, 10, 50, 200} {
				s := steadyResult{Mode: mode, WindowS: w, Profile: profile{Name: strconv.FormatFloat(rate, 'g', -1, 64), Rate: rate},
					WCU: 4, RCU: 0.5, InvocationsPerMsg: 1 / (1 + w*rate), InvocationMs: 20, P50ms: 100 + 1000*w, P99ms: 300 + 1000*w}
				s.USDPerMillion = s.WCU*pricePerMillionWRU + s.RCU*pricePerMillionRRU
				s.LambdaUSDPerMillion = 0.1
				s.TotalUSDPerMillion = s.USDPerMillion + s.LambdaUSDPerMillion
				r.Sweep = append(r.Sweep, s)
			}
		}
	}
	dir := t.TempDir()
	doc := "# Capacity\n\nprose before\n\n" + sweepBegin + "\nold table\n" + sweepEnd + "\n\nprose after\n"
	if err := os.WriteFile(filepath.Join(dir, "capacity.md"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.writeCapacity(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "capacity.md"))
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if strings.Contains(got, "old table") || !strings.HasPrefix(got, "# Capacity\n\nprose before\n\n") || !strings.HasSuffix(got, sweepEnd+"\n\nprose after\n") {
		t.Fatalf("the section was not replaced in place:\n%s", got)
	}
	if n := strings.Count(got, "\n| watermark |") + strings.Count(got, "\n| delete |"); n != len(r.Sweep) {
		t.Errorf("%d rows for %d runs:\n%s", n, len(r.Sweep), got)
	}
	if fi, err := os.Stat(filepath.Join(dir, "capacity.png")); err != nil || fi.Size() == 0 {
		t.Errorf("no chart: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "capacity.md"), []byte("# no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.writeCapacity(dir); err == nil || !strings.Contains(err.Error(), "no ") {
		t.Errorf("a capacity.md without markers: %v", err)
	}
}

// make bench writes the sweep into docs/capacity.md at the end of a long
// run: the markers must be there before it starts.
func TestCapacityDocHasTheSweepMarkers(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "capacity.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if i, j := strings.Index(doc, sweepBegin), strings.Index(doc, sweepEnd); i < 0 || j < i {
		t.Fatalf("docs/capacity.md lacks the sweep's markers %q ... %q", sweepBegin, sweepEnd)
	}
}

// A run rewrites benchmarks.md but keeps, as it is, everything from the
// kept-by-hand marker on (the partial runs added by hand since); the first
// run writes a page that does not exist yet.
func TestBenchmarksPageKeepsItsHandKeptPart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "benchmarks.md")
	if err := writeKeepingTrailer(path, "# Benchmarks\n\nrun 1\n"); err != nil {
		t.Fatal(err)
	}
	kept := keptByHand + "\n\n## A pair added by hand\n\npair 1: 0.33\n"
	b, _ := os.ReadFile(path)
	if err := os.WriteFile(path, append(b, []byte("\n"+kept)...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeKeepingTrailer(path, "# Benchmarks\n\nrun 2\n"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "# Benchmarks\n\nrun 2\n\n"+kept; got != want {
		t.Fatalf("benchmarks.md after a second run:\n%s\nwant:\n%s", got, want)
	}
}

// The repository's benchmarks.md has the marker, so that make bench keeps
// the pairs recorded there by hand.
func TestDocsBenchmarksPageHasTheKeptMarker(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), keptByHand) {
		t.Fatalf("docs/benchmarks.md lacks %q: make bench would erase its hand-kept runs", keptByHand)
	}
}
