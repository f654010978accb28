package handler

import (
	"io"
	"sync"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/lambda/emf"
	"github.com/dynakafka/outbox/relay"
)

// Namespace is the CloudWatch namespace of the functions' metrics; their one
// dimension is DimensionName = the messages table's name.
const (
	Namespace     = "Outbox"
	DimensionName = "Outbox"
)

// The relay function's metrics, one EMF line per invocation (docs/deploy.md,
// Metrics, says what each means).
var (
	MessagesPublished        = emf.Metric{Name: "MessagesPublished", Unit: emf.Count}
	PublishFailuresRetriable = emf.Metric{Name: "PublishFailuresRetriable", Unit: emf.Count}
	PublishFailuresFatal     = emf.Metric{Name: "PublishFailuresFatal", Unit: emf.Count}
	PublishFailuresRecord    = emf.Metric{Name: "PublishFailuresRecord", Unit: emf.Count}
	PublishDuration          = emf.Metric{Name: "PublishDuration", Unit: emf.Milliseconds}
	BatchSize                = emf.Metric{Name: "BatchSize", Unit: emf.Count}
	LeasesAcquired           = emf.Metric{Name: "LeasesAcquired", Unit: emf.Count}
	LeasesLost               = emf.Metric{Name: "LeasesLost", Unit: emf.Count}
	LeasesTakenOver          = emf.Metric{Name: "LeasesTakenOver", Unit: emf.Count}
	MessagesParked           = emf.Metric{Name: "MessagesParked", Unit: emf.Count}
	FencesWritten            = emf.Metric{Name: "FencesWritten", Unit: emf.Count}
	GapWaitTime              = emf.Metric{Name: "GapWaitTime", Unit: emf.Milliseconds}
	BucketsFailed            = emf.Metric{Name: "BucketsFailed", Unit: emf.Count}
	InvocationDuration       = emf.Metric{Name: "InvocationDuration", Unit: emf.Milliseconds}
)

// The sweeper function's metrics, one EMF line per invocation; it also
// emits BucketsFailed.
var (
	PendingMessages  = emf.Metric{Name: "PendingMessages", Unit: emf.Count}
	OldestPendingAge = emf.Metric{Name: "OldestPendingAge", Unit: emf.Seconds}
	StuckBuckets     = emf.Metric{Name: "StuckBuckets", Unit: emf.Count}
	ParkedMessages   = emf.Metric{Name: "ParkedMessages", Unit: emf.Count}
	LiveRelays       = emf.Metric{Name: "LiveRelays", Unit: emf.Count}
	// BucketCountChangeOverdue: seconds past the change's deadline that
	// the old epoch of an online BucketCount change still drains after
	// the sweep (a stuck or unrelayed old bucket: the new messages of its
	// keys wait); 0 when within the deadline or ended. Both change metrics
	// are absent when the sweep saw no old epoch draining.
	BucketCountChangeOverdue = emf.Metric{Name: "BucketCountChangeOverdue", Unit: emf.Seconds}
	// BucketCountChangesCompleted: old epochs the sweep found drained and
	// ended (0 or 1).
	BucketCountChangesCompleted = emf.Metric{Name: "BucketCountChangesCompleted", Unit: emf.Count}
)

// RelayMetricSet and SweeperMetricSet list each function's metrics in the
// order its lines carry them (template.yaml's alarms and dashboard use these
// names; deploy/ checks them).
var (
	RelayMetricSet = []emf.Metric{MessagesPublished, PublishFailuresRetriable, PublishFailuresFatal, PublishFailuresRecord,
		PublishDuration, BatchSize, LeasesAcquired, LeasesLost, LeasesTakenOver, MessagesParked, FencesWritten,
		GapWaitTime, BucketsFailed, InvocationDuration}
	SweeperMetricSet = []emf.Metric{PendingMessages, OldestPendingAge, StuckBuckets, ParkedMessages, LiveRelays, BucketsFailed,
		BucketCountChangeOverdue, BucketCountChangesCompleted}
)

// NewEmitter returns the functions' EMF emitter: namespace Outbox, dimension
// Outbox = messagesTable.
func NewEmitter(w io.Writer, messagesTable string, opts ...emf.Option) (*emf.Emitter, error) {
	return emf.New(w, Namespace, []emf.Dimension{{Name: DimensionName, Value: messagesTable}}, opts...)
}

// RelayMetrics is the relay function's relay.Metrics (relay.WithMetrics):
// it adds up what the engine reports until Take hands the totals over.
// Lambda runs one invocation at a time per execution environment, so the
// totals taken at the end of an invocation are that invocation's. Where
// invocations of one handler overlap (tests, a local pipeline), every event
// still lands in exactly one line. Safe for concurrent use.
type RelayMetrics struct {
	mu sync.Mutex
	t  RelayTotals
}

var _ relay.Metrics = (*RelayMetrics)(nil)

// NewRelayMetrics returns an empty RelayMetrics.
func NewRelayMetrics() *RelayMetrics { return &RelayMetrics{} }

// RelayTotals is what the engine reported between two Takes.
type RelayTotals struct {
	Published int
	// Failed publishes (a Publish call that did not acknowledge every
	// message it was given), by the class of their error.
	FailuresRetriable, FailuresFatal, FailuresRecord int
	// Per publish: its duration and how many messages it carried.
	PublishDurations []time.Duration
	BatchSizes       []int
	Acquired         int
	Lost             int
	TakenOver        int
	Parked           int
	Fenced           int // fences written
	GapWait          time.Duration
}

// Batch implements relay.Metrics.
func (m *RelayMetrics) Batch(s relay.BatchStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.t.Published += s.Acked
	if s.Messages == 0 {
		return // a record parked, or a run of tombstones: no publish
	}
	m.t.PublishDurations = append(m.t.PublishDurations, s.PublishDuration)
	m.t.BatchSizes = append(m.t.BatchSizes, s.Messages)
	if s.Err == nil || s.Acked >= s.Messages {
		return // published; a later store write may have failed (the drain reports it)
	}
	switch s.Class {
	case outbox.Fatal:
		m.t.FailuresFatal++
	case outbox.RecordPermanent:
		m.t.FailuresRecord++
	default:
		m.t.FailuresRetriable++
	}
}

// Drain implements relay.Metrics.
func (m *RelayMetrics) Drain(s relay.DrainStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.t.Parked += s.Parked
	m.t.Fenced += s.Fenced
	m.t.GapWait += s.GapWait
	if s.Acquired {
		m.t.Acquired++
	}
	if s.TakenOver {
		m.t.TakenOver++
	}
	if s.LeaseLost {
		m.t.Lost++
	}
}

// Take returns the totals since the last Take and starts new ones.
func (m *RelayMetrics) Take() RelayTotals {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.t
	m.t = RelayTotals{}
	return t
}

// relayLine is the relay's EMF line for one invocation. Every count is
// exact, so it is present even when 0; the per-publish series are absent
// when nothing was published.
func relayLine(t RelayTotals, bucketsFailed int, took time.Duration) *emf.Line {
	var l emf.Line
	durations := make([]float64, len(t.PublishDurations))
	for i, d := range t.PublishDurations {
		durations[i] = ms(d)
	}
	sizes := make([]float64, len(t.BatchSizes))
	for i, n := range t.BatchSizes {
		sizes[i] = float64(n)
	}
	l.Value(MessagesPublished, float64(t.Published))
	l.Value(PublishFailuresRetriable, float64(t.FailuresRetriable))
	l.Value(PublishFailuresFatal, float64(t.FailuresFatal))
	l.Value(PublishFailuresRecord, float64(t.FailuresRecord))
	l.Values(PublishDuration, durations...)
	l.Values(BatchSize, sizes...)
	l.Value(LeasesAcquired, float64(t.Acquired))
	l.Value(LeasesLost, float64(t.Lost))
	l.Value(LeasesTakenOver, float64(t.TakenOver))
	l.Value(MessagesParked, float64(t.Parked))
	l.Value(FencesWritten, float64(t.Fenced))
	l.Value(GapWaitTime, ms(t.GapWait))
	l.Value(BucketsFailed, float64(bucketsFailed))
	l.Value(InvocationDuration, ms(took))
	return &l
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
