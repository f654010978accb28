package outbox

import (
	"context"
	"fmt"
	"time"
)

// Mode says what becomes of a message once Kafka acknowledged it. It is a
// property of the outbox, stored in its config item: writers and relays
// read it there, and a relay configured for the other mode refuses to run.
type Mode int

const (
	// DeleteMode (the default): each acknowledged message is replaced by a
	// tombstone of a few dozen bytes — the same one write unit as deleting
	// it — which DynamoDB's TTL removes later, for free. The tombstone
	// marks the sequence number as decided, so the bucket's stored head
	// may lag behind it.
	DeleteMode Mode = iota
	// WatermarkMode: the relay never writes per message. The bucket's head
	// is the watermark: everything at or below it was acknowledged.
	// Messages stay, with their payload, until their TTL (the outbox's
	// retention, set by the writer) removes them, and can be published
	// again by range (replay). A message still pending when its TTL passes
	// can be deleted by DynamoDB before it is published: the retention
	// must be far above any backlog the outbox can build up.
	WatermarkMode
)

func (m Mode) String() string {
	switch m {
	case DeleteMode:
		return "delete"
	case WatermarkMode:
		return "watermark"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "delete" or "watermark".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "delete":
		return DeleteMode, nil
	case "watermark":
		return WatermarkMode, nil
	}
	return 0, fmt.Errorf("outbox: unknown mode %q: want delete or watermark", s)
}

// Lease is one bucket's lease item, as last read or written.
//
// A lease is in one of four states:
//
//   - free: no owner has ever held it;
//   - held: Owner holds it until Expires (after now);
//   - expired: Owner held it and neither renewed nor released it (a
//     crashed or stalled holder); anyone may take it over;
//   - released: Owner released it (Expires is zero) and nobody has taken
//     it since. Anyone may acquire it; Owner may also drain the bucket
//     again without acquiring it (see docs/design.md, "resuming").
//
// Head is the highest sequence number already decided (published and
// acknowledged, fenced or parked), as far as the lease item knows: the
// items themselves are the truth (a published message is replaced by a
// tombstone before head moves past it), so a stored head may lag. Cleaned is
// the highest sequence number below which every item is known decided and
// marked; the relay reads from Cleaned+1. Messages in (Cleaned, Head] are
// leftovers of an older relay version that advanced head before deleting;
// they are marked without being published again.
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
	// Wake counts wake-ups left by contenders that found the lease held
	// since it was last released. The holder releases only if Wake is still
	// what it was before its last complete read; a release resets it.
	// Wake-ups still on a lease when it is acquired were never honoured
	// (their holder failed or crashed): the new holder drains to the end.
	Wake int64
	// Epoch increases with every acquisition.
	Epoch int64
	// Token identifies one acquisition: Acquire writes a fresh one, Release
	// and Abandon keep it. Owner names a relay, and several processes may
	// share a name (the relay function's containers do); the token names
	// the hold, so the writes a holder makes under its hold (Renew, Update,
	// Release, Abandon, Park) are conditional on it, and a resent Acquire
	// recognises its own acquisition by it. A process may resume a released
	// lease only if the token is one it acquired itself (docs/design.md §4.3).
	// Empty for a lease written by a version before 0.3.
	Token string
	// TakenOver is set by Acquire only: the lease was taken from a hold
	// that had expired without a release (a crashed or stalled holder,
	// whatever its owner name).
	TakenOver bool
	// PrevReleasedBy and PrevToken are set by Acquire only, when the lease
	// was released: the owner and token of the hold that released it, the
	// acquirer's own name included. Whoever released it may still be
	// draining the bucket as its resumer, within ResumeWindow of its last
	// look at the lease, so the new holder reads and publishes nothing
	// before ResumeWindow has passed since its acquisition — unless
	// PrevToken is a hold the acquiring process released itself, or its
	// publisher fences earlier holders (HolderFencer).
	PrevReleasedBy string
	PrevToken      string
	// Process names the process instance of the hold: a relay sets it
	// (an id of its own, drawn at New) on the lease it releases, and Release
	// and Abandon store it, so that a released lease says which process released it,
	// where Owner may be shared. A relay that takes over one bucket of a
	// process's releases drains that process's other busy buckets beside it
	// (docs/design.md §4.3.4, companion drains). Empty when not stored (a
	// store or a version without it).
	Process string
	// Stuck is why the bucket last stopped, as a relay recorded it (a
	// StuckRecorder store): current while Stuck.Sequence > Head, stale
	// once the head passed it. Zero when nothing was recorded.
	Stuck Stuck
}

// Stuck is why a bucket stopped: the permanent, topic- or cluster-wide
// error (class Fatal: a missing topic, an authorization failure) that its
// first pending message met. Relays record it on the bucket's lease item
// (at most once a minute per bucket and process) so that operators see it
// (outbox status, REASON); it never changes the lease's hold.
type Stuck struct {
	Sequence  int64 // the message the bucket stopped at
	MessageID string
	Topic     string
	Class     ErrorClass
	Reason    string // the error, at most MaxStuckReason bytes
	// Since is when a relay first saw the bucket stopped at Sequence, Last
	// the latest record; Count is how many failed attempts were counted
	// since Since (a lower bound: attempts between records are counted
	// in the process that made them).
	Since, Last time.Time
	Count       int64
}

// MaxStuckReason bounds Stuck.Reason.
const MaxStuckReason = 1024

// Current reports whether s still describes a bucket whose head is head.
func (s Stuck) Current(head int64) bool { return s.Sequence > head }

// StuckRecorder is an optional Store capability: it records why a bucket
// stopped on its lease item, without touching the hold (owner, expiry,
// head, cleaned, gap, wake count, epoch), and only while the stored head is
// below s.Sequence (a record for a bucket that moved on is dropped). Any
// relay may record, held or not; the write is idempotent.
type StuckRecorder interface {
	RecordStuck(ctx context.Context, bucket int, s Stuck) error
}

// HeldAt reports whether an owner holds the lease at now.
func (l Lease) HeldAt(now time.Time) bool { return l.Owner != "" && l.Expires.After(now) }

// Released reports whether the lease is released (owner kept, no expiry).
func (l Lease) Released() bool { return l.Owner != "" && l.Expires.IsZero() }

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
// takes a context and must honour its cancellation, and every write must be
// safe to retry (a retried request that already applied has the same
// outcome). store/dynamo implements it over two DynamoDB tables; the
// conformance suite in storetest checks any implementation.
type Store interface {
	// Config reads the outbox's stored configuration.
	Config(ctx context.Context) (Config, error)

	// ReadLease returns the bucket's lease as stored, read consistently (a
	// Lease with only Bucket set when there is none yet).
	ReadLease(ctx context.Context, bucket int) (Lease, error)
	// Acquire takes the bucket's lease for owner until now+d, with a fresh
	// Token, when it is free, released or expired (Expires <= now). A lease
	// held by anyone — owner's own name included: another process may share
	// it — is not taken: Acquire leaves a wake-up on it (increments Wake,
	// conditional on the hold being unchanged, so the holder drains again
	// before it releases) and returns ErrLeaseHeld — only then. If the
	// holder changes in between, Acquire tries again; if it cannot decide
	// in a few attempts it returns an error that is not ErrLeaseHeld. A
	// resent Acquire that already applied returns the lease it wrote, with
	// the same Token, TakenOver, PrevReleasedBy and PrevToken.
	Acquire(ctx context.Context, bucket int, owner string, now time.Time, d time.Duration) (Lease, error)
	// Renew extends l to now+d if l's hold (l.Owner and, when set, l.Token)
	// is still the lease's and it has not expired at now; otherwise
	// ErrLeaseLost.
	Renew(ctx context.Context, l Lease, now time.Time, d time.Duration) (Lease, error)
	// Update writes u to the lease if l's hold is still the lease's and it
	// has not expired at now; otherwise ErrLeaseLost. Head never moves
	// backwards.
	Update(ctx context.Context, l Lease, u LeaseUpdate, now time.Time) (Lease, error)
	// Release ends l.Owner's hold if no wake-up arrived since l.Wake: it
	// keeps the owner, clears the expiry and the wake count, and writes
	// head and cleaned (neither moves backwards). If a wake-up arrived it
	// returns ErrWoken with the lease, still held, carrying the current
	// Wake. ErrLeaseLost if l's hold is no longer the lease's. A release
	// that already applied returns nil.
	Release(ctx context.Context, l Lease, head, cleaned int64) (Lease, error)
	// Abandon ends l.Owner's hold after a failed drain without honouring
	// wake-ups: they stay on the lease, so whoever acquires it next drains
	// the bucket to its end. It writes head and cleaned like Release. Nil
	// if l's hold is no longer the lease's.
	Abandon(ctx context.Context, l Lease, head, cleaned int64) error
	// Advance moves head and cleaned (and clears a gap they pass) on the
	// lease of a bucket nobody holds at now — free, released or expired —
	// if its head and gap are still l's. The caller guarantees that every
	// sequence number up to head is decided and marked. ErrLeaseHeld if it
	// is held; ErrLeaseLost if it changed since l was read. A resent
	// Advance that already applied (unheld, head already at head) succeeds.
	Advance(ctx context.Context, l Lease, head, cleaned int64, now time.Time) (Lease, error)

	// Pending returns up to limit entries of bucket with sequence > after, in
	// ascending sequence order, read consistently. The second result is true
	// when the read reached the end of the bucket (no entries beyond those
	// returned).
	Pending(ctx context.Context, bucket int, after int64, limit int) ([]Entry, bool, error)
	// MarkPublished replaces the messages at these sequence numbers, which
	// the relay read as messages and Kafka acknowledged, by tombstones
	// (DeleteMode). A tombstone reads as an Entry with Fence and Published
	// set. Marking a missing or already marked sequence number is not an
	// error.
	MarkPublished(ctx context.Context, bucket int, seqs []int64, now time.Time) error
	// Fence puts a fence tombstone at seq if nothing is stored there, else
	// returns ErrAlreadyWritten.
	Fence(ctx context.Context, bucket int, seq int64, now time.Time) error

	// Park moves the item at p.Sequence, which must be l.Head+1, out of the
	// pending set into a dead-letter record and advances head to it, in one
	// transaction conditional on l's hold being the lease's at now (otherwise
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
// order. When ctx is done it returns soon after, even if records it handed to
// its client are unanswered: those are abandoned — not counted as
// acknowledged; they may still be appended (duplicates, which consumers
// drop). It need not abort records not yet sent: with a client shared by
// several buckets, a record queued behind another bucket's cannot be.
type Publisher interface {
	Publish(ctx context.Context, msgs []Message) (acked int, err error)
}

// Isolator is an optional Publisher capability. PublishAlone produces one
// message in a produce request that carries no other record, so that a
// record-level rejection (MESSAGE_TOO_LARGE, INVALID_RECORD) is that
// message's own and not a batch mate's. The relay parks a message only after
// PublishAlone rejected it; with a Publisher that is not an Isolator it
// relies on Publish with that one message.
//
// The relay finds optional capabilities with a type assertion on the
// Publisher it was given. A Publisher that wraps another (to count, trace
// or log its calls) must forward each capability its inner Publisher has —
// Isolator, HolderFencer, ConfigChecker — with a method that calls the
// inner one's (or Publish, FenceHolders and CheckConfig returning nil, when
// the inner one lacks it): a wrapper without them silently loses what they
// give. Without Isolator a
// rejected record's batch mates are parked with it; without HolderFencer
// (around a kafka.TxnPublisher) earlier holders are fenced only at the
// first publish, after the read, and a stalled holder's commit can land in
// between (docs/design.md §7.3).
type Isolator interface {
	PublishAlone(ctx context.Context, msg Message) error
}

// HolderFencer is an optional Publisher capability, for a broker that can
// shut a bucket's earlier publishers out (Kafka transactions:
// kafka.TxnPublisher initialises the bucket's transactional id). After each
// acquisition of a bucket's lease — not for a drain that resumes this
// process's own release — the relay calls FenceHolders once, before it reads
// the bucket, and neither reads nor publishes it unless FenceHolders returned
// nil: from then on nothing that an earlier holder had not made visible
// (a stalled holder's open transaction, its commit, a resumer's next
// transaction) may become visible, so a stalled holder's commit cannot land
// between this holder's read and its first publish (docs/design.md §7.3),
// and the acquirer need not wait out ResumeWindow for a process that may
// still be resuming the bucket (§4.3). ctx ends at the lease's publish
// cut-off at the latest. On an error the drain stops, gives the lease up
// with its wake-ups kept and returns the error (classified as usual); the
// bucket's next drain acquires and fences again.
//
// For that, Publish must never make a producer of its own: it publishes a
// bucket only with the producer FenceHolders initialised for it in this
// process, and once that producer failed (the publisher dropped it) or
// before FenceHolders was ever called, it publishes nothing and returns an
// error wrapping ErrFenceRequired. The relay calls FenceHolders only while
// it holds the bucket's lease (a resumed drain acquires first), so a
// process that lost the bucket can never fence its new holder and then
// commit after that holder's read. A wrapper of a HolderFencer must
// forward it (see Isolator).
type HolderFencer interface {
	FenceHolders(ctx context.Context, bucket int) error
}

// ConfigChecker is an optional Publisher capability, for a publisher that
// uses shared settings of the outbox (kafka.Publisher: MaxMessageBytes and
// the stamped header names, which it takes from the config item it is
// given). relay.New calls CheckConfig with the config item it runs on and
// refuses the publisher when it returns an error (a
// *MisconfigurationError naming the setting), so that a publisher built
// for another outbox, or without its config item, cannot publish records
// that the item's writers and consumers do not expect.
type ConfigChecker interface {
	CheckConfig(stored Config) error
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

// CounterProbe is an optional Store capability: the last sequence number
// reserved in a bucket (0 when none).
type CounterProbe interface {
	LastSequence(ctx context.Context, bucket int) (int64, error)
}

// ParkedCounter is an optional Store capability: how many dead-letter
// records a bucket has.
type ParkedCounter interface {
	CountParked(ctx context.Context, bucket int) (int, error)
}

// EpochGate is an optional Store capability (store/dynamo's and
// store/memory's Store have it): the relays' side of an online BucketCount
// change (docs/design.md §13). Writers go on at once under the new count,
// and stamp each message with the epoch its sequence number was reserved
// at (Entry.Epoch); a relay publishes a bucket's messages of the new epoch
// only once the old buckets whose keys they could share have decided
// every message of the old epoch.
type EpochGate interface {
	// GateOpen reports whether bucket's messages stamped with epoch may be
	// published: the config item's epoch is past epoch, or no old epoch
	// drains, or every old bucket of OldBucketsOf(bucket) decided every
	// sequence number up to its cut point (the last one reserved before
	// its counter moved to the new epoch). waiting names the old buckets
	// not drained yet (for the log and outbox status). A gate never closes
	// again once open.
	GateOpen(ctx context.Context, bucket int, epoch int64) (open bool, waiting []int, err error)
	// EndOldEpoch ends the old epoch stored (the config item as just read)
	// says drains, when every old bucket decided every number up to its
	// cut point: the config item's OldBucketCount and ChangeDeadline are
	// cleared, conditional on it still saying stored's epoch and old
	// count. ended reports that this call's write ended it; waiting names
	// the old buckets not drained yet. A change begun by a version before
	// the cut-over (stored.Frozen()) is aborted instead: the count stays,
	// at the next epoch. Nothing happens when stored shows neither.
	EndOldEpoch(ctx context.Context, stored Config) (ended bool, waiting []int, err error)
}
