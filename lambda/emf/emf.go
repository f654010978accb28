package emf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Unit is a CloudWatch metric unit.
type Unit string

// The units the outbox's metrics use (CloudWatch accepts more).
const (
	Count        Unit = "Count"
	Milliseconds Unit = "Milliseconds"
	Seconds      Unit = "Seconds"
)

// Metric names a metric and its unit.
type Metric struct {
	Name string
	Unit Unit
}

// Dimension is one dimension of every metric an Emitter writes.
type Dimension struct {
	Name, Value string
}

// MaxValues is the most values one metric may carry in one EMF document
// (CloudWatch's limit). Values reduces longer series to this many.
const MaxValues = 100

// Limits of CloudWatch on what an EMF document declares.
const (
	maxDimensions = 30
	maxNameLen    = 255
	maxValueLen   = 1024
)

// Error says which setting of New is wrong and why.
type Error struct {
	Field  string
	Value  string
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("emf: %s %q: %s", e.Field, e.Value, e.Reason)
}

// Option configures an Emitter.
type Option func(*config)

type config struct {
	level string
	now   func() time.Time
}

// Level adds a "level" member with this value (and a "timestamp" member in
// RFC 3339) to every line. Lambda's application log-level filtering reads a
// JSON line's level and counts a line without one as INFO: with the
// function's log level at WARN or above, a line without a level, and so its
// metrics, would be dropped before CloudWatch Logs sees it. Default: no
// level member.
func Level(level string) Option { return func(c *config) { c.level = level } }

// WithClock sets the clock of the documents' timestamps. Default time.Now.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// Emitter writes EMF documents, one JSON object per line, each with a
// single Write: lines from concurrent Emit calls never interleave. Build it
// with New.
type Emitter struct {
	w         io.Writer
	namespace string
	dims      []Dimension
	cfg       config

	mu sync.Mutex
}

// New returns an Emitter writing to w (stdout in Lambda, which delivers it
// to CloudWatch Logs) in namespace, every metric with the given dimensions
// (at least one, at most 30). Names follow CloudWatch's rules: non-empty
// ASCII without control characters, the namespace not starting with ':'.
func New(w io.Writer, namespace string, dims []Dimension, opts ...Option) (*Emitter, error) {
	if w == nil {
		return nil, &Error{Field: "writer", Reason: "is nil"}
	}
	if err := checkName("namespace", namespace, maxNameLen); err != nil {
		return nil, err
	}
	if strings.HasPrefix(namespace, ":") {
		return nil, &Error{Field: "namespace", Value: namespace, Reason: "must not start with ':'"}
	}
	if len(dims) == 0 || len(dims) > maxDimensions {
		return nil, &Error{Field: "dimensions", Value: fmt.Sprint(len(dims)), Reason: fmt.Sprintf("must be 1..%d", maxDimensions)}
	}
	seen := map[string]bool{}
	for _, d := range dims {
		if err := checkName("dimension name", d.Name, maxNameLen); err != nil {
			return nil, err
		}
		if err := checkName("dimension "+d.Name, d.Value, maxValueLen); err != nil {
			return nil, err
		}
		if seen[d.Name] || reserved(d.Name) {
			return nil, &Error{Field: "dimension name", Value: d.Name, Reason: "is used twice or is a member of the document itself"}
		}
		seen[d.Name] = true
	}
	cfg := config{now: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.now == nil {
		return nil, &Error{Field: "WithClock", Reason: "is nil"}
	}
	return &Emitter{w: w, namespace: namespace, dims: slices.Clone(dims), cfg: cfg}, nil
}

func checkName(field, s string, max int) error {
	if s == "" || strings.TrimSpace(s) == "" {
		return &Error{Field: field, Value: s, Reason: "must not be empty or blank"}
	}
	if len(s) > max {
		return &Error{Field: field, Value: s, Reason: fmt.Sprintf("is longer than %d characters", max)}
	}
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			return &Error{Field: field, Value: s, Reason: "must be printable ASCII"}
		}
	}
	return nil
}

// reserved reports whether name is a root member the document itself uses.
func reserved(name string) bool { return name == "_aws" || name == "level" || name == "timestamp" }

// Line is one document's metric values. Set only what was sampled: a metric
// without a value is absent from the document, never 0. The zero Line is
// empty and ready to use.
type Line struct {
	values []value
}

type value struct {
	m  Metric
	vs []float64
}

// Value sets m to v. A NaN or infinite v leaves m absent.
func (l *Line) Value(m Metric, v float64) { l.Values(m, v) }

// Values sets m to the series vs, which CloudWatch counts as len(vs)
// samples (statistics such as p99 and Average are computed over them).
// Without a finite value m stays absent. More than MaxValues values are
// reduced to MaxValues order statistics at evenly spaced ranks, the minimum
// and maximum included: percentiles, minimum and maximum stay right within
// a percent of rank, the sample count becomes MaxValues.
func (l *Line) Values(m Metric, vs ...float64) {
	var keep []float64
	for _, v := range vs {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			keep = append(keep, v)
		}
	}
	l.values = slices.DeleteFunc(l.values, func(x value) bool { return x.m.Name == m.Name })
	if len(keep) == 0 {
		return
	}
	l.values = append(l.values, value{m: m, vs: reduce(keep)})
}

// Len returns how many metrics have a value.
func (l *Line) Len() int { return len(l.values) }

// reduce returns vs, or MaxValues order statistics of it when longer.
func reduce(vs []float64) []float64 {
	if len(vs) <= MaxValues {
		return vs
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	out := make([]float64, MaxValues)
	for i := range out {
		out[i] = s[i*(len(s)-1)/(MaxValues-1)]
	}
	return out
}

// Emit writes l as one EMF document on one line. A line without values is
// still written, with an empty metric list (as AWS's EMF libraries do): it
// records that the invocation ran and sampled nothing.
func (e *Emitter) Emit(l *Line) error {
	for _, v := range l.values {
		if err := checkName("metric name", v.m.Name, maxNameLen); err != nil {
			return err
		}
		if reserved(v.m.Name) || e.isDim(v.m.Name) {
			return &Error{Field: "metric name", Value: v.m.Name, Reason: "collides with a dimension or a member of the document"}
		}
	}
	var b bytes.Buffer
	now := e.cfg.now()
	b.WriteString(`{"_aws":{"Timestamp":`)
	fmt.Fprint(&b, now.UnixMilli())
	b.WriteString(`,"CloudWatchMetrics":[{"Namespace":`)
	writeJSON(&b, e.namespace)
	b.WriteString(`,"Dimensions":[[`)
	for i, d := range e.dims {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSON(&b, d.Name)
	}
	b.WriteString(`]],"Metrics":[`)
	for i, v := range l.values {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"Name":`)
		writeJSON(&b, v.m.Name)
		b.WriteString(`,"Unit":`)
		writeJSON(&b, string(v.m.Unit))
		b.WriteByte('}')
	}
	b.WriteString(`]}]}`)
	if e.cfg.level != "" {
		b.WriteString(`,"level":`)
		writeJSON(&b, e.cfg.level)
		b.WriteString(`,"timestamp":`)
		writeJSON(&b, now.UTC().Format(time.RFC3339Nano))
	}
	for _, d := range e.dims {
		b.WriteByte(',')
		writeJSON(&b, d.Name)
		b.WriteByte(':')
		writeJSON(&b, d.Value)
	}
	for _, v := range l.values {
		b.WriteByte(',')
		writeJSON(&b, v.m.Name)
		b.WriteByte(':')
		if len(v.vs) == 1 {
			writeJSON(&b, v.vs[0])
		} else {
			writeJSON(&b, v.vs)
		}
	}
	b.WriteString("}\n")
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("emf: write: %w", err)
	}
	return nil
}

func (e *Emitter) isDim(name string) bool {
	for _, d := range e.dims {
		if d.Name == name {
			return true
		}
	}
	return false
}

// writeJSON appends v encoded as JSON. Strings and finite numbers cannot
// fail to encode.
func writeJSON(b *bytes.Buffer, v any) {
	out, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("emf: encode %T: %v", v, err))
	}
	b.Write(out)
}
