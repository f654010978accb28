// Package seam holds the relay engine's test seams: named crash points and
// a fault injector consulted at each of them, and the scheduler through which
// a drain waits and starts goroutines, which a deterministic simulation
// replaces. Package outbox installs them with the option that With returns;
// none of this is part of the library's public API.
package seam

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// CrashPoint names a point in a drain where a FaultInjector can crash or
// stall the relay. Each is a place where a real process can die, and
// docs/design.md says what happens after a crash there.
type CrashPoint string

// The crash points of a drain.
const (
	// AfterAcquire: the lease was just taken (or resumed); nothing read yet.
	AfterAcquire CrashPoint = "after-acquire"
	// DuringRenewal: a renewal was just written.
	DuringRenewal CrashPoint = "during-renewal"
	// AfterProduce: Kafka acknowledged a batch; head not advanced yet
	// (the batch is published again: duplicates).
	AfterProduce CrashPoint = "after-produce"
	// AfterHeadUpdate: head advanced; nothing marked yet (leftovers).
	AfterHeadUpdate CrashPoint = "after-head-update"
	// MidDelete: part of the acknowledged batch replaced by tombstones.
	MidDelete CrashPoint = "mid-delete"
	// DuringFence: some of a gap's fences written.
	DuringFence CrashPoint = "during-fence"
)

// CrashPoints lists every crash point.
var CrashPoints = []CrashPoint{AfterAcquire, DuringRenewal, AfterProduce, AfterHeadUpdate, MidDelete, DuringFence}

// FaultInjector is consulted at every crash point of every drain. Returning
// a non-nil error crashes the drain there: it stops at once, writes nothing
// more and keeps its lease (as a dead process would; another relay takes the
// bucket over when the lease expires). Sleeping before returning stalls the
// drain.
type FaultInjector interface {
	At(ctx context.Context, p CrashPoint, bucket int) error
}

// CrashError is what a drain returns after an injected crash.
type CrashError struct {
	Point  CrashPoint
	Bucket int
	Err    error
}

func (e *CrashError) Error() string {
	return fmt.Sprintf("outbox: injected crash at %s in bucket %d: %v", e.Point, e.Bucket, e.Err)
}

func (e *CrashError) Unwrap() error { return e.Err }

// Scheduler is how a drain waits and runs its lease watchdog. The default
// uses goroutines and the runtime's timers; a simulation replaces it so that
// it decides, deterministically, when each wait ends.
type Scheduler interface {
	// Now is the monotonic time the drain measures its windows with (not
	// the lease clock, which is the relay's Clock option).
	Now() time.Time
	// Go runs f in a new goroutine and returns a function that waits for
	// it to return.
	Go(f func()) (wait func())
	// Sleep waits d, or until stop is closed; it reports whether the full
	// d passed.
	Sleep(stop <-chan struct{}, d time.Duration) bool
	// AfterFunc calls f in its own goroutine after d, unless stopped.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it
	// did.
	Stop() bool
	// Reset moves the call to d from now (or schedules it again).
	Reset(d time.Duration)
}

// Hooks are what a test installs in a relay. Zero fields are off.
type Hooks struct {
	// Faults is consulted at every crash point. With it, every tombstone
	// write is split in two requests so a crash can fall between them.
	Faults FaultInjector
	// Scheduler replaces the runtime's goroutines and timers.
	Scheduler Scheduler
	// Rand, when set, replaces the random source of backoff jitter:
	// Rand(n) returns a number in [0, n).
	Rand func(n int64) int64
	// NoHandoverWait (tests only) breaks the hand-over's exclusion: an
	// acquisition from another process's release publishes at once,
	// without the ResumeWindow wait, so a checker can show that it sees
	// the overlap the wait prevents (sim.RunWithoutHandoverWait).
	NoHandoverWait bool
}

// install is set by package outbox: it turns hooks into a relay.Option.
var install func(Hooks) any

// Register is called once, by package outbox, with the function that turns
// hooks into a relay.Option.
func Register(f func(Hooks) any) { install = f }

// With returns the relay.Option that installs h, as an any (this package
// cannot name the type): seam.With(h).(relay.Option).
func With(h Hooks) any { return install(h) }

// Runtime is the default Scheduler: goroutines and the runtime's timers.
var Runtime Scheduler = runtime{}

type runtime struct{}

func (runtime) Now() time.Time { return time.Now() }

func (runtime) Go(f func()) func() {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f()
	}()
	return wg.Wait
}

func (runtime) Sleep(stop <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-stop:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

func (runtime) AfterFunc(d time.Duration, f func()) Timer { return runtimeTimer{time.AfterFunc(d, f)} }

type runtimeTimer struct{ t *time.Timer }

func (t runtimeTimer) Stop() bool            { return t.t.Stop() }
func (t runtimeTimer) Reset(d time.Duration) { t.t.Reset(d) }
