package relay

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dynakafka/outbox"
)

// The classify step of a drain, on its own: what a read found, given the
// decided head.
func TestClassify(t *testing.T) {
	msg := func(seq int64) outbox.Entry {
		return outbox.Entry{Sequence: seq, Message: outbox.Message{ID: fmt.Sprint("m", seq), Sequence: seq, Topic: "t", Value: []byte("v")}}
	}
	fence := func(seq int64) outbox.Entry { return outbox.Entry{Sequence: seq, Fence: true} }
	tomb := func(seq int64) outbox.Entry { return outbox.Entry{Sequence: seq, Fence: true, Published: true} }
	bad := func(seq int64) outbox.Entry { return outbox.Entry{Sequence: seq, Err: errors.New("undecodable")} }
	big := func(seq int64) outbox.Entry {
		e := msg(seq)
		e.Message.Value = []byte(strings.Repeat("x", 2000))
		return e
	}
	seqs := func(es []outbox.Entry) string {
		var out []string
		for _, e := range es {
			out = append(out, fmt.Sprint(e.Sequence))
		}
		return strings.Join(out, ",")
	}
	for _, tt := range []struct {
		name      string
		head      int64
		entries   []outbox.Entry
		batch     int
		isolate   bool
		leftovers string
		run       string
		msgs      int
		gap       [2]int64
		bad       int64
	}{
		{name: "run from head+1", head: 2, entries: []outbox.Entry{msg(3), msg(4), msg(5)}, batch: 10, run: "3,4,5", msgs: 3},
		{name: "leftovers at or below head, tombstones and fences skipped", head: 4,
			entries: []outbox.Entry{msg(1), tomb(2), fence(3), msg(4), msg(5)}, batch: 10, leftovers: "1,4", run: "5", msgs: 1},
		{name: "tombstones and fences above head join the run", head: 0,
			entries: []outbox.Entry{tomb(1), fence(2), msg(3), tomb(4)}, batch: 10, run: "1,2,3,4", msgs: 1},
		{name: "stops at BatchSize messages", head: 0, entries: []outbox.Entry{msg(1), fence(2), msg(3), msg(4)}, batch: 2, run: "1,2,3", msgs: 2},
		{name: "isolating: one message", head: 0, entries: []outbox.Entry{msg(1), msg(2)}, batch: 10, isolate: true, run: "1", msgs: 1},
		{name: "gap at head+1", head: 3, entries: []outbox.Entry{msg(5), msg(6)}, batch: 10, gap: [2]int64{4, 5}},
		{name: "a gap after a run ends it, not a gap", head: 0, entries: []outbox.Entry{msg(1), msg(3)}, batch: 10, run: "1", msgs: 1},
		{name: "undecodable at head+1", head: 0, entries: []outbox.Entry{bad(1), msg(2)}, batch: 10, bad: 1},
		{name: "too large at head+1", head: 0, entries: []outbox.Entry{big(1)}, batch: 10, bad: 1},
		{name: "a bad entry after a run ends the run", head: 0, entries: []outbox.Entry{msg(1), bad(2)}, batch: 10, run: "1", msgs: 1, bad: 2},
		{name: "an undecodable leftover is left alone", head: 2, entries: []outbox.Entry{bad(1), msg(3)}, batch: 10, run: "3", msgs: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bt := &batch{entries: tt.entries}
			classify(bt, tt.head, tt.batch, 1000, outbox.HeaderNames{}, tt.isolate, 0)
			var left []string
			for _, s := range bt.leftovers {
				left = append(left, fmt.Sprint(s))
			}
			if got := strings.Join(left, ","); got != tt.leftovers {
				t.Errorf("leftovers %q, want %q", got, tt.leftovers)
			}
			if got := seqs(bt.run); got != tt.run {
				t.Errorf("run %q, want %q", got, tt.run)
			}
			if len(bt.msgs) != tt.msgs {
				t.Errorf("%d messages to publish, want %d", len(bt.msgs), tt.msgs)
			}
			if got := [2]int64{bt.gapAt, bt.gapNext}; got != tt.gap {
				t.Errorf("gap %v, want %v", got, tt.gap)
			}
			var gotBad int64
			if bt.bad != nil {
				gotBad = bt.bad.Sequence
			}
			if gotBad != tt.bad {
				t.Errorf("bad entry at %d, want %d", gotBad, tt.bad)
			}
		})
	}
}

// A read is complete when it reached the end of the bucket and everything
// it returned is decided: only then may a release absorb earlier wake-ups.
func TestBatchComplete(t *testing.T) {
	entries := []outbox.Entry{{Sequence: 4}, {Sequence: 5}}
	for _, tt := range []struct {
		end  bool
		es   []outbox.Entry
		head int64
		want bool
	}{
		{true, nil, 0, true},
		{true, entries, 5, true},
		{true, entries, 4, false},  // 5 not decided yet
		{false, entries, 5, false}, // more beyond the read
	} {
		bt := &batch{entries: tt.es, end: tt.end}
		if got := bt.complete(tt.head); got != tt.want {
			t.Errorf("end=%v entries=%d head=%d: complete %v, want %v", tt.end, len(tt.es), tt.head, got, tt.want)
		}
	}
}

func TestBackoffIsBoundedFullJitter(t *testing.T) {
	top := func(n int64) int64 { return n - 1 }
	for attempt, want := range map[int]int64{1: 100, 2: 200, 3: 400, 10: 5000} {
		got := backoff(100e6, 5e9, attempt, top)
		if int64(got) != want*1e6 {
			t.Errorf("attempt %d: at most %v, want %dms", attempt, got, want)
		}
	}
	if got := backoff(100e6, 5e9, 3, func(int64) int64 { return 0 }); got != 1 {
		t.Errorf("the least backoff is %v, want 1ns", got)
	}
}
