package relay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
	"github.com/dynakafka/outbox/store/memory"
)

// A region-mode relay drains only its region's slice (and slices it took
// over, as of its last sweep), refuses a drain of another region's bucket,
// counts only its region's live relays, and never fences a gap in a slice
// it took over.
func TestRelayRegionMode(t *testing.T) {
	s := memory.New(4)
	regions := outbox.Config{Regions: []string{"a", "b"}} // a: buckets 0-1, b: 2-3
	s.SetConfig(regions)
	for _, tc := range []struct {
		name string
		opts []relay.Option
	}{{"no region", nil}, {"unlisted region", []relay.Option{relay.Region("c")}}} {
		var me *outbox.MisconfigurationError
		if _, err := relay.New(ctxFor(t, time.Second), s, &recorder{}, tc.opts...); !errors.As(err, &me) || me.Setting != "Region" {
			t.Errorf("%s: relay.New = %v, want a *MisconfigurationError for Region", tc.name, err)
		}
	}
	fill(t, s, 1, 1, 2)
	fill(t, s, 3, 1, 2)
	p := &recorder{}
	r := newRelay(t, s, p, relay.Region("a"), relay.RelayID("r1"), relay.DeadlineMargin(0),
		relay.GapTimeout(50*time.Millisecond), relay.GapPollInterval(5*time.Millisecond))
	if r.ID() != "a/r1" {
		t.Errorf("relay id %q, want it prefixed by its region", r.ID())
	}
	rep, err := r.Sweep(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.seqs(1), p.seqs(3)); got != "[1 2] []" {
		t.Errorf("published %s from buckets 1 and 3, want [1 2] []: bucket 3 is region b's", got)
	}
	if !rep.Buckets[3].Foreign || rep.Buckets[1].Foreign || s.Count(3) != 2 {
		t.Errorf("sweep report %+v, bucket 3 holds %d; want bucket 3 foreign and untouched", rep.Buckets, s.Count(3))
	}
	var re *outbox.RegionError
	if _, err := r.DrainBucket(ctxFor(t, time.Second), 3); !errors.As(err, &re) || re.Drainer != "b" {
		t.Errorf("DrainBucket of region b's bucket = %v, want a *RegionError naming b", err)
	}

	// Region b fails and a takes its buckets over: the next sweep drains
	// them; a gap there waits (a commit of b may not have replicated yet).
	taken := regions
	taken.TakenOver = map[string]string{"b": "a"}
	s.SetConfig(taken)
	fill(t, s, 2, 1, 3)
	if _, err := r.Sweep(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(p.seqs(3)); got != "[1 2]" {
		t.Errorf("after the takeover, bucket 3 published %s, want [1 2]", got)
	}
	time.Sleep(60 * time.Millisecond) // past GapTimeout
	st, err := r.DrainBucket(ctxFor(t, 10*time.Second), 2)
	if !errors.Is(err, outbox.ErrGapPending) || st.Fenced != 0 || fmt.Sprint(p.seqs(2)) != "[1]" {
		t.Errorf("gap in a slice taken over: err %v, fenced %d, published %v; want ErrGapPending, no fence, [1]", err, st.Fenced, p.seqs(2))
	}
	fill(t, s, 2, 2) // the commit replicates
	if _, err := r.DrainBucket(ctxFor(t, 10*time.Second), 2); err != nil || fmt.Sprint(p.seqs(2)) != "[1 2 3]" {
		t.Errorf("after the missing commit arrived: err %v, published %v, want [1 2 3]", err, p.seqs(2))
	}

	// Handed back: a stops draining b's buckets at its next sweep.
	s.SetConfig(regions)
	if _, err := r.Sweep(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.DrainBucket(ctxFor(t, time.Second), 3); !errors.As(err, &re) {
		t.Errorf("after the hand-back, DrainBucket(3) = %v, want a *RegionError", err)
	}
	s.SetConfig(outbox.Config{Regions: []string{"a", "c"}})
	var me *outbox.MisconfigurationError
	if _, err := r.Sweep(ctxFor(t, time.Second)); !errors.As(err, &me) || me.Setting != "Regions" {
		t.Errorf("sweep after the region list changed = %v, want a *MisconfigurationError for Regions", err)
	}
}

// In the default mode a Region option is refused.
func TestRelayDefaultModeRefusesRegion(t *testing.T) {
	var me *outbox.MisconfigurationError
	if _, err := relay.New(ctxFor(t, time.Second), memory.New(2), &recorder{}, relay.Region("a")); !errors.As(err, &me) || me.Setting != "Region" {
		t.Errorf("relay.New(Region) on a single-region outbox = %v, want a *MisconfigurationError", err)
	}
}

// configReads counts the config item reads of a store.
type configReads struct {
	*memory.Store
	n int
}

func (c *configReads) Config(ctx context.Context) (outbox.Config, error) {
	c.n++
	return c.Store.Config(ctx)
}

// A full sweep reads the config item once: in region mode for both the
// BucketCount (an online change) and the takeovers (it read it twice
// before, once for each).
func TestSweepReadsConfigOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		regions []string
		opts    []relay.Option
		full    int
	}{
		{"region mode", []string{"a", "b"}, []relay.Option{relay.Region("a")}, 1},
		{"default mode", nil, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &configReads{Store: memory.New(4)}
			s.SetConfig(outbox.Config{Regions: tc.regions})
			fill(t, s.Store, 0, 1, 2)
			p := &recorder{}
			r := newRelay(t, s, p, append(tc.opts, relay.RelayID("r1"), relay.DeadlineMargin(0))...)
			s.n = 0
			if _, err := r.Sweep(ctxFor(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			if s.n != tc.full {
				t.Errorf("a full sweep read the config item %d times, want %d", s.n, tc.full)
			}
			if got := fmt.Sprint(p.seqs(0)); got != "[1 2]" {
				t.Errorf("published %s from bucket 0, want [1 2]", got)
			}
		})
	}
}
