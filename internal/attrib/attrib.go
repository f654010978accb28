// Package attrib attributes duplicate deliveries to their causes: it wraps
// a relay's store and publisher and puts at risk of a second delivery every
// message that was published and then published again before anything
// decided it (a tombstone, or a head written past it), and every message
// whose publish failed. A duplicate of a message never put at risk is
// unexplained: the relay read a message it had already decided. It also
// keeps, per message, a trace of the reads, publishes and decisions that
// touched it, for failure reports.
package attrib

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/checker"
)

// New wraps store and pub; chk receives the at-risk and parked messages.
// The Attribution is the store and the publisher to give the relays (one
// for all relays of an outbox). Via gives further publishers sharing it.
func New(store outbox.Store, pub outbox.Publisher, chk *checker.Checker) *Attribution {
	return &Attribution{Store: store, pub: pub, chk: chk, last: map[int][]outbox.Message{}}
}

// Via returns a publisher that publishes through pub with the attribution's
// bookkeeping (for relays that each have their own publisher).
func (a *Attribution) Via(pub outbox.Publisher) outbox.Publisher {
	return via{a, pub}
}

type via struct {
	a   *Attribution
	pub outbox.Publisher
}

func (v via) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	return v.a.publish(ctx, v.pub, msgs)
}

// Attribution wraps the relay's store and publisher. Per bucket it keeps the
// messages published since the head last moved past them; when they are
// published again before that (a crash, a stall, a lost lease, a failed head
// update) or their publish failed, they are at risk of a second delivery.
type Attribution struct {
	outbox.Store
	pub outbox.Publisher
	chk *checker.Checker

	mu     sync.Mutex
	last   map[int][]outbox.Message
	parked []string
	trace  map[string][]string // message id -> what happened to it, for reports
}

func (a *Attribution) note(msgs []outbox.Message, format string, args ...any) {
	ev := time.Now().Format("15:04:05.000") + " " + fmt.Sprintf(format, args...)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.trace == nil {
		a.trace = map[string][]string{}
	}
	for _, m := range msgs {
		a.trace[m.ID] = append(a.trace[m.ID], ev)
	}
}

// Trace returns what happened to a message (for reports).
func (a *Attribution) Trace(id string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.trace[id]...)
}

// Peek passes through, so the sweeper (which needs an outbox.BucketProbe)
// works on the wrapped store.
func (a *Attribution) Peek(ctx context.Context, bucket int, after int64, limit int) (int, time.Time, error) {
	return a.Store.(outbox.BucketProbe).Peek(ctx, bucket, after, limit)
}

var _ outbox.BucketProbe = (*Attribution)(nil)

func (a *Attribution) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	return a.publish(ctx, a.pub, msgs)
}

func (a *Attribution) publish(ctx context.Context, pub outbox.Publisher, msgs []outbox.Message) (int, error) {
	b := msgs[0].Bucket
	a.mu.Lock()
	if prev := a.last[b]; len(prev) > 0 {
		a.chk.AtRisk(ids(prev)...)
	}
	a.last[b] = append(a.last[b], msgs...)
	a.mu.Unlock()
	n, err := pub.Publish(ctx, msgs)
	if err != nil {
		a.chk.AtRisk(ids(msgs)...)
	}
	a.note(msgs, "publish bucket %d seqs %d..%d acked %d err %v", b, msgs[0].Sequence, msgs[len(msgs)-1].Sequence, n, err)
	return n, err
}

func (a *Attribution) Update(ctx context.Context, l outbox.Lease, u outbox.LeaseUpdate, now time.Time) (outbox.Lease, error) {
	a.mu.Lock()
	last := append([]outbox.Message(nil), a.last[l.Bucket]...)
	a.mu.Unlock()
	nl, err := a.Store.Update(ctx, l, u, now)
	if err == nil {
		a.decided(l.Bucket, u.Head)
	}
	a.note(last, "update bucket %d by %s head %d -> %d err %v", l.Bucket, l.Owner, l.Head, u.Head, err)
	return nl, err
}

// MarkPublished, Release, Abandon and Advance decide messages too: a
// tombstone marks its message decided; the heads they write cover the rest.
func (a *Attribution) MarkPublished(ctx context.Context, bucket int, seqs []int64, now time.Time) error {
	last := a.lastOf(bucket)
	err := a.Store.MarkPublished(ctx, bucket, seqs, now)
	if err == nil {
		a.decidedSeqs(bucket, seqs)
	}
	if len(seqs) > 0 {
		a.note(last, "mark bucket %d seqs %d..%d (%d) err %v", bucket, seqs[0], seqs[len(seqs)-1], len(seqs), err)
	}
	return err
}

func (a *Attribution) Release(ctx context.Context, l outbox.Lease, head, cleaned int64) (outbox.Lease, error) {
	last := a.lastOf(l.Bucket)
	nl, err := a.Store.Release(ctx, l, head, cleaned)
	if err == nil {
		a.decided(l.Bucket, head)
	}
	a.note(last, "release bucket %d by %s head %d err %v", l.Bucket, l.Owner, head, err)
	return nl, err
}

func (a *Attribution) Abandon(ctx context.Context, l outbox.Lease, head, cleaned int64) error {
	last := a.lastOf(l.Bucket)
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
	}
	a.note(last, "abandon bucket %d by %s head %d err %v applied %v", l.Bucket, l.Owner, head, err, applied)
	return err
}

func (a *Attribution) Advance(ctx context.Context, l outbox.Lease, head, cleaned int64, now time.Time) (outbox.Lease, error) {
	last := a.lastOf(l.Bucket)
	nl, err := a.Store.Advance(ctx, l, head, cleaned, now)
	if err == nil {
		a.decided(l.Bucket, head)
	}
	a.note(last, "advance bucket %d by %s head %d err %v", l.Bucket, l.Owner, head, err)
	return nl, err
}

// Pending passes through, noting which messages each read returned (and
// from which head), so that a report shows a read older than a decision.
func (a *Attribution) Pending(ctx context.Context, bucket int, after int64, limit int) ([]outbox.Entry, bool, error) {
	es, more, err := a.Store.Pending(ctx, bucket, after, limit)
	var msgs []outbox.Message
	for _, e := range es {
		if !e.Fence && e.Err == nil {
			msgs = append(msgs, e.Message)
		}
	}
	a.note(msgs, "read bucket %d after %d: %d entries, %d messages", bucket, after, len(es), len(msgs))
	return es, more, err
}

func (a *Attribution) Acquire(ctx context.Context, bucket int, owner string, now time.Time, d time.Duration) (outbox.Lease, error) {
	last := a.lastOf(bucket)
	l, err := a.Store.Acquire(ctx, bucket, owner, now, d)
	a.note(last, "acquire bucket %d by %s head %d err %v", bucket, owner, l.Head, err)
	return l, err
}

func (a *Attribution) lastOf(bucket int) []outbox.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]outbox.Message(nil), a.last[bucket]...)
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

// decided drops the bucket's published messages at or below head.
func (a *Attribution) decided(bucket int, head int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	keep := a.last[bucket][:0]
	for _, m := range a.last[bucket] {
		if m.Sequence > head {
			keep = append(keep, m)
		}
	}
	a.last[bucket] = keep
}

// decidedSeqs drops these published messages of the bucket.
func (a *Attribution) decidedSeqs(bucket int, seqs []int64) {
	done := make(map[int64]bool, len(seqs))
	for _, q := range seqs {
		done[q] = true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	keep := a.last[bucket][:0]
	for _, m := range a.last[bucket] {
		if !done[m.Sequence] {
			keep = append(keep, m)
		}
	}
	a.last[bucket] = keep
}

// ParkedIDs are the ids of the messages the relay parked, sorted.
func (a *Attribution) ParkedIDs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := append([]string(nil), a.parked...)
	sort.Strings(out)
	return out
}

func ids(msgs []outbox.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}
