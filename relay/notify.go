package relay

import (
	"math/bits"
	"sync"

	"github.com/dynakafka/outbox"
)

// Notifier carries commit notifications from the writers of a process to
// the relay running in it (Relay.Run), so that a message committed there is
// published at once instead of at the relay's next poll. A writer calls
// Notify with the buckets of a transaction after it committed
// (store/dynamo's WithNotifier option does this); Run, given the same
// Notifier with the WithNotifier option, drains those buckets as soon as it
// is woken. Polling stays the fallback: writers in other processes, a
// missed or dropped notification and a bucket owned by another relay are
// all found by the next poll.
//
// Notifications coalesce: a bucket notified many times before the relay
// looks is drained once, after the last of them (its drain reads to the
// end). Notify never blocks and never fails; it holds at most one pending
// mark per bucket, so its memory is bounded whatever the rate. A
// notification that arrives while the relay drains stays pending and wakes
// it again, so none is lost to a race with the relay going idle.
//
// One Notifier belongs to one relay: two relays taking from one Notifier
// would each see only part of the notifications. A Notifier is safe for
// concurrent use; the zero value is not usable: call NewNotifier.
type Notifier struct {
	mu      sync.Mutex
	pending [outbox.MaxBucketCount / 64]uint64 // one bit per bucket
	any     bool
	wake    chan struct{} // holds a token while notifications are pending
}

// NewNotifier returns a Notifier with nothing pending.
func NewNotifier() *Notifier {
	return &Notifier{wake: make(chan struct{}, 1)}
}

// Notify marks buckets as holding newly committed messages and wakes the
// relay waiting on the Notifier. Call it only after the transaction
// committed: a notification before the commit may be taken and drained
// before the messages are there (they would then wait for the next poll).
// Buckets outside 0..MaxBucketCount-1 are ignored; buckets at or above the
// relay's bucket count are dropped by the relay (its sweeps report such
// messages). It never blocks.
func (n *Notifier) Notify(buckets ...int) {
	n.mu.Lock()
	marked := false
	for _, b := range buckets {
		if b < 0 || b >= outbox.MaxBucketCount {
			continue
		}
		n.pending[b/64] |= 1 << (b % 64)
		marked = true
	}
	n.any = n.any || marked
	n.mu.Unlock()
	if marked {
		select {
		case n.wake <- struct{}{}:
		default: // already pending: coalesced
		}
	}
}

// Ready returns the channel a relay waits on: a receive from it succeeds
// once after one or more Notify calls (it is never closed). Take the
// buckets with Take after it fires. Run does this; call it only in a relay
// loop of your own.
func (n *Notifier) Ready() <-chan struct{} { return n.wake }

// Take returns the pending buckets in increasing order and clears them
// (nil when none). A Notify after Take marks its buckets again and makes
// Ready fire again.
func (n *Notifier) Take() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.any {
		return nil
	}
	var out []int
	for i, w := range n.pending {
		for w != 0 {
			bit := bits.TrailingZeros64(w)
			out = append(out, i*64+bit)
			w &^= 1 << bit
		}
		n.pending[i] = 0
	}
	n.any = false
	return out
}
