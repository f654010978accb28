package ddbmodel

import (
	"time"
)

// DynamoDB's capacity units ("Read/write capacity mode" and "Item sizes
// and formats" in the developer guide):
//
//   - a write unit per 1 KB of the item written, rounded up per item, at
//     least 1; a write that replaces or updates an item is charged by the
//     larger of the item before and after, a delete by the deleted item;
//   - a transactional write costs twice that, per item of the
//     transaction (a ConditionCheck as a write of the item checked);
//   - a read unit per 4 KB, strongly consistent, rounded up per item for
//     GetItem and each key of BatchGetItem (a key that names nothing: 1)
//     and over the whole response for Query (the items read, before any
//     filter), at least 1; an eventually consistent read costs half,
//     a transactional read twice.
const (
	writeUnitBytes = 1024
	readUnitBytes  = 4096
)

// WriteUnits is what writing an item of the given size (the larger of
// before and after) costs, times 2 in a transaction.
func WriteUnits(bytes int, transactional bool) float64 {
	u := float64(max(1, ceilDiv(bytes, writeUnitBytes)))
	if transactional {
		u *= 2
	}
	return u
}

// ReadUnits is what reading bytes costs (an item, or the items of one
// Query response): per 4 KB rounded up, at least 1, half for an eventually
// consistent read, twice for a transactional one.
func ReadUnits(bytes int, consistent, transactional bool) float64 {
	u := float64(max(1, ceilDiv(bytes, readUnitBytes)))
	switch {
	case transactional:
		u *= 2
	case !consistent:
		u /= 2
	}
	return u
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// tokenBucket is a partition key's read or write capacity: rate units per
// second, of which it banks at most burst. A write is admitted when the
// bucket holds its cost; a read, whose cost is known only once it has read,
// when the bucket is not empty, and then pays what it read (the bucket may
// go below zero, and admits nothing until it refills).
type tokenBucket struct {
	tokens float64
	last   time.Time
	init   bool
}

func (b *tokenBucket) refill(now time.Time, rate, burst float64) {
	if !b.init {
		b.tokens, b.last, b.init = burst, now, true
		return
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(burst, b.tokens+dt*rate)
		b.last = now
	}
}

// take admits a write of cost units, and takes them.
func (b *tokenBucket) take(now time.Time, rate, burst, cost float64) bool {
	b.refill(now, rate, burst)
	if b.tokens < cost {
		return false
	}
	b.tokens -= cost
	return true
}

// admit tells whether a read may start now.
func (b *tokenBucket) admit(now time.Time, rate, burst float64) bool {
	b.refill(now, rate, burst)
	return b.tokens > 0
}

// pay takes the units a read consumed.
func (b *tokenBucket) pay(cost float64) { b.tokens -= cost }
