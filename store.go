package outbox

import (
	"context"
	"time"
)

// Config is the outbox's stored configuration (the config item of the control
// table). Writers and relays read it at start and refuse to run when their own
// BucketCount differs.
type Config struct {
	BucketCount int
	// FormatVersion is the item format version the outbox was created with.
	FormatVersion int
}

// Lease is one owner's hold on one bucket, as last read or written.
//
// Head is the highest sequence number already decided (published and
// acknowledged, or fenced); the relay publishes from Head+1. Cleaned is the
// highest sequence number below which every message is known to be deleted;
// the relay reads from Cleaned+1, so messages in (Cleaned, Head] are leftovers
// of a crash between the head update and the delete, deleted without being
// republished.
type Lease struct {
	Bucket  int
	Owner   string
	Expires time.Time
	Head    int64
	Cleaned int64
	// Gap is the first missing sequence number the bucket is waiting on, 0 for
	// none; GapSince is when a relay first saw it missing. Both are stored on
	// the lease so GapTimeout holds across invocations and restarts.
	Gap      int64
	GapSince time.Time
	// Wake counts wake-ups left by contenders that found the lease held. The
	// holder releases only if Wake is still what it last saw.
	Wake int64
	// Epoch increases with every acquisition by a new owner. Probes use it
	// to tell holders apart.
	Epoch int64
}

// LeaseUpdate is what the relay writes to its lease after a batch, in one
// conditional write (conditional on owning the lease).
type LeaseUpdate struct {
	Head     int64
	Cleaned  int64
	Gap      int64
	GapSince time.Time
	// Expires, when non-zero, extends the lease.
	Expires time.Time
}

// Store is what the relay engine needs from a storage backend. Every method
// takes a context and must honour its cancellation. store/dynamo implements it
// over two DynamoDB tables; the conformance suite in storetest checks any
// implementation.
type Store interface {
	// Config reads the outbox's stored configuration.
	Config(ctx context.Context) (Config, error)

	// Acquire takes the bucket's lease for owner until now+d, when it is free,
	// expired (Expires <= now), or already owned by owner. Otherwise it leaves
	// a wake-up on the lease (increments Wake, conditional on the holder being
	// unchanged, so the holder drains again before it releases) and returns
	// ErrLeaseHeld. If the holder released in between, Acquire tries again.
	Acquire(ctx context.Context, bucket int, owner string, now time.Time, d time.Duration) (Lease, error)
	// Renew extends l to now+d if l.Owner still owns it and it has not
	// expired at now; otherwise ErrLeaseLost.
	Renew(ctx context.Context, l Lease, now time.Time, d time.Duration) (Lease, error)
	// Update writes u to the lease if l.Owner still owns it and it has not
	// expired at now; otherwise ErrLeaseLost. Head never moves backwards.
	Update(ctx context.Context, l Lease, u LeaseUpdate, now time.Time) (Lease, error)
	// Release gives the lease up (writing cleaned) if its Wake is still
	// l.Wake. If a wake-up arrived it returns ErrWoken with the lease, still
	// held, carrying the new Wake. ErrLeaseLost if no longer owned.
	Release(ctx context.Context, l Lease, cleaned int64) (Lease, error)

	// Pending returns up to limit entries of bucket with sequence > after, in
	// ascending sequence order, read consistently. The second result is true
	// when the read reached the end of the bucket (no entries beyond those
	// returned).
	Pending(ctx context.Context, bucket int, after int64, limit int) ([]Entry, bool, error)
	// Delete deletes the messages at these sequence numbers. Deleting a
	// missing item is not an error. The engine passes only sequence numbers
	// it read as messages, never fences (fences expire by TTL), so a store
	// may delete unconditionally.
	Delete(ctx context.Context, bucket int, seqs []int64) error
	// Fence puts a fence tombstone at seq if nothing is stored there, else
	// returns ErrAlreadyWritten.
	Fence(ctx context.Context, bucket int, seq int64, now time.Time) error

	// Park moves the item at p.Sequence, which must be l.Head+1, out of the
	// pending set into a dead-letter record and advances head to it, in one
	// transaction conditional on l.Owner owning the lease at now (otherwise
	// ErrLeaseLost; nothing changes). The dead-letter record keeps the item as
	// stored (an undecodable item is copied as it is) plus p's reason,
	// attempts and failure times. Parking never deletes data.
	Park(ctx context.Context, l Lease, p Parked, now time.Time) (Lease, error)

	// Heartbeat records that relay id is alive at now, for fair sharing.
	Heartbeat(ctx context.Context, id string, now time.Time, ttl time.Duration) error
	// LiveRelays returns the ids of relays whose heartbeat is newer than
	// now-ttl, sorted.
	LiveRelays(ctx context.Context, now time.Time, ttl time.Duration) ([]string, error)
}

// Parked describes a message moved to the dead letters.
type Parked struct {
	Bucket   int
	Sequence int64
	// Message is the message as read; for an undecodable item only Bucket
	// and Sequence are set (the store keeps the raw item).
	Message Message
	// Reason is the error that made the relay park it.
	Reason string
	// Class of that error (RecordPermanent).
	Class ErrorClass
	// Attempts is how many publish attempts failed.
	Attempts     int
	FirstFailure time.Time
	LastFailure  time.Time
	// ParkedAt is when it was parked; set by the store on read.
	ParkedAt time.Time
}

// BucketProbe is an optional Store capability used by the sweeper: a cheap,
// bounded look at one bucket, without a table scan.
type BucketProbe interface {
	// ReadLease returns the bucket's lease as stored, read consistently (a
	// Lease with only Bucket set when there is none yet).
	ReadLease(ctx context.Context, bucket int) (Lease, error)
	// Peek counts the messages of bucket with sequence > after, up to
	// limit, and returns that count and the creation time of the first of
	// them (zero when none). Fences, and any other item marked as a fence,
	// are skipped without counting toward limit, however many come before
	// the first message: a bucket with a message above after is never
	// reported empty. An undecodable item counts as a message (the relay
	// must park it). Implementations bound each read they make, not the
	// number of fences skipped, and document how.
	Peek(ctx context.Context, bucket int, after int64, limit int) (pending int, oldest time.Time, err error)
}

// Publisher produces messages to the broker. Publish produces msgs (one
// bucket's contiguous run, in sequence order) and returns how many of them,
// counted from the front, were acknowledged, and the first error in message
// order. It must not return before every record it started has completed or
// been aborted; when ctx is done it aborts what it has not sent yet.
type Publisher interface {
	Publish(ctx context.Context, msgs []Message) (acked int, err error)
}

// Clock tells the time. The relay uses it for leases, heartbeats and gap
// timeouts, so tests can drive time.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// SystemClock is the wall clock.
var SystemClock Clock = systemClock{}
