// Package attrib attributes duplicate deliveries to recorded events and
// checks I4 (one publisher per bucket) on the publishing side.
//
// It wraps the relays' store and publishers. Per bucket it keeps the
// messages in flight: published and not yet decided (no tombstone, no head
// written past them). A duplicate is explained only by an event recorded
// while its message was in flight, tied to that message or its bucket:
//
//   - publish-error: its publish returned an error (an injected Kafka fault,
//     a publish cancelled at its cut-off or deadline: the records may still
//     have been appended); with Kafka transactions only a publish whose
//     commit's outcome is unknown (PublishRisk);
//   - store-fault:<op>: a write that was to decide it failed (MarkPublished,
//     Update, Release; the response may be lost after the write applied);
//   - crash:<point>, stall:<point>: the harness crashed or stalled a drain
//     of its bucket at a crash point (Crashed, Stalled);
//   - lease-lost, abandoned: a renewal of its bucket's lease found the lease
//     lost, or a drain of its bucket gave the lease up with it undecided;
//   - takeover: its bucket's lease was taken over (acquired after it expired);
//   - handover (WatermarkMode only): a resumed drain's head write, or its
//     acquisition, was refused because another relay acquired the bucket:
//     what it published stays above the stored head and the acquirer
//     publishes it again (docs/design.md §9.1). In DeleteMode the acquirer
//     publishes only what the resumer did not mark, so a resumer's refused
//     head write excuses only what it left unmarked:
//   - resume-window-ended (DeleteMode): a resumed drain stopped with
//     acknowledged messages it had not replaced by tombstones (its window
//     ended before its marking, a resumer stalled past its window: design.md
//     §7.13), and its head write on the way out was refused because another
//     relay acquired the bucket;
//   - handover-fenced (Kafka transactions): its bucket was acquired from a
//     release while it was in flight; the acquirer fences the releaser
//     instead of waiting out its resume (docs/design.md §4.3), so a
//     transaction the releaser committed before its marks landed is
//     published again: whole, or, when the acquirer read while the
//     releaser's tombstones were landing (a BatchWriteItem applies put by
//     put), the part whose tombstones had not landed (MarkSent records
//     that a tombstone was asked for, not that it landed);
//   - whatever a harness records itself through the checker (e.g. a Kafka
//     request that timed out after the broker appended it).
//
// A fault-free drain, resumed or not, of any number of batches records
// nothing. A duplicate of a message never put at risk is unexplained: some
// relay published a message that was decided, or two drains published it at
// once with nothing recorded between them.
//
// Each publisher given by ViaAs is one process (a relay, a container of the
// relay function, a sweeper). Overlaps reports every publish of a bucket
// that began while another process's publish of it was under way (I4), and
// admits one only if that other publish had already been cancelled (the
// records its client had accepted before its cut-off may still land,
// docs/design.md §7.3) or, with Kafka transactions, its producer had
// already been fenced (nothing of it can become visible: §4.3).
package attrib

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/checker"
)

// New wraps store and pub; chk receives the at-risk and parked messages.
// The Attribution is the store and the publisher to give the relays (one
// for all relays of an outbox). ViaAs gives further publishers sharing it,
// one per process.
//
// The optional Store capabilities the relays use pass through, so that the
// relays under attribution run as deployed on store/dynamo, which has them
// all: without EpochGate, say, no sweep could end an old BucketCount epoch
// and every relay would wait on its gate for good. New panics when store
// lacks one (store/dynamo's and store/memory's Store have them all).
func New(store outbox.Store, pub outbox.Publisher, chk *checker.Checker) *Attribution {
	caps, ok := store.(capabilities)
	if !ok {
		panic(fmt.Sprintf("attrib: the store %T lacks an optional capability the deployed relays use (BucketProbe, CounterProbe, ParkedCounter, StuckRecorder, EpochGate)", store))
	}
	return &Attribution{Store: store, caps: caps, pub: pub, chk: chk, inFlight: map[int]map[int64]string{}, Now: time.Now}
}

// capabilities are the optional Store capabilities the relays look for.
type capabilities interface {
	outbox.BucketProbe
	outbox.CounterProbe
	outbox.ParkedCounter
	outbox.StuckRecorder
	outbox.EpochGate
}

var _ capabilities = (*Attribution)(nil)

// Attribution wraps the relays' store and publishers.
type Attribution struct {
	outbox.Store
	caps capabilities // the same store
	pub  outbox.Publisher
	chk  *checker.Checker
	// Now is the clock of the publish intervals and the trace (default
	// time.Now; a simulation sets its own before any publish).
	Now func() time.Time
	// Watermark: the outbox is in WatermarkMode, whose handover duplicates
	// are documented (set before any drain).
	Watermark bool
	// PublishRisk names the risk a failed publish puts its messages at
	// ("" for none; nil: "publish-error" for every error). With Kafka
	// transactions a failed publish is aborted unless its commit's outcome
	// is unknown, so only that puts anything at risk (set before any drain).
	PublishRisk func(error) string
	// Fenced reports whether who's publish of bucket can no longer make
	// anything visible: a newer holder fenced its producer (Kafka
	// transactions). An overlap of two publishes one of which is fenced
	// is admitted (nil: none is; set before any drain).
	Fenced func(who string, bucket int) bool

	mu       sync.Mutex
	inFlight map[int]map[int64]string // bucket -> sequence -> message id: published, not decided
	parked   []string
	trace    map[string][]string   // message id -> what happened to it, for reports
	active   map[int][]*publishing // bucket -> publishes under way
	overlaps OverlapReport
	// unfenced: buckets acquired from a release with Kafka transactions
	// whose acquirer has not fenced the releaser yet. A resumer whose look
	// came before that acquisition may still begin a publish and commit it
	// before the fence (docs/design.md §4.3): what it publishes then is
	// read and published again by the acquirer ("handover-fenced").
	unfenced map[int]bool
	// fences: per bucket, the fences (FenceHolders) that returned without
	// an error, counted; producers: per process and bucket, the count its
	// own last successful fence made (0: none, or its last fence failed,
	// and then the publisher produces nothing until it fences again).
	// Under fenceMu: Fenced is called with mu held.
	fenceMu   sync.Mutex
	fences    map[int]int
	fenceLog  map[int][]string // bucket -> the fences that returned, in order: who, when
	producers map[string]map[int]int
	// markSent: the ids of the messages a MarkPublished was asked to
	// replace by tombstones, whatever its outcome (a BatchWriteItem applies
	// put by put: some may land before an acquirer reads, others after).
	markSent map[string]bool
}

// publishing is one publish call under way.
type publishing struct {
	who   string
	ctx   context.Context
	start time.Time
	first int64
}

// Via returns a publisher that publishes through pub with the attribution's
// bookkeeping, as the process "relay".
func (a *Attribution) Via(pub outbox.Publisher) outbox.Publisher { return a.ViaAs("relay", pub) }

// ViaAs returns a publisher that publishes through pub with the
// attribution's bookkeeping, as the process who (its publish intervals are
// checked against the other processes').
func (a *Attribution) ViaAs(who string, pub outbox.Publisher) outbox.Publisher {
	v := via{a, pub, who}
	if _, ok := pub.(outbox.HolderFencer); ok {
		return fencingVia{v}
	}
	return v
}

type via struct {
	a   *Attribution
	pub outbox.Publisher
	who string
}

func (v via) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	return v.a.publish(ctx, v.who, v.pub, msgs)
}

// PublishAlone keeps the inner publisher's Isolator (a record rejected
// alone is parked), with the same bookkeeping.
func (v via) PublishAlone(ctx context.Context, m outbox.Message) error {
	_, err := v.a.publish(ctx, v.who, alone{v.pub}, []outbox.Message{m})
	return err
}

// fencingVia is via over a publisher that is an outbox.HolderFencer: the
// relay fences a bucket's earlier holders through it. Only such a publisher
// gets the method, so that a relay over one without it (the idempotent
// publisher) runs the drains it runs when deployed, with no fence.
type fencingVia struct{ via }

func (v fencingVia) FenceHolders(ctx context.Context, bucket int) error {
	err := v.pub.(outbox.HolderFencer).FenceHolders(ctx, bucket)
	// Whatever the outcome, the acquirer tried: a fence that failed is
	// tried again under the lease before anything is published.
	v.a.mu.Lock()
	delete(v.a.unfenced, bucket)
	v.a.mu.Unlock()
	v.a.fenceMu.Lock()
	defer v.a.fenceMu.Unlock()
	if v.a.fences == nil {
		v.a.fences, v.a.producers = map[int]int{}, map[string]map[int]int{}
	}
	if v.a.producers[v.who] == nil {
		v.a.producers[v.who] = map[int]int{}
	}
	if err != nil {
		// It may have fenced the others all the same, but nothing here
		// says it did: their publishes stay unexcused. Its own producer
		// is dropped.
		v.a.producers[v.who][bucket] = 0
		return err
	}
	v.a.fences[bucket]++
	v.a.producers[v.who][bucket] = v.a.fences[bucket]
	if v.a.fenceLog == nil {
		v.a.fenceLog = map[int][]string{}
	}
	v.a.fenceLog[bucket] = append(v.a.fenceLog[bucket], fmt.Sprintf("%s's fence of bucket %d returned at %s", v.who, bucket, v.a.Now().Format("15:04:05.000")))
	return nil
}

// fenceEvent names, by this record, what makes stale's producer of bucket
// stale: the first fence that returned after stale's own last one, or that
// stale has none (it never fenced the bucket, or its last fence failed).
// The simulator's Fenced is its own model of the broker, which can differ
// (a failed fence may fence there all the same); the text then says what
// this record holds. a.mu is held.
func (a *Attribution) fenceEvent(bucket int, stale string) string {
	a.fenceMu.Lock()
	defer a.fenceMu.Unlock()
	p := a.producers[stale][bucket]
	if p == 0 {
		return fmt.Sprintf("; %s has no producer of bucket %d here (never fenced it, or its last fence failed)", stale, bucket)
	}
	if log := a.fenceLog[bucket]; p < len(log) {
		return "; outdated by " + log[p]
	}
	return fmt.Sprintf("; %s's producer is the newest this record holds", stale)
}

// FencedByRecord is a Fenced for publishers that are outbox.HolderFencers
// (given by ViaAs) and fence through Kafka transactions, as
// kafka.TxnPublisher does: who's publish of bucket can make nothing visible
// if who has no producer of the bucket (it never fenced it, or its last
// fence failed: the publisher then answers ErrFenceRequired), or another
// process's fence of the bucket returned after who's own. Only fences that
// returned count: one still in flight, or failed, excuses nothing.
//
// It models what the publisher must do, so it excuses every overlap of two
// processes that both fenced; what makes that check worth something is
// that a publish that began while its process was fenced by this record
// must commit nothing (publish counts one that did as an unadmitted
// overlap), and the Kafka-side oracle (interleavings, stale records).
func (a *Attribution) FencedByRecord(who string, bucket int) bool {
	a.fenceMu.Lock()
	defer a.fenceMu.Unlock()
	p := a.producers[who][bucket]
	return p == 0 || p != a.fences[bucket]
}

// alone publishes its single message through the Isolator, if any.
type alone struct{ pub outbox.Publisher }

func (p alone) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	if iso, ok := p.pub.(outbox.Isolator); ok {
		if err := iso.PublishAlone(ctx, msgs[0]); err != nil {
			return 0, err
		}
		return 1, nil
	}
	return p.pub.Publish(ctx, msgs)
}

func (a *Attribution) note(msgs []string, format string, args ...any) {
	ev := a.Now().Format("15:04:05.000") + " " + fmt.Sprintf(format, args...)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.trace == nil {
		a.trace = map[string][]string{}
	}
	for _, id := range msgs {
		a.trace[id] = append(a.trace[id], ev)
	}
}

// Trace returns what happened to a message (for reports).
func (a *Attribution) Trace(id string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.trace[id]...)
}

// Peek, LastSequence, CountParked, RecordStuck, GateOpen and EndOldEpoch
// pass through (see New).
func (a *Attribution) Peek(ctx context.Context, bucket int, after int64, limit int) (int, time.Time, error) {
	return a.caps.Peek(ctx, bucket, after, limit)
}

func (a *Attribution) LastSequence(ctx context.Context, bucket int) (int64, error) {
	return a.caps.LastSequence(ctx, bucket)
}

func (a *Attribution) CountParked(ctx context.Context, bucket int) (int, error) {
	return a.caps.CountParked(ctx, bucket)
}

func (a *Attribution) RecordStuck(ctx context.Context, bucket int, s outbox.Stuck) error {
	return a.caps.RecordStuck(ctx, bucket, s)
}

func (a *Attribution) GateOpen(ctx context.Context, bucket int, epoch int64) (bool, []int, error) {
	return a.caps.GateOpen(ctx, bucket, epoch)
}

func (a *Attribution) EndOldEpoch(ctx context.Context, stored outbox.Config) (bool, []int, error) {
	return a.caps.EndOldEpoch(ctx, stored)
}

func (a *Attribution) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	return a.publish(ctx, "relay", a.pub, msgs)
}

func (a *Attribution) publish(ctx context.Context, who string, pub outbox.Publisher, msgs []outbox.Message) (int, error) {
	b := msgs[0].Bucket
	a.mu.Lock()
	fl := a.inFlight[b]
	if fl == nil {
		fl = map[int64]string{}
		a.inFlight[b] = fl
	}
	for _, m := range msgs {
		fl[m.Sequence] = m.ID
	}
	unfenced := a.unfenced[b]
	a.mu.Unlock()
	// A publish that begins with its process's producer fenced (none, or
	// one a later fence outdated) can commit nothing: the overlaps that
	// fence excuses (begin) stand on it, so a commit is a violation.
	stale := a.Fenced != nil && a.Fenced(who, b)
	end := a.begin(ctx, who, b, msgs[0].Sequence)
	n, err := pub.Publish(ctx, msgs)
	end()
	if stale && n > 0 {
		a.mu.Lock()
		a.overlaps.Overlaps++
		if len(a.overlaps.Unadmitted) < 5 {
			a.overlaps.Unadmitted = append(a.overlaps.Unadmitted, fmt.Sprintf(
				"bucket %d: %s began a publish from %d with its producer fenced and committed %d messages", b, who, msgs[0].Sequence, n))
		}
		a.mu.Unlock()
	}
	a.mu.Lock()
	unfenced = unfenced || a.unfenced[b]
	a.mu.Unlock()
	if unfenced && n > 0 {
		a.chk.AtRisk("handover-fenced", ids(msgs[:n])...)
	}
	if err != nil {
		cause := "publish-error"
		if a.PublishRisk != nil {
			cause = a.PublishRisk(err)
		}
		if cause != "" {
			a.chk.AtRisk(cause, ids(msgs)...)
		}
	}
	a.note(ids(msgs), "%s publish bucket %d seqs %d..%d acked %d err %v", who, b, msgs[0].Sequence, msgs[len(msgs)-1].Sequence, n, err)
	return n, err
}

// risk puts the bucket's messages in flight above head at risk for cause
// and returns their ids.
func (a *Attribution) risk(bucket int, above int64, cause string) []string {
	a.mu.Lock()
	var out []string
	for q, id := range a.inFlight[bucket] {
		if q > above {
			out = append(out, id)
		}
	}
	a.mu.Unlock()
	sort.Strings(out)
	a.chk.AtRisk(cause, out...)
	return out
}

// inFlightOf returns the ids of the bucket's messages in flight.
func (a *Attribution) inFlightOf(bucket int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.inFlight[bucket]))
	for _, id := range a.inFlight[bucket] {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// PartialMarking are the recorded causes that mark part of a published
// batch and leave the rest to be published again: a crash or a stall
// between two of the drain's tombstone writes, or one of them failed. With
// Kafka transactions they are what may republish part of a committed one.
var PartialMarking = []string{"crash:mid-delete", "stall:mid-delete", "store-fault:mark"}

// Crashed records that the harness crashed a drain of bucket at point: the
// bucket's messages in flight may be published again.
func (a *Attribution) Crashed(bucket int, point string) {
	a.note(a.risk(bucket, 0, "crash:"+point), "crash at %s in bucket %d", point, bucket)
}

// Stalled records that the harness stalled a drain of bucket at point past
// its lease or resume window.
func (a *Attribution) Stalled(bucket int, point string) {
	a.note(a.risk(bucket, 0, "stall:"+point), "stall at %s in bucket %d", point, bucket)
}

func (a *Attribution) Update(ctx context.Context, l outbox.Lease, u outbox.LeaseUpdate, now time.Time) (outbox.Lease, error) {
	nl, err := a.Store.Update(ctx, l, u, now)
	if err == nil {
		a.decided(l.Bucket, u.Head)
	} else {
		a.risk(l.Bucket, 0, "store-fault:update")
	}
	a.note(a.inFlightOf(l.Bucket), "update bucket %d by %s head %d -> %d err %v", l.Bucket, l.Owner, l.Head, u.Head, err)
	return nl, err
}

func (a *Attribution) Renew(ctx context.Context, l outbox.Lease, now time.Time, d time.Duration) (outbox.Lease, error) {
	nl, err := a.Store.Renew(ctx, l, now, d)
	if errors.Is(err, outbox.ErrLeaseLost) {
		a.note(a.risk(l.Bucket, 0, "lease-lost"), "renew bucket %d by %s: %v", l.Bucket, l.Owner, err)
	}
	return nl, err
}

// MarkPublished, Release, Abandon and Advance decide messages too: a
// tombstone marks its message decided; the heads they write cover the rest.
func (a *Attribution) MarkPublished(ctx context.Context, bucket int, seqs []int64, now time.Time) error {
	a.mu.Lock()
	if a.markSent == nil {
		a.markSent = map[string]bool{}
	}
	for _, q := range seqs {
		if id, ok := a.inFlight[bucket][q]; ok {
			a.markSent[id] = true
		}
	}
	a.mu.Unlock()
	err := a.Store.MarkPublished(ctx, bucket, seqs, now)
	if err == nil {
		a.decidedSeqs(bucket, seqs)
	} else {
		a.risk(bucket, 0, "store-fault:mark")
	}
	if len(seqs) > 0 {
		a.note(a.inFlightOf(bucket), "mark bucket %d seqs %d..%d (%d) err %v", bucket, seqs[0], seqs[len(seqs)-1], len(seqs), err)
	}
	return err
}

func (a *Attribution) Release(ctx context.Context, l outbox.Lease, head, cleaned int64) (outbox.Lease, error) {
	last := a.inFlightOf(l.Bucket)
	nl, err := a.Store.Release(ctx, l, head, cleaned)
	switch {
	case err == nil:
		a.decided(l.Bucket, head)
	case errors.Is(err, outbox.ErrWoken):
		// Refused, the hold kept and nothing written (the head neither):
		// the drain goes on, and what it published is still in flight
		// until its next write decides it.
	default:
		a.risk(l.Bucket, 0, "store-fault:release")
	}
	a.note(last, "release bucket %d by %s head %d err %v", l.Bucket, l.Owner, head, err)
	return nl, err
}

func (a *Attribution) Abandon(ctx context.Context, l outbox.Lease, head, cleaned int64) error {
	last := a.inFlightOf(l.Bucket)
	err := a.Store.Abandon(ctx, l, head, cleaned)
	// Abandon also returns nil when l.Owner no longer holds the lease (a
	// drain past its cut-off gives up a lease another relay may have taken
	// meanwhile): it wrote nothing then, and decided nothing. Read the lease
	// back: only its owner can have written it since (it is still in this
	// call, so its relay does not acquire the bucket again meanwhile).
	applied := false
	if err == nil {
		cur, rerr := a.Store.ReadLease(ctx, l.Bucket)
		applied = rerr == nil && cur.Owner == l.Owner && cur.Head >= head
	}
	if applied {
		a.decided(l.Bucket, head)
		a.risk(l.Bucket, head, "abandoned")
	} else {
		a.risk(l.Bucket, 0, "lease-lost")
	}
	a.note(last, "abandon bucket %d by %s head %d err %v applied %v", l.Bucket, l.Owner, head, err, applied)
	return err
}

func (a *Attribution) Advance(ctx context.Context, l outbox.Lease, head, cleaned int64, now time.Time) (outbox.Lease, error) {
	last := a.inFlightOf(l.Bucket)
	nl, err := a.Store.Advance(ctx, l, head, cleaned, now)
	switch {
	case err == nil:
		a.decided(l.Bucket, head)
	case errors.Is(err, outbox.ErrLeaseHeld), errors.Is(err, outbox.ErrLeaseLost):
		if a.Watermark {
			a.risk(l.Bucket, l.Head, "handover")
		} else {
			// DeleteMode: a resumed drain writes its head on the way out
			// only after it stopped, and what it published is still in
			// flight only if its tombstones were not written: its window
			// ended first (a resumer stalled past its window, §7.13).
			// The acquirer that refused this write waited its own window
			// and publishes them again.
			a.risk(l.Bucket, l.Head, "resume-window-ended")
		}
	default:
		a.risk(l.Bucket, l.Head, "store-fault:advance")
	}
	a.note(last, "advance bucket %d by %s head %d err %v", l.Bucket, l.Owner, head, err)
	return nl, err
}

// Pending passes through, noting which messages each read returned (and
// from which head), so that a report shows a read older than a decision.
func (a *Attribution) Pending(ctx context.Context, bucket int, after int64, limit int) ([]outbox.Entry, bool, error) {
	es, more, err := a.Store.Pending(ctx, bucket, after, limit)
	var msgs []string
	for _, e := range es {
		if !e.Fence && e.Err == nil {
			msgs = append(msgs, e.Message.ID)
		}
	}
	a.note(msgs, "read bucket %d after %d: %d entries, %d messages", bucket, after, len(es), len(msgs))
	return es, more, err
}

func (a *Attribution) Acquire(ctx context.Context, bucket int, owner string, now time.Time, d time.Duration) (outbox.Lease, error) {
	l, err := a.Store.Acquire(ctx, bucket, owner, now, d)
	switch {
	case err == nil && l.TakenOver:
		// The previous holder's lease expired with its messages in flight.
		a.risk(bucket, l.Head, "takeover")
	case errors.Is(err, outbox.ErrLeaseHeld) && a.Watermark:
		// A resumed drain that must hold the lease finds an acquirer there.
		a.risk(bucket, 0, "handover")
	case err == nil && l.PrevReleasedBy != "" && a.Fenced != nil:
		// With Kafka transactions an acquirer from a release fences the
		// releaser instead of waiting for it (docs/design.md §4.3): a
		// transaction the releaser committed while resuming, whose
		// tombstones or head had not landed, is read and published again
		// whole — one in flight now, or one the releaser begins before
		// the acquirer's fence (publish).
		a.risk(bucket, l.Head, "handover-fenced")
		a.mu.Lock()
		if a.unfenced == nil {
			a.unfenced = map[int]bool{}
		}
		a.unfenced[bucket] = true
		a.mu.Unlock()
	}
	a.note(a.inFlightOf(bucket), "acquire bucket %d by %s head %d takeover %v released_by %q err %v", bucket, owner, l.Head, l.TakenOver, l.PrevReleasedBy, err)
	return l, err
}

func (a *Attribution) Park(ctx context.Context, l outbox.Lease, p outbox.Parked, now time.Time) (outbox.Lease, error) {
	nl, err := a.Store.Park(ctx, l, p, now)
	if err == nil {
		a.mu.Lock()
		a.parked = append(a.parked, p.Message.ID)
		a.mu.Unlock()
		a.chk.Parked(p.Message.ID)
		a.decided(l.Bucket, p.Sequence)
	}
	return nl, err
}

// decided drops the bucket's messages in flight at or below head.
func (a *Attribution) decided(bucket int, head int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for q := range a.inFlight[bucket] {
		if q <= head {
			delete(a.inFlight[bucket], q)
		}
	}
}

// decidedSeqs drops these messages of the bucket from those in flight.
func (a *Attribution) decidedSeqs(bucket int, seqs []int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, q := range seqs {
		delete(a.inFlight[bucket], q)
	}
}

// MarkSent reports whether a MarkPublished was asked to replace the
// message by a tombstone while it was in flight, whatever came of it.
func (a *Attribution) MarkSent(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.markSent[id]
}

// ParkedIDs are the ids of the messages the relay parked, sorted.
func (a *Attribution) ParkedIDs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := append([]string(nil), a.parked...)
	sort.Strings(out)
	return out
}

// OverlapReport is what the I4 check found.
type OverlapReport struct {
	// Overlaps counts publishes of a bucket that began while another
	// process's publish of the bucket was under way; Admitted those where
	// one of the two producers was fenced (Fenced, below), or else that
	// other publish had already been cancelled (at its lease's cut-off, its
	// resume window's end or its deadline): its client may still deliver
	// what it had accepted (docs/design.md §7.3).
	Overlaps, Admitted int
	// Of Admitted: Cancelled by the other publish's cancellation, Fenced by
	// a broker fence (Kafka transactions: one of the two producers can make
	// nothing visible, so only one publisher counts, design.md §4.3.5).
	Cancelled, Fenced int
	// Examples of unadmitted overlaps, and of admitted ones with the event
	// that admits them.
	Unadmitted, AdmittedBy []string
}

// UnadmittedCount counts the overlaps that fail a run.
func (r OverlapReport) UnadmittedCount() int { return r.Overlaps - r.Admitted }

// Add sums two reports.
func (r *OverlapReport) Add(o OverlapReport) {
	r.Overlaps += o.Overlaps
	r.Admitted += o.Admitted
	r.Cancelled += o.Cancelled
	r.Fenced += o.Fenced
	r.Unadmitted = append(r.Unadmitted, o.Unadmitted...)[:min(5, len(r.Unadmitted)+len(o.Unadmitted))]
	r.AdmittedBy = append(r.AdmittedBy, o.AdmittedBy...)[:min(5, len(r.AdmittedBy)+len(o.AdmittedBy))]
}

// begin checks I4 as a publish of bucket by who begins, and returns the
// function that ends it. One process's drains of a bucket take turns (the
// Relay's own lock), so only other processes' publishes count.
func (a *Attribution) begin(ctx context.Context, who string, bucket int, first int64) func() {
	me := &publishing{who: who, ctx: ctx, start: a.Now(), first: first}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.active == nil {
		a.active = map[int][]*publishing{}
	}
	for _, o := range a.active[bucket] {
		if o.who == who {
			continue
		}
		a.overlaps.Overlaps++
		desc := fmt.Sprintf("bucket %d: %s publishes from %d at %s while %s publishes from %d since %s", bucket,
			who, first, me.start.Format("15:04:05.000"), o.who, o.first, o.start.Format("15:04:05.000"))
		// A broker fence first: it excludes outright (nothing of the
		// stale producer can become visible), a cancellation only bounds.
		if a.Fenced != nil && (a.Fenced(o.who, bucket) || a.Fenced(who, bucket)) {
			stale := o.who
			if !a.Fenced(o.who, bucket) {
				stale = who
			}
			a.overlaps.Admitted++
			a.overlaps.Fenced++
			if len(a.overlaps.AdmittedBy) < 5 {
				a.overlaps.AdmittedBy = append(a.overlaps.AdmittedBy, desc+fmt.Sprintf(" (admitted: %s's producer was fenced: its transaction cannot commit%s)", stale, a.fenceEvent(bucket, stale)))
			}
			continue
		}
		if o.ctx.Err() != nil {
			a.overlaps.Admitted++
			a.overlaps.Cancelled++
			if len(a.overlaps.AdmittedBy) < 5 {
				a.overlaps.AdmittedBy = append(a.overlaps.AdmittedBy, desc+fmt.Sprintf(" (admitted: %s's publish was cancelled, %v)", o.who, context.Cause(o.ctx)))
			}
			continue
		}
		if len(a.overlaps.Unadmitted) < 5 {
			a.overlaps.Unadmitted = append(a.overlaps.Unadmitted, desc)
		}
	}
	a.active[bucket] = append(a.active[bucket], me)
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		act := a.active[bucket][:0]
		for _, o := range a.active[bucket] {
			if o != me {
				act = append(act, o)
			}
		}
		a.active[bucket] = act
	}
}

// Overlaps returns the I4 check's findings so far.
func (a *Attribution) Overlaps() OverlapReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.overlaps
	r.Unadmitted = append([]string(nil), r.Unadmitted...)
	r.AdmittedBy = append([]string(nil), r.AdmittedBy...)
	return r
}

// String is the summary's fields: overlaps=N overlaps_admitted=M
// admitted_by=cancelled:C,fenced:F.
func (r OverlapReport) String() string {
	return fmt.Sprintf("overlaps=%d overlaps_admitted=%d admitted_by=cancelled:%d,fenced:%d", r.Overlaps, r.Admitted, r.Cancelled, r.Fenced)
}

// Details lists the examples, for a failure message.
func (r OverlapReport) Details() string {
	return strings.Join(append(append([]string(nil), r.Unadmitted...), r.AdmittedBy...), "; ")
}

func ids(msgs []outbox.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}
