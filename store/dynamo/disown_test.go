package dynamo

import (
	"testing"
	"time"
)

// TestDisown: a lease its hold released is handed back (no owner: the next
// acquirer has no resumer to wait for); a resend succeeds; a lease held,
// released by another owner, or released by another process sharing the
// owner's name (another token) is left alone — removing that name would let
// the next acquirer skip the wait while the other process resumes (I4).
// Before Disown took the token, the shared-name case removed the owner.
func TestDisown(t *testing.T) {
	e := newEnv(t, 4)
	ctx, now := ctxT(t), time.Now()
	l, err := e.store.Acquire(ctx, 1, "cli", now, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Disown(ctx, 1, "cli", l.Token); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.store.ReadLease(ctx, 1); got.Owner != "cli" || !got.HeldAt(now) {
		t.Fatalf("a held lease was disowned: %+v", got)
	}
	if _, err := e.store.Release(ctx, l, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Disown(ctx, 1, "other", l.Token); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.store.ReadLease(ctx, 1); got.Owner != "cli" {
		t.Fatalf("another owner disowned cli's lease: %+v", got)
	}
	// Another process named "cli" acquires and releases: the release is its
	// own, and the first process's token no longer disowns it.
	other, err := e.store.Acquire(ctx, 1, "cli", now, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Release(ctx, other, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Disown(ctx, 1, "cli", l.Token); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.store.ReadLease(ctx, 1); got.Owner != "cli" || got.Token != other.Token {
		t.Fatalf("a process disowned the release of another process sharing its name: %+v", got)
	}
	if err := e.store.Disown(ctx, 1, "cli", ""); err == nil {
		t.Fatal("Disown with no token: want an error")
	}
	for range 2 { // the second is a resend
		if err := e.store.Disown(ctx, 1, "cli", other.Token); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := e.store.ReadLease(ctx, 1); got.Owner != "" {
		t.Fatalf("after Disown: %+v", got)
	}
	l, err = e.store.Acquire(ctx, 1, "relay", now, 30*time.Second)
	if err != nil || l.PrevReleasedBy != "" || l.TakenOver || l.Epoch != 3 {
		t.Fatalf("acquired after Disown: %+v, %v; want no resumer to wait for, no takeover, epoch 3", l, err)
	}
}
