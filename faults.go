package outbox

import (
	"context"
	"fmt"
)

// CrashPoint names a point in a drain where a FaultInjector can crash or
// stall the relay. Each is a place where a real process can die, and
// docs/design.md §6 says what happens after a crash there.
type CrashPoint string

// The crash points of a drain.
const (
	// AfterAcquire: the lease was just taken; nothing read yet.
	AfterAcquire CrashPoint = "after-acquire"
	// DuringRenewal: a renewal was just written.
	DuringRenewal CrashPoint = "during-renewal"
	// AfterProduce: Kafka acknowledged a batch; head not advanced yet
	// (the batch is published again: duplicates).
	AfterProduce CrashPoint = "after-produce"
	// AfterHeadUpdate: head advanced; nothing deleted yet (leftovers).
	AfterHeadUpdate CrashPoint = "after-head-update"
	// MidDelete: part of the acknowledged batch deleted.
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
// drain. For tests and soak runs only; see WithFaultInjector.
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

// WithFaultInjector installs a fault injector. Default: none. Production
// relays never set it; with it, every delete is split in two requests so a
// crash can fall between them.
func WithFaultInjector(f FaultInjector) Option { return func(c *config) { c.faults = f } }

// inject consults the fault injector at p.
func (d *drain) inject(ctx context.Context, p CrashPoint) error {
	f := d.r.cfg.faults
	if f == nil {
		return nil
	}
	if err := f.At(ctx, p, d.lease.Bucket); err != nil {
		return &CrashError{Point: p, Bucket: d.lease.Bucket, Err: err}
	}
	return nil
}
