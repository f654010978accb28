package dynamo

import (
	"testing"
	"time"
)

// TestDisown: a lease its owner released is handed back (no owner: the
// next acquirer has no resumer to wait for); a resend succeeds; a lease
// held, or released by another owner, is left alone.
func TestDisown(t *testing.T) {
	e := newEnv(t, 4)
	ctx, now := ctxT(t), time.Now()
	l, err := e.store.Acquire(ctx, 1, "cli", now, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Disown(ctx, 1, "cli"); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.store.ReadLease(ctx, 1); got.Owner != "cli" || !got.HeldAt(now) {
		t.Fatalf("a held lease was disowned: %+v", got)
	}
	if _, err := e.store.Release(ctx, l, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Disown(ctx, 1, "other"); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.store.ReadLease(ctx, 1); got.Owner != "cli" {
		t.Fatalf("another owner disowned cli's lease: %+v", got)
	}
	for range 2 { // the second is a resend
		if err := e.store.Disown(ctx, 1, "cli"); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := e.store.ReadLease(ctx, 1); got.Owner != "" {
		t.Fatalf("after Disown: %+v", got)
	}
	l, err = e.store.Acquire(ctx, 1, "relay", now, 30*time.Second)
	if err != nil || l.PrevReleasedBy != "" || l.TakenOver || l.Epoch != 2 {
		t.Fatalf("acquired after Disown: %+v, %v; want no resumer to wait for, no takeover, epoch 2", l, err)
	}
}
