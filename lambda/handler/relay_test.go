package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

type fakeDrainer struct {
	mu      sync.Mutex
	count   int
	span    int // the buckets drained beyond count (an old epoch after a shrink); 0: none
	errs    map[int]error
	drained []int
	targets map[int]int64
}

func (f *fakeDrainer) BucketCount() int { return f.count }

func (f *fakeDrainer) BucketSpan() int { return max(f.count, f.span) }

func (f *fakeDrainer) RefreshConfig(context.Context) (int, error) { return f.count, nil }

func (f *fakeDrainer) DrainBucketTo(ctx context.Context, b int, seq int64) (relay.DrainStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.targets == nil {
		f.targets = map[int]int64{}
	}
	f.targets[b] = seq
	f.drained = append(f.drained, b)
	if err := f.errs[b]; err != nil {
		return relay.DrainStats{Bucket: b}, err
	}
	return relay.DrainStats{Bucket: b, Published: 1}, nil
}

func (f *fakeDrainer) buckets() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := append([]int(nil), f.drained...)
	sort.Ints(out)
	return out
}

func loadEvent(t *testing.T, name string) events.DynamoDBEvent {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return ev
}

func newHandler(d Drainer) *Relay {
	return NewRelay(d, 4, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func TestHandlerFixtures(t *testing.T) {
	errBroker := errors.New("broker down")
	cases := []struct {
		fixture    string
		errs       map[int]error
		span       int
		drained    string
		failure    string // expected ItemIdentifier, "" for none
		ignored    int64
		malformed  int64
		outOfRange int64
	}{
		{fixture: "insert.json", drained: "[1 3 7]"},
		{fixture: "modify.json", drained: "[]", ignored: 1},
		{fixture: "remove.json", drained: "[]", ignored: 2},
		{fixture: "fence.json", drained: "[4]"},
		{fixture: "out_of_range.json", drained: "[0]", outOfRange: 1},
		// After a shrink 16 → 8, old bucket 12 is drained while its epoch drains.
		{fixture: "out_of_range.json", span: 16, drained: "[0 12]"},
		{fixture: "malformed.json", drained: "[6]", malformed: 6},
		// Bucket 3's first record is seq 100, bucket 1's is 101: report the lowest failed one.
		{fixture: "insert.json", errs: map[int]error{1: errBroker, 7: errBroker}, drained: "[1 3 7]", failure: "4421584500000000000000000101"},
		{fixture: "insert.json", errs: map[int]error{3: outbox.ErrGapPending, 1: errBroker}, drained: "[1 3 7]", failure: "4421584500000000000000000100"},
		// A held bucket was woken: not a failure.
		{fixture: "insert.json", errs: map[int]error{3: outbox.ErrLeaseHeld}, drained: "[1 3 7]"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%v", c.fixture, c.errs), func(t *testing.T) {
			d := &fakeDrainer{count: 8, span: c.span, errs: c.errs}
			h := newHandler(d)
			resp, err := h.Handle(context.Background(), loadEvent(t, c.fixture))
			if err != nil {
				t.Fatalf("Handle returned a function error: %v", err)
			}
			if got := fmt.Sprint(d.buckets()); got != c.drained {
				t.Errorf("drained %s, want %s (each bucket once)", got, c.drained)
			}
			var failure string
			if len(resp.BatchItemFailures) > 1 {
				t.Fatalf("%d batch item failures; only the lowest may be reported", len(resp.BatchItemFailures))
			}
			if len(resp.BatchItemFailures) == 1 {
				failure = resp.BatchItemFailures[0].ItemIdentifier
			}
			if failure != c.failure {
				t.Errorf("failure item %q, want %q", failure, c.failure)
			}
			if h.counters.Ignored.Load() != c.ignored || h.counters.Malformed.Load() != c.malformed || h.counters.OutOfRange.Load() != c.outOfRange {
				t.Errorf("counters ignored=%d malformed=%d out_of_range=%d, want %d %d %d",
					h.counters.Ignored.Load(), h.counters.Malformed.Load(), h.counters.OutOfRange.Load(), c.ignored, c.malformed, c.outOfRange)
			}
		})
	}
}

// Each bucket is drained up to the highest sequence hinted for it.
func TestHandlerDrainsUpToTheHighestHint(t *testing.T) {
	d := &fakeDrainer{count: 8}
	if _, err := newHandler(d).Handle(context.Background(), loadEvent(t, "insert.json")); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(d.targets); got != "map[1:6 3:19 7:1]" {
		t.Fatalf("targets %s, want map[1:6 3:19 7:1]", got)
	}
}

func TestDecodeHint(t *testing.T) {
	ev := loadEvent(t, "insert.json")
	b, s, err := decodeHint(ev.Records[0])
	if err != nil || b != 3 || s != 17 {
		t.Fatalf("decodeHint = %d %d %v, want 3 17", b, s, err)
	}
	for i, rec := range loadEvent(t, "malformed.json").Records[:6] {
		var he *HintError
		if _, _, err := decodeHint(rec); !errors.As(err, &he) || he.EventID != rec.EventID {
			t.Errorf("malformed record %d: err = %v, want a HintError naming the event", i, err)
		}
	}
}

func TestSeqLess(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"9", "10", true}, {"10", "9", false}, {"100", "101", true}, {"101", "101", false},
		{"4421584500000000017450439091", "4421584500000000017450439092", true},
	}
	for _, c := range cases {
		if got := seqLess(c.a, c.b); got != c.want {
			t.Errorf("seqLess(%s, %s) = %v", c.a, c.b, got)
		}
	}
}

// A stopped bucket (a Fatal error: a missing topic, an authorization
// failure) is named by the engine once a minute per bucket; the handler
// does not add a WARN line per invocation for it, while it still reports
// the bucket for redelivery. Any other failure keeps its WARN line.
func TestStoppedBucketLogsNoWarnPerInvocation(t *testing.T) {
	for _, tt := range []struct {
		name  string
		err   error
		warns int
	}{
		{"fatal", outbox.WithClass(errors.New("UNKNOWN_TOPIC_OR_PARTITION: order-evnts"), outbox.Fatal), 0},
		{"retriable", outbox.WithClass(errors.New("broker timeout"), outbox.Retriable), 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf syncBuffer
			d := &fakeDrainer{count: 8, errs: map[int]error{3: tt.err}}
			h := NewRelay(d, 4, slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
			for i := 0; i < 3; i++ {
				resp, err := h.Handle(context.Background(), loadEvent(t, "insert.json"))
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.BatchItemFailures) != 1 {
					t.Fatalf("invocation %d: failures %+v; want bucket 3 reported for redelivery", i, resp.BatchItemFailures)
				}
			}
			warns := 0
			for _, line := range buf.lines() {
				var rec struct {
					Level string `json:"level"`
				}
				if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == "WARN" {
					warns++
				}
			}
			if warns != 3*tt.warns {
				t.Fatalf("%d WARN lines in 3 invocations; want %d:\n%s", warns, 3*tt.warns, buf.String())
			}
		})
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return string(s.b) }

func (s *syncBuffer) lines() []string {
	var out []string
	for _, l := range strings.Split(s.String(), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// In region mode the stream carries the items replicated from the other
// regions too: the handler skips the hints for buckets its relay's region
// does not drain (bucket 7 of insert.json is region b's), and drains the
// others.
func TestHandlerSkipsOtherRegionsBuckets(t *testing.T) {
	s := memory.New(8)
	s.SetConfig(outbox.Config{Regions: []string{"a", "b"}}) // a: buckets 0-3, b: 4-7
	r, err := relay.New(context.Background(), s, noopPublisher{}, relay.Region("a"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler(r)
	resp, err := h.Handle(context.Background(), loadEvent(t, "insert.json"))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v; want no failure", resp, err)
	}
	foreign := h.counters.Foreign.Load()
	if foreign == 0 || h.counters.Drained.Load() != 2 {
		t.Errorf("foreign hints %d, buckets drained %d; want bucket 7's hints skipped and buckets 1 and 3 drained",
			foreign, h.counters.Drained.Load())
	}

	// Region a takes b's buckets over: once RegionRefreshInterval has
	// passed, the next invocation re-reads the takeovers and drains 7 too.
	s.SetConfig(outbox.Config{Regions: []string{"a", "b"}, TakenOver: map[string]string{"b": "a"}})
	if _, err := h.Handle(context.Background(), loadEvent(t, "insert.json")); err != nil {
		t.Fatal(err)
	}
	if h.counters.Foreign.Load() != 2*foreign {
		t.Errorf("within RegionRefreshInterval the handler re-read the takeovers (foreign hints %d, want %d)", h.counters.Foreign.Load(), 2*foreign)
	}
	h.refreshed = time.Now().Add(-RegionRefreshInterval)
	if _, err := h.Handle(context.Background(), loadEvent(t, "insert.json")); err != nil {
		t.Fatal(err)
	}
	if h.counters.Foreign.Load() != 2*foreign || h.counters.Drained.Load() != 2+2+3 {
		t.Errorf("after the takeover: foreign hints %d, buckets drained %d; want bucket 7 drained too", h.counters.Foreign.Load(), h.counters.Drained.Load())
	}
}

type noopPublisher struct{}

func (noopPublisher) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	return len(msgs), nil
}

// fakeCompanions is a fakeDrainer with DrainBucketsTo, as *relay.Relay:
// its call also returns companion drains of buckets no record hinted.
type fakeCompanions struct {
	*fakeDrainer
	companions []relay.BucketResult
}

func (c *fakeCompanions) DrainBucketsTo(ctx context.Context, targets map[int]int64) (hinted, companions []relay.BucketResult) {
	for b, seq := range targets {
		st, err := c.DrainBucketTo(ctx, b, seq)
		hinted = append(hinted, relay.BucketResult{Bucket: b, Stats: st, Err: err})
	}
	return hinted, c.companions
}

// TestHandlerCountsCompanionsButReportsNoRecordForThem: with a Drainer
// that drains companions beside a hand-over (relay.DrainBucketsTo), the
// handler drains each hinted bucket up to its highest hint through it,
// counts what the companions published, and reports a hinted bucket's
// failure but never a companion's: its messages' hints come in later
// batches.
func TestHandlerCountsCompanionsButReportsNoRecordForThem(t *testing.T) {
	d := &fakeCompanions{fakeDrainer: &fakeDrainer{count: 8, errs: map[int]error{3: errors.New("broker down")}}, companions: []relay.BucketResult{
		{Bucket: 2, Stats: relay.DrainStats{Bucket: 2, Published: 5, Companion: true}},
		{Bucket: 5, Stats: relay.DrainStats{Bucket: 5, Companion: true}, Err: errors.New("broker down")},
	}}
	h := newHandler(d)
	resp, err := h.Handle(context.Background(), loadEvent(t, "insert.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(d.targets); got != "map[1:6 3:19 7:1]" {
		t.Fatalf("targets %s, want map[1:6 3:19 7:1]", got)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "4421584500000000000000000100" {
		t.Fatalf("failures %+v, want only bucket 3's lowest record", resp.BatchItemFailures)
	}
	// Buckets 1 and 7 published 1 each, companion 2 published 5.
	if got := h.counters.Published.Load(); got != 7 {
		t.Fatalf("published %d, want 7 (the companions' included)", got)
	}
}
