package soak

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/attrib"
	"github.com/dynakafka/outbox/internal/harness/checker"
	"github.com/dynakafka/outbox/kafka"
)

// The transactional mode's oracle. Every publish is one Kafka transaction
// (kafka.TxnPublisher); the harness tags each record with its transaction's
// identity (the TxnHeader header, one value per Publish call) and records the
// transaction's outcome as the publisher reported it: committed (the acked
// records), aborted (every other error: kgo aborted it, or a fence or a new
// producer's initialisation will), or unknown (the commit was sent and not
// confirmed, kafka.ErrCommitUnknown). A read_committed consumer records
// every record it sees with its tag, partition and offset; after the round
// has drained, the oracle checks:
//
//   - stale_visible: a visible record of an aborted transaction, of no
//     transaction the harness recorded, or beyond the records its committed
//     transaction acked;
//   - interleavings: on one partition, a bucket's transaction whose records
//     appear again after another transaction of that bucket began (two
//     holders' transactions interleaved), or a key that goes back to an older
//     copy within one transaction;
//   - duplicates only as whole transactions: a copy of a message twice in one
//     transaction is unexplained; a committed transaction some of whose
//     messages appear again later is a duplicated transaction, whole if all
//     of them do, and partial only with a recorded partial marking
//     (crash:mid-delete, stall:mid-delete, store-fault:mark) on one of them — any other
//     partial one is unexplained. Each duplicate is attributed by the
//     checker as in the default mode, except that a failed publish puts
//     nothing at risk unless its commit's outcome is unknown
//     (commit-unknown): an aborted transaction publishes nothing.

// TxnHeader is the record header carrying the soak's transaction tag.
const TxnHeader = "soak-txn"

type txnOutcome int

const (
	txnPending txnOutcome = iota
	txnCommitted
	txnAborted
	txnUnknown
)

type txnRecord struct {
	who     string
	outcome txnOutcome
	fenced  bool
	ids     []string // committed: the acked messages; otherwise every message
	acked   map[string]bool
}

type txnSeen struct {
	part   int32
	offset int64
	tag    string
	id     string
	key    string
	bucket string
	order  int64
}

// txnOracle records transactions on the producing side and what a
// read_committed consumer saw.
type txnOracle struct {
	n    atomic.Int64
	mu   sync.Mutex
	txns map[string]*txnRecord
	seen []txnSeen
}

func newTxnOracle() *txnOracle { return &txnOracle{txns: map[string]*txnRecord{}} }

// publisher returns pub with every Publish tagged and its outcome recorded,
// as the process who.
func (o *txnOracle) publisher(who string, pub outbox.Publisher) outbox.Publisher {
	return &txnTagger{o: o, who: who, pub: pub}
}

type txnTagger struct {
	o   *txnOracle
	who string
	pub outbox.Publisher
}

func (p *txnTagger) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	tag := fmt.Sprintf("%s/%d", p.who, p.o.n.Add(1))
	tagged := make([]outbox.Message, len(msgs))
	for i, m := range msgs {
		m.Headers = append(slices.Clip(m.Headers), outbox.Header{Key: TxnHeader, Value: []byte(tag)})
		tagged[i] = m
	}
	rec := &txnRecord{who: p.who}
	p.o.mu.Lock()
	p.o.txns[tag] = rec
	p.o.mu.Unlock()
	n, err := p.pub.Publish(ctx, tagged)
	p.o.mu.Lock()
	defer p.o.mu.Unlock()
	var fe *kafka.FencedError
	switch {
	case n > 0: // err, if any, names a message refused before producing
		rec.outcome, rec.ids = txnCommitted, msgIDs(msgs[:n])
	case errors.Is(err, kafka.ErrCommitUnknown):
		rec.outcome, rec.ids = txnUnknown, msgIDs(msgs)
	case err != nil:
		rec.outcome, rec.ids, rec.fenced = txnAborted, msgIDs(msgs), errors.As(err, &fe)
	default: // nothing to publish
		rec.outcome = txnCommitted
	}
	rec.acked = map[string]bool{}
	for _, id := range rec.ids {
		rec.acked[id] = true
	}
	return n, err
}

// FenceHolders keeps the inner publisher's outbox.HolderFencer: the
// relays fence a bucket's earlier holders at each acquisition.
func (p *txnTagger) FenceHolders(ctx context.Context, bucket int) error {
	if f, ok := p.pub.(outbox.HolderFencer); ok {
		return f.FenceHolders(ctx, bucket)
	}
	return nil
}

func msgIDs(msgs []outbox.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// delivered records one record a read_committed consumer saw.
func (o *txnOracle) delivered(r *kgo.Record, id string, order int64) {
	s := txnSeen{part: r.Partition, offset: r.Offset, id: id, key: string(r.Key), order: order}
	for _, h := range r.Headers {
		switch h.Key {
		case TxnHeader:
			s.tag = string(h.Value)
		case outbox.DefaultBucketHeader:
			s.bucket = string(h.Value)
		}
	}
	o.mu.Lock()
	o.seen = append(o.seen, s)
	o.mu.Unlock()
}

// txnVerdict is what the oracle found.
type txnVerdict struct {
	StaleVisible, Interleavings int
	Committed, Aborted, Fenced  int // transactions by outcome (Fenced: of the aborted)
	Unknown, UnknownVisible     int // commit outcome unknown; of those, seen
	DupWhole, DupPartial        int // duplicated transactions
	InTxnDuplicates             int // a message twice in one transaction
	PartialParked               int // of DupPartial: the messages not published again were all parked
	PartialHandover             int // of DupPartial: a fenced hand-over read while the rest's tombstones landed
	UnexplainedPartial          int // partial duplicated transactions with no partial marking recorded and not the rest parked
	Examples                    []string
}

func (v *txnVerdict) example(s string) {
	if len(v.Examples) < 8 {
		v.Examples = append(v.Examples, s)
	}
}

// String is the summary's fields.
func (v txnVerdict) String() string {
	return fmt.Sprintf("stale_visible=%d interleavings=%d txns=committed:%d,aborted:%d,fenced:%d,unknown:%d,unknown_visible:%d dup_txns=whole:%d,partial:%d,partial_parked:%d,partial_handover:%d,within_txn:%d,partial_unexplained:%d",
		v.StaleVisible, v.Interleavings, v.Committed, v.Aborted, v.Fenced, v.Unknown, v.UnknownVisible, v.DupWhole, v.DupPartial, v.PartialParked, v.PartialHandover, v.InTxnDuplicates, v.UnexplainedPartial)
}

// Add sums two verdicts.
func (v *txnVerdict) Add(o txnVerdict) {
	v.StaleVisible += o.StaleVisible
	v.Interleavings += o.Interleavings
	v.Committed += o.Committed
	v.Aborted += o.Aborted
	v.Fenced += o.Fenced
	v.Unknown += o.Unknown
	v.UnknownVisible += o.UnknownVisible
	v.DupWhole += o.DupWhole
	v.DupPartial += o.DupPartial
	v.PartialParked += o.PartialParked
	v.PartialHandover += o.PartialHandover
	v.InTxnDuplicates += o.InTxnDuplicates
	v.UnexplainedPartial += o.UnexplainedPartial
	for _, e := range o.Examples {
		v.example(e)
	}
}

// Unexplained counts the duplicates the transactional mode does not admit.
func (v txnVerdict) Unexplained() int { return v.InTxnDuplicates + v.UnexplainedPartial }

// verdict checks what the consumer saw (call once the round has drained and
// the consumer stopped); chk gives each message's recorded risk, parked the
// messages the relay parked.
//
// A committed transaction republished in part is admitted on one of three
// recorded events: a partial marking on one of its messages; every message
// of it that was not published again parked (the republish met a
// record-level failure on them: the relay parked them and published the
// rest of the batch in a new transaction); or a fenced hand-over read
// while its tombstones were landing — every message published again was
// at risk of handover-fenced, and a tombstone was asked for every message
// of it (markSent; the acquirer skipped those whose puts had landed, as a
// BatchWriteItem applies put by put; docs/design.md §4.3.5).
func (o *txnOracle) verdict(chk *checker.Checker, parked map[string]bool, markSent func(id string) bool) txnVerdict {
	o.mu.Lock()
	defer o.mu.Unlock()
	var v txnVerdict
	for _, t := range o.txns {
		switch t.outcome {
		case txnCommitted:
			v.Committed++
		case txnAborted:
			v.Aborted++
			if t.fenced {
				v.Fenced++
			}
		case txnUnknown:
			v.Unknown++
		}
	}
	seen := append([]txnSeen(nil), o.seen...)
	sort.SliceStable(seen, func(i, j int) bool {
		if seen[i].part != seen[j].part {
			return seen[i].part < seen[j].part
		}
		return seen[i].offset < seen[j].offset
	})
	type pb struct {
		part   int32
		bucket string
	}
	last := map[pb]string{}
	ended := map[pb]map[string]bool{}
	type keyLast struct {
		order int64
		tag   string
	}
	prevKey := map[string]keyLast{}
	copies := map[string][]string{} // message id -> tags of its copies, in log order
	unknownSeen := map[string]bool{}
	for _, s := range seen {
		t := o.txns[s.tag]
		switch {
		case t == nil:
			v.StaleVisible++
			v.example(fmt.Sprintf("p%d@%d: message %s tagged %q, no transaction the harness published", s.part, s.offset, s.id, s.tag))
		case t.outcome == txnAborted || t.outcome == txnPending:
			v.StaleVisible++
			v.example(fmt.Sprintf("p%d@%d: message %s of transaction %s visible, which its publisher reported aborted (fenced %v)", s.part, s.offset, s.id, s.tag, t.fenced))
		case t.outcome == txnCommitted && !t.acked[s.id]:
			v.StaleVisible++
			v.example(fmt.Sprintf("p%d@%d: message %s of transaction %s visible beyond the records it acked", s.part, s.offset, s.id, s.tag))
		case t.outcome == txnUnknown:
			unknownSeen[s.tag] = true
		}
		k := pb{s.part, s.bucket}
		if l, ok := last[k]; !ok || l != s.tag {
			if ended[k][s.tag] {
				v.Interleavings++
				v.example(fmt.Sprintf("p%d@%d: transaction %s of bucket %s appears again after %s began", s.part, s.offset, s.tag, s.bucket, l))
			}
			if ok {
				if ended[k] == nil {
					ended[k] = map[string]bool{}
				}
				ended[k][l] = true
			}
			last[k] = s.tag
		}
		if p, ok := prevKey[s.key]; ok && s.order <= p.order && p.tag == s.tag {
			v.Interleavings++
			v.example(fmt.Sprintf("p%d@%d: key %s goes back from %d to %d within transaction %s", s.part, s.offset, s.key, p.order, s.order, s.tag))
		}
		prevKey[s.key] = keyLast{s.order, s.tag}
		if c := copies[s.id]; len(c) > 0 && slices.Contains(c, s.tag) {
			v.InTxnDuplicates++
			v.example(fmt.Sprintf("p%d@%d: message %s twice in transaction %s", s.part, s.offset, s.id, s.tag))
		}
		copies[s.id] = append(copies[s.id], s.tag)
	}
	v.UnknownVisible = len(unknownSeen)
	// Duplicated transactions: a transaction some of whose messages have a
	// later copy in another transaction.
	for tag, t := range o.txns {
		if t.outcome != txnCommitted && !(t.outcome == txnUnknown && unknownSeen[tag]) {
			continue
		}
		again, partialCause, restParked := 0, "", true
		// A fenced hand-over: every message published again was in flight
		// when its bucket was acquired from a release (handover-fenced),
		// and a tombstone was asked for every message of it, those
		// published again included (their puts had not landed when the
		// acquirer read): a drain that never asked for some is a bug.
		handover := true
		for _, id := range t.ids {
			c := copies[id]
			handover = handover && markSent(id)
			if i := slices.Index(c, tag); i >= 0 && i < len(c)-1 {
				again++
				handover = handover && slices.Contains(chk.Risks(id), "handover-fenced")
			} else {
				restParked = restParked && parked[id]
			}
			for _, r := range chk.Risks(id) {
				if slices.Contains(attrib.PartialMarking, r) {
					partialCause = r
				}
			}
		}
		switch {
		case again == 0:
		case again == len(t.ids):
			v.DupWhole++
		default:
			v.DupPartial++
			switch {
			case partialCause != "":
			case restParked:
				v.PartialParked++
			case handover:
				v.PartialHandover++
			default:
				v.UnexplainedPartial++
				v.example(fmt.Sprintf("transaction %s by %s: %d of its %d messages published again, no partial marking was recorded on them and the rest were not parked", tag, t.who, again, len(t.ids)))
			}
		}
	}
	return v
}

// txnDetails lists examples, for a failure message.
func (v txnVerdict) details() string { return strings.Join(v.Examples, "; ") }
