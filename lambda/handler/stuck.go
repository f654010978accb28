package handler

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/dynakafka/outbox/relay"
)

// DefaultStuckAfter is how many consecutive sweeps must see a bucket
// pending at the same head before it counts as stuck.
const DefaultStuckAfter = 3

// Progress is what the sweeper remembers between sweeps to tell a stuck
// bucket: for each bucket that had pending messages at the last sweep, its
// head then and how many consecutive sweeps saw it pending at that head.
type Progress struct {
	Buckets map[int]Watched
	// Version is the store's version of what was loaded (0: nothing was
	// saved yet); SaveProgress writes only over that version.
	Version int64
}

// Watched is one bucket's entry in Progress.
type Watched struct {
	Head   int64
	Sweeps int
}

// ProgressStore keeps Progress between sweeper invocations. A Lambda
// execution environment may be new at any invocation (a deploy, a scale
// event, a recycled container), so the sweeper function keeps it in the
// control table (lambda/wiring.ProgressStore); MemoryProgress keeps it in
// the process.
type ProgressStore interface {
	LoadProgress(ctx context.Context) (Progress, error)
	// SaveProgress stores p if the stored version is still p.Version and
	// returns ErrProgressConflict otherwise (another sweep saved first).
	SaveProgress(ctx context.Context, p Progress) error
}

// ErrProgressConflict says another sweep saved its progress between this
// sweep's load and save; this sweep's observation is dropped (the next sweep
// builds on the other one's).
var ErrProgressConflict = errors.New("handler: sweep progress was saved by another sweep since it was loaded")

// MemoryProgress is a ProgressStore in memory: stuck buckets are only
// recognised after StuckAfter sweeps of the same process.
type MemoryProgress struct {
	mu sync.Mutex
	p  Progress
}

// LoadProgress implements ProgressStore.
func (m *MemoryProgress) LoadProgress(context.Context) (Progress, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Progress{Buckets: maps.Clone(m.p.Buckets), Version: m.p.Version}, nil
}

// SaveProgress implements ProgressStore.
func (m *MemoryProgress) SaveProgress(_ context.Context, p Progress) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p.Version != m.p.Version {
		return ErrProgressConflict
	}
	m.p = Progress{Buckets: maps.Clone(p.Buckets), Version: p.Version + 1}
	return nil
}

// pendingAt reports whether a sweep saw committed messages waiting in the
// bucket above its head: the probe found messages, and the counter (when
// known) is above the head. A reservation that was never committed (a
// writer that died between reserving and committing, with nothing after it
// to make a gap) raises the counter but holds nothing that waits, so it
// does not make a bucket stuck; messages at or below the head are leftovers
// that a drain marks without publishing.
func pendingAt(b relay.BucketReport) bool {
	return b.Messages > 0 && (b.Last < 0 || b.Last > b.Lease.Head)
}

// observe applies one sweep's look at the buckets to prev. A bucket counts
// one more sweep while it stays pending at the same head, starts again at 1
// when its head moved, and is forgotten when nothing waits in it or when
// the sweep itself drained it (the look came before the drain; a drain that
// succeeded decided everything committed before it). A bucket whose probe
// failed keeps its entry unchanged. It returns the new entries and the
// buckets seen pending at one head for at least after sweeps.
func observe(prev map[int]Watched, buckets []relay.BucketReport, drained []int, after int) (map[int]Watched, []int) {
	next := map[int]Watched{}
	var stuck []int
	for _, b := range buckets {
		w, had := prev[b.Bucket]
		switch {
		case b.Err != nil:
			if had {
				next[b.Bucket] = w
			}
			continue
		case !pendingAt(b) || slices.Contains(drained, b.Bucket):
			continue
		case had && w.Head == b.Lease.Head:
			w.Sweeps++
		default:
			w = Watched{Head: b.Lease.Head, Sweeps: 1}
		}
		next[b.Bucket] = w
		if w.Sweeps >= after {
			stuck = append(stuck, b.Bucket)
		}
	}
	slices.Sort(stuck)
	return next, stuck
}
