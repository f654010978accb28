// Package sim is a deterministic simulator for the relay engine: a seeded
// scheduler that runs every actor (writers, stream deliveries, drains, lease
// watchdogs, timers) one at a time and chooses at random which goes next at
// every store call, publish and wait, under a simulated clock. Given a seed,
// a run is reproducible; the checker then verifies that every committed
// message was published.
//
// It implements seam.Scheduler, so the engine's waits, goroutines and timers
// go through it, and wraps the store and the publisher so that each of their
// calls is a point where another actor may run first.
package sim

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/dynakafka/outbox/internal/seam"
)

// Epoch is where simulated time starts.
var Epoch = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

// actor is one goroutine under the scheduler.
type actor struct {
	id   int
	name string
	run  chan struct{} // the scheduler lets the actor run
	// What it waits for while parked (all zero: runnable).
	until  time.Time       // sleeping until then
	stop   <-chan struct{} // or until this closes
	joinOn *actor          // waiting for this actor to finish
	done   bool
}

// Scheduler runs actors one at a time. Build it with New.
type Scheduler struct {
	rng *rand.Rand

	mu      sync.Mutex
	now     time.Time
	actors  []*actor
	current *actor
	parked  chan struct{} // the running actor parked or finished
	nextID  int
	steps   int
	timers  []*timer
	err     error
}

var _ seam.Scheduler = (*Scheduler)(nil)

// New returns a scheduler seeded with seed.
func New(seed uint64) *Scheduler {
	return &Scheduler{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: Epoch, parked: make(chan struct{})}
}

// Rand returns the scheduler's random source; actors use it only while
// they run, so its sequence is deterministic.
func (s *Scheduler) Rand() *rand.Rand { return s.rng }

// Now implements seam.Scheduler and is the lease clock too.
func (s *Scheduler) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// Advance moves simulated time forward by d (while an actor runs).
func (s *Scheduler) Advance(d time.Duration) {
	s.mu.Lock()
	s.now = s.now.Add(d)
	s.mu.Unlock()
}

// Steps returns how many times an actor was scheduled.
func (s *Scheduler) Steps() int { return s.steps }

// Spawn starts an actor that runs f once the scheduler picks it.
func (s *Scheduler) Spawn(name string, f func()) {
	s.spawn(name, f)
}

func (s *Scheduler) spawn(name string, f func()) *actor {
	s.mu.Lock()
	a := &actor{id: s.nextID, name: name, run: make(chan struct{})}
	s.nextID++
	s.actors = append(s.actors, a)
	s.mu.Unlock()
	go func() {
		<-a.run
		defer func() {
			if p := recover(); p != nil {
				s.mu.Lock()
				s.err = fmt.Errorf("actor %s panicked: %v", a.name, p)
				s.mu.Unlock()
			}
			s.mu.Lock()
			a.done = true
			s.mu.Unlock()
			s.parked <- struct{}{}
		}()
		f()
	}()
	return a
}

// park blocks the running actor until the scheduler picks it again.
func (s *Scheduler) park(a *actor) {
	s.parked <- struct{}{}
	<-a.run
}

// Yield lets another actor run first: a point where the real system could
// interleave (a store call, a publish).
func (s *Scheduler) Yield() {
	s.mu.Lock()
	a := s.current
	s.mu.Unlock()
	if a == nil {
		return // not under the scheduler (set-up or checks)
	}
	s.park(a)
}

// Go implements seam.Scheduler.
func (s *Scheduler) Go(f func()) func() {
	child := s.spawn("go", f)
	return func() {
		s.mu.Lock()
		a := s.current
		a.joinOn = child
		s.mu.Unlock()
		s.park(a)
	}
}

// Sleep implements seam.Scheduler.
func (s *Scheduler) Sleep(stop <-chan struct{}, d time.Duration) bool {
	s.mu.Lock()
	a := s.current
	if a == nil {
		s.mu.Unlock()
		panic("sim: Sleep outside an actor")
	}
	a.until = s.now.Add(max(d, 0))
	a.stop = stop
	s.mu.Unlock()
	s.park(a)
	select {
	case <-stop:
		return false
	default:
		return true
	}
}

// timer is a pending AfterFunc.
type timer struct {
	s     *Scheduler
	at    time.Time
	f     func()
	armed bool
}

// AfterFunc implements seam.Scheduler: f runs as a new actor when due.
func (s *Scheduler) AfterFunc(d time.Duration, f func()) seam.Timer {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &timer{s: s, at: s.now.Add(d), f: f, armed: true}
	s.timers = append(s.timers, t)
	return t
}

func (t *timer) Stop() bool {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	was := t.armed
	t.armed = false
	return was
}

func (t *timer) Reset(d time.Duration) {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.at = t.s.now.Add(d)
	if !t.armed {
		t.armed = true
		t.s.timers = append(t.s.timers, t)
	}
}

// runnable reports whether a parked actor may run now.
func (s *Scheduler) runnable(a *actor) bool {
	if a.done {
		return false
	}
	if a.joinOn != nil {
		return a.joinOn.done
	}
	if !a.until.IsZero() {
		if !s.now.Before(a.until) {
			return true
		}
		if a.stop != nil {
			select {
			case <-a.stop:
				return true
			default:
			}
		}
		return false
	}
	return true
}

// Run schedules actors until all have finished, maxSteps is reached or an
// actor panicked. It returns an error for the last two, and when actors
// remain that nothing can wake (a deadlock).
func (s *Scheduler) Run(maxSteps int) error {
	for {
		s.mu.Lock()
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return err
		}
		// Fire due timers as new actors.
		var due []*timer
		keep := s.timers[:0]
		for _, t := range s.timers {
			switch {
			case !t.armed:
			case !t.at.After(s.now):
				t.armed = false
				due = append(due, t)
			default:
				keep = append(keep, t)
			}
		}
		s.timers = keep
		s.mu.Unlock()
		for _, t := range due {
			s.spawn("timer", t.f)
		}

		s.mu.Lock()
		live := s.actors[:0]
		for _, a := range s.actors {
			if !a.done {
				live = append(live, a)
			}
		}
		s.actors = live
		var ready []*actor
		for _, a := range s.actors {
			if s.runnable(a) {
				ready = append(ready, a)
			}
		}
		if len(ready) == 0 {
			// Nothing can run now: let time pass to the next wake-up.
			next := time.Time{}
			for _, a := range s.actors {
				if a.joinOn == nil && !a.until.IsZero() && (next.IsZero() || a.until.Before(next)) {
					next = a.until
				}
			}
			for _, t := range s.timers {
				if t.armed && (next.IsZero() || t.at.Before(next)) {
					next = t.at
				}
			}
			if next.IsZero() {
				n := len(s.actors)
				var names []string
				for _, a := range s.actors {
					names = append(names, a.name)
				}
				s.mu.Unlock()
				if n == 0 {
					return nil
				}
				sort.Strings(names)
				return fmt.Errorf("deadlock: %d actors wait for nothing that can happen: %v", n, names)
			}
			s.now = next
			s.mu.Unlock()
			continue
		}
		a := ready[s.rng.IntN(len(ready))]
		a.until, a.stop, a.joinOn = time.Time{}, nil, nil
		s.current = a
		s.steps++
		steps := s.steps
		s.mu.Unlock()
		if steps > maxSteps {
			var names []string
			for _, a := range s.actors {
				names = append(names, fmt.Sprintf("%s(until %v, join %v)", a.name, a.until.Sub(Epoch), a.joinOn != nil))
			}
			return fmt.Errorf("no progress: more than %d scheduling steps at %v; actors %v", maxSteps, s.Now().Sub(Epoch), names)
		}
		a.run <- struct{}{}
		<-s.parked
		s.mu.Lock()
		s.current = nil
		s.mu.Unlock()
	}
}
