package fanout

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestEachCallsEveryIndexOnce(t *testing.T) {
	for _, n := range []int{0, 1, 5, 100} {
		var mu sync.Mutex
		var got []int
		err := Each(context.Background(), n, 4, func(_ context.Context, i int) error {
			mu.Lock()
			got = append(got, i)
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatalf("n=%d: Each = %v", n, err)
		}
		slices.Sort(got)
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		if !slices.Equal(got, want) {
			t.Fatalf("n=%d: called %v, want each of 0..%d once", n, got, n-1)
		}
	}
}

// The first limit calls wait until limit of them run at once, which they
// can only if Each starts that many; none may see more than limit.
func TestEachRunsLimitAtOnce(t *testing.T) {
	for _, limit := range []int{1, 3, 16} {
		var running, most atomic.Int32
		full := make(chan struct{})
		var once sync.Once
		err := Each(context.Background(), 4*limit, limit, func(_ context.Context, i int) error {
			r := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); r > m && !most.CompareAndSwap(m, r); m = most.Load() {
			}
			if int(r) == limit {
				once.Do(func() { close(full) })
			}
			if i < limit {
				// Fails only when Each is wrong: a correct one lets the
				// limit-th call in whatever the machine's speed.
				select {
				case <-full:
				case <-time.After(time.Minute):
					t.Errorf("limit %d: call %d waited a minute for %d calls to run at once", limit, i, limit)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := most.Load(); int(got) != limit {
			t.Errorf("limit %d: at most %d calls ran at once", limit, got)
		}
	}
}

func TestEachZeroLimitRunsOneAtATime(t *testing.T) {
	var running atomic.Int32
	err := Each(context.Background(), 10, 0, func(context.Context, int) error {
		if running.Add(1) > 1 {
			t.Error("two calls at once with limit 0")
		}
		running.Add(-1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The first error cancels the calls running and starts no more.
func TestEachFirstErrorCancelsAndStops(t *testing.T) {
	boom := errors.New("boom")
	var calls atomic.Int32
	// Call 0 waits for its context to end; call 1 fails, which must end it.
	err := Each(context.Background(), 10, 2, func(ctx context.Context, i int) error {
		calls.Add(1)
		if i == 0 {
			<-ctx.Done()
			return ctx.Err()
		}
		return boom
	})
	if err != boom {
		t.Errorf("Each = %v, want the first error, %v", err, boom)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls, want 2: none after the first error", n)
	}
}

func TestEachStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var called []int
	err := Each(ctx, 10, 1, func(_ context.Context, i int) error {
		called = append(called, i) // limit 1: one call at a time
		if i == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Each = %v, want context.Canceled", err)
	}
	if !slices.Equal(called, []int{0, 1, 2, 3}) {
		t.Errorf("called %v, want 0..3 and none after the context ended", called)
	}

	// Already ended: no call at all.
	err = Each(ctx, 10, 4, func(context.Context, int) error {
		t.Error("called with an ended context")
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Each = %v, want context.Canceled", err)
	}
}
