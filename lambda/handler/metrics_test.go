package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/lambda/emf"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/emf/")

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// goldenAt is the clock of the golden lines.
var goldenAt = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testEmitter(t *testing.T, w io.Writer) *emf.Emitter {
	t.Helper()
	e, err := NewEmitter(w, "orders-outbox-Messages-1A2B", emf.WithClock(func() time.Time { return goldenAt }))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "emf", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n got %s\nwant %s", path, got, want)
	}
}

// metricsOf decodes an EMF line into its declared metrics' values (a
// number, or a []any of numbers) and checks that every metric is one of
// the function's.
func metricsOf(t *testing.T, line []byte, set []emf.Metric) map[string]any {
	t.Helper()
	var doc struct {
		AWS struct {
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		} `json:"_aws"`
	}
	var root map[string]any
	if err := json.Unmarshal(line, &doc); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	if err := json.Unmarshal(line, &root); err != nil {
		t.Fatal(err)
	}
	d := doc.AWS.CloudWatchMetrics[0]
	if d.Namespace != Namespace || !reflect.DeepEqual(d.Dimensions, [][]string{{DimensionName}}) || root[DimensionName] == "" {
		t.Fatalf("namespace %q, dimensions %v: %s", d.Namespace, d.Dimensions, line)
	}
	units := map[string]string{}
	for _, m := range set {
		units[m.Name] = string(m.Unit)
	}
	out := map[string]any{}
	for _, m := range d.Metrics {
		if units[m.Name] != m.Unit {
			t.Errorf("metric %s (%s) is not one of the function's", m.Name, m.Unit)
		}
		out[m.Name] = root[m.Name]
	}
	return out
}

// The contract (docs/deploy.md, template.yaml): exactly these names.
func TestMetricSetsAreTheContract(t *testing.T) {
	names := func(set []emf.Metric) string {
		var s []string
		for _, m := range set {
			s = append(s, m.Name+"/"+string(m.Unit))
		}
		return strings.Join(s, " ")
	}
	relay := "MessagesPublished/Count PublishFailuresRetriable/Count PublishFailuresFatal/Count PublishFailuresRecord/Count " +
		"PublishDuration/Milliseconds BatchSize/Count LeasesAcquired/Count LeasesLost/Count LeasesTakenOver/Count " +
		"MessagesParked/Count FencesWritten/Count GapWaitTime/Milliseconds BucketsFailed/Count InvocationDuration/Milliseconds"
	sweeper := "PendingMessages/Count OldestPendingAge/Seconds StuckBuckets/Count ParkedMessages/Count LiveRelays/Count BucketsFailed/Count BucketCountChangeOverdue/Seconds BucketCountChangesCompleted/Count"
	if got := names(RelayMetricSet); got != relay {
		t.Errorf("relay metrics\n %s\nwant\n %s", got, relay)
	}
	if got := names(SweeperMetricSet); got != sweeper {
		t.Errorf("sweeper metrics\n %s\nwant\n %s", got, sweeper)
	}
}

func TestRelayMetricsSortsBatches(t *testing.T) {
	fatal := outbox.WithClass(errors.New("TOPIC_AUTHORIZATION_FAILED"), outbox.Fatal)
	cases := []struct {
		name  string
		batch relay.BatchStats
		want  RelayTotals
	}{
		{"published", relay.BatchStats{Messages: 5, Acked: 5, PublishDuration: 3 * time.Millisecond},
			RelayTotals{Published: 5, PublishDurations: []time.Duration{3 * time.Millisecond}, BatchSizes: []int{5}}},
		{"fatal after a prefix", relay.BatchStats{Messages: 5, Acked: 2, Err: fatal, Class: outbox.Fatal, PublishDuration: time.Millisecond},
			RelayTotals{Published: 2, FailuresFatal: 1, PublishDurations: []time.Duration{time.Millisecond}, BatchSizes: []int{5}}},
		{"retriable", relay.BatchStats{Messages: 1, Err: errors.New("timeout"), Class: outbox.Retriable},
			RelayTotals{FailuresRetriable: 1, PublishDurations: []time.Duration{0}, BatchSizes: []int{1}}},
		{"record", relay.BatchStats{Messages: 1, Err: errors.New("MESSAGE_TOO_LARGE"), Class: outbox.RecordPermanent},
			RelayTotals{FailuresRecord: 1, PublishDurations: []time.Duration{0}, BatchSizes: []int{1}}},
		// The publish succeeded; the head update after it failed: not a
		// publish failure (the drain reports the store error).
		{"store error after the publish", relay.BatchStats{Messages: 3, Acked: 3, Err: errors.New("throttled")},
			RelayTotals{Published: 3, PublishDurations: []time.Duration{0}, BatchSizes: []int{3}}},
		// A record parked: no publish in this call.
		{"parked", relay.BatchStats{Parked: 1, Err: errors.New("too large"), Class: outbox.RecordPermanent}, RelayTotals{}},
		// Only tombstones passed over: no publish.
		{"fences only", relay.BatchStats{Fenced: 4}, RelayTotals{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := NewRelayMetrics()
			m.Batch(c.batch)
			if got := m.Take(); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("totals %+v, want %+v", got, c.want)
			}
			if got := m.Take(); !reflect.DeepEqual(got, RelayTotals{}) {
				t.Fatalf("Take does not start over: %+v", got)
			}
		})
	}
	m := NewRelayMetrics()
	m.Drain(relay.DrainStats{Acquired: true, TakenOver: true, Parked: 2, Fenced: 3, GapWait: time.Second})
	m.Drain(relay.DrainStats{Resumed: true, LeaseLost: true, GapWait: time.Second})
	want := RelayTotals{Acquired: 1, TakenOver: 1, Lost: 1, Parked: 2, Fenced: 3, GapWait: 2 * time.Second}
	if got := m.Take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("drain totals %+v, want %+v", got, want)
	}
}

func TestRelayLineGolden(t *testing.T) {
	cases := []struct {
		name   string
		totals RelayTotals
		failed int
		took   time.Duration
	}{
		{"relay.json", RelayTotals{Published: 1200, FailuresRetriable: 2, FailuresRecord: 1,
			PublishDurations: []time.Duration{12500 * time.Microsecond, 9 * time.Millisecond, 41 * time.Millisecond},
			BatchSizes:       []int{500, 500, 200}, Acquired: 3, TakenOver: 1, Parked: 1, Fenced: 2, GapWait: 10 * time.Second},
			0, 11250 * time.Millisecond},
		// Nothing was published: the per-publish series are absent, every
		// count is present (a sampled 0).
		{"relay_idle.json", RelayTotals{}, 0, 3 * time.Millisecond},
		{"relay_fatal.json", RelayTotals{FailuresFatal: 1, PublishDurations: []time.Duration{2 * time.Millisecond}, BatchSizes: []int{1}, Acquired: 1},
			1, 40 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := testEmitter(t, &buf).Emit(relayLine(c.totals, c.failed, c.took)); err != nil {
				t.Fatal(err)
			}
			metricsOf(t, buf.Bytes(), RelayMetricSet)
			checkGolden(t, c.name, buf.Bytes())
		})
	}
}

func bucket(b int, head, last int64, messages, parked int, oldest time.Time) relay.BucketReport {
	return relay.BucketReport{Bucket: b, Lease: outbox.Lease{Bucket: b, Head: head}, Last: last, Messages: messages, Parked: parked, Oldest: oldest}
}

func TestSweeperLineGolden(t *testing.T) {
	start := goldenAt
	healthy := []relay.BucketReport{
		bucket(0, 10, 10, 0, 0, time.Time{}),
		bucket(1, 4, 9, 5, 1, start.Add(-90*time.Second)),
		bucket(2, 7, 8, 0, 0, time.Time{}), // an uncommitted reservation: counted, not a message
		bucket(3, 0, 2, 2, 0, start.Add(-2500*time.Millisecond)),
	}
	with := func(bs []relay.BucketReport, i int, f func(*relay.BucketReport)) []relay.BucketReport {
		out := append([]relay.BucketReport(nil), bs...)
		f(&out[i])
		return out
	}
	probeErr := errors.New("throttled")
	cases := []struct {
		name       string
		rep        relay.SweepReport
		looked     bool
		stuck      []int
		stuckKnown bool
	}{
		{"sweeper.json", relay.SweepReport{Live: 2, Buckets: healthy}, true, []int{1}, true},
		{"sweeper_empty.json", relay.SweepReport{Live: 1, Buckets: []relay.BucketReport{bucket(0, 3, 3, 0, 0, time.Time{})}}, true, nil, true},
		// A bucket's probe failed: nothing summed over the buckets is exact.
		{"sweeper_probe_failed.json", relay.SweepReport{Live: 1, Buckets: with(healthy, 2, func(b *relay.BucketReport) { b.Err = probeErr; b.Last, b.Parked = -1, -1 }),
			Errors: map[int]error{2: probeErr}}, true, []int{1}, true},
		// The counter could not be read: only PendingMessages is absent.
		{"sweeper_counter_unknown.json", relay.SweepReport{Live: 1, Buckets: with(healthy, 0, func(b *relay.BucketReport) { b.Last = -1 })}, true, []int{1}, true},
		// The dead letters could not be counted.
		{"sweeper_parked_unknown.json", relay.SweepReport{Live: 1, Buckets: with(healthy, 3, func(b *relay.BucketReport) { b.Parked = -1 })}, true, []int{1}, true},
		// The progress could not be loaded: StuckBuckets is absent.
		{"sweeper_progress_unknown.json", relay.SweepReport{Live: 1, Buckets: healthy}, true, nil, false},
		// The sweep failed after listing the relays (and so looked at no bucket).
		{"sweeper_failed.json", relay.SweepReport{Live: 1}, false, nil, false},
		// The sweep failed before anything: an empty line.
		{"sweeper_nothing.json", relay.SweepReport{}, false, nil, false},
		// The old epoch of a BucketCount change still draining 95 s past
		// its deadline (RebucketOverdueAlarm), then one the sweep found
		// drained and ended.
		{"sweeper_change_overdue.json", relay.SweepReport{Live: 1, Buckets: healthy,
			Change: &relay.ChangeSeen{From: 8, To: 16, Overdue: 95 * time.Second, Waiting: []int{3}}}, true, nil, true},
		{"sweeper_change_completed.json", relay.SweepReport{Live: 1, Buckets: healthy,
			Change: &relay.ChangeSeen{From: 8, To: 16, Completed: true}}, true, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := testEmitter(t, &buf).Emit(sweeperLine(c.rep, c.looked, start, c.stuck, c.stuckKnown)); err != nil {
				t.Fatal(err)
			}
			metricsOf(t, buf.Bytes(), SweeperMetricSet)
			checkGolden(t, c.name, buf.Bytes())
		})
	}
}

func TestObserve(t *testing.T) {
	pending := func(b int, head int64) relay.BucketReport { return bucket(b, head, head+3, 3, 0, time.Now()) }
	cases := []struct {
		name    string
		prev    map[int]Watched
		buckets []relay.BucketReport
		drained []int
		next    map[int]Watched
		stuck   string
	}{
		{"first sight", nil, []relay.BucketReport{pending(0, 5)}, nil, map[int]Watched{0: {5, 1}}, "[]"},
		{"same head again", map[int]Watched{0: {5, 2}}, []relay.BucketReport{pending(0, 5)}, nil, map[int]Watched{0: {5, 3}}, "[0]"},
		{"head moved", map[int]Watched{0: {5, 7}}, []relay.BucketReport{pending(0, 6)}, nil, map[int]Watched{0: {6, 1}}, "[]"},
		{"empty", map[int]Watched{0: {5, 7}}, []relay.BucketReport{bucket(0, 8, 8, 0, 0, time.Time{})}, nil, map[int]Watched{}, "[]"},
		// The sweep drained it after its look.
		{"drained by this sweep", map[int]Watched{0: {5, 7}}, []relay.BucketReport{pending(0, 5)}, []int{0}, map[int]Watched{}, "[]"},
		// A reservation never committed: the counter is above the head
		// but no message waits.
		{"reservation only", map[int]Watched{0: {5, 7}}, []relay.BucketReport{bucket(0, 5, 6, 0, 0, time.Time{})}, nil, map[int]Watched{}, "[]"},
		// Messages at or below the head are leftovers a drain marks.
		{"leftovers only", map[int]Watched{0: {5, 7}}, []relay.BucketReport{bucket(0, 5, 5, 2, 0, time.Now())}, nil, map[int]Watched{}, "[]"},
		// Without a counter the messages alone decide.
		{"counter unknown", map[int]Watched{0: {5, 2}}, []relay.BucketReport{bucket(0, 5, -1, 1, 0, time.Now())}, nil, map[int]Watched{0: {5, 3}}, "[0]"},
		{"probe failed keeps the entry", map[int]Watched{0: {5, 2}, 1: {9, 9}},
			[]relay.BucketReport{{Bucket: 0, Err: errors.New("throttled")}, pending(1, 9)}, nil, map[int]Watched{0: {5, 2}, 1: {9, 10}}, "[1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			next, stuck := observe(c.prev, c.buckets, c.drained, 3)
			if !reflect.DeepEqual(next, c.next) || fmt.Sprint(stuck) != c.stuck {
				t.Fatalf("observe = %v, %v; want %v, %v", next, stuck, c.next, c.stuck)
			}
		})
	}
}

func TestMemoryProgressRefusesAStaleSave(t *testing.T) {
	var m MemoryProgress
	ctx := context.Background()
	a, _ := m.LoadProgress(ctx)
	b, _ := m.LoadProgress(ctx)
	a.Buckets = map[int]Watched{1: {4, 1}}
	if err := m.SaveProgress(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := m.SaveProgress(ctx, b); !errors.Is(err, ErrProgressConflict) {
		t.Fatalf("a save over a newer version: %v, want ErrProgressConflict", err)
	}
	if got, _ := m.LoadProgress(ctx); got.Version != 1 || got.Buckets[1] != (Watched{4, 1}) {
		t.Fatalf("loaded %+v", got)
	}
}

func TestNewSweeperValidatesOptions(t *testing.T) {
	cases := []struct {
		name   string
		opts   []SweeperOption
		option string
	}{
		{"one sweep", []SweeperOption{StuckAfter(1)}, "StuckAfter"},
		{"too many", []SweeperOption{StuckAfter(1001)}, "StuckAfter"},
		{"nil progress", []SweeperOption{SweepProgress(nil)}, "SweepProgress"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewSweeper(nil, quiet, c.opts...)
			var oe *outbox.OptionError
			if !errors.As(err, &oe) || oe.Option != c.option {
				t.Fatalf("err = %v, want an *outbox.OptionError for %s", err, c.option)
			}
		})
	}
	if _, err := NewSweeper(nil, quiet, StuckAfter(2), SweepProgress(&MemoryProgress{})); err != nil {
		t.Fatal(err)
	}
}

// fatalPublisher refuses every publish with a fatal error while on, and
// publishes otherwise.
type fatalPublisher struct {
	mu  sync.Mutex
	on  bool
	pub int
}

func (p *fatalPublisher) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on {
		return 0, outbox.WithClass(errors.New("TOPIC_AUTHORIZATION_FAILED: not authorized"), outbox.Fatal)
	}
	p.pub += len(msgs)
	return len(msgs), nil
}

func (p *fatalPublisher) set(on bool) {
	p.mu.Lock()
	p.on = on
	p.mu.Unlock()
}

// lines splits what an emitter wrote into its lines.
func lines(buf *bytes.Buffer) [][]byte {
	return bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
}

// A bucket that a fatal error stops: each sweep fails (the Errors alarm),
// the bucket is stuck from the StuckAfter-th sweep on, and once the cause is
// gone the next sweep drains it and it is no longer stuck.
func TestSweeperReportsABucketStoppedByAFatalError(t *testing.T) {
	ctx := context.Background()
	s := memory.New(4)
	put(t, s, 2, 3, time.Now().Add(-time.Minute))
	p := &fatalPublisher{on: true}
	clk := &laterClock{}
	r, err := relay.New(ctx, s, p, relay.DeadlineMargin(0), relay.SweepMinAge(0), relay.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	h, err := NewSweeper(r, quiet, SweeperEMF(testEmitter(t, &buf)), StuckAfter(3))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		sum, err := h.Handle(ctx, scheduled(t))
		var se *StoppedError
		if !errors.As(err, &se) || se.Errors[2] == nil || outbox.Classify(err) != outbox.Fatal {
			t.Fatalf("sweep %d: err = %v, want a *StoppedError for bucket 2 whose class is fatal", i, err)
		}
		m := metricsOf(t, lines(&buf)[i-1], SweeperMetricSet)
		wantStuck := 0.0
		if i == 3 {
			wantStuck = 1
		}
		if m["StuckBuckets"] != wantStuck || m["PendingMessages"] != 3.0 || m["BucketsFailed"] != 1.0 || fmt.Sprint(sum.Failed) != "[2]" {
			t.Fatalf("sweep %d: metrics %v, summary %+v; want StuckBuckets %v, PendingMessages 3, BucketsFailed 1", i, m, sum, wantStuck)
		}
	}
	p.set(false)
	// A relay leaves a bucket it stopped alone for a few seconds (the
	// engine's stoppedRetry, 5 s), reporting the stop; the sweeper runs
	// once a minute, so the next sweep is a minute later.
	clk.add(time.Minute)
	if _, err := h.Handle(ctx, scheduled(t)); err != nil {
		t.Fatalf("sweep after the fix: %v", err)
	}
	if m := metricsOf(t, lines(&buf)[3], SweeperMetricSet); m["StuckBuckets"] != 0.0 || m["BucketsFailed"] != 0.0 || p.pub != 3 {
		t.Fatalf("after the fix: metrics %v, published %d", m, p.pub)
	}
	// The sweep that drained it saw it pending before draining; the next
	// one sees it empty.
	if _, err := h.Handle(ctx, scheduled(t)); err != nil {
		t.Fatal(err)
	}
	if m := metricsOf(t, lines(&buf)[4], SweeperMetricSet); m["PendingMessages"] != 0.0 || m["OldestPendingAge"] != 0.0 {
		t.Fatalf("drained: metrics %v", m)
	}
}

// The relay handler writes one line per invocation with what its drains
// did, reports a stopped bucket as a batch item failure and returns no
// function error.
func TestRelayEmitsOneLinePerInvocation(t *testing.T) {
	ctx := context.Background()
	s := memory.New(8)
	p := &fatalPublisher{}
	m := NewRelayMetrics()
	r, err := relay.New(ctx, s, p, relay.DeadlineMargin(0), relay.WithMetrics(m), relay.BatchSize(2))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	h := NewRelay(r, 4, quiet, RelayEMF(testEmitter(t, &buf), m))
	// insert.json hints buckets 1, 3 and 7 (up to 6, 19 and 1); bucket 1
	// is empty the first time.
	put(t, s, 3, 19, time.Now())
	put(t, s, 7, 1, time.Now())
	resp, err := h.Handle(ctx, loadEvent(t, "insert.json"))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v", resp, err)
	}
	got := metricsOf(t, lines(&buf)[0], RelayMetricSet)
	sizes, _ := got["BatchSize"].([]any)
	if got["MessagesPublished"] != 20.0 || got["LeasesAcquired"] != 3.0 || got["BucketsFailed"] != 0.0 ||
		got["PublishFailuresFatal"] != 0.0 || len(sizes) != 11 || got["InvocationDuration"] == nil {
		t.Fatalf("first invocation: %v", got)
	}

	p.set(true)
	put(t, s, 1, 6, time.Now())
	resp, err = h.Handle(ctx, loadEvent(t, "insert.json"))
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("Handle with a fatal error = %+v, %v; want one batch item failure and no function error", resp, err)
	}
	if n := len(lines(&buf)); n != 2 {
		t.Fatalf("%d lines after two invocations", n)
	}
	got = metricsOf(t, lines(&buf)[1], RelayMetricSet)
	if got["MessagesPublished"] != 0.0 || got["PublishFailuresFatal"] != 1.0 || got["BucketsFailed"] != 1.0 {
		t.Fatalf("second invocation: %v", got)
	}
}

// retryingSweep is a sweep whose drain of bucket 2 fails retriably and
// retries until its context ends, as under a Kafka leader change or a
// broker that never answers that lasts.
type retryingSweep struct{}

func (retryingSweep) Sweep(ctx context.Context) (relay.SweepReport, error) {
	<-ctx.Done()
	return relay.SweepReport{Live: 1, Buckets: []relay.BucketReport{bucket(0, 0, 0, 0, 0, time.Time{}), bucket(2, 4, 7, 3, 0, time.Now().Add(-time.Minute))},
		Ready: []int{2}, Errors: map[int]error{2: fmt.Errorf("publish: %w", outbox.ErrDeadline)}}, nil
}

// ctxProgress is a MemoryProgress that, like a store over the network,
// cannot be read or written on a context that has ended.
type ctxProgress struct{ MemoryProgress }

func (p *ctxProgress) LoadProgress(ctx context.Context) (Progress, error) {
	if err := ctx.Err(); err != nil {
		return Progress{}, err
	}
	return p.MemoryProgress.LoadProgress(ctx)
}

func (p *ctxProgress) SaveProgress(ctx context.Context, pr Progress) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return p.MemoryProgress.SaveProgress(ctx, pr)
}

// A bucket whose drain retries until the deadline in every sweep is still
// counted stuck: the sweep ends ProgressReserve before the work does, and
// the progress is read before it (it was read and saved after a sweep that
// had used the whole invocation, so never).
func TestSweepThatRunsToItsDeadlineStillCountsStuckBuckets(t *testing.T) {
	var buf bytes.Buffer
	h, err := NewSweeper(retryingSweep{}, quiet, SweeperEMF(testEmitter(t, &buf)), StuckAfter(2), SweepProgress(&ctxProgress{}))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		// The sweep's own share of the invocation is 100 ms.
		ctx, cancel := context.WithTimeout(context.Background(), ResponseMargin+ProgressReserve+100*time.Millisecond)
		sum, err := h.Handle(ctx, scheduled(t))
		cancel()
		if err != nil {
			t.Fatalf("sweep %d: %v (a retriable failure is left to the next sweep)", i, err)
		}
		m := metricsOf(t, lines(&buf)[i-1], SweeperMetricSet)
		if want := float64(i - 1); m["StuckBuckets"] != want {
			t.Fatalf("sweep %d: StuckBuckets %v, want %v (summary %+v)", i, m["StuckBuckets"], want, sum)
		}
	}
}

// laterClock is the wall clock moved on by what add added.
type laterClock struct{ by atomic.Int64 }

func (c *laterClock) Now() time.Time      { return time.Now().Add(time.Duration(c.by.Load())) }
func (c *laterClock) add(d time.Duration) { c.by.Add(int64(d)) }
