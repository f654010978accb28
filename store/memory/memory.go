// Package memory is an in-process outbox.Store with the same semantics as
// store/dynamo. It exists for fast, deterministic tests of the relay engine
// (and of code built on it) and passes the same conformance suite
// (storetest) as the DynamoDB store. It is not durable.
package memory

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/dynakafka/outbox"
)

// Store is an in-memory outbox.Store and outbox.BucketProbe. The zero value
// is not usable; call New.
type Store struct {
	mu          sync.Mutex
	bucketCount int
	buckets     map[int]map[int64]outbox.Entry
	counters    map[int]int64
	leases      map[int]*outbox.Lease
	relays      map[string]time.Time
	parked      map[int][]outbox.Parked
	tokens      int64 // acquisitions so far: each gets a fresh token
	shared      outbox.Config
	// ce, cf: each counter's BucketCount epoch (absent: 0) and cut point
	// (the last number reserved on it before it moved to ce), as
	// sequence keeps them in the counter item.
	ce, cf map[int]int64

	// Hook, when set, is called at the start of every Store method with the
	// method's name and bucket (-1 when none). A non-nil error is returned
	// from the method before it does anything: tests inject faults with it.
	Hook func(method string, bucket int) error
}

var (
	_ outbox.Store         = (*Store)(nil)
	_ outbox.BucketProbe   = (*Store)(nil)
	_ outbox.CounterProbe  = (*Store)(nil)
	_ outbox.ParkedCounter = (*Store)(nil)
	_ outbox.StuckRecorder = (*Store)(nil)
	_ outbox.EpochGate     = (*Store)(nil)
)

// New returns an empty store for an outbox with bucketCount buckets.
func New(bucketCount int) *Store {
	return &Store{
		bucketCount: bucketCount,
		buckets:     make(map[int]map[int64]outbox.Entry),
		counters:    make(map[int]int64),
		leases:      make(map[int]*outbox.Lease),
		relays:      make(map[string]time.Time),
		parked:      make(map[int][]outbox.Parked),
		ce:          make(map[int]int64),
		cf:          make(map[int]int64),
	}
}

func (s *Store) hook(method string, bucket int) error {
	if s.Hook == nil {
		return nil
	}
	return s.Hook(method, bucket)
}

// Reserve reserves n sequence numbers of bucket and returns the first.
func (s *Store) Reserve(bucket, n int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counters[bucket] += int64(n)
	return s.counters[bucket] - int64(n) + 1
}

// Put stores messages at their Bucket and Sequence as a committed writer
// would. It returns outbox.ErrAlreadyWritten, storing none of them, if any
// position is taken (by a message or a fence), like a cancelled transaction.
func (s *Store) Put(msgs ...outbox.Message) error {
	return s.PutStamped(0, msgs...)
}

// PutStamped is Put for messages whose sequence numbers were reserved at
// BucketCount epoch epoch: their entries carry it (Entry.Epoch), as
// store/dynamo's message items carry their stamp.
func (s *Store) PutStamped(epoch int64, msgs ...outbox.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		if _, ok := s.buckets[m.Bucket][m.Sequence]; ok {
			return outbox.ErrAlreadyWritten
		}
	}
	for _, m := range msgs {
		if s.buckets[m.Bucket] == nil {
			s.buckets[m.Bucket] = make(map[int64]outbox.Entry)
		}
		s.buckets[m.Bucket][m.Sequence] = outbox.Entry{Sequence: m.Sequence, Message: m, Epoch: epoch}
		// As if reserved: a writer's sequence is always at most the counter.
		s.counters[m.Bucket] = max(s.counters[m.Bucket], m.Sequence)
	}
	return nil
}

// PutUndecodable stores an item the relay cannot decode, at bucket/seq.
func (s *Store) PutUndecodable(bucket int, seq int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buckets[bucket] == nil {
		s.buckets[bucket] = make(map[int64]outbox.Entry)
	}
	s.buckets[bucket][seq] = outbox.Entry{Sequence: seq, Err: err, Message: outbox.Message{Bucket: bucket, Sequence: seq}}
}

// Count returns how many messages (not tombstones) are stored in bucket.
func (s *Store) Count(bucket int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.buckets[bucket] {
		if !e.Fence {
			n++
		}
	}
	return n
}

// Lease returns a copy of the bucket's lease as stored.
func (s *Store) Lease(bucket int) outbox.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.leases[bucket]; l != nil {
		return *l
	}
	return outbox.Lease{Bucket: bucket}
}

// Config implements outbox.Store.
func (s *Store) Config(ctx context.Context) (outbox.Config, error) {
	if err := s.hook("Config", -1); err != nil {
		return outbox.Config{}, err
	}
	s.mu.Lock()
	c := s.shared
	c.BucketCount = s.bucketCount
	s.mu.Unlock()
	c.FormatVersion = outbox.FormatVersion
	return c, ctx.Err()
}

// SetConfig makes Config report c's shared settings (Mode, Retention,
// Topics, MaxMessageBytes, Headers), as a config item would; the bucket
// count stays New's. Default: none of them (the defaults).
func (s *Store) SetConfig(c outbox.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.BucketEpoch = s.shared.BucketEpoch
	s.shared = c
}

// SetBucketCount makes Config report count at BucketCount epoch epoch, as
// the config item says after an online BucketCount change (the simulator
// models the change's counters itself).
func (s *Store) SetBucketCount(count int, epoch int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bucketCount, s.shared.BucketEpoch = count, epoch
}

// Flip makes Config report an online BucketCount change's flip: count at
// the next epoch, with the old count's epoch draining until deadline
// (Config.OldBucketCount), as store/dynamo's ChangeBucketCount writes it.
// It returns the new epoch. Counters are cut by Cut or CutTo (GateOpen and
// EndOldEpoch cut one they need that nobody cut yet, as the DynamoDB store
// does).
func (s *Store) Flip(count int, deadline time.Time) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shared.OldBucketCount, s.shared.ChangeDeadline = s.bucketCount, deadline
	s.bucketCount = count
	s.shared.BucketEpoch++
	return s.shared.BucketEpoch
}

// EpochError is ReserveAt or CutTo refused because bucket's counter serves
// another BucketCount epoch (Counter) than the caller's; Cut is its cut
// point. As sequence.EpochError.
type EpochError struct {
	Bucket         int
	Epoch, Counter int64
	Cut            int64
}

func (e *EpochError) Error() string {
	return fmt.Sprintf("memory: bucket %d's counter serves BucketCount epoch %d, the caller's is %d", e.Bucket, e.Counter, e.Epoch)
}

// ReserveAt is Reserve for a writer at BucketCount epoch epoch: refused
// (an *EpochError, nothing reserved) unless the counter serves epoch, as
// sequence.Counter.ReserveAt.
func (s *Store) ReserveAt(bucket, n int, epoch int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ce := s.ce[bucket]; ce != epoch {
		return 0, &EpochError{Bucket: bucket, Epoch: epoch, Counter: ce, Cut: s.cf[bucket]}
	}
	s.counters[bucket] += int64(n)
	return s.counters[bucket] - int64(n) + 1, nil
}

// CutTo moves bucket's counter to epoch to and returns its cut point, the
// last number reserved on it before, as sequence.Cut: a counter at an
// earlier epoch moves; one at to returns its recorded cut point; one at a
// later epoch is an *EpochError.
func (s *Store) CutTo(bucket int, to int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cutTo(bucket, to)
}

func (s *Store) cutTo(bucket int, to int64) (int64, error) {
	switch ce := s.ce[bucket]; {
	case ce < to:
		s.ce[bucket], s.cf[bucket] = to, s.counters[bucket]
	case ce > to:
		return 0, &EpochError{Bucket: bucket, Epoch: to, Counter: ce, Cut: s.cf[bucket]}
	}
	return s.cf[bucket], nil
}

// Cut is CutTo the current epoch (Flip's).
func (s *Store) Cut(bucket int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, _ := s.cutTo(bucket, s.shared.BucketEpoch)
	return c
}

// GateOpen implements outbox.EpochGate.
func (s *Store) GateOpen(ctx context.Context, bucket int, epoch int64) (bool, []int, error) {
	if err := s.hook("GateOpen", bucket); err != nil {
		return false, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.shared
	c.BucketCount = s.bucketCount
	if epoch <= c.OpenEpoch() {
		return true, nil, ctx.Err()
	}
	if epoch > c.BucketEpoch {
		return false, nil, fmt.Errorf("memory: bucket %d holds a message of BucketCount epoch %d, past the store's %d", bucket, epoch, c.BucketEpoch)
	}
	waiting := s.undrained(outbox.OldBucketsOf(bucket, c.OldBucketCount, c.BucketCount))
	return len(waiting) == 0, waiting, ctx.Err()
}

// EndOldEpoch implements outbox.EpochGate.
func (s *Store) EndOldEpoch(ctx context.Context, stored outbox.Config) (bool, []int, error) {
	if err := s.hook("EndOldEpoch", -1); err != nil {
		return false, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !stored.Draining() || s.shared.BucketEpoch != stored.BucketEpoch || s.shared.OldBucketCount == 0 {
		return false, nil, ctx.Err()
	}
	old := make([]int, stored.OldBucketCount)
	for b := range old {
		old[b] = b
	}
	if waiting := s.undrained(old); len(waiting) > 0 {
		return false, waiting, ctx.Err()
	}
	s.shared.OldBucketCount, s.shared.ChangeDeadline = 0, time.Time{}
	return true, nil, ctx.Err()
}

// undrained returns the buckets of old that have not decided every number
// up to their cut points (cutting those nobody cut yet); s.mu is held.
func (s *Store) undrained(old []int) []int {
	var waiting []int
	for _, b := range old {
		cut, err := s.cutTo(b, s.shared.BucketEpoch)
		if err != nil {
			panic(err) // a counter past the config item's epoch: not a state this store reaches
		}
		head := s.lease(b).Head
		for head < cut {
			if e, ok := s.buckets[b][head+1]; !ok || !e.Fence {
				break
			}
			head++
		}
		if head < cut {
			waiting = append(waiting, b)
		}
	}
	return waiting
}

func (s *Store) lease(bucket int) *outbox.Lease {
	l := s.leases[bucket]
	if l == nil {
		l = &outbox.Lease{Bucket: bucket}
		s.leases[bucket] = l
	}
	return l
}

// Acquire implements outbox.Store.
func (s *Store) Acquire(ctx context.Context, bucket int, owner string, now time.Time, d time.Duration) (outbox.Lease, error) {
	if err := s.hook("Acquire", bucket); err != nil {
		return outbox.Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return outbox.Lease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lease(bucket)
	if l.HeldAt(now) {
		// Held, whatever the owner's name: another process may share it.
		l.Wake++
		return outbox.Lease{}, outbox.ErrLeaseHeld
	}
	out := outbox.Lease{}
	if l.Owner != "" {
		out.TakenOver = !l.Expires.IsZero()
		if l.Expires.IsZero() {
			out.PrevReleasedBy, out.PrevToken = l.Owner, l.Token
		}
	}
	s.tokens++
	l.Epoch++
	l.Owner, l.Token = owner, fmt.Sprintf("m%d", s.tokens)
	l.Expires = now.Add(d)
	out.Bucket, out.Owner, out.Token, out.Expires, out.Head, out.Cleaned = l.Bucket, l.Owner, l.Token, l.Expires, l.Head, l.Cleaned
	out.Gap, out.GapSince, out.Wake, out.Epoch, out.Stuck = l.Gap, l.GapSince, l.Wake, l.Epoch, l.Stuck
	out.Process = l.Process // the releaser's, until this hold's release
	return out, nil
}

// ours reports whether cur is l's hold: the same owner and, when l carries
// one, the same token.
func ours(cur *outbox.Lease, l outbox.Lease) bool {
	return l.Owner != "" && cur.Owner == l.Owner && (l.Token == "" || cur.Token == l.Token)
}

func (s *Store) owned(l outbox.Lease, now time.Time) (*outbox.Lease, error) {
	cur := s.lease(l.Bucket)
	if !ours(cur, l) || !cur.Expires.After(now) {
		return nil, outbox.ErrLeaseLost
	}
	return cur, nil
}

// Renew implements outbox.Store.
func (s *Store) Renew(ctx context.Context, l outbox.Lease, now time.Time, d time.Duration) (outbox.Lease, error) {
	if err := s.hook("Renew", l.Bucket); err != nil {
		return outbox.Lease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.owned(l, now)
	if err != nil {
		return outbox.Lease{}, err
	}
	cur.Expires = now.Add(d)
	return *cur, ctx.Err()
}

// Update implements outbox.Store.
func (s *Store) Update(ctx context.Context, l outbox.Lease, u outbox.LeaseUpdate, now time.Time) (outbox.Lease, error) {
	if err := s.hook("Update", l.Bucket); err != nil {
		return outbox.Lease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.owned(l, now)
	if err != nil {
		return outbox.Lease{}, err
	}
	if u.Head < cur.Head {
		return outbox.Lease{}, outbox.ErrLeaseLost
	}
	cur.Head, cur.Cleaned, cur.Gap, cur.GapSince = u.Head, max(cur.Cleaned, u.Cleaned), u.Gap, u.GapSince
	if !u.Expires.IsZero() {
		cur.Expires = u.Expires
	}
	return *cur, ctx.Err()
}

// Release implements outbox.Store.
func (s *Store) Release(ctx context.Context, l outbox.Lease, head, cleaned int64) (outbox.Lease, error) {
	if err := s.hook("Release", l.Bucket); err != nil {
		return outbox.Lease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.lease(l.Bucket)
	switch {
	case !ours(cur, l):
		return outbox.Lease{}, outbox.ErrLeaseLost
	case cur.Expires.IsZero():
		return *cur, ctx.Err() // released already
	case cur.Wake != l.Wake:
		return *cur, outbox.ErrWoken
	case head < cur.Head || min(cleaned, head) < cur.Cleaned:
		return outbox.Lease{}, fmt.Errorf("memory: release bucket %d: marks would move backwards: %w", l.Bucket, outbox.ErrLeaseLost)
	}
	s.giveUp(cur, l, head, cleaned)
	cur.Wake = 0
	return *cur, ctx.Err()
}

// Abandon implements outbox.Store.
func (s *Store) Abandon(ctx context.Context, l outbox.Lease, head, cleaned int64) error {
	if err := s.hook("Abandon", l.Bucket); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.lease(l.Bucket); ours(cur, l) {
		s.giveUp(cur, l, head, cleaned)
	}
	return ctx.Err()
}

// giveUp ends l's hold: owner kept, expiry cleared, marks moved forward,
// the releasing process recorded.
func (s *Store) giveUp(cur *outbox.Lease, l outbox.Lease, head, cleaned int64) {
	cur.Expires = time.Time{}
	if l.Process != "" {
		cur.Process = l.Process
	}
	if head > cur.Head {
		cur.Head = head
		if cur.Gap != 0 && cur.Gap <= head {
			cur.Gap, cur.GapSince = 0, time.Time{}
		}
	}
	cur.Cleaned = max(cur.Cleaned, min(cleaned, cur.Head))
}

// Advance implements outbox.Store.
func (s *Store) Advance(ctx context.Context, l outbox.Lease, head, cleaned int64, now time.Time) (outbox.Lease, error) {
	if err := s.hook("Advance", l.Bucket); err != nil {
		return outbox.Lease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.lease(l.Bucket)
	switch {
	case cur.HeldAt(now):
		return outbox.Lease{}, outbox.ErrLeaseHeld
	case cur.Head == head && head > l.Head:
		return *cur, ctx.Err() // a resend that applied, or another relay that got there first
	case cur.Head != l.Head || cur.Gap != l.Gap || head < cur.Head:
		return outbox.Lease{}, outbox.ErrLeaseLost
	}
	cur.Head = head
	cur.Cleaned = max(cur.Cleaned, min(cleaned, head))
	if cur.Gap != 0 && cur.Gap <= head {
		cur.Gap, cur.GapSince = 0, time.Time{}
	}
	return *cur, ctx.Err()
}

// Pending implements outbox.Store.
func (s *Store) Pending(ctx context.Context, bucket int, after int64, limit int) ([]outbox.Entry, bool, error) {
	if err := s.hook("Pending", bucket); err != nil {
		return nil, false, err
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var seqs []int64
	for seq := range s.buckets[bucket] {
		if seq > after {
			seqs = append(seqs, seq)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	end := len(seqs) <= limit
	if !end {
		seqs = seqs[:limit]
	}
	out := make([]outbox.Entry, 0, len(seqs))
	for _, seq := range seqs {
		out = append(out, s.buckets[bucket][seq])
	}
	return out, end, nil
}

// MarkPublished implements outbox.Store.
func (s *Store) MarkPublished(ctx context.Context, bucket int, seqs []int64, now time.Time) error {
	if err := s.hook("MarkPublished", bucket); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, seq := range seqs {
		if e, ok := s.buckets[bucket][seq]; ok && !e.Fence {
			s.buckets[bucket][seq] = outbox.Entry{Sequence: seq, Fence: true, Published: true,
				Message: outbox.Message{Bucket: bucket, Sequence: seq, CreatedAt: now}}
		}
	}
	return ctx.Err()
}

// Fence implements outbox.Store.
func (s *Store) Fence(ctx context.Context, bucket int, seq int64, now time.Time) error {
	if err := s.hook("Fence", bucket); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.buckets[bucket][seq]; ok {
		return outbox.ErrAlreadyWritten
	}
	if s.buckets[bucket] == nil {
		s.buckets[bucket] = make(map[int64]outbox.Entry)
	}
	s.buckets[bucket][seq] = outbox.Entry{Sequence: seq, Fence: true, Message: outbox.Message{Bucket: bucket, Sequence: seq, CreatedAt: now}}
	return ctx.Err()
}

// Park implements outbox.Store.
func (s *Store) Park(ctx context.Context, l outbox.Lease, p outbox.Parked, now time.Time) (outbox.Lease, error) {
	if err := s.hook("Park", l.Bucket); err != nil {
		return outbox.Lease{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.owned(l, now)
	if err != nil {
		return outbox.Lease{}, err
	}
	if p.Bucket != l.Bucket || p.Sequence != cur.Head+1 {
		return outbox.Lease{}, fmt.Errorf("memory: park bucket %d sequence %d: head is %d: %w", p.Bucket, p.Sequence, cur.Head, outbox.ErrLeaseLost)
	}
	e, ok := s.buckets[p.Bucket][p.Sequence]
	if !ok || e.Fence {
		return outbox.Lease{}, fmt.Errorf("memory: park bucket %d sequence %d: no message there", p.Bucket, p.Sequence)
	}
	if e.Err == nil {
		p.Message = e.Message
	}
	p.ParkedAt = now
	s.parked[p.Bucket] = append(s.parked[p.Bucket], p)
	delete(s.buckets[p.Bucket], p.Sequence)
	cur.Head = p.Sequence
	return *cur, ctx.Err()
}

// Parked returns the dead-letter records of bucket, in the order parked.
func (s *Store) Parked(bucket int) []outbox.Parked {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]outbox.Parked(nil), s.parked[bucket]...)
}

// Heartbeat implements outbox.Store.
func (s *Store) Heartbeat(ctx context.Context, id string, now time.Time, ttl time.Duration) error {
	if err := s.hook("Heartbeat", -1); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.relays[id] = now
	return ctx.Err()
}

// LiveRelays implements outbox.Store.
func (s *Store) LiveRelays(ctx context.Context, now time.Time, ttl time.Duration) ([]string, error) {
	if err := s.hook("LiveRelays", -1); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, seen := range s.relays {
		if seen.After(now.Add(-ttl)) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, ctx.Err()
}

// ReadLease implements outbox.BucketProbe.
func (s *Store) ReadLease(ctx context.Context, bucket int) (outbox.Lease, error) {
	if err := s.hook("ReadLease", bucket); err != nil {
		return outbox.Lease{}, err
	}
	return s.Lease(bucket), ctx.Err()
}

// Peek implements outbox.BucketProbe: it counts up to limit messages of
// bucket above after, skipping fences however many there are.
func (s *Store) Peek(ctx context.Context, bucket int, after int64, limit int) (int, time.Time, error) {
	if err := s.hook("Peek", bucket); err != nil {
		return 0, time.Time{}, err
	}
	if err := ctx.Err(); err != nil {
		return 0, time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var seqs []int64
	for seq, e := range s.buckets[bucket] {
		if seq > after && !e.Fence {
			seqs = append(seqs, seq)
		}
	}
	if len(seqs) == 0 {
		return 0, time.Time{}, nil
	}
	first := seqs[0]
	for _, seq := range seqs {
		first = min(first, seq)
	}
	return min(len(seqs), limit), s.buckets[bucket][first].Message.CreatedAt, nil
}

// LastSequence implements outbox.CounterProbe.
func (s *Store) LastSequence(ctx context.Context, bucket int) (int64, error) {
	if err := s.hook("LastSequence", bucket); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counters[bucket], ctx.Err()
}

// CountParked implements outbox.ParkedCounter.
func (s *Store) CountParked(ctx context.Context, bucket int) (int, error) {
	if err := s.hook("CountParked", bucket); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parked[bucket]), ctx.Err()
}

// RecordStuck implements outbox.StuckRecorder: it stores st on the bucket's
// lease unless the head already passed st.Sequence.
func (s *Store) RecordStuck(ctx context.Context, bucket int, st outbox.Stuck) error {
	if err := s.hook("RecordStuck", bucket); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.lease(bucket); l.Head < st.Sequence {
		l.Stuck = st
	}
	return ctx.Err()
}
