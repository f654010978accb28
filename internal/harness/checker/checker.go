// Package checker links every message id to what happened to it — committed,
// rolled back, delivered (how often, in which order) — and verifies the
// outbox's promises: no committed message lost, no rolled-back message
// delivered, every record's id header equal to the stored message's id, and
// first deliveries of each key in the key's business order.
package checker

import (
	"fmt"
	"slices"
	"sort"
	"sync"
)

// Checker is safe for concurrent use.
type Checker struct {
	mu         sync.Mutex
	committed  map[string]expect
	rolledBack map[string]bool
	delivered  map[string]int
	firstMax   map[string]int64 // key -> highest business order among its first deliveries
	violations []Violation
	mismatches []string
	deliveries int
	atRisk     map[string]string   // published where a recorded event may republish it -> the first such event
	risks      map[string][]string // the same -> every such event, in the order recorded
	parked     map[string]bool
}

type expect struct {
	key   string
	order int64
}

// Violation is a first delivery that arrived after a later one of its key.
type Violation struct {
	Key       string
	ID        string
	Order     int64
	AfterMax  int64
	Delivered int // index of the delivery in consumption order
}

// New returns an empty checker.
func New() *Checker {
	return &Checker{
		committed:  map[string]expect{},
		rolledBack: map[string]bool{},
		delivered:  map[string]int{},
		firstMax:   map[string]int64{},
		atRisk:     map[string]string{},
		risks:      map[string][]string{},
		parked:     map[string]bool{},
	}
}

// AtRisk records that a message was published in circumstances where a
// recorded event may make the relay publish it again; cause names the event
// (an injected fault on its publish or its mark, a crash point hit while it
// was undecided, its lease lost or abandoned while it was in flight, a
// takeover of its bucket while it was in flight). A duplicate is explained
// by the first cause recorded for its message; a duplicate of a message
// never put at risk is unexplained.
func (c *Checker) AtRisk(cause string, ids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if c.atRisk[id] == "" {
			c.atRisk[id] = cause
		}
		if !slices.Contains(c.risks[id], cause) {
			c.risks[id] = append(c.risks[id], cause)
		}
	}
}

// Risks returns every cause recorded for a message, first one first: a
// message put at risk twice (a stall after its produce, then a crash in the
// middle of its marking) keeps both, for checks that ask whether a
// particular event happened to it.
func (c *Checker) Risks(id string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.risks[id])
}

// RiskOf returns the first cause recorded for a message ("" if none).
func (c *Checker) RiskOf(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.atRisk[id]
}

// Parked records that the relay moved a message to the dead letters: it is
// accounted for, not lost, and must not be delivered.
func (c *Checker) Parked(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.parked[id] = true
}

// Committed records a message whose transaction committed. order is its
// business order within key (e.g. aggregate version × 1000 + index).
func (c *Checker) Committed(id, key string, order int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.committed[id] = expect{key, order}
}

// RolledBack records a message whose transaction did not commit.
func (c *Checker) RolledBack(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rolledBack[id] = true
}

// Delivered records one consumed record, in consumption order per key (all
// records of a key are on one partition, so per-partition order suffices).
// headerID is the record's message-id header, payloadID the id the writer
// put in the value; they must match.
func (c *Checker) Delivered(headerID, payloadID, key string, order int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deliveries++
	if headerID != payloadID {
		c.mismatches = append(c.mismatches, fmt.Sprintf("header %q carries payload id %q", headerID, payloadID))
	}
	c.delivered[headerID]++
	if c.delivered[headerID] > 1 {
		return // a duplicate: order is judged on first deliveries only
	}
	if m, ok := c.firstMax[key]; ok && order < m {
		c.violations = append(c.violations, Violation{Key: key, ID: headerID, Order: order, AfterMax: m, Delivered: c.deliveries})
	}
	if m, ok := c.firstMax[key]; !ok || order > m {
		c.firstMax[key] = order
	}
}

// Result is the verdict.
type Result struct {
	Committed       int
	RolledBack      int
	Deliveries      int
	DeliveredUnique int
	Duplicates      int
	Lost            int
	Phantom         int // delivered but rolled back or never committed
	OrderViolations int
	HeaderMismatch  int
	Parked          int // committed messages in the dead letters
	Unexplained     int // duplicates of messages never put at risk by a recorded event
	// ByCause counts the duplicates (deliveries beyond the first) of each
	// cause; the unexplained ones are under "unexplained".
	ByCause map[string]int
	// Examples of each problem, for the failure message.
	LostIDs        []string
	PhantomIDs     []string
	UnexplainedIDs []string
	Violations     []Violation
	Mismatches     []string
}

// OK reports whether no promise was broken.
func (r Result) OK() bool {
	return r.Lost == 0 && r.Phantom == 0 && r.OrderViolations == 0 && r.HeaderMismatch == 0 && r.Unexplained == 0
}

// Result computes the verdict from everything recorded so far.
func (c *Checker) Result() Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := Result{Committed: len(c.committed), RolledBack: len(c.rolledBack), Deliveries: c.deliveries,
		OrderViolations: len(c.violations), HeaderMismatch: len(c.mismatches), Mismatches: c.mismatches, Violations: c.violations,
		ByCause: map[string]int{}}
	for id, n := range c.delivered {
		if _, ok := c.committed[id]; !ok {
			r.Phantom++
			r.PhantomIDs = append(r.PhantomIDs, id)
			continue
		}
		r.DeliveredUnique++
		r.Duplicates += n - 1
		if n > 1 {
			cause := c.atRisk[id]
			if cause == "" {
				cause = "unexplained"
				r.Unexplained++
				r.UnexplainedIDs = append(r.UnexplainedIDs, id)
			}
			r.ByCause[cause] += n - 1
		}
	}
	for id := range c.committed {
		switch {
		case c.parked[id]:
			r.Parked++
		case c.delivered[id] == 0:
			r.Lost++
			r.LostIDs = append(r.LostIDs, id)
		}
	}
	sort.Strings(r.LostIDs)
	sort.Strings(r.PhantomIDs)
	sort.Strings(r.UnexplainedIDs)
	return r
}

// Causes renders ByCause as "cause=n ..." sorted by cause ("none" when
// there are no duplicates), for summary lines.
func (r Result) Causes() string {
	var ks []string
	for k := range r.ByCause {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b []byte
	for i, k := range ks {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%s:%d", k, r.ByCause[k])
	}
	if len(b) == 0 {
		return "none"
	}
	return string(b)
}

// CommittedIDs returns the ids of every committed message.
func (c *Checker) CommittedIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]string, 0, len(c.committed))
	for id := range c.committed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Missing returns how many committed messages have not been delivered yet
// (parked ones excepted).
func (c *Checker) Missing() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for id := range c.committed {
		if c.delivered[id] == 0 && !c.parked[id] {
			n++
		}
	}
	return n
}

// Totals is what a read model that applies every committed message of a key
// exactly once, in order, holds for the key: how many, the sum and the
// highest of their business orders.
type Totals struct {
	N        int
	Sum, Max int64
}

// Expected returns the Totals of every key that starts with prefix, over the
// committed messages that reached Kafka: not parked, or parked after a copy
// was delivered (a timed-out produce that was appended).
func (c *Checker) Expected(prefix string) map[string]Totals {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]Totals{}
	for id, e := range c.committed {
		if c.parked[id] && c.delivered[id] == 0 || len(e.key) < len(prefix) || e.key[:len(prefix)] != prefix {
			continue
		}
		t := out[e.key]
		t.N++
		t.Sum += e.order
		t.Max = max(t.Max, e.order)
		out[e.key] = t
	}
	return out
}
