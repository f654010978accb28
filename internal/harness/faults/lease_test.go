package faults_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/faults"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/store/dynamo"
)

// TestResentAcquireKeepsPrevReleasedBy (issue 16, defect 3) and its
// siblings: every conditional lease write the SDK may resend applies again
// unchanged. Each case loses the response of the operation's first
// UpdateItem once (DynamoDB applied it; the SDK sends it again) and checks
// that the operation reports what the write that applied did. Before the
// acquisition token, the resent Acquire failed its condition (the owner was
// already the acquirer), took the own-lease path and reported
// PrevReleasedBy="" — the acquirer then published at once while the
// releaser might still be resuming — and a resent Advance reported
// ErrLeaseLost.
func TestResentAcquireKeepsPrevReleasedBy(t *testing.T) {
	d := testenv.DynamoDB(t)
	tables := dynamo.Tables{Messages: testenv.Name(t, "msgs"), Control: testenv.Name(t, "ctl")}
	if err := dynamo.CreateTables(ctxT(t), d.Client, tables, dynamo.BucketCount(8)); err != nil {
		t.Fatal(err)
	}
	plain, err := dynamo.NewStore(ctxT(t), d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	// Renew and Update are conditional on the hold not having expired at
	// now: held leases are acquired at the wall clock's now.
	now := time.Now().Truncate(time.Millisecond)
	const d30 = 30 * time.Second
	type lossy func(s *dynamo.Store, l outbox.Lease) (outbox.Lease, error)
	for i, tc := range []struct {
		name string
		// prepare leaves bucket i in the state the resent write starts
		// from and returns the lease the write is given.
		prepare func(t *testing.T, s *dynamo.Store, b int) outbox.Lease
		write   lossy
		check   func(t *testing.T, before, got outbox.Lease, err error)
	}{
		{"Acquire from a release", func(t *testing.T, s *dynamo.Store, b int) outbox.Lease {
			return released(t, s, b, "sweeper", now)
		}, func(s *dynamo.Store, l outbox.Lease) (outbox.Lease, error) {
			return s.Acquire(ctxT(t), l.Bucket, "relay/fn", now.Add(time.Second), d30)
		}, func(t *testing.T, before, got outbox.Lease, err error) {
			if err != nil || got.PrevReleasedBy != "sweeper" || got.PrevToken != before.Token || got.TakenOver || got.Token == "" || got.Token == before.Token {
				t.Fatalf("resent Acquire = %+v, %v; want PrevReleasedBy sweeper, PrevToken %s and a new token", got, err, before.Token)
			}
		}},
		{"Acquire from the acquirer's own name's release", func(t *testing.T, s *dynamo.Store, b int) outbox.Lease {
			return released(t, s, b, "relay/fn", now)
		}, func(s *dynamo.Store, l outbox.Lease) (outbox.Lease, error) {
			return s.Acquire(ctxT(t), l.Bucket, "relay/fn", now.Add(time.Second), d30)
		}, func(t *testing.T, before, got outbox.Lease, err error) {
			if err != nil || got.PrevReleasedBy != "relay/fn" || got.PrevToken != before.Token || got.Epoch != before.Epoch+1 {
				t.Fatalf("resent Acquire = %+v, %v; want PrevReleasedBy relay/fn, PrevToken %s, epoch %d", got, err, before.Token, before.Epoch+1)
			}
		}},
		{"Acquire over an expired hold", func(t *testing.T, s *dynamo.Store, b int) outbox.Lease {
			l, err := s.Acquire(ctxT(t), b, "stalled", now.Add(-time.Minute), d30)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}, func(s *dynamo.Store, l outbox.Lease) (outbox.Lease, error) {
			return s.Acquire(ctxT(t), l.Bucket, "relay/fn", now, d30)
		}, func(t *testing.T, before, got outbox.Lease, err error) {
			if err != nil || !got.TakenOver || got.PrevReleasedBy != "" {
				t.Fatalf("resent takeover = %+v, %v; want TakenOver and no PrevReleasedBy", got, err)
			}
		}},
		{"Renew", held, func(s *dynamo.Store, l outbox.Lease) (outbox.Lease, error) {
			return s.Renew(ctxT(t), l, now.Add(time.Second), d30)
		}, func(t *testing.T, before, got outbox.Lease, err error) {
			if err != nil || !got.Expires.Equal(now.Add(time.Second+d30)) || got.Token != before.Token {
				t.Fatalf("resent Renew = %+v, %v", got, err)
			}
		}},
		{"Update", held, func(s *dynamo.Store, l outbox.Lease) (outbox.Lease, error) {
			return s.Update(ctxT(t), l, outbox.LeaseUpdate{Head: 5, Cleaned: 5}, now.Add(time.Second))
		}, func(t *testing.T, before, got outbox.Lease, err error) {
			if err != nil || got.Head != 5 || got.Cleaned != 5 {
				t.Fatalf("resent Update = %+v, %v", got, err)
			}
		}},
		{"Release", held, func(s *dynamo.Store, l outbox.Lease) (outbox.Lease, error) {
			return s.Release(ctxT(t), l, 4, 4)
		}, func(t *testing.T, before, got outbox.Lease, err error) {
			if err != nil || !got.Released() || got.Head != 4 || got.Token != before.Token {
				t.Fatalf("resent Release = %+v, %v", got, err)
			}
		}},
		{"Abandon", held, func(s *dynamo.Store, l outbox.Lease) (outbox.Lease, error) {
			return l, s.Abandon(ctxT(t), l, 4, 4)
		}, func(t *testing.T, before, _ outbox.Lease, err error) {
			if l, rerr := plain.ReadLease(ctxT(t), before.Bucket); err != nil || rerr != nil || !l.Released() || l.Head != 4 {
				t.Fatalf("resent Abandon: %v; lease %+v, %v", err, l, rerr)
			}
		}},
		{"Advance", func(t *testing.T, s *dynamo.Store, b int) outbox.Lease {
			return released(t, s, b, "relay/fn", now)
		}, func(s *dynamo.Store, l outbox.Lease) (outbox.Lease, error) {
			return s.Advance(ctxT(t), l, 7, 7, now.Add(time.Second))
		}, func(t *testing.T, before, got outbox.Lease, err error) {
			if err != nil || got.Head != 7 {
				t.Fatalf("resent Advance = %+v, %v; want head 7", got, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.prepare(t, plain, i)
			inj := newInjector(t, faults.Disabled(), faults.For("UpdateItem", faults.Policy{ResponseLost: 1, Limit: 1}))
			s, err := dynamo.NewStore(ctxT(t), client(t, inj), tables)
			if err != nil {
				t.Fatal(err)
			}
			inj.Enable()
			got, err := tc.write(s, before)
			if n := inj.Count(faults.ResponseLost, "UpdateItem"); n != 1 {
				t.Fatalf("%d lost responses, want 1: the case did not run as written", n)
			}
			tc.check(t, before, got, err)
		})
	}
}

// held acquires bucket b for "relay/fn".
func held(t *testing.T, s *dynamo.Store, b int) outbox.Lease {
	t.Helper()
	l, err := s.Acquire(ctxT(t), b, "relay/fn", time.Now().Truncate(time.Millisecond), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// released acquires bucket b for owner and releases it.
func released(t *testing.T, s *dynamo.Store, b int, owner string, now time.Time) outbox.Lease {
	t.Helper()
	l, err := s.Acquire(ctxT(t), b, owner, now, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l, err = s.Release(ctxT(t), l, 3, 3)
	if err != nil && !errors.Is(err, outbox.ErrWoken) {
		t.Fatal(err)
	}
	return l
}
