package emf

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

var (
	published = Metric{Name: "MessagesPublished", Unit: Count}
	duration  = Metric{Name: "PublishDuration", Unit: Milliseconds}
	age       = Metric{Name: "OldestPendingAge", Unit: Seconds}
	pending   = Metric{Name: "PendingMessages", Unit: Count}
)

var at = time.Date(2026, 3, 1, 12, 0, 0, 250_000_000, time.UTC)

func newEmitter(t *testing.T, w io.Writer, opts ...Option) *Emitter {
	t.Helper()
	e, err := New(w, "Outbox", []Dimension{{Name: "Outbox", Value: "orders-outbox-Messages-1A2B"}},
		append([]Option{WithClock(func() time.Time { return at })}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n got %s\nwant %s", name, got, want)
	}
}

// document is the structure of an EMF line, as CloudWatch reads it.
type document struct {
	AWS struct {
		Timestamp         int64
		CloudWatchMetrics []struct {
			Namespace  string
			Dimensions [][]string
			Metrics    []struct{ Name, Unit string }
		}
	} `json:"_aws"`
}

// checkDocument checks what the specification requires of line: one JSON
// object, every declared dimension and metric a root member, every metric
// value a number or an array of at most MaxValues numbers.
func checkDocument(t *testing.T, line []byte) {
	t.Helper()
	if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
		t.Fatalf("not exactly one line: %q", line)
	}
	var doc document
	var root map[string]json.RawMessage
	if err := json.Unmarshal(line, &doc); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(line, &root); err != nil {
		t.Fatal(err)
	}
	if doc.AWS.Timestamp != at.UnixMilli() || len(doc.AWS.CloudWatchMetrics) != 1 {
		t.Fatalf("metadata %+v", doc.AWS)
	}
	d := doc.AWS.CloudWatchMetrics[0]
	for _, set := range d.Dimensions {
		for _, name := range set {
			var s string
			if err := json.Unmarshal(root[name], &s); err != nil || s == "" {
				t.Errorf("dimension %s is not a string member: %s", name, root[name])
			}
		}
	}
	for _, m := range d.Metrics {
		raw, ok := root[m.Name]
		if !ok {
			t.Errorf("metric %s is declared but has no value", m.Name)
			continue
		}
		var one float64
		var many []float64
		if json.Unmarshal(raw, &one) != nil && (json.Unmarshal(raw, &many) != nil || len(many) == 0 || len(many) > MaxValues) {
			t.Errorf("metric %s = %s: not a number or an array of 1..%d numbers", m.Name, raw, MaxValues)
		}
	}
}

func TestGolden(t *testing.T) {
	many := make([]float64, 250)
	for i := range many {
		many[i] = float64((i * 37) % 250) // 0..249, shuffled
	}
	cases := []struct {
		name string
		opts []Option
		fill func(l *Line)
	}{
		{"values.json", nil, func(l *Line) {
			l.Value(published, 12)
			l.Values(duration, 4.25, 3.5, 17)
			l.Value(age, 0.5)
		}},
		// Not sampled: absent, not 0. A NaN is not a sample either.
		{"absent.json", nil, func(l *Line) {
			l.Value(published, 0)
			l.Value(pending, math.NaN())
			l.Values(duration)
		}},
		{"empty.json", nil, func(*Line) {}},
		// 250 samples become 100 order statistics, 0 and 249 kept.
		{"reduced.json", nil, func(l *Line) { l.Values(duration, many...) }},
		{"level.json", []Option{Level("WARN")}, func(l *Line) { l.Value(published, 3) }},
		// Setting a metric again replaces its value.
		{"replaced.json", nil, func(l *Line) {
			l.Value(published, 1)
			l.Value(published, 2)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			var l Line
			c.fill(&l)
			if err := newEmitter(t, &buf, c.opts...).Emit(&l); err != nil {
				t.Fatal(err)
			}
			checkDocument(t, buf.Bytes())
			golden(t, c.name, buf.Bytes())
		})
	}
}

func TestReduceKeepsExtremesAndOrder(t *testing.T) {
	vs := make([]float64, 1000)
	for i := range vs {
		vs[i] = float64(999 - i)
	}
	got := reduce(vs)
	if len(got) != MaxValues || got[0] != 0 || got[MaxValues-1] != 999 {
		t.Fatalf("reduce: %d values from %v to %v", len(got), got[0], got[len(got)-1])
	}
	// The median of the reduced series is within a percent of rank of the
	// median of the input.
	if med := got[MaxValues/2]; med < 490 || med > 515 {
		t.Fatalf("median %v, want about 500", med)
	}
	short := []float64{3, 1, 2}
	if r := reduce(short); len(r) != 3 || r[0] != 3 {
		t.Fatalf("a short series must be kept as it is: %v", r)
	}
}

func TestNewRejectsWhatCloudWatchRefuses(t *testing.T) {
	dim := []Dimension{{Name: "Outbox", Value: "t"}}
	cases := []struct {
		name      string
		w         io.Writer
		namespace string
		dims      []Dimension
		opts      []Option
		field     string
	}{
		{"no writer", nil, "Outbox", dim, nil, "writer"},
		{"empty namespace", io.Discard, "", dim, nil, "namespace"},
		{"colon namespace", io.Discard, ":Outbox", dim, nil, "namespace"},
		{"non-ASCII namespace", io.Discard, "Outböx", dim, nil, "namespace"},
		{"no dimension", io.Discard, "Outbox", nil, nil, "dimensions"},
		{"empty dimension value", io.Discard, "Outbox", []Dimension{{Name: "Outbox"}}, nil, "dimension Outbox"},
		{"duplicate dimension", io.Discard, "Outbox", []Dimension{{"A", "1"}, {"A", "2"}}, nil, "dimension name"},
		{"reserved dimension", io.Discard, "Outbox", []Dimension{{"_aws", "1"}}, nil, "dimension name"},
		{"long value", io.Discard, "Outbox", []Dimension{{"A", strings.Repeat("v", 1025)}}, nil, "dimension A"},
		{"nil clock", io.Discard, "Outbox", dim, []Option{WithClock(nil)}, "WithClock"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.w, c.namespace, c.dims, c.opts...)
			var e *Error
			if !errors.As(err, &e) || e.Field != c.field {
				t.Fatalf("err = %v, want an *emf.Error for %s", err, c.field)
			}
		})
	}
}

func TestEmitRejectsCollidingNames(t *testing.T) {
	for _, name := range []string{"Outbox", "_aws", "level", "", "Bad\nName"} {
		var buf bytes.Buffer
		var l Line
		l.Value(Metric{Name: name, Unit: Count}, 1)
		err := newEmitter(t, &buf).Emit(&l)
		var e *Error
		if !errors.As(err, &e) || buf.Len() != 0 {
			t.Errorf("metric %q: err = %v, wrote %q; want an *emf.Error and nothing written", name, err, buf.String())
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("closed") }

func TestEmitReportsWriteErrors(t *testing.T) {
	var l Line
	l.Value(published, 1)
	if err := newEmitter(t, failingWriter{}).Emit(&l); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("err = %v", err)
	}
}

// recordingWriter keeps each Write call apart.
type recordingWriter struct {
	mu     sync.Mutex
	writes [][]byte
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, append([]byte(nil), p...))
	return len(p), nil
}

// Concurrent Emits write whole lines, one Write each.
func TestEmitWritesEachLineOnce(t *testing.T) {
	w := &recordingWriter{}
	e := newEmitter(t, w)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var l Line
			l.Values(duration, float64(i), float64(i+1))
			if err := e.Emit(&l); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(w.writes) != 20 {
		t.Fatalf("%d writes, want 20", len(w.writes))
	}
	for _, line := range w.writes {
		checkDocument(t, line)
	}
}
