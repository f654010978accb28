package outbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/store/memory"
)

// changeStore is a memory store whose config item says an online
// BucketCount change 8 → 16 is in progress until deadline, and which ends
// it (outbox.ChangeEnder) as store/dynamo does: the count stays, at the
// next epoch. fail makes the abort fail.
type changeStore struct {
	*memory.Store
	mu       sync.Mutex
	cfg      outbox.Config
	fail     error
	abortsAt []time.Time
}

func newChangeStore(deadline time.Time) *changeStore {
	s := memory.New(8)
	return &changeStore{Store: s, cfg: outbox.Config{BucketCount: 8, FormatVersion: outbox.FormatVersion, NextBucketCount: 16, ChangeDeadline: deadline}}
}

func (s *changeStore) Config(context.Context) (outbox.Config, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg, nil
}

func (s *changeStore) EndExpiredChange(_ context.Context, stored outbox.Config, now time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abortsAt = append(s.abortsAt, now)
	switch {
	case s.fail != nil:
		return false, s.fail
	case !stored.Changing() || now.Before(stored.ChangeDeadline) || s.cfg.BucketEpoch != stored.BucketEpoch:
		return false, nil
	}
	s.cfg.BucketEpoch, s.cfg.NextBucketCount, s.cfg.ChangeDeadline = stored.BucketEpoch+1, 0, time.Time{}
	return true, nil
}

// A full sweep and RefreshConfig leave a change within its deadline alone,
// and abort one past it through the store's ChangeEnder, once; an abort
// that fails is reported with how far past its deadline the change is.
func TestRelayAbortsAnOverdueChange(t *testing.T) {
	clk := &fakeClock{}
	deadline := clk.Now().Add(30 * time.Second)
	s := newChangeStore(deadline)
	r := newRelay(t, s, &recorder{}, outbox.WithClock(clk), outbox.DeadlineMargin(0))
	rep, err := r.Sweep(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Change; c == nil || c.From != 8 || c.To != 16 || c.Overdue != 0 || c.Aborted || c.Err != nil || len(s.abortsAt) != 0 {
		t.Fatalf("sweep within the deadline: change %+v, aborts %v; want it seen and left alone", c, s.abortsAt)
	}
	clk.Advance(45 * time.Second)
	s.fail = errors.New("AccessDeniedException")
	rep, err = r.Sweep(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Change; c == nil || c.Overdue != 15*time.Second || c.Aborted || !errors.Is(c.Err, s.fail) || r.ChangesAborted() != 0 {
		t.Fatalf("sweep whose abort fails: change %+v; want 15s overdue with the abort's error", c)
	}
	s.fail = nil
	if _, err := r.RefreshConfig(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if r.ChangesAborted() != 1 || len(s.abortsAt) != 2 || !s.abortsAt[1].Equal(clk.Now()) {
		t.Fatalf("RefreshConfig past the deadline: %d aborted, abort calls at %v; want 1, the second at %v", r.ChangesAborted(), s.abortsAt, clk.Now())
	}
	rep, err = r.Sweep(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Change != nil || r.ChangesAborted() != 1 || len(s.abortsAt) != 2 {
		t.Fatalf("sweep after the abort: change %+v, %d aborted, %d abort calls; want none in progress and no new call", rep.Change, r.ChangesAborted(), len(s.abortsAt))
	}
}
