// Package storetest is the conformance suite every outbox.Store must pass.
// A store package runs it from its tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{New: ..., Put: ...})
//	}
//
// The suite checks the contract the relay engine relies on: lease exclusion,
// takeover on expiry, release that keeps the owner, wake-ups that survive a
// failed holder, idempotent release, idle head advances, head monotonicity,
// ordered consistent reads, fences that win or lose against writers,
// tombstones for published messages that spare fences, and heartbeats. It
// uses a fixed fake time, so it does not sleep.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
)

// Harness builds stores for the suite.
type Harness struct {
	// New returns a store for a new, empty outbox with bucketCount buckets.
	New func(t *testing.T, bucketCount int) outbox.Store
	// Put stores msgs at their Bucket and Sequence as one committed writer
	// transaction would. It returns an error wrapping
	// outbox.ErrAlreadyWritten when a position is taken (nothing stored).
	Put func(t *testing.T, s outbox.Store, msgs ...outbox.Message) error
	// Mode and Retention are what the outboxes New creates are configured
	// with (default outbox.DeleteMode, no retention). A store that offers
	// both modes runs the suite once per mode.
	Mode      outbox.Mode
	Retention time.Duration
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const lease = 30 * time.Second

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	t.Run("Config", func(t *testing.T) { testConfig(t, h) })
	t.Run("LeaseExclusion", func(t *testing.T) { testLeaseExclusion(t, h) })
	t.Run("LeaseTakeover", func(t *testing.T) { testLeaseTakeover(t, h) })
	t.Run("RenewAndUpdate", func(t *testing.T) { testRenewUpdate(t, h) })
	t.Run("WakeOnRelease", func(t *testing.T) { testWake(t, h) })
	t.Run("ReleaseKeepsOwner", func(t *testing.T) { testReleaseKeepsOwner(t, h) })
	t.Run("ReleaseIsIdempotent", func(t *testing.T) { testReleaseIdempotent(t, h) })
	t.Run("AbandonKeepsWakeUps", func(t *testing.T) { testAbandon(t, h) })
	t.Run("AdvanceIdle", func(t *testing.T) { testAdvance(t, h) })
	t.Run("PendingOrderAndLimit", func(t *testing.T) { testPending(t, h) })
	t.Run("MessageRoundTrip", func(t *testing.T) { testRoundTrip(t, h) })
	t.Run("FenceAgainstWriter", func(t *testing.T) { testFence(t, h) })
	t.Run("MarkPublishedSparesFences", func(t *testing.T) { testMarkPublished(t, h) })
	t.Run("Heartbeats", func(t *testing.T) { testHeartbeats(t, h) })
	t.Run("Peek", func(t *testing.T) { testPeek(t, h) })
	t.Run("PeekBeyondFences", func(t *testing.T) { testPeekBeyondFences(t, h) })
	t.Run("Park", func(t *testing.T) { testPark(t, h) })
	t.Run("StuckRecordKeepsTheHold", func(t *testing.T) { testStuck(t, h) })
	if h.Mode == outbox.WatermarkMode {
		t.Run("WatermarkRetainsPublished", func(t *testing.T) { testRetains(t, h) })
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func msg(bucket int, seq int64) outbox.Message {
	return outbox.Message{
		ID: outbox.NewID(), Bucket: bucket, Sequence: seq, Topic: "orders",
		Key: []byte(fmt.Sprintf("k%d", seq)), Value: []byte(fmt.Sprintf("v%d", seq)),
		CreatedAt: t0.Add(time.Duration(seq) * time.Millisecond),
	}
}

func put(t *testing.T, h Harness, s outbox.Store, msgs ...outbox.Message) {
	t.Helper()
	if err := h.Put(t, s, msgs...); err != nil {
		t.Fatalf("put: %v", err)
	}
}

func testConfig(t *testing.T, h Harness) {
	for _, n := range []int{1, 8, 64} {
		s := h.New(t, n)
		c, err := s.Config(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if c.BucketCount != n || c.FormatVersion != outbox.FormatVersion || c.Mode != h.Mode || c.Retention != h.Retention {
			t.Fatalf("Config = %+v, want BucketCount %d FormatVersion %d Mode %v Retention %v", c, n, outbox.FormatVersion, h.Mode, h.Retention)
		}
	}
}

func testLeaseExclusion(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	a, err := s.Acquire(ctx, 1, "a", t0, lease)
	if err != nil {
		t.Fatal(err)
	}
	if a.Owner != "a" || a.Bucket != 1 || !a.Expires.Equal(t0.Add(lease)) || a.Head != 0 {
		t.Fatalf("lease = %+v", a)
	}
	if _, err := s.Acquire(ctx, 1, "b", t0.Add(lease-time.Millisecond), lease); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf("second owner before expiry: err = %v, want ErrLeaseHeld", err)
	}
	// Other buckets are independent.
	if _, err := s.Acquire(ctx, 2, "b", t0, lease); err != nil {
		t.Fatalf("other bucket: %v", err)
	}
	// A held lease is not taken by its owner's name either: another process
	// may share the name (the relay function's containers do). The attempt
	// leaves a wake-up, and the hold's writes need its token.
	if _, err := s.Acquire(ctx, 1, "a", t0.Add(time.Second), lease); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf("the holder's name again before expiry: err = %v, want ErrLeaseHeld", err)
	}
	if a.Token == "" {
		t.Fatalf("lease = %+v: Acquire returned no token", a)
	}
	other := a
	other.Token = a.Token + "-other"
	if _, err := s.Renew(ctx, other, t0.Add(time.Second), lease); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("renew by another process with the holder's name: err = %v, want ErrLeaseLost", err)
	}
	if _, err := s.Update(ctx, other, outbox.LeaseUpdate{Head: 1, Cleaned: 1}, t0.Add(time.Second)); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("update by another process with the holder's name: err = %v, want ErrLeaseLost", err)
	}
	if _, err := s.Release(ctx, other, 0, 0); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("release by another process with the holder's name: err = %v, want ErrLeaseLost", err)
	}
	if err := s.Abandon(ctx, other, 0, 0); err != nil {
		t.Fatalf("abandon by another process with the holder's name: %v, want nil (not its hold)", err)
	}
	if l, _ := s.ReadLease(ctx, 1); !l.HeldAt(t0.Add(time.Second)) || l.Token != a.Token {
		t.Fatalf("after another process's writes the lease is %+v; want a's hold (token %s) unchanged", l, a.Token)
	}
	a2, err := s.ReadLease(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Released: free for anyone at once.
	if _, err := s.Release(ctx, a2, 0, 0); err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, 1, "b", t0.Add(2*time.Second), lease)
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	if b.Epoch <= a.Epoch {
		t.Fatalf("new owner's epoch %d not above %d", b.Epoch, a.Epoch)
	}
	// The old holder's lease is gone.
	if _, err := s.Renew(ctx, a2, t0.Add(3*time.Second), lease); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("renew by the previous owner: err = %v, want ErrLeaseLost", err)
	}
}

func testLeaseTakeover(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	a, err := s.Acquire(ctx, 0, "a", t0, lease)
	if err != nil {
		t.Fatal(err)
	}
	a, err = s.Update(ctx, a, outbox.LeaseUpdate{Head: 7, Cleaned: 5}, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// At expiry exactly, the lease is free.
	b, err := s.Acquire(ctx, 0, "b", t0.Add(lease), lease)
	if err != nil {
		t.Fatalf("takeover at expiry: %v", err)
	}
	if b.Head != 7 || b.Cleaned != 5 || !b.TakenOver {
		t.Fatalf("takeover lost the head or did not say it took over: %+v", b)
	}
	// The stalled holder can no longer act.
	if _, err := s.Update(ctx, a, outbox.LeaseUpdate{Head: 9, Cleaned: 7}, t0.Add(lease+time.Second)); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("update by the stalled holder: err = %v, want ErrLeaseLost", err)
	}
	if _, err := s.Renew(ctx, a, t0.Add(lease+time.Second), lease); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("renew by the stalled holder: err = %v, want ErrLeaseLost", err)
	}
	if _, err := s.Release(ctx, a, 7, 5); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("release by the stalled holder: err = %v, want ErrLeaseLost", err)
	}
	// An expired lease that nobody took over cannot be renewed either.
	c, err := s.Acquire(ctx, 3, "c", t0, lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Renew(ctx, c, t0.Add(lease), lease); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("renew after expiry: err = %v, want ErrLeaseLost", err)
	}
}

func testRenewUpdate(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	a, err := s.Acquire(ctx, 2, "a", t0, lease)
	if err != nil {
		t.Fatal(err)
	}
	a, err = s.Renew(ctx, a, t0.Add(10*time.Second), lease)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Expires.Equal(t0.Add(40 * time.Second)) {
		t.Fatalf("renewed expiry = %v", a.Expires)
	}
	gs := t0.Add(11 * time.Second)
	a, err = s.Update(ctx, a, outbox.LeaseUpdate{Head: 10, Cleaned: 4, Gap: 11, GapSince: gs}, t0.Add(12*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if a.Head != 10 || a.Cleaned != 4 || a.Gap != 11 || !a.GapSince.Equal(gs) {
		t.Fatalf("after update: %+v", a)
	}
	if _, err := s.Update(ctx, a, outbox.LeaseUpdate{Head: 9, Cleaned: 4}, t0.Add(13*time.Second)); err == nil {
		t.Fatal("head moved backwards without an error")
	}
	// The update persists for the next owner, gap included.
	if _, err := s.Release(ctx, a, 10, 10); err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, 2, "b", t0.Add(14*time.Second), lease)
	if err != nil {
		t.Fatal(err)
	}
	if b.Head != 10 || b.Cleaned != 10 || b.Gap != 11 || !b.GapSince.Equal(gs) {
		t.Fatalf("next owner sees %+v", b)
	}
}

func testWake(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	a, err := s.Acquire(ctx, 3, "a", t0, lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, 3, "b", t0.Add(time.Second), lease); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf("contender: %v", err)
	}
	woken, err := s.Release(ctx, a, 0, 0)
	if !errors.Is(err, outbox.ErrWoken) {
		t.Fatalf("release after a wake-up: err = %v, want ErrWoken", err)
	}
	if woken.Owner != "a" || woken.Wake == a.Wake {
		t.Fatalf("woken lease = %+v (was wake %d)", woken, a.Wake)
	}
	// Still held: the contender cannot take it.
	if _, err := s.Acquire(ctx, 3, "b", t0.Add(2*time.Second), lease); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf("contender after ErrWoken: %v", err)
	}
	woken2, err := s.Release(ctx, woken, 0, 0)
	if !errors.Is(err, outbox.ErrWoken) {
		t.Fatalf("second wake-up not seen: %v", err)
	}
	released, err := s.Release(ctx, woken2, 0, 0)
	if err != nil {
		t.Fatalf("release after draining again: %v", err)
	}
	if released.Wake != 0 {
		t.Fatalf("release did not reset the wake count: %+v", released)
	}
	b, err := s.Acquire(ctx, 3, "b", t0.Add(3*time.Second), lease)
	if err != nil {
		t.Fatalf("contender after release: %v", err)
	}
	if b.Wake != 0 || b.TakenOver {
		t.Fatalf("acquired after a release: %+v; want no wake-ups and no takeover", b)
	}
}

func testReleaseKeepsOwner(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	a, err := s.Acquire(ctx, 0, "a", t0, lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, a, outbox.LeaseUpdate{Head: 4, Cleaned: 4, Gap: 5, GapSince: t0}, t0); err != nil {
		t.Fatal(err)
	}
	a, _ = s.ReadLease(ctx, 0)
	if _, err := s.Release(ctx, a, 9, 8); err != nil {
		t.Fatal(err)
	}
	l, err := s.ReadLease(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Released() || l.Owner != "a" || l.HeldAt(t0) || l.Head != 9 || l.Cleaned != 8 || l.Gap != 0 || l.Epoch != a.Epoch {
		t.Fatalf("released lease = %+v; want owner a kept, no expiry, head 9, cleaned 8, the gap at 5 cleared, epoch %d", l, a.Epoch)
	}
	// Every acquisition is a new hold: a new epoch and token, and the
	// release it replaced (its owner's own name included).
	a2, err := s.Acquire(ctx, 0, "a", t0.Add(time.Second), lease)
	if err != nil || a2.Epoch != a.Epoch+1 || a2.TakenOver || a2.Head != 9 || a2.Token == a.Token ||
		a2.PrevReleasedBy != "a" || a2.PrevToken != a.Token {
		t.Fatalf("re-acquire by its owner = %+v, %v; want epoch %d, a new token, PrevReleasedBy a and PrevToken %s", a2, err, a.Epoch+1, a.Token)
	}
	if _, err := s.Release(ctx, a2, 9, 9); err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, 0, "b", t0.Add(2*time.Second), lease)
	if err != nil || b.Epoch != a2.Epoch+1 || b.TakenOver || b.PrevReleasedBy != "a" || b.PrevToken != a2.Token {
		t.Fatalf("acquire of a released lease = %+v, %v; want epoch %d, no takeover, released by a with token %s", b, err, a2.Epoch+1, a2.Token)
	}
	// Neither mark moves backwards.
	if _, err := s.Release(ctx, b, 3, 3); err == nil {
		t.Fatal("release moved head backwards without an error")
	}
}

func testReleaseIdempotent(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	a, err := s.Acquire(ctx, 1, "a", t0, lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, 1, "b", t0, lease); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatal(err)
	}
	woken, err := s.Release(ctx, a, 2, 2)
	if !errors.Is(err, outbox.ErrWoken) {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, woken, 2, 2); err != nil {
		t.Fatal(err)
	}
	// A retried request of a release that applied (a lost response) succeeds.
	if _, err := s.Release(ctx, woken, 2, 2); err != nil {
		t.Fatalf("retried release: %v, want nil", err)
	}
}

func testAbandon(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	a, err := s.Acquire(ctx, 2, "a", t0, lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, 2, "b", t0, lease); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatal(err)
	}
	if err := s.Abandon(ctx, a, 6, 6); err != nil {
		t.Fatal(err)
	}
	if err := s.Abandon(ctx, a, 6, 6); err != nil {
		t.Fatalf("abandoning twice: %v", err)
	}
	c, err := s.Acquire(ctx, 2, "c", t0.Add(time.Second), lease)
	if err != nil {
		t.Fatal(err)
	}
	if c.Wake == 0 || c.Head != 6 {
		t.Fatalf("after abandon: %+v; want the wake-up kept and head 6", c)
	}
	// Abandon by a non-holder changes nothing.
	if err := s.Abandon(ctx, a, 9, 9); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.ReadLease(ctx, 2); l.Owner != "c" || l.Head != 6 || !l.HeldAt(t0.Add(time.Second)) {
		t.Fatalf("a stale abandon changed the lease: %+v", l)
	}
}

func testAdvance(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	// A lease nobody ever held.
	l, err := s.ReadLease(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	l, err = s.Advance(ctx, l, 4, 4, t0)
	if err != nil || l.Head != 4 || l.Cleaned != 4 {
		t.Fatalf("advance a new lease = %+v, %v", l, err)
	}
	// Not from a stale read.
	stale := l
	stale.Head = 2
	if _, err := s.Advance(ctx, stale, 5, 5, t0); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("advance from a stale head: %v, want ErrLeaseLost", err)
	}
	// Not while held.
	a, err := s.Acquire(ctx, 3, "a", t0, lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Advance(ctx, a, 6, 6, t0.Add(time.Second)); !errors.Is(err, outbox.ErrLeaseHeld) {
		t.Fatalf("advance a held lease: %v, want ErrLeaseHeld", err)
	}
	if a, err = s.Update(ctx, a, outbox.LeaseUpdate{Head: 4, Cleaned: 4, Gap: 5, GapSince: t0}, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, a, 4, 4); err != nil {
		t.Fatal(err)
	}
	// Released: its owner (or anyone) advances it; a passed gap is cleared.
	l, _ = s.ReadLease(ctx, 3)
	l, err = s.Advance(ctx, l, 7, 7, t0.Add(2*time.Second))
	if err != nil || l.Head != 7 || l.Gap != 0 || l.Owner != "a" || !l.Released() {
		t.Fatalf("advance a released lease = %+v, %v", l, err)
	}
	// Expired: too.
	b, err := s.Acquire(ctx, 3, "b", t0.Add(3*time.Second), lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Advance(ctx, b, 8, 8, t0.Add(3*time.Second+lease)); err != nil {
		t.Fatalf("advance an expired lease: %v", err)
	}
}

func testPending(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	var msgs []outbox.Message
	for seq := int64(1); seq <= 30; seq++ {
		if seq == 17 {
			continue // a gap
		}
		msgs = append(msgs, msg(1, seq))
	}
	// Written in several transactions, out of order.
	put(t, h, s, msgs[20:]...)
	put(t, h, s, msgs[:10]...)
	put(t, h, s, msgs[10:20]...)
	put(t, h, s, msg(2, 1))
	if err := s.Fence(ctx, 1, 31, t0); err != nil {
		t.Fatal(err)
	}
	got, end, err := s.Pending(ctx, 1, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !end || len(got) != 30 {
		t.Fatalf("Pending(all) = %d entries, end=%v; want 30, true", len(got), end)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Sequence <= got[i-1].Sequence {
			t.Fatalf("not ascending at %d: %d after %d", i, got[i].Sequence, got[i-1].Sequence)
		}
	}
	if last := got[len(got)-1]; !last.Fence || last.Sequence != 31 {
		t.Fatalf("last entry = %+v, want the fence at 31", last)
	}
	got, end, err = s.Pending(ctx, 1, 5, 10)
	if err != nil {
		t.Fatal(err)
	}
	if end || len(got) != 10 || got[0].Sequence != 6 || got[9].Sequence != 15 {
		t.Fatalf("Pending(after 5, limit 10) = %d entries from %d, end=%v", len(got), got[0].Sequence, end)
	}
	got, end, err = s.Pending(ctx, 1, 31, 10)
	if err != nil || !end || len(got) != 0 {
		t.Fatalf("Pending past the end = %d, %v, %v", len(got), end, err)
	}
	got, _, err = s.Pending(ctx, 2, 0, 10)
	if err != nil || len(got) != 1 || got[0].Message.Bucket != 2 {
		t.Fatalf("bucket 2 = %+v, %v", got, err)
	}
}

func testRoundTrip(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 8)
	p := int32(5)
	cases := []outbox.Message{
		{Key: nil, Value: []byte("keyless")},
		{Key: []byte{}, Value: []byte("empty key")},
		{Key: []byte("k"), Value: nil},
		{Key: []byte("k"), Value: []byte{}},
		{Key: []byte{0, 255, 10}, Value: bytes.Repeat([]byte{0xAB}, 10_000)},
		{Key: []byte("h"), Value: []byte("v"), Headers: []outbox.Header{
			{Key: "dup", Value: []byte("1")}, {Key: "dup", Value: []byte("2")},
			{Key: "nil", Value: nil}, {Key: "empty", Value: []byte{}}, {Key: "bin", Value: []byte{0, 1, 255}},
		}},
		{Key: []byte("p"), Value: []byte("pinned"), Partition: &p},
	}
	for i := range cases {
		m := &cases[i]
		m.ID, m.Bucket, m.Sequence, m.Topic = outbox.NewID(), 4, int64(i+1), "topic.with-all_chars"
		m.CreatedAt = t0.Add(time.Duration(i)*time.Hour + 123*time.Millisecond)
	}
	put(t, h, s, cases...)
	got, _, err := s.Pending(ctx, 4, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(cases) {
		t.Fatalf("got %d entries, want %d", len(got), len(cases))
	}
	for i, e := range got {
		want := cases[i]
		m := e.Message
		if e.Err != nil || e.Fence {
			t.Fatalf("case %d: err=%v fence=%v", i, e.Err, e.Fence)
		}
		if m.ID != want.ID || m.Bucket != want.Bucket || m.Sequence != want.Sequence || m.Topic != want.Topic {
			t.Errorf("case %d: identity %+v, want %+v", i, m, want)
		}
		if (m.Key == nil) != (want.Key == nil) || !bytes.Equal(m.Key, want.Key) {
			t.Errorf("case %d: key %v (nil=%v), want %v (nil=%v)", i, m.Key, m.Key == nil, want.Key, want.Key == nil)
		}
		if (m.Value == nil) != (want.Value == nil) || !bytes.Equal(m.Value, want.Value) {
			t.Errorf("case %d: value nil=%v len=%d, want nil=%v len=%d", i, m.Value == nil, len(m.Value), want.Value == nil, len(want.Value))
		}
		if len(m.Headers) != len(want.Headers) {
			t.Fatalf("case %d: %d headers, want %d", i, len(m.Headers), len(want.Headers))
		}
		for j := range want.Headers {
			g, w := m.Headers[j], want.Headers[j]
			if g.Key != w.Key || (g.Value == nil) != (w.Value == nil) || !bytes.Equal(g.Value, w.Value) {
				t.Errorf("case %d header %d: %q=%v, want %q=%v", i, j, g.Key, g.Value, w.Key, w.Value)
			}
		}
		if (m.Partition == nil) != (want.Partition == nil) || m.Partition != nil && *m.Partition != *want.Partition {
			t.Errorf("case %d: partition %v, want %v", i, m.Partition, want.Partition)
		}
		if !m.CreatedAt.Equal(want.CreatedAt.Truncate(time.Millisecond)) {
			t.Errorf("case %d: created %v, want %v", i, m.CreatedAt, want.CreatedAt)
		}
	}
}

func testFence(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	// Writer first: the fence loses.
	put(t, h, s, msg(0, 1))
	if err := s.Fence(ctx, 0, 1, t0); !errors.Is(err, outbox.ErrAlreadyWritten) {
		t.Fatalf("fence over a message: err = %v, want ErrAlreadyWritten", err)
	}
	// Fence first: the writer's whole transaction loses.
	if err := s.Fence(ctx, 0, 2, t0); err != nil {
		t.Fatal(err)
	}
	if err := h.Put(t, s, msg(0, 3), msg(0, 2)); !errors.Is(err, outbox.ErrAlreadyWritten) {
		t.Fatalf("writer over a fence: err = %v, want ErrAlreadyWritten", err)
	}
	if err := s.Fence(ctx, 0, 2, t0); !errors.Is(err, outbox.ErrAlreadyWritten) {
		t.Fatalf("fence twice: err = %v, want ErrAlreadyWritten", err)
	}
	got, _, err := s.Pending(ctx, 0, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Fence || !got[1].Fence || got[1].Sequence != 2 {
		t.Fatalf("entries = %+v; want message 1 and fence 2 only (the cancelled transaction wrote nothing)", got)
	}
}

func testMarkPublished(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	var msgs []outbox.Message
	var seqs []int64
	for seq := int64(1); seq <= 60; seq++ {
		msgs = append(msgs, msg(3, seq))
		seqs = append(seqs, seq)
	}
	put(t, h, s, msgs...)
	if err := s.Fence(ctx, 3, 61, t0); err != nil {
		t.Fatal(err)
	}
	// Marking more than one batch's worth (DynamoDB batches 25): those
	// messages become tombstones; the rest and the fence stay as they were.
	if err := s.MarkPublished(ctx, 3, seqs[:55], t0); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.Pending(ctx, 3, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var marked, messages int
	for _, e := range got {
		switch {
		case e.Sequence <= 55 && e.Fence && e.Published:
			marked++
		case e.Sequence > 55 && e.Sequence <= 60 && !e.Fence:
			messages++
		case e.Sequence == 61 && e.Fence && !e.Published:
		default:
			t.Fatalf("after marking: unexpected entry %+v", e)
		}
	}
	if marked != 55 || messages != 5 || len(got) != 61 {
		t.Fatalf("after marking: %d tombstones, %d messages, %d entries; want 55, 5, 61", marked, messages, len(got))
	}
	if err := s.MarkPublished(ctx, 3, seqs[:55], t0); err != nil {
		t.Fatalf("marking again: %v", err)
	}
	// A tombstone holds its sequence number like a fence.
	if err := s.Fence(ctx, 3, 5, t0); !errors.Is(err, outbox.ErrAlreadyWritten) {
		t.Fatalf("fence over a tombstone: %v, want ErrAlreadyWritten", err)
	}
	if err := h.Put(t, s, msg(3, 6)); !errors.Is(err, outbox.ErrAlreadyWritten) {
		t.Fatalf("writer over a tombstone: %v, want ErrAlreadyWritten", err)
	}
}

func testHeartbeats(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	for i, id := range []string{"r2", "r1", "r3"} {
		if err := s.Heartbeat(ctx, id, t0.Add(time.Duration(i)*10*time.Second), lease); err != nil {
			t.Fatal(err)
		}
	}
	live, err := s.LiveRelays(ctx, t0.Add(35*time.Second), lease)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(live) != "[r1 r3]" {
		t.Fatalf("live = %v, want [r1 r3] (r2 last seen 35s ago)", live)
	}
	if err := s.Heartbeat(ctx, "r2", t0.Add(35*time.Second), lease); err != nil {
		t.Fatal(err)
	}
	live, err = s.LiveRelays(ctx, t0.Add(36*time.Second), lease)
	if err != nil || fmt.Sprint(live) != "[r1 r2 r3]" {
		t.Fatalf("live = %v, %v; want [r1 r2 r3]", live, err)
	}
}

func testPeek(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	p, ok := s.(outbox.BucketProbe)
	if !ok {
		t.Skip("store does not implement outbox.BucketProbe")
	}
	l, err := s.ReadLease(ctx, 1)
	if err != nil || l.Bucket != 1 || l.Owner != "" || l.Head != 0 {
		t.Fatalf("ReadLease of a new bucket = %+v, %v", l, err)
	}
	if n, _, err := p.Peek(ctx, 1, 0, 10); err != nil || n != 0 {
		t.Fatalf("empty bucket: pending=%d err=%v", n, err)
	}
	if err := s.Fence(ctx, 1, 1, t0); err != nil {
		t.Fatal(err)
	}
	if n, _, err := p.Peek(ctx, 1, 0, 10); err != nil || n != 0 {
		t.Fatalf("fence only: pending=%d err=%v; fences are not pending messages", n, err)
	}
	put(t, h, s, msg(1, 2), msg(1, 3), msg(1, 4))
	n, oldest, err := p.Peek(ctx, 1, 0, 10)
	if err != nil || n != 3 || !oldest.Equal(msg(1, 2).CreatedAt) {
		t.Fatalf("Peek = %d %v %v, want 3 %v", n, oldest, err, msg(1, 2).CreatedAt)
	}
	if n, _, err := p.Peek(ctx, 1, 0, 2); err != nil || n != 2 {
		t.Fatalf("Peek limit 2 over a fence and 3 messages = %d %v, want 2 (the limit counts messages, not fences)", n, err)
	}
	if n, _, err := p.Peek(ctx, 1, 4, 10); err != nil || n != 0 {
		t.Fatalf("Peek above the last = %d %v", n, err)
	}
	a, err := s.Acquire(ctx, 1, "a", t0, lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, a, outbox.LeaseUpdate{Head: 3, Cleaned: 2}, t0); err != nil {
		t.Fatal(err)
	}
	l, err = s.ReadLease(ctx, 1)
	if err != nil || l.Owner != "a" || l.Head != 3 || l.Cleaned != 2 || !l.Expires.Equal(t0.Add(lease)) {
		t.Fatalf("ReadLease = %+v, %v", l, err)
	}
}

// testPeekBeyondFences: fences must not hide the messages behind them. Two
// failed 99-message writes leave 198 fences above the cleaned mark; the one
// message committed after them must still be seen, whatever the limit.
func testPeekBeyondFences(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	p, ok := s.(outbox.BucketProbe)
	if !ok {
		t.Skip("store does not implement outbox.BucketProbe")
	}
	const fences = 2 * 99
	for seq := int64(1); seq <= fences; seq++ {
		if err := s.Fence(ctx, 2, seq, t0); err != nil {
			t.Fatalf("fence %d: %v", seq, err)
		}
	}
	if n, oldest, err := p.Peek(ctx, 2, 0, 100); err != nil || n != 0 || !oldest.IsZero() {
		t.Fatalf("fences only: Peek = %d %v %v, want 0 and no oldest", n, oldest, err)
	}
	put(t, h, s, msg(2, fences+1))
	for _, limit := range []int{1, 100} {
		n, oldest, err := p.Peek(ctx, 2, 0, limit)
		if err != nil || n != 1 || !oldest.Equal(msg(2, fences+1).CreatedAt) {
			t.Fatalf("Peek limit %d over %d fences and one message = %d %v %v, want 1 %v", limit, fences, n, oldest, err, msg(2, fences+1).CreatedAt)
		}
	}
	// More messages than the limit behind the fences: the limit counts
	// messages only.
	var more []outbox.Message
	for seq := int64(fences + 2); seq <= fences+6; seq++ {
		more = append(more, msg(2, seq))
	}
	put(t, h, s, more...)
	if n, _, err := p.Peek(ctx, 2, 0, 4); err != nil || n != 4 {
		t.Fatalf("Peek limit 4 over %d fences and 6 messages = %d %v, want 4", fences, n, err)
	}
	if n, _, err := p.Peek(ctx, 2, 0, 100); err != nil || n != 6 {
		t.Fatalf("Peek limit 100 over %d fences and 6 messages = %d %v, want 6", fences, n, err)
	}
	// A fence among messages is skipped too; after restricts the range.
	if err := s.Fence(ctx, 2, fences+7, t0); err != nil {
		t.Fatal(err)
	}
	put(t, h, s, msg(2, fences+8))
	if n, oldest, err := p.Peek(ctx, 2, fences+3, 100); err != nil || n != 4 || !oldest.Equal(msg(2, fences+4).CreatedAt) {
		t.Fatalf("Peek after %d = %d %v %v, want 4 from %v", fences+3, n, oldest, err, msg(2, fences+4).CreatedAt)
	}
}

func testPark(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 4)
	put(t, h, s, msg(2, 1), msg(2, 2), msg(2, 3))
	a, err := s.Acquire(ctx, 2, "a", t0, lease)
	if err != nil {
		t.Fatal(err)
	}
	if a, err = s.Update(ctx, a, outbox.LeaseUpdate{Head: 1, Cleaned: 0}, t0); err != nil {
		t.Fatal(err)
	}
	p := outbox.Parked{Bucket: 2, Sequence: 2, Reason: "MESSAGE_TOO_LARGE", Class: outbox.RecordPermanent, Attempts: 2,
		FirstFailure: t0, LastFailure: t0.Add(time.Second)}
	// Only the head+1 item can be parked, and only by the holder.
	if _, err := s.Park(ctx, a, outbox.Parked{Bucket: 2, Sequence: 3}, t0); err == nil {
		t.Fatal("parked a sequence that is not head+1")
	}
	other := a
	other.Owner = "b"
	if _, err := s.Park(ctx, other, p, t0); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("park by a non-holder: %v, want ErrLeaseLost", err)
	}
	if _, err := s.Park(ctx, a, p, t0.Add(lease)); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("park after expiry: %v, want ErrLeaseLost", err)
	}
	a, err = s.Park(ctx, a, p, t0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if a.Head != 2 {
		t.Fatalf("head after park = %d, want 2", a.Head)
	}
	got, _, err := s.Pending(ctx, 2, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Sequence != 1 || got[1].Sequence != 3 {
		t.Fatalf("pending after park = %+v; want 1 and 3 (2 moved to the dead letters)", got)
	}
	// The head persisted for the next owner.
	if _, err := s.Release(ctx, a, 2, 1); err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, 2, "b", t0.Add(3*time.Second), lease)
	if err != nil || b.Head != 2 {
		t.Fatalf("next owner: %+v %v", b, err)
	}
}

// testRetains: in WatermarkMode the relay never writes per message, so the
// store must keep published messages, payload and all, once head moved past
// them (replay reads them there), while reads above head see none of them.
func testRetains(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 2)
	msgs := []outbox.Message{msg(1, 1), msg(1, 2), msg(1, 3)}
	put(t, h, s, msgs...)
	l, err := s.Acquire(ctx, 1, "a", t0, lease)
	if err != nil {
		t.Fatal(err)
	}
	if l, err = s.Update(ctx, l, outbox.LeaseUpdate{Head: 3, Cleaned: 3}, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, l, 3, 3); err != nil {
		t.Fatal(err)
	}
	got, end, err := s.Pending(ctx, 1, 0, 10)
	if err != nil || !end || len(got) != len(msgs) {
		t.Fatalf("Pending after 0 = %d entries, end %v, %v; want the 3 published messages", len(got), end, err)
	}
	for i, e := range got {
		m := e.Message
		if e.Fence || e.Err != nil || m.ID != msgs[i].ID || !bytes.Equal(m.Value, msgs[i].Value) || !bytes.Equal(m.Key, msgs[i].Key) {
			t.Errorf("entry %d = %+v, want message %s with its payload", i, e, msgs[i].ID)
		}
	}
	if above, _, err := s.Pending(ctx, 1, 3, 10); err != nil || len(above) != 0 {
		t.Errorf("Pending after head = %+v, %v; want nothing", above, err)
	}
}

// testStuck: a StuckRecorder's record is read back with the lease (by
// ReadLease and Acquire), changes nothing of the hold, is dropped once the
// head passed its sequence, and can be written by a relay that does not
// hold the lease.
func testStuck(t *testing.T, h Harness) {
	ctx, s := ctxT(t), h.New(t, 2)
	rec, ok := s.(outbox.StuckRecorder)
	if !ok {
		t.Skip("not a StuckRecorder")
	}
	a, err := s.Acquire(ctx, 1, "a", t0, lease)
	if err != nil {
		t.Fatal(err)
	}
	st := outbox.Stuck{Sequence: 4, MessageID: outbox.NewID(), Topic: "gone", Class: outbox.Fatal, Reason: "topic does not exist",
		Since: t0, Last: t0.Add(time.Minute), Count: 3}
	if err := rec.RecordStuck(ctx, 1, st); err != nil {
		t.Fatal(err)
	}
	l, err := s.ReadLease(ctx, 1)
	if err != nil || !sameStuck(l.Stuck, st) || l.Owner != "a" || !l.Expires.Equal(a.Expires) || l.Epoch != a.Epoch || l.Wake != a.Wake {
		t.Fatalf("ReadLease = %+v, %v; want the hold of %+v and the record %+v", l, err, a, st)
	}
	if _, err := s.Renew(ctx, a, t0.Add(time.Second), lease); err != nil {
		t.Fatalf("renew after a record: %v", err)
	}
	if err := s.Abandon(ctx, a, 3, 3); err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, 1, "b", t0.Add(2*time.Second), lease)
	if err != nil || !sameStuck(b.Stuck, st) || !b.Stuck.Current(b.Head) {
		t.Fatalf("Acquire = %+v, %v; want the current record", b, err)
	}
	// The record of another bucket, by a relay that holds nothing.
	if err := rec.RecordStuck(ctx, 0, st); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.ReadLease(ctx, 0); !sameStuck(l.Stuck, st) || l.Owner != "" {
		t.Fatalf("bucket 0: %+v", l)
	}
	if _, err := s.Update(ctx, b, outbox.LeaseUpdate{Head: 4, Cleaned: 4}, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	late := st
	late.Count = 9
	if err := rec.RecordStuck(ctx, 1, late); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.ReadLease(ctx, 1); l.Stuck.Count != 3 || l.Stuck.Current(l.Head) {
		t.Fatalf("after head passed 4: %+v; want the old record, stale", l)
	}
}

// sameStuck compares two records, their times by instant.
func sameStuck(a, b outbox.Stuck) bool {
	ta, tb := a, b
	ta.Since, ta.Last, tb.Since, tb.Last = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return ta == tb && a.Since.Equal(b.Since) && a.Last.Equal(b.Last)
}
