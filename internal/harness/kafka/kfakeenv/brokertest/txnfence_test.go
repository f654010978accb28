package brokertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/kafka/kfakeenv"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// stallAfterProduce holds a client's produce answers (kgo's
// HookProduceRecordUnbuffered runs before the record's promise) from the
// first record on, until release: a TxnPublisher stalled with its
// transaction's records appended at the broker and its commit not sent.
type stallAfterProduce struct {
	once     sync.Once
	produced chan struct{}
	release  chan struct{}
}

func (s *stallAfterProduce) OnProduceRecordUnbuffered(_ *kgo.Record, err error) {
	if err != nil {
		return
	}
	s.once.Do(func() {
		close(s.produced)
		<-s.release
	})
}

// gatedReads holds the first read of the bucket's messages until release.
type gatedReads struct {
	*memory.Store
	once    sync.Once
	reading chan struct{}
	release chan struct{}
}

func (g *gatedReads) Pending(ctx context.Context, bucket int, after int64, limit int) ([]outbox.Entry, bool, error) {
	g.once.Do(func() {
		close(g.reading)
		select {
		case <-g.release:
		case <-ctx.Done():
		}
	})
	return g.Store.Pending(ctx, bucket, after, limit)
}

// publishOutcomes is a TxnPublisher (FenceHolders and PublishAlone
// included) that records what each Publish returned.
type publishOutcomes struct {
	*kafka.TxnPublisher
	mu   sync.Mutex
	seen []publishResult
}

func (p *publishOutcomes) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	n, err := p.TxnPublisher.Publish(ctx, msgs)
	p.mu.Lock()
	p.seen = append(p.seen, publishResult{Acked: n, Err: err})
	p.mu.Unlock()
	return n, err
}

func (p *publishOutcomes) first() (publishResult, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) == 0 {
		return publishResult{}, false
	}
	return p.seen[0], true
}

// settableClock is a relay clock the test moves.
type settableClock struct{ off atomic.Int64 }

var fenceEpoch = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func (c *settableClock) Now() time.Time          { return fenceEpoch.Add(time.Duration(c.off.Load())) }
func (c *settableClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// TestTxnTakeoverFencesBeforeItsRead (issue 29, item 8; docs/design.md
// §7.3): relay A holds bucket 3 and stalls in its transactional publish with
// the records appended and the commit not sent. Its lease expires; relay B
// takes the bucket over and reaches its first read, where the test holds it.
// A wakes up and commits: the commit must be refused (fenced) — B's
// acquisition initialised the bucket's transactional id before that read.
// When the id was first initialised at B's first publish, A's commit landed
// between B's read and B's publish. A read_committed consumer then sees
// each message once (B's transaction), and A's aborted records did reach
// the log (so the fence was tested). The stall and the read are held by
// gates, not timing; A's lease, transaction timeout and renewal interval are
// minutes, so nothing but B's fence can end A's transaction while the gates
// hold.
func TestTxnTakeoverFencesBeforeItsRead(t *testing.T) {
	k := kfakeenv.Kafka(t)
	lane := "kfake"
	if k.Cluster == nil {
		lane = "real"
	}
	ctx := testCtx(t)
	topic := newTopic(t, k.KafkaCluster, 1, nil)
	prefix := testenv.Name(t, "ob")
	const bucket = 3 // messages() puts every message in bucket 3
	const lease = 10 * time.Minute

	mem := memory.New(4)
	msgs := messages(topic, 3, sameKey("k"))
	if err := mem.Put(msgs...); err != nil {
		t.Fatal(err)
	}
	stall := &stallAfterProduce{produced: make(chan struct{}), release: make(chan struct{})}
	defer func() {
		select {
		case <-stall.release:
		default:
			close(stall.release)
		}
	}()
	pubA := &publishOutcomes{TxnPublisher: newTxnPublisher(t, k.KafkaCluster, prefix, kafka.Topics(topic),
		kafka.LeaseDuration(lease), kafka.ClientOptions(kgo.WithHooks(stall)))}
	pubB := &publishOutcomes{TxnPublisher: newTxnPublisher(t, k.KafkaCluster, prefix, kafka.Topics(topic), kafka.LeaseDuration(lease))}
	reads := &gatedReads{Store: mem, reading: make(chan struct{}), release: make(chan struct{})}
	defer func() {
		select {
		case <-reads.release:
		default:
			close(reads.release)
		}
	}()
	clkA, clkB := &settableClock{}, &settableClock{}
	clkB.Advance(time.Hour) // B's clock is past A's lease: a takeover
	// Renewals every 5 minutes: A's watchdog, which would find the lease
	// lost and cancel A's publish, stays asleep while the gates hold.
	opts := []relay.Option{relay.LeaseDuration(lease), relay.LeaseRenewInterval(5 * time.Minute), relay.DeadlineMargin(0),
		relay.RetryBackoff(10*time.Millisecond, 50*time.Millisecond)}
	a, err := relay.New(ctx, mem, pubA, append(opts, relay.RelayID("a"), relay.WithClock(clkA))...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := relay.New(ctx, reads, pubB, append(opts, relay.RelayID("b"), relay.WithClock(clkB))...)
	if err != nil {
		t.Fatal(err)
	}
	type drained struct {
		st  relay.DrainStats
		err error
	}
	drain := func(r *relay.Relay) <-chan drained {
		ch := make(chan drained, 1)
		go func() {
			st, err := r.DrainBucket(ctx, bucket)
			ch <- drained{st, err}
		}()
		return ch
	}

	aDone := drain(a)
	select {
	case <-stall.produced:
	case d := <-aDone:
		t.Fatalf("A's drain ended before its transaction stalled: %+v, %v", d.st, d.err)
	case <-ctx.Done():
		t.Fatal("A never produced")
	}
	bDone := drain(b)
	select {
	case <-reads.reading:
	case d := <-bDone:
		t.Fatalf("B's drain ended before its read: %+v, %v", d.st, d.err)
	case <-ctx.Done():
		t.Fatal("B never read the bucket")
	}
	// B holds the bucket and is about to read it. A wakes up, its clock
	// past its lease's cut-off (as it is, by the clock-skew bound, whenever
	// another relay could take the bucket over), and commits.
	clkA.Advance(time.Hour)
	close(stall.release)
	var da drained
	select {
	case da = <-aDone:
	case <-ctx.Done():
		t.Fatal("A's drain did not end")
	}
	// The commit is refused: PRODUCER_FENCED (a *kafka.FencedError), or,
	// where the broker takes a commit one epoch behind for a resend of an
	// EndTxn that aborted (KIP-890, kfake), INVALID_TXN_STATE, which the
	// publisher reports as a commit it cannot confirm. Either way nothing
	// is acknowledged, and the read_committed read below shows that it did
	// not apply.
	res, ok := pubA.first()
	var fe *kafka.FencedError
	staleCommit := "fenced"
	switch {
	case !ok:
		t.Fatal("A's publish left no outcome")
	case res.Acked > 0 || res.Err == nil:
		staleCommit = "committed"
		t.Errorf("A's stalled transaction committed (acked %d, %v) after B had acquired the bucket and begun its read: B did not fence it at acquisition", res.Acked, res.Err)
	case !errors.As(res.Err, &fe):
		staleCommit = "refused"
		t.Logf("A's stalled publish: %v", res.Err)
	}
	if !errors.Is(da.err, outbox.ErrLeaseLost) {
		t.Errorf("A's drain: %v, want ErrLeaseLost (B took the bucket over)", da.err)
	}
	close(reads.release)
	var db drained
	select {
	case db = <-bDone:
	case <-ctx.Done():
		t.Fatal("B's drain did not end")
	}
	if db.err != nil || !db.st.Acquired || !db.st.TakenOver {
		t.Fatalf("B's drain: %+v, %v; want a takeover that succeeds", db.st, db.err)
	}

	want := values(msgs)
	committed := readValues(t, k.KafkaCluster, topic, true)
	once := 0
	for _, v := range want {
		if n := count(committed, v); n == 1 {
			once++
		}
	}
	if !slices.Equal(committed, want) {
		t.Errorf("read_committed read %v, want %v once", committed, want)
	}
	bAcked := 0
	pubB.mu.Lock()
	for _, r := range pubB.seen {
		bAcked += r.Acked
	}
	pubB.mu.Unlock()
	if staleCommit != "committed" && bAcked != len(want) {
		t.Errorf("B acknowledged %d messages, want %d: B publishes what A's aborted transaction held", bAcked, len(want))
	}
	if all := readValues(t, k.KafkaCluster, topic, false); count(all, want[0]) < 2 && staleCommit != "committed" {
		t.Errorf("read_uncommitted read %v: A's records never reached the log, the fence was not tested", all)
	}
	fmt.Printf("txn-fence: lane=%s stale_commit=%s stale_holder_stopped=%v new_holder_acked=%d committed_once=%d/%d\n",
		lane, staleCommit, errors.Is(da.err, outbox.ErrLeaseLost), bAcked, once, len(want))
}

func count(vs []string, v string) int {
	n := 0
	for _, x := range vs {
		if x == v {
			n++
		}
	}
	return n
}
