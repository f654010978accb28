package replay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/replay"
	"github.com/dynakafka/outbox/store/memory"
)

// watermark is a memory store that says it is in WatermarkMode (the memory
// store has no config item of its own).
type watermark struct{ *memory.Store }

func (w watermark) Config(ctx context.Context) (outbox.Config, error) {
	c, err := w.Store.Config(ctx)
	c.Mode, c.Retention = outbox.WatermarkMode, 24*time.Hour
	return c, err
}

// recorder is a publisher that records what it was given and acknowledges
// it, except from the failAt-th message on (0: never).
type recorder struct {
	mu     sync.Mutex
	got    []outbox.Message
	calls  int
	failAt int
}

func (r *recorder) Publish(ctx context.Context, msgs []outbox.Message) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	for i, m := range msgs {
		if r.failAt > 0 && len(r.got)+1 >= r.failAt {
			return i, &outbox.PublishError{Bucket: m.Bucket, Sequence: m.Sequence, Err: errors.New("broker unreachable")}
		}
		r.got = append(r.got, m)
	}
	return len(msgs), ctx.Err()
}

func (r *recorder) seqs() []int64 {
	var out []int64
	for _, m := range r.got {
		out = append(out, m.Sequence)
	}
	return out
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// bucket1 is bucket 1 of a 4-bucket outbox whose relay published up to
// head 10: messages at 1, 2, 4 and 6..10, a fence at 3, nothing at 5 (its
// message expired or was parked), an undecodable item at 12 above head, and
// message 11 pending. It returns the store and the messages by sequence.
func bucket1(t *testing.T) (*memory.Store, map[int64]outbox.Message) {
	t.Helper()
	s := memory.New(4)
	msgs := map[int64]outbox.Message{}
	for _, seq := range []int64{1, 2, 4, 6, 7, 8, 9, 10, 11} {
		m := outbox.Message{ID: outbox.NewID(), Bucket: 1, Sequence: seq, Topic: "orders", Key: []byte("order-7"),
			Value: fmt.Appendf(nil, `{"n":%d}`, seq), CreatedAt: t0}
		msgs[seq] = m
		if err := s.Put(m); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := s.Fence(ctx, 1, 3, t0); err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, 1, "relay", t0, time.Minute)
	if err == nil {
		_, err = s.Release(ctx, l, 10, 10)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s, msgs
}

func TestRange(t *testing.T) {
	cases := []struct {
		name     string
		from, to int64
		opts     []replay.Option
		failAt   int
		bad      int64 // an undecodable item at this sequence (0: none)
		want     []int64
		stats    replay.Stats // Published, Fences, Missing, First, Last, Next
		err      string       // a word the error holds ("" for none)
	}{
		{name: "everything retained", from: 1, to: 10, want: []int64{1, 2, 4, 6, 7, 8, 9, 10},
			stats: replay.Stats{Published: 8, Fences: 1, Missing: 1, First: 1, Last: 10, Next: 11}},
		{name: "in small batches", from: 1, to: 10, opts: []replay.Option{replay.BatchSize(2)}, want: []int64{1, 2, 4, 6, 7, 8, 9, 10},
			stats: replay.Stats{Published: 8, Fences: 1, Missing: 1, First: 1, Last: 10, Next: 11}},
		{name: "a middle range across the fence and the hole", from: 3, to: 7, want: []int64{4, 6, 7},
			stats: replay.Stats{Published: 3, Fences: 1, Missing: 1, First: 4, Last: 7, Next: 8}},
		{name: "one message", from: 9, to: 9, want: []int64{9}, stats: replay.Stats{Published: 1, First: 9, Last: 9, Next: 10}},
		{name: "nothing left in the range", from: 5, to: 5, stats: replay.Stats{Missing: 1, Next: 6}},
		{name: "the broker fails at the fourth message", from: 1, to: 10, failAt: 4, want: []int64{1, 2, 4},
			stats: replay.Stats{Published: 3, Fences: 1, First: 1, Last: 4, Next: 5}, err: "--from 5"},
		{name: "an item that cannot be decoded", from: 1, to: 10, bad: 7, want: []int64{1, 2, 4, 6},
			stats: replay.Stats{Published: 4, Fences: 1, Missing: 1, First: 1, Last: 6, Next: 7}, err: "sequence 7 cannot be read"},
		{name: "above the head", from: 5, to: 11, err: "above the bucket's head 10"},
		{name: "from zero", from: 0, to: 3, err: "start at 1"},
		{name: "backwards", from: 4, to: 3, err: "ends before it starts"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, msgs := bucket1(t)
			if c.bad != 0 {
				s.PutUndecodable(1, c.bad, errors.New("bad attribute"))
			}
			pub := &recorder{failAt: c.failAt}
			st, err := replay.Range(context.Background(), watermark{s}, pub, 1, c.from, c.to, c.opts...)
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("Range: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("Range = %v, want an error saying %q", err, c.err)
			}
			if got := pub.seqs(); !slices.Equal(got, c.want) {
				t.Errorf("published %v, want %v", got, c.want)
			}
			for _, m := range pub.got {
				if want := msgs[m.Sequence]; m.ID != want.ID || string(m.Value) != string(want.Value) || m.Bucket != 1 {
					t.Errorf("sequence %d published as %+v, want the stored message %s", m.Sequence, m, want.ID)
				}
			}
			if c.stats.Next != 0 {
				got := st
				got.Bucket, got.From, got.To, got.Head = 0, 0, 0, 0
				if got != c.stats {
					t.Errorf("stats %+v, want %+v", got, c.stats)
				}
				if st.Published+st.Fences+st.Missing != int(st.Next-c.from) {
					t.Errorf("stats %+v do not account for every number before Next", st)
				}
			}
		})
	}
}

// TestRangeRefuses: before anything is read or published.
func TestRangeRefuses(t *testing.T) {
	s, _ := bucket1(t)
	pub := &recorder{}
	var me *outbox.MisconfigurationError
	if _, err := replay.Range(context.Background(), s, pub, 1, 1, 10); !errors.As(err, &me) || me.Setting != "Mode" || me.Stored != "delete" {
		t.Errorf("a delete-mode outbox: %v, want a *MisconfigurationError naming the mode", err)
	}
	var re *replay.RangeError
	if _, err := replay.Range(context.Background(), watermark{s}, pub, 4, 1, 1); !errors.As(err, &re) || !strings.Contains(err.Error(), "buckets 0..3") {
		t.Errorf("bucket 4 of 4: %v, want a *RangeError naming the buckets", err)
	}
	var oe *outbox.OptionError
	if _, err := replay.Range(context.Background(), watermark{s}, pub, 1, 1, 1, replay.BatchSize(0)); !errors.As(err, &oe) {
		t.Errorf("BatchSize(0): %v, want an *OptionError", err)
	}
	if pub.calls != 0 {
		t.Errorf("%d publishes", pub.calls)
	}
}

// TestReplayAfterAWatermarkRelay: the relay in WatermarkMode publishes a
// bucket without writing per message, so everything it published can be
// replayed, in order, with the same ids.
func TestReplayAfterAWatermarkRelay(t *testing.T) {
	ctx := context.Background()
	s := memory.New(2)
	var want []string
	for seq := int64(1); seq <= 25; seq++ {
		m := outbox.Message{ID: outbox.NewID(), Bucket: 0, Sequence: seq, Topic: "orders", Key: []byte("k"), Value: []byte("v"), CreatedAt: t0}
		want = append(want, m.ID)
		if err := s.Put(m); err != nil {
			t.Fatal(err)
		}
	}
	relayed := &recorder{}
	r, err := relay.New(ctx, watermark{s}, relayed, relay.BatchSize(10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.DrainBucket(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if l := s.Lease(0); l.Head != 25 || s.Count(0) != 25 {
		t.Fatalf("after the drain: head %d, %d messages stored; want 25 and all 25 kept", l.Head, s.Count(0))
	}
	again := &recorder{}
	st, err := replay.Range(ctx, watermark{s}, again, 0, 1, 25)
	if err != nil || st.Published != 25 {
		t.Fatalf("Range = %+v, %v", st, err)
	}
	for i, m := range again.got {
		if m.ID != want[i] || m.ID != relayed.got[i].ID {
			t.Fatalf("replayed message %d has id %s, want %s as first published", i, m.ID, want[i])
		}
	}
}
