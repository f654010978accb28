package brokertest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dynakafka/outbox/internal/harness/kafka/kfakeenv"
	"github.com/dynakafka/outbox/kafka"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

func newTxnPublisher(t *testing.T, k *testenv.KafkaCluster, prefix string, opts ...kafka.Option) *kafka.TxnPublisher {
	t.Helper()
	p, err := kafka.NewTxnPublisher(testCtx(t), k.Brokers, prefix, opts...)
	if err != nil {
		t.Fatalf("NewTxnPublisher: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// fence has p fence bucket's earlier holders, as the relay does after it
// acquires the bucket and again, under the lease, after a failed
// transaction (outbox.HolderFencer: Publish never makes a producer).
func fence(t *testing.T, p *kafka.TxnPublisher, bucket int) {
	t.Helper()
	if err := p.FenceHolders(testCtx(t), bucket); err != nil {
		t.Fatalf("FenceHolders(%d): %v", bucket, err)
	}
}

// readValues appends a sentinel record to topic's partition 0 (outside any
// transaction), reads the partition up to it with isolation level
// read_committed or read_uncommitted, and returns the values before it,
// other sentinels left out. (A read_committed consumer stops at the last
// stable offset, so the sentinel also shows that no transaction is left open.)
func readValues(t *testing.T, k *testenv.KafkaCluster, topic string, committed bool) []string {
	t.Helper()
	return readPartition(t, k, topic, 0, committed)
}

// readPartition is readValues for partition part.
func readPartition(t *testing.T, k *testenv.KafkaCluster, topic string, part int32, committed bool) []string {
	t.Helper()
	ctx := testCtx(t)
	sentinel := "end-" + outbox.NewID()
	pr, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := pr.ProduceSync(ctx, &kgo.Record{Value: []byte(sentinel), Partition: part}).FirstErr(); err != nil {
		t.Fatalf("produce the sentinel: %v", err)
	}
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {part: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(iso), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []string
	for done := false; !done; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: no sentinel after %v: %v", topic, out, ctx.Err())
		}
		if err := fs.Err(); err != nil {
			t.Fatalf("read %s: %v", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			switch v := string(r.Value); {
			case done:
			case v == sentinel:
				done = true
			case !strings.HasPrefix(v, "end-"):
				out = append(out, v)
			}
		})
	}
	return out
}

func values(msgs []outbox.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Value))
	}
	return out
}

func realTxnCluster(t *testing.T) *testenv.KafkaCluster {
	t.Helper()
	return realCluster(t).Kafka()
}

// TestRealTxnCommits: a Publish is one committed transaction that a
// read_committed consumer sees whole.
func TestRealTxnCommits(t *testing.T) {
	k := realTxnCluster(t)
	topic := newTopic(t, k, 1, nil)
	p := newTxnPublisher(t, k, testenv.Name(t, "ob"), kafka.Topics(topic))
	fence(t, p, 3) // messages() puts every message in bucket 3
	for round := range 2 {
		msgs := messages(topic, 5, sameKey("k"))
		for i := range msgs {
			msgs[i].Value = fmt.Appendf(nil, "r%d-%d", round, i)
		}
		if acked, err := p.Publish(testCtx(t), msgs); acked != 5 || err != nil {
			t.Fatalf("Publish = %d, %v", acked, err)
		}
	}
	want := []string{"r0-0", "r0-1", "r0-2", "r0-3", "r0-4", "r1-0", "r1-1", "r1-2", "r1-3", "r1-4"}
	if got := readValues(t, k, topic, true); !slices.Equal(got, want) {
		t.Fatalf("read_committed read %v, want %v", got, want)
	}
	mixed := messages(topic, 2, sameKey("k"))
	mixed[1].Bucket++
	if _, err := p.Publish(testCtx(t), mixed); err == nil || !strings.Contains(err.Error(), "own transactional id") {
		t.Fatalf("Publish of two buckets: %v, want a refusal", err)
	}
}

// TestRealTxnFencesTheStaleHolder: the stale holder of a bucket has appended
// records in an open transaction when the new holder publishes the bucket;
// the new holder's producer initialisation fences it. The stale records are
// on the log (a read_uncommitted consumer sees them) but never visible to
// read_committed consumers, the stale holder's commit fails, and its next
// Publish returns a *FencedError with nothing acknowledged.
func TestRealTxnFencesTheStaleHolder(t *testing.T) {
	k := realTxnCluster(t)
	topic := newTopic(t, k, 1, nil)
	prefix := testenv.Name(t, "ob")
	const bucket = 3 // messages() puts every message in bucket 3
	ctx := testCtx(t)

	stalePub := newTxnPublisher(t, k, prefix, kafka.Topics(topic))
	fence(t, stalePub, bucket)
	first := messages(topic, 1, sameKey("k"))
	first[0].Value = []byte("old-holder-committed")
	if acked, err := stalePub.Publish(ctx, first); acked != 1 || err != nil {
		t.Fatalf("first Publish = %d, %v", acked, err)
	}

	// A stalled holder mid-transaction: the same transactional id, records
	// appended, no commit yet.
	stalled, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.TransactionalID(kafka.TransactionalID(prefix, bucket)),
		kgo.TransactionTimeout(30*time.Second), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	if err := stalled.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := stalled.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: fmt.Appendf(nil, "stale-%d", i)}).FirstErr(); err != nil {
			t.Fatalf("stalled holder's produce: %v", err)
		}
	}

	// The new holder takes the bucket over and publishes.
	newPub := newTxnPublisher(t, k, prefix, kafka.Topics(topic))
	fence(t, newPub, bucket)
	fresh := messages(topic, 2, sameKey("k"))
	fresh[0].Value, fresh[1].Value = []byte("new-1"), []byte("new-2")
	if acked, err := newPub.Publish(ctx, fresh); acked != 2 || err != nil {
		t.Fatalf("new holder's Publish = %d, %v", acked, err)
	}

	// The stalled holder wakes up and commits: refused.
	if err := stalled.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Fatal("the fenced holder committed its transaction")
	} else if !(errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)) {
		t.Logf("fenced holder's commit: %v", err)
	}
	// The stale TxnPublisher publishes again: fenced, nothing acknowledged.
	again := messages(topic, 2, sameKey("k"))
	again[0].Value, again[1].Value = []byte("stale-again-1"), []byte("stale-again-2")
	acked, err := stalePub.Publish(ctx, again)
	var fe *kafka.FencedError
	if acked != 0 || !errors.As(err, &fe) || fe.TransactionalID != kafka.TransactionalID(prefix, bucket) {
		t.Fatalf("stale holder's Publish = %d, %v; want 0 and a *kafka.FencedError for %q", acked, err, kafka.TransactionalID(prefix, bucket))
	}
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Errorf("error %v matches neither PRODUCER_FENCED nor INVALID_PRODUCER_EPOCH", err)
	}

	want := []string{"old-holder-committed", "new-1", "new-2"}
	if got := readValues(t, k, topic, true); !slices.Equal(got, want) {
		t.Fatalf("read_committed read %v, want %v: a fenced holder's records are visible, or a committed one is not (read_uncommitted reads %v)",
			got, want, readValues(t, k, topic, false))
	}
	// The stale records did reach the log: the check above could fail.
	if got := readValues(t, k, topic, false); !slices.Contains(got, "stale-0") {
		t.Fatalf("read_uncommitted read %v: the stalled holder's records never reached the log, the fence was not tested", got)
	}
}

// TestRealTxnReferenceCase is the reference strict-order case on the real
// broker: rows 1, 2, 3 on one key, row 1 larger than the topic's
// max.message.bytes, which an operator lowered after the publisher checked
// it (row 1 is within MaxMessageBytes: only the broker knows).
// The publish of 1, 2, 3 acknowledges nothing (kgo refuses the partition's
// batch, or the transaction is aborted: TestRealTxnAbortHidesAppendedRecords);
// the relay parks 1 and publishes 2, 3 in the next transaction. A
// read_committed consumer sees 2, 3 — never 2, 3, 1, 2, 3 — in both the
// default and the Strict mode.
func TestRealTxnReferenceCase(t *testing.T) {
	k := realTxnCluster(t)
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			topic := newTopic(t, k, 1, map[string]string{"max.message.bytes": "2000"})
			// Uncompressed: the broker's limit applies to the batch as sent.
			opts := []kafka.Option{kafka.Topics(topic), kafka.OutboxConfig(outbox.Config{MaxMessageBytes: 2000}), kafka.Compression(kgo.NoCompression())}
			if strict {
				opts = append(opts, kafka.Strict())
			}
			p := newTxnPublisher(t, k, testenv.Name(t, "ob"), opts...)
			// The operator lowers the topic's limit after the publisher
			// checked it.
			lowerMaxMessageBytes(t, k, topic, "1500")
			rows := messages(topic, 3, sameKey("order-1"))
			rows[1].Value, rows[2].Value = []byte("2"), []byte("3")
			// Row 1 within MaxMessageBytes (2000) as the writers measure it,
			// above the topic's new limit (1500).
			rows[0].Value = []byte("1")
			size := outbox.HeaderNames{}.RecordSize(rows[0]) // p uses the default header names
			rows[0].Value = []byte("1" + strings.Repeat("x", 2000-size-1))
			if got := (outbox.HeaderNames{}).RecordSize(rows[0]); got != 1999 {
				t.Fatalf("row 1 is %d bytes, want 1999", got)
			}
			fence(t, p, rows[0].Bucket)
			acked, err := p.Publish(testCtx(t), rows)
			if acked != 0 || err == nil {
				t.Fatalf("Publish(1, 2, 3) = %d, %v; want 0 and row 1's error", acked, err)
			}
			if cl := outbox.Classify(err); cl != outbox.RecordPermanent {
				t.Fatalf("row 1's error %v is %v, want RecordPermanent (the relay parks it)", err, cl)
			}
			var pe *outbox.PublishError
			if !errors.As(err, &pe) || pe.Sequence != 1 {
				t.Fatalf("error %v does not name row 1", err)
			}
			// The relay parks row 1, fences again (the failed
			// transaction's producer is gone) and publishes the rest.
			fence(t, p, rows[0].Bucket)
			if acked, err := p.Publish(testCtx(t), rows[1:]); acked != 2 || err != nil {
				t.Fatalf("Publish(2, 3) = %d, %v", acked, err)
			}
			if got := readValues(t, k, topic, true); !slices.Equal(got, []string{"2", "3"}) {
				t.Fatalf("read_committed read %v, want [2 3]", got)
			}
			// What reached the log, aborted copies included (kgo may have
			// refused the batch of 1, 2, 3 whole, or appended 2, 3 alone).
			t.Logf("read_uncommitted: %d records", len(readValues(t, k, topic, false)))
		})
	}
}

// TestRealTxnAbortHidesAppendedRecords: a transaction whose records on one
// partition were appended while a record on another failed (too large for
// the topic's lowered limit) is aborted: the appended record is on the log
// (read_uncommitted sees it) but a read_committed consumer never sees it.
// (Committing instead of aborting makes it visible, and the test fails.)
func TestRealTxnAbortHidesAppendedRecords(t *testing.T) {
	k := realTxnCluster(t)
	topic := newTopic(t, k, 2, map[string]string{"max.message.bytes": "4000"})
	p := newTxnPublisher(t, k, testenv.Name(t, "ob"), kafka.Topics(topic), kafka.OutboxConfig(outbox.Config{MaxMessageBytes: 4000}), kafka.Compression(kgo.NoCompression()))
	lowerMaxMessageBytes(t, k, topic, "1500")
	msgs := messages(topic, 2, sameKey("k"))
	p0, p1 := int32(0), int32(1)
	msgs[0].Partition, msgs[0].Value = &p0, []byte("small")
	msgs[1].Partition, msgs[1].Value = &p1, []byte(strings.Repeat("x", 3000))
	fence(t, p, msgs[0].Bucket)
	acked, err := p.Publish(testCtx(t), msgs)
	if acked != 0 || !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("Publish = %d, %v; want 0 and MESSAGE_TOO_LARGE", acked, err)
	}
	read := func(committed bool) []string { return readPartition(t, k, topic, 0, committed) }
	if got := read(false); !slices.Contains(got, "small") {
		t.Fatalf("read_uncommitted read %v: the small record was never appended, the abort was not tested", got)
	}
	if got := read(true); len(got) != 0 {
		t.Fatalf("read_committed read %v from an aborted transaction", got)
	}
}

// TestRealTxnPublishAlone: TxnPublisher is an outbox.Isolator whose
// PublishAlone is a transaction of its own under the bucket's transactional
// id: the record a read_committed consumer sees is in a transactional
// batch; a record the broker rejects is rejected alone (its error is its
// own, RecordPermanent) and nothing of it is visible; and once a new holder
// initialised the bucket's transactional id, the stale holder's
// PublishAlone is fenced (*FencedError) and its record never visible.
// (Publishing alone through Publisher.PublishAlone's non-transactional
// client instead fails the first and the last check.)
func TestRealTxnPublishAlone(t *testing.T) {
	k := realTxnCluster(t)
	topic := newTopic(t, k, 1, map[string]string{"max.message.bytes": "4000"})
	prefix := testenv.Name(t, "ob")
	ctx := testCtx(t)
	opts := []kafka.Option{kafka.Topics(topic), kafka.OutboxConfig(outbox.Config{MaxMessageBytes: 4000}), kafka.Compression(kgo.NoCompression())}
	stale := newTxnPublisher(t, k, prefix, opts...)
	var iso outbox.Isolator = stale // the relay finds it by this assertion
	// The new holder, built (its topic checked) before the limit is lowered;
	// its producer is initialised by its fence.
	newer := newTxnPublisher(t, k, prefix, opts...)

	alone := messages(topic, 3, sameKey("k"))
	alone[0].Value = []byte("alone-1")
	fence(t, stale, alone[0].Bucket)
	if err := iso.PublishAlone(ctx, alone[0]); err != nil {
		t.Fatalf("PublishAlone: %v", err)
	}

	// A record the broker rejects: the operator lowered the topic's limit
	// below it after the publisher checked the topic.
	lowerMaxMessageBytes(t, k, topic, "1500")
	alone[1].Value = []byte("too-large-" + strings.Repeat("x", 3000))
	err := iso.PublishAlone(ctx, alone[1])
	if !errors.Is(err, kerr.MessageTooLarge) || outbox.Classify(err) != outbox.RecordPermanent {
		t.Fatalf("PublishAlone of a record above the topic's limit: %v (%v), want MESSAGE_TOO_LARGE, RecordPermanent", err, outbox.Classify(err))
	}

	// The stale holder, still holding the bucket, fences again after the
	// failed transaction; then the new holder takes the bucket and
	// initialises its transactional id.
	fence(t, stale, alone[1].Bucket)
	fresh := messages(topic, 1, sameKey("k"))
	fresh[0].Value = []byte("new-holder")
	fence(t, newer, fresh[0].Bucket)
	if acked, err := newer.Publish(ctx, fresh); acked != 1 || err != nil {
		t.Fatalf("new holder's Publish = %d, %v", acked, err)
	}
	alone[2].Value = []byte("stale-alone")
	err = iso.PublishAlone(ctx, alone[2])
	var fe *kafka.FencedError
	if !errors.As(err, &fe) || fe.TransactionalID != kafka.TransactionalID(prefix, alone[2].Bucket) {
		t.Fatalf("stale holder's PublishAlone: %v, want a *kafka.FencedError for %q", err, kafka.TransactionalID(prefix, alone[2].Bucket))
	}

	want := []string{"alone-1", "new-holder"}
	if got := readValues(t, k, topic, true); !slices.Equal(got, want) {
		t.Fatalf("read_committed read %v, want %v", got, want)
	}
	// alone-1 went through the fence: its batch is transactional.
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for found := false; !found; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("alone-1 not read back: %v", ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) == "alone-1" {
				found = true
				if !r.Attrs.IsTransactional() {
					t.Errorf("alone-1 was published outside a transaction")
				}
			}
		})
	}
}

// lowerMaxMessageBytes sets topic's max.message.bytes to lim, as an operator
// would after the publisher checked the topic, and waits until the brokers
// report it.
func lowerMaxMessageBytes(t *testing.T, k *testenv.KafkaCluster, topic, lim string) {
	t.Helper()
	adm := newAdmin(t, k)
	if res, err := adm.AlterTopicConfigs(testCtx(t), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &lim}}, topic); err != nil || res[0].Err != nil {
		t.Fatalf("lower max.message.bytes: %v %v", err, res)
	}
	waitFor(t, func() bool {
		rc, err := adm.DescribeTopicConfigs(testCtx(t), topic)
		if err != nil || len(rc) != 1 {
			return false
		}
		for _, c := range rc[0].Configs {
			if c.Key == "max.message.bytes" && c.Value != nil && *c.Value == lim {
				return true
			}
		}
		return false
	})
}

// TestTxnUnconfirmedCommitIsAborted: a commit whose outcome the coordinator
// leaves unknown (UNKNOWN_SERVER_ERROR, which kgo treats as unconfirmed) or
// refuses as abortable (TRANSACTION_ABORTABLE) is reported as not known
// committed (ErrCommitUnknown, nothing acknowledged), and Publish aborts the
// transaction before it returns: a read_committed consumer of the partition
// reads on past a record produced after it and never sees the transaction's
// records, while a read_uncommitted one shows they were appended. The
// bucket's next Publish refuses to publish with a producer of its own
// (ErrFenceRequired); after a fence it commits. (Without the abort, or with kgo's TryAbort
// alone, which only marks the producer id for reloading, the transaction
// stays open at the broker until its timeout, LeaseDuration, here ten
// minutes: the read_committed read stops at it and fails when the test's
// context ends.)
func TestTxnUnconfirmedCommitIsAborted(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.UnknownServerError, kerr.TransactionAbortable} {
		t.Run(code.Message, func(t *testing.T) {
			k := kfakeenv.Kafka(t)
			kfakeenv.RequireKfake(t, k)
			topic := newTopic(t, k.KafkaCluster, 1, nil)
			p := newTxnPublisher(t, k.KafkaCluster, testenv.Name(t, "ob"), kafka.Topics(topic), kafka.LeaseDuration(10*time.Minute))

			var commits atomic.Int32
			var refuse atomic.Bool
			refuse.Store(true)
			k.Cluster.ControlKey(int16(kmsg.EndTxn), func(kr kmsg.Request) (kmsg.Response, error, bool) {
				k.Cluster.KeepControl()
				if !kr.(*kmsg.EndTxnRequest).Commit || !refuse.Load() {
					return nil, nil, false
				}
				commits.Add(1)
				resp := kr.ResponseKind().(*kmsg.EndTxnResponse)
				resp.ErrorCode = code.Code
				return resp, nil, true
			})
			msgs := messages(topic, 3, sameKey("k"))
			for i := range msgs {
				msgs[i].Value = fmt.Appendf(nil, "unconfirmed-%d", i)
			}
			if err := p.FenceHolders(testCtx(t), msgs[0].Bucket); err != nil {
				t.Fatal(err)
			}
			acked, err := p.Publish(testCtx(t), msgs)
			refuse.Store(false)
			if acked != 0 || !errors.Is(err, kafka.ErrCommitUnknown) || !errors.Is(err, code) {
				t.Fatalf("Publish = %d, %v; want 0 and ErrCommitUnknown with %v", acked, err, code)
			}
			if commits.Load() == 0 {
				t.Fatal("no commit request reached the cluster")
			}
			if got := readValues(t, k.KafkaCluster, topic, false); !slices.Contains(got, "unconfirmed-0") {
				t.Fatalf("read_uncommitted read %v: the transaction's records were never appended, nothing was tested", got)
			}
			if got := readValues(t, k.KafkaCluster, topic, true); len(got) != 0 {
				t.Fatalf("read_committed read %v from a transaction whose commit was not confirmed", got)
			}

			// The failed transaction's producer is gone: the bucket
			// publishes again only after a fence (which the relay makes
			// under the lease: outbox.HolderFencer).
			next := messages(topic, 1, sameKey("k"))
			next[0].Value = []byte("next")
			if acked, err := p.Publish(testCtx(t), next); acked != 0 || !errors.Is(err, outbox.ErrFenceRequired) {
				t.Fatalf("Publish after the failed transaction = %d, %v; want 0 and ErrFenceRequired", acked, err)
			}
			if err := p.FenceHolders(testCtx(t), next[0].Bucket); err != nil {
				t.Fatal(err)
			}
			if acked, err := p.Publish(testCtx(t), next); acked != 1 || err != nil {
				t.Fatalf("the next Publish = %d, %v", acked, err)
			}
			if got := readValues(t, k.KafkaCluster, topic, true); !slices.Equal(got, []string{"next"}) {
				t.Fatalf("read_committed read %v, want [next]", got)
			}
		})
	}
}
