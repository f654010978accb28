package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/attrib"
)

// The transactional publish (kafka.TxnPublisher) as the broker runs it: each
// process has, per bucket, a producer under the bucket's transactional id;
// initialising one bumps the id's epoch, which aborts the open transaction
// of the previous epoch and refuses that producer's further produce and
// commit (fenced). Each Publish is one transaction: its records are
// appended as they are produced and visible only once it commits; a failed
// record, a cancelled publish or a fence aborts it, and nothing of it is
// ever visible. A commit's answer may be lost after it applied: the
// publisher then reports the commit's outcome unknown (kafka.ErrCommitUnknown),
// the only failed publish that puts its messages at risk. The coordinator
// may also apply a commit late (a slow transaction log): the publish gives
// up at its context's end (the lease's cut-off), its outcome unknown, and
// the commit applies later unless a newer producer was initialised first.
// A relay initialises its producer after each acquisition, before it reads
// (FenceHolders, docs/design.md §7.3), so no such late commit may land
// after an acquirer's read (checkLateCommits).

// txnState is a transaction's state at the broker.
type txnState int8

const (
	txnOpen txnState = iota
	txnCommitted
	txnAborted
)

type txn struct {
	bucket int
	epoch  int
	who    string
	state  txnState
	// reported: what Publish told the relay: 0 not yet, 1 committed, 2
	// failed, 3 commit outcome unknown.
	reported int8
	ids      []string
	// committedAt: the fenceLog event of its commit (0: not committed).
	committedAt int
	// acqAt: the fenceLog event of the acquisition after which its
	// producer was initialised (0: none — a producer no fence made).
	acqAt int
}

// fenceLog numbers the events of the late-commit check: each process's
// acquisitions of a bucket, with the transactional id's epoch then, the
// first read after each, and the commits.
type fenceLog struct {
	n     int
	acq   map[string]map[int]int // process -> bucket -> epoch at its acquisition, until its first read
	last  map[string]map[int]int // process -> bucket -> event of its last acquisition
	reads []acqRead
}

type acqRead struct {
	who               string
	bucket, epoch, at int
}

func (f *fenceLog) next() int {
	f.n++
	return f.n
}

func (f *fenceLog) acquired(who string, b, epoch int) {
	if f.acq == nil {
		f.acq, f.last = map[string]map[int]int{}, map[string]map[int]int{}
	}
	if f.acq[who] == nil {
		f.acq[who], f.last[who] = map[int]int{}, map[int]int{}
	}
	f.acq[who][b] = epoch
	f.last[who][b] = f.next()
}

// lastAcquired is the event of who's last acquisition of b (0: none).
func (f *fenceLog) lastAcquired(who string, b int) int { return f.last[who][b] }

func (f *fenceLog) read(who string, b int) {
	e, ok := f.acq[who][b]
	if !ok {
		return
	}
	delete(f.acq[who], b)
	f.reads = append(f.reads, acqRead{who: who, bucket: b, epoch: e, at: f.next()})
}

// procStore is the store as the process who calls it: with transactions it
// records the process's acquisitions and the first read after each.
type procStore struct {
	*attrib.Attribution
	p   *publisher
	who string
}

// storeFor is the store of the process who.
func (w *world) storeFor(who string) outbox.Store {
	if !w.cfg.Txn {
		return w.at
	}
	return &procStore{Attribution: w.at, p: w.pub, who: who}
}

func (ps *procStore) Acquire(ctx context.Context, b int, owner string, now time.Time, d time.Duration) (outbox.Lease, error) {
	l, err := ps.Attribution.Acquire(ctx, b, owner, now, d)
	if err == nil {
		ps.p.fl.acquired(ps.who, b, ps.p.epoch[b])
	}
	return l, err
}

// Renew fails while the process is frozen (Publish): it sends nothing.
func (ps *procStore) Renew(ctx context.Context, l outbox.Lease, now time.Time, d time.Duration) (outbox.Lease, error) {
	if ps.p.frozen[ps.who] {
		return outbox.Lease{}, errRetriable
	}
	return ps.Attribution.Renew(ctx, l, now, d)
}

func (ps *procStore) Pending(ctx context.Context, b int, after int64, limit int) ([]outbox.Entry, bool, error) {
	ps.p.fl.read(ps.who, b)
	return ps.Attribution.Pending(ctx, b, after, limit)
}

var (
	errFenced        = errors.New("PRODUCER_FENCED") // retriable
	errCommitUnknown = errors.New("commit sent, outcome unknown")
)

// txnProc is one process's transactional publisher.
type txnProc struct {
	p    *publisher
	who  string
	prod map[int]int // bucket -> its producer's epoch (0: none yet, or dropped after a failure)
	// acqAt: bucket -> the fenceLog event of the acquisition after which
	// FenceHolders initialised its producer.
	acqAt map[int]int
	busy  map[int]bool
}

func (p *publisher) txnFor(who string) *txnProc {
	tp := &txnProc{p: p, who: who, prod: map[int]int{}, acqAt: map[int]int{}, busy: map[int]bool{}}
	if p.procs == nil {
		p.procs = map[string]*txnProc{}
	}
	p.procs[who] = tp
	return tp
}

// fenced reports whether who's publish of bucket b can make nothing
// visible (attrib.Fenced): its producer is older than the transactional
// id's epoch (a newer producer fenced it), or it has none (its Publish
// answers ErrFenceRequired without producing).
func (p *publisher) fenced(who string, b int) bool {
	tp := p.procs[who]
	return tp != nil && (tp.prod[b] == 0 || tp.prod[b] != p.epoch[b])
}

// abortOpen aborts bucket b's open transactions of epochs before e (the new
// producer's initialisation).
func (p *publisher) abortOpen(b, e int) {
	for _, t := range p.txns {
		if t.bucket == b && t.state == txnOpen && t.epoch < e {
			t.state = txnAborted
		}
	}
}

// FenceHolders initialises the process's producer of bucket b
// (kafka.TxnPublisher.FenceHolders): the id's epoch is bumped and the older
// epochs' open transactions are aborted. The coordinator may not answer; the
// initialisation may have applied all the same.
func (tp *txnProc) FenceHolders(ctx context.Context, b int) error {
	p := tp.p
	s, r := p.w.s, p.w.s.Rand()
	if tp.busy[b] {
		p.w.fail(fmt.Errorf("%s fences bucket %d during its own publish of it", tp.who, b))
	}
	tp.busy[b] = true
	defer func() { tp.busy[b] = false }()
	s.Yield()
	s.Sleep(ctx.Done(), time.Duration(r.Int64N(int64(100*time.Millisecond))))
	tp.prod[b] = 0
	failed := ctx.Err() != nil || r.Float64() < p.w.cfg.FaultRate/10
	if !failed || r.IntN(2) == 0 {
		p.epoch[b]++
		p.abortOpen(b, p.epoch[b])
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case failed:
		return errRetriable
	}
	tp.prod[b], tp.acqAt[b] = p.epoch[b], p.fl.lastAcquired(tp.who, b)
	return nil
}

func (tp *txnProc) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	p := tp.p
	s, r := p.w.s, p.w.s.Rand()
	b := msgs[0].Bucket
	if tp.busy[b] {
		// kafka.TxnPublisher serialises a bucket's transactions; the relay's
		// own lock should never let two drains of one process publish a
		// bucket at once.
		p.w.fail(fmt.Errorf("%s publishes bucket %d twice at once", tp.who, b))
	}
	tp.busy[b] = true
	defer func() { tp.busy[b] = false }()
	s.Yield()
	if tp.prod[b] == 0 {
		// kafka.TxnPublisher makes no producer of its own: only a fence,
		// under the lease, does (outbox.HolderFencer).
		return 0, fmt.Errorf("%s has no producer of bucket %d: %w", tp.who, b, outbox.ErrFenceRequired)
	}
	t := &txn{bucket: b, epoch: tp.prod[b], who: tp.who, acqAt: tp.acqAt[b]}
	p.txns = append(p.txns, t)
	tx := len(p.txns) // 1-based: 0 is "no transaction"
	appendRecs := func(n int) {
		for _, m := range msgs[:n] {
			p.log = append(p.log, record{id: m.ID, bucket: m.Bucket, seq: m.Sequence, txn: tx})
			t.ids = append(t.ids, m.ID)
		}
	}
	fail := func(err error) (int, error) {
		if t.state == txnOpen {
			t.state = txnAborted
		}
		t.reported = 2
		// kafka.TxnPublisher drops the client after any failure: the
		// next publish needs a fence, under the lease.
		tp.prod[b] = 0
		return 0, err
	}
	s.Sleep(ctx.Done(), time.Duration(r.Int64N(int64(300*time.Millisecond))))
	if r.Float64() < p.w.cfg.FaultRate/10 {
		s.Sleep(ctx.Done(), 30*time.Second) // a very slow broker
	}
	fenced := func() bool { return p.epoch[b] != tp.prod[b] }
	switch x := r.Float64(); {
	case fenced():
		// A newer producer initialised the id: what was appended before is
		// aborted with the transaction, the rest is refused.
		appendRecs(r.IntN(len(msgs) + 1))
		return fail(errFenced)
	case x < p.w.cfg.FaultRate/3:
		appendRecs(r.IntN(len(msgs) + 1))
		return fail(errRetriable)
	case x < p.w.cfg.FaultRate*2/3:
		appendRecs(r.IntN(len(msgs)))
		return fail(errTooLarge)
	case x < p.w.cfg.FaultRate*3/4:
		return fail(errAuth)
	case ctx.Err() != nil:
		// Cancelled: kgo fails what it buffered, the rest was appended;
		// the transaction is aborted.
		appendRecs(r.IntN(len(msgs) + 1))
		return fail(ctx.Err())
	}
	appendRecs(len(msgs))
	if p.stalls.Float64() < p.w.cfg.FaultRate/4 {
		// The holder's process freezes (a pause, a frozen container)
		// between its produce and its commit: deaf to ctx, its lease
		// renewals stop, the lease expires and another process may
		// acquire the bucket, fence and read it. Its commit, sent when it
		// thaws, must be refused (the fence check below).
		p.w.res.CommitStalls++
		p.w.at.Stalled(b, "before-commit")
		p.frozen[tp.who] = true
		s.Sleep(nil, 20*time.Second+time.Duration(p.stalls.Int64N(int64(40*time.Second))))
		p.frozen[tp.who] = false
	}
	// The commit: another process may initialise the id meanwhile.
	s.Yield()
	s.Sleep(nil, time.Duration(r.Int64N(int64(50*time.Millisecond))))
	if r.Float64() < p.w.cfg.FaultRate/4 {
		// The coordinator applies the commit late.
		until := s.Now().Add(time.Duration(r.Int64N(int64(45 * time.Second))))
		if !s.Sleep(ctx.Done(), until.Sub(s.Now())) {
			p.w.res.LateCommitFaults++
			t.reported = 3
			tp.prod[b] = 0
			s.Spawn(fmt.Sprint("late-commit-", tx), func() {
				s.Sleep(nil, until.Sub(s.Now()))
				if t.state == txnOpen && p.epoch[b] == t.epoch {
					t.state, t.committedAt = txnCommitted, p.fl.next()
				}
			})
			return 0, fmt.Errorf("commit transaction: %w", errCommitUnknown)
		}
	}
	if fenced() {
		return fail(errFenced)
	}
	t.state, t.committedAt = txnCommitted, p.fl.next()
	if r.Float64() < p.w.cfg.FaultRate/5 {
		// The commit applied; its answer was lost.
		t.reported = 3
		tp.prod[b] = 0
		return 0, fmt.Errorf("commit transaction: %w", errCommitUnknown)
	}
	t.reported = 1
	return len(msgs), nil
}

// visible is the log as a read_committed consumer reads it: the records of
// committed transactions, and those published without one.
func (p *publisher) visible() []record {
	if p.txns == nil {
		return p.log
	}
	var out []record
	for _, rec := range p.log {
		if rec.txn == 0 || p.txns[rec.txn-1].state == txnCommitted {
			out = append(out, rec)
		}
	}
	return out
}

// checkTxns checks what a read_committed consumer sees: nothing of a
// transaction the relay was told failed (unless its commit's outcome was
// unknown) — stale_visible; a bucket's transactions one after another, each
// in sequence order — interleavings; and duplicates only as whole
// transactions, or part of one after a recorded partial marking, or part of
// one whose other messages were all parked (the republish met a
// record-level failure on them, and the relay published the rest of the
// batch in a new transaction: seed 3532).
func (w *world) checkTxns(vis []record, parked map[string]bool) {
	p := w.pub
	w.checkLateCommits()
	lastTxn := map[int]int{}
	ended := map[int]map[int]bool{}
	lastSeq := map[int]int64{}
	copies := map[string][]int{}
	for _, rec := range vis {
		t := p.txns[rec.txn-1]
		if t.reported == 2 || t.reported == 0 {
			w.res.StaleVisible = append(w.res.StaleVisible, fmt.Sprintf("%s of transaction %d (%s), reported failed", rec.id, rec.txn, t.who))
		}
		b := rec.bucket
		if l, ok := lastTxn[b]; !ok || l != rec.txn {
			if ended[b][rec.txn] {
				w.res.Interleavings = append(w.res.Interleavings, fmt.Sprintf("bucket %d: transaction %d again after %d", b, rec.txn, l))
			}
			if ok {
				if ended[b] == nil {
					ended[b] = map[int]bool{}
				}
				ended[b][l] = true
			}
			lastTxn[b] = rec.txn
		} else if rec.seq <= lastSeq[b] {
			w.res.Interleavings = append(w.res.Interleavings, fmt.Sprintf("bucket %d: %d after %d in transaction %d", b, rec.seq, lastSeq[b], rec.txn))
		}
		lastSeq[b] = rec.seq
		if slices.Contains(copies[rec.id], rec.txn) {
			w.res.PartialDuplicates = append(w.res.PartialDuplicates, fmt.Sprintf("%s twice in transaction %d", rec.id, rec.txn))
		}
		copies[rec.id] = append(copies[rec.id], rec.txn)
	}
	for i, t := range p.txns {
		if t.state != txnCommitted {
			continue
		}
		again, partialCause, restParked := 0, false, true
		for _, id := range t.ids {
			c := copies[id]
			if j := slices.Index(c, i+1); j >= 0 && j < len(c)-1 {
				again++
			} else if !parked[id] {
				restParked = false
			}
			// A partial marking: the drain crashed or stalled between two
			// of its tombstone writes, or one of them failed.
			for _, risk := range w.chk.Risks(id) {
				if slices.Contains(attrib.PartialMarking, risk) {
					partialCause = true
				}
			}
		}
		switch {
		case again == 0:
		case again == len(t.ids):
			w.res.DupTxnsWhole++
		default:
			w.res.DupTxnsPartial++
			switch {
			case partialCause:
			case restParked:
				w.res.DupTxnsPartialParked++
			default:
				w.res.PartialDuplicates = append(w.res.PartialDuplicates, fmt.Sprintf("transaction %d (%s): %d of %d messages published again, no partial marking recorded and the rest not parked", i+1, t.who, again, len(t.ids)))
			}
		}
	}
}

// checkLateCommits: no transaction commits after another process acquired
// its bucket and read it, unless its own process acquired the bucket after
// that read and initialised its producer after that acquisition (it then
// holds the bucket). A stale holder's producer, initialised before the
// other's acquisition, was fenced by it; a resumer's, had it made one
// after the other's fence, would commit here unfenced (docs/design.md
// §4.3: a resumer never initialises a producer).
func (w *world) checkLateCommits() {
	for i, t := range w.pub.txns {
		if t.committedAt == 0 {
			continue
		}
		for _, rd := range w.pub.fl.reads {
			if rd.bucket == t.bucket && rd.who != t.who && t.acqAt < rd.at && rd.at < t.committedAt {
				w.res.LateCommits = append(w.res.LateCommits, fmt.Sprintf("transaction %d (%s, epoch %d, producer made after its acquisition at event %d) of bucket %d committed after %s acquired the bucket at epoch %d and read it (event %d)",
					i+1, t.who, t.epoch, t.acqAt, t.bucket, rd.who, rd.epoch, rd.at))
				break
			}
		}
	}
}

// fail ends the schedule with err.
func (w *world) fail(err error) {
	w.s.mu.Lock()
	if w.s.err == nil {
		w.s.err = err
	}
	w.s.mu.Unlock()
}
