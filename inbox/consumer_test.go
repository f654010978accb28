package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

const partitions = 4

// produced is what produce wrote: per key, the sequences in order.
type produced map[string][]int64

// produce writes n records over keys, as a relay with BucketCount =
// partitions would: each key's bucket is its partition, sequences count
// per bucket.
func produce(t *testing.T, k *testenv.KafkaCluster, topic string, n, keys int) produced {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := produced{}
	seq := map[int]int64{}
	var recs []*kgo.Record
	for i := range n {
		key := fmt.Sprintf("key-%02d", i%keys)
		b := outbox.BucketForKey([]byte(key), partitions)
		seq[b]++
		out[key] = append(out[key], seq[b])
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte("v"), Headers: []kgo.RecordHeader{
			{Key: outbox.DefaultMessageIDHeader, Value: []byte(outbox.NewID())},
			{Key: outbox.DefaultBucketHeader, Value: []byte(strconv.Itoa(b))},
			{Key: outbox.DefaultSequenceHeader, Value: []byte(strconv.FormatInt(seq[b], 10))},
		}})
	}
	if err := cl.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkReadModel: every record applied exactly once, in sequence order.
func (e *env) checkReadModel(t *testing.T, want produced) {
	t.Helper()
	for key, seqs := range want {
		n, got := e.applied(t, key)
		if n != int64(len(seqs)) || !slices.Equal(got, seqs) {
			t.Errorf("key %s applied %d times: %v; want once each of %v", key, n, got, seqs)
		}
	}
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (c *tally) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status[Applied] + c.status[Duplicate] + c.status[Stale] + c.status[Failed]
}

func (c *tally) count(s Status) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status[s]
}

// runConsumer starts a Consumer in group on topic; stop ends it and
// returns Run's error.
func runConsumer(t *testing.T, k *testenv.KafkaCluster, ib *Inbox, fn func(*Tx) error, group, topic string) (stop func() error) {
	t.Helper()
	c, err := NewConsumer(ib, fn, ClientOptions(kgo.SeedBrokers(k.Brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.FetchMaxWait(50*time.Millisecond)), MaxPollRecords(50))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return func() error {
		cancel()
		err := <-done
		return errors.Join(err, c.Close())
	}
}

// pollAll polls cl until it has n records.
func pollAll(t *testing.T, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	waitFor(t, fmt.Sprintf("%d records", n), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		recs = append(recs, cl.PollFetches(ctx).Records()...)
		return len(recs) >= n
	})
	return recs
}

// A consumer that crashes after its transactions committed and before it
// committed the offsets: the group delivers every record again, and the
// next consumer skips them all.
func TestCrashBetweenTransactionAndOffsetCommit(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"id-only", nil}, {"in order", []Option{InOrder()}}} {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t)
			k := testenv.Kafka(t)
			topic, group := testenv.Name(t, "orders"), testenv.Name(t, "group")
			testenv.CreateTopic(t, k, topic, partitions)
			want := produce(t, k, topic, 120, 12)

			// The first consumer processes everything, commits nothing, and
			// "crashes" (leaves without committing).
			first := newTally()
			ib := e.inbox(t, nil, append(mode.opts, WithMetrics(first))...)
			cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
				kgo.DisableAutoCommit(), kgo.FetchMaxWait(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range pollAll(t, cl, 120) {
				if _, err := ib.Process(ctxT(t), r, e.apply); err != nil {
					t.Fatal(err)
				}
			}
			cl.Close()
			if got := first.String(); got != "applied=120 duplicate=0 stale=0 failed=0 gaps=0" {
				t.Fatalf("first consumer: %s", got)
			}

			// The next consumer of the group gets them all again.
			second := newTally()
			stop := runConsumer(t, k, e.inbox(t, nil, append(mode.opts, WithMetrics(second))...), e.apply, group, topic)
			waitFor(t, "the redeliveries", func() bool { return second.total() >= 120 })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if got := second.String(); got != "applied=0 duplicate=120 stale=0 failed=0 gaps=0" {
				t.Fatalf("second consumer: %s", got)
			}
			e.checkReadModel(t, want)
		})
	}
}

// A rebalance in the middle of a batch: member A polled every record and is
// still working through them when B joins the group and takes partitions
// over from offsets A never committed. A goes on with the records of the
// partitions it lost (nothing stops a member from doing so), so each of
// them is processed by both, concurrently; the inbox applies each record
// once, in order.
func TestRebalanceInTheMiddleOfABatch(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"id-only", nil}, {"in order", []Option{InOrder()}}} {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t)
			k := testenv.Kafka(t)
			topic, group := testenv.Name(t, "orders"), testenv.Name(t, "group")
			testenv.CreateTopic(t, k, topic, partitions)
			const n = 200
			want := produce(t, k, topic, n, 20)

			ta, tb := newTally(), newTally()
			a := e.inbox(t, nil, append(mode.opts, WithMetrics(ta))...)
			cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
				kgo.DisableAutoCommit(), kgo.FetchMaxWait(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			batch := pollAll(t, cl, n)
			// A's batch, round-robin over the partitions, each in order.
			byPartition := map[int32][]*kgo.Record{}
			for _, r := range batch {
				byPartition[r.Partition] = append(byPartition[r.Partition], r)
			}
			var order []*kgo.Record
			for i := 0; len(order) < n; i++ {
				for p := range int32(partitions) {
					if i < len(byPartition[p]) {
						order = append(order, byPartition[p][i])
					}
				}
			}
			processA := func(recs []*kgo.Record) {
				for _, r := range recs {
					if _, err := a.Process(ctxT(t), r, e.apply); err != nil {
						t.Fatal(err)
					}
				}
			}
			processA(order[:n/2])

			// B joins: the group rebalances while A is mid-batch, and B
			// starts its partitions at offset 0.
			stopB := runConsumer(t, k, e.inbox(t, nil, append(mode.opts, WithMetrics(tb))...), e.apply, group, topic)
			waitFor(t, "B to apply a record A had not reached", func() bool { return tb.count(Applied) > 0 })
			processA(order[n/2:])
			cl.Close() // A leaves: B gets every partition, from offset 0 for A's
			waitFor(t, "B to process every record", func() bool { return tb.total() >= n })
			if err := stopB(); err != nil {
				t.Fatal(err)
			}
			t.Logf("A: %s; B: %s", ta, tb)
			if a, b := ta.count(Applied), tb.count(Applied); a+b != n || a == 0 || b == 0 {
				t.Errorf("applied by A %d + by B %d, want %d, both non-zero", a, b, n)
			}
			if d := ta.count(Duplicate) + tb.count(Duplicate); d != tb.total()+ta.total()-n {
				t.Errorf("%d duplicates of %d deliveries of %d records", d, ta.total()+tb.total(), n)
			}
			e.checkReadModel(t, want)
		})
	}
}

// NewConsumer refuses settings that would commit records before their
// transaction, or no group to commit to.
func TestNewConsumerRefuses(t *testing.T) {
	e := newEnv(t)
	ib := e.inbox(t, nil)
	seeds := kgo.SeedBrokers("127.0.0.1:1")
	cases := []struct {
		name   string
		ib     *Inbox
		opts   []ConsumerOption
		option string
	}{
		{"no inbox", nil, []ConsumerOption{ClientOptions(seeds, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"))}, "ib"},
		{"no group", ib, []ConsumerOption{ClientOptions(seeds, kgo.ConsumeTopics("t"))}, "ClientOptions"},
		{"auto commit off", ib, []ConsumerOption{ClientOptions(seeds, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"), kgo.DisableAutoCommit())}, "ClientOptions"},
		{"greedy", ib, []ConsumerOption{ClientOptions(seeds, kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"), kgo.GreedyAutoCommit())}, "ClientOptions"},
		{"poll size", ib, []ConsumerOption{ClientOptions(seeds, kgo.ConsumerGroup("g")), MaxPollRecords(0)}, "MaxPollRecords"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewConsumer(c.ib, e.apply, c.opts...)
			var oe *outbox.OptionError
			if !errors.As(err, &oe) || oe.Option != c.option {
				t.Fatalf("NewConsumer = %v, want an *OptionError for %s", err, c.option)
			}
		})
	}
}

// A record the inbox cannot process stops the Consumer (policy Stop, the
// default) after its retries, with the records before it committed; a new
// Consumer resumes at that record.
func TestConsumerStopsAtAFailedRecord(t *testing.T) {
	e := newEnv(t)
	k := testenv.Kafka(t)
	topic, group := testenv.Name(t, "orders"), testenv.Name(t, "group")
	testenv.CreateTopic(t, k, topic, 1)
	want := produce(t, k, topic, 10, 1)
	poison := errors.New("poison")
	var failing = true
	var attempts atomic.Int64
	tl := newTally()
	fn := func(tx *Tx) error {
		if failing && tx.Message().Sequence == 6 {
			attempts.Add(1)
			return poison
		}
		return e.apply(tx)
	}
	c, err := NewConsumer(e.inbox(t, nil, WithMetrics(tl)), fn, ClientOptions(kgo.SeedBrokers(k.Brokers...), kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic), kgo.FetchMaxWait(50*time.Millisecond)), RecordRetries(1, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// Run returns by itself: the policy stops it, naming the record and
	// what to do.
	err = c.Run(ctxT(t))
	if !errors.Is(err, poison) {
		t.Fatalf("Run = %v, want the callback's error", err)
	}
	var se *StoppedError
	if !errors.As(err, &se) || se.Topic != topic || se.Partition != 0 || se.Offset != 5 || se.Attempts != 2 {
		t.Fatalf("Run = %#v, want a *StoppedError at %s/0@5 after 2 attempts", err, topic)
	}
	for _, want := range []string{topic + "/0@5", "failed 2 times", "build a new Consumer", "resumes at this record", "OnPoison"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run's error does not say %q: %v", want, err)
		}
	}
	if err := c.Run(ctxT(t)); !errors.Is(err, poison) {
		t.Fatalf("Run again = %v, want the Consumer to stay failed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := attempts.Load(); n != 2 {
		t.Fatalf("the failing record was processed %d times, want 2 (RecordRetries(1))", n)
	}
	if n, _ := e.applied(t, "key-00"); n != 5 {
		t.Fatalf("%d applied before the failure, want 5", n)
	}
	failing = false
	tl2 := newTally()
	stop := runConsumer(t, k, e.inbox(t, nil, WithMetrics(tl2)), fn, group, topic)
	waitFor(t, "the rest", func() bool { return tl2.total() >= 5 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := tl2.String(); got != "applied=5 duplicate=0 stale=0 failed=0 gaps=0" {
		t.Fatalf("after the restart: %s (want it to resume at the failed record)", got)
	}
	e.checkReadModel(t, want)
}

// Run called again after its context ended resumes at the first record it
// had polled and not applied: before the fix the second Run fetched past
// the rest of the first poll and committed offsets past records never
// applied (44 of 60 applied, and a fresh consumer of the group got nothing).
func TestRunAgainAfterItsContextEnded(t *testing.T) {
	e := newEnv(t)
	k := testenv.Kafka(t)
	topic, group := testenv.Name(t, "orders"), testenv.Name(t, "group")
	testenv.CreateTopic(t, k, topic, 1)
	const n = 60
	want := produce(t, k, topic, n, 1)

	var (
		mu      sync.Mutex
		cancel1 context.CancelFunc
	)
	fn := func(tx *Tx) error {
		mu.Lock()
		if tx.Message().Offset == 10 && cancel1 != nil {
			// The first Run's context ends in the middle of its first
			// poll: record 10 does not commit, 11.. are polled, not
			// processed.
			cancel1()
			cancel1 = nil
		}
		mu.Unlock()
		return e.apply(tx)
	}
	c, err := NewConsumer(e.inbox(t, nil), fn, ClientOptions(kgo.SeedBrokers(k.Brokers...), kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic), kgo.FetchMaxWait(50*time.Millisecond)), MaxPollRecords(50))
	if err != nil {
		t.Fatal(err)
	}
	ctx1, cancel := context.WithCancel(ctxT(t))
	mu.Lock()
	cancel1 = cancel
	mu.Unlock()
	if err := c.Run(ctx1); err != nil {
		t.Fatalf("first Run = %v, want nil after its context ended", err)
	}
	if n, _ := e.applied(t, "key-00"); n >= 11 {
		t.Fatalf("%d applied by the first Run, want at most 10 (the context ended at offset 10)", n)
	}

	ctx2, cancel2 := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx2) }()
	// Until the last record is applied, not merely handed to fn: a
	// context ended while its transaction is under way rightly applies
	// nothing (make test, a busy machine: "key-00 applied 59 times").
	waitFor(t, "the last record applied", func() bool { got, _ := e.applied(t, "key-00"); return got == n })
	cancel2()
	if err := <-done; err != nil {
		t.Fatalf("second Run = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	e.checkReadModel(t, want)
	if err := c.Run(ctxT(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close = %v, want ErrClosed", err)
	}
}

// A second Run while one is running is refused.
func TestRunTwiceAtOnce(t *testing.T) {
	e := newEnv(t)
	c, err := NewConsumer(e.inbox(t, nil), e.apply, ClientOptions(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitFor(t, "the first Run", c.running.Load)
	if err := c.Run(ctx); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Run = %v, want ErrRunning", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The Consumer reads read_committed by default: a record of an aborted
// Kafka transaction (a fenced or failed transactional publish) is never
// processed; the committed record after it is.
func TestConsumerReadsCommittedOnly(t *testing.T) {
	e := newEnv(t)
	k := testenv.Kafka(t)
	topic, group := testenv.Name(t, "orders"), testenv.Name(t, "group")
	testenv.CreateTopic(t, k, topic, 1)
	txn, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.TransactionalID(testenv.Name(t, "txn")), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	aborted := rec(topic, 0, 0, "key-00", outbox.NewID(), 0, 1)
	committed := rec(topic, 0, 0, "key-00", outbox.NewID(), 0, 2)
	for _, step := range []struct {
		r   *kgo.Record
		end kgo.TransactionEndTry
	}{{aborted, kgo.TryAbort}, {committed, kgo.TryCommit}} {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := txn.ProduceSync(ctxT(t), step.r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctxT(t), step.end); err != nil {
			t.Fatal(err)
		}
	}
	tl := newTally()
	stop := runConsumer(t, k, e.inbox(t, nil, WithMetrics(tl)), e.apply, group, topic)
	waitFor(t, "the committed record", func() bool { return tl.total() >= 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n, seqs := e.applied(t, "key-00"); n != 1 || !slices.Equal(seqs, []int64{2}) {
		t.Fatalf("applied %d: %v; want only the committed record (sequence 2)", n, seqs)
	}
}
