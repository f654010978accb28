package dynamo

import (
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/sequence"
)

// Attribute names of the two tables (see the package documentation). They
// are short because DynamoDB counts attribute names in every item's size.
const (
	// Messages table.
	attrBucket    = "b"
	attrSeq       = "s"
	attrVersion   = "v"
	attrID        = "id"
	attrTopic     = "t"
	attrKey       = "k"
	attrValue     = "val"
	attrHeaders   = "h"
	attrPartition = "p"
	attrCreated   = "c"
	attrFence     = "f"
	attrPublished = "pb"
	attrTTL       = "x"
	// attrMsgEpoch: the BucketCount epoch a message's sequence number was
	// reserved at (≥ 1; absent: 0), which the relays' gate reads
	// (rebucket.go, outbox.EpochGate).
	attrMsgEpoch = "ep"

	// Control table.
	attrPK       = "pk"
	attrSK       = "sk"
	attrBuckets  = "bc"
	attrBktEpoch = "be" // config item: BucketCount epoch (rebucket.go)
	attrOldBkts  = "ob" // config item: the old epoch's count while it drains
	attrChangeDL = "cd" // config item: when the old epoch should have drained, epoch ms
	// attrNextBkts: a change begun by a version before the cut-over
	// (it froze the counters), which this version aborts.
	attrNextBkts  = "nb"
	attrMode      = "md"
	attrRetention = "rt"
	attrTopics    = "tp"
	// The config item's shared settings (absent: the default).
	attrMaxBytes  = "mb"
	attrIDHeader  = "hi"
	attrBktHeader = "hb"
	attrSeqHeader = "hs"
	attrRegions   = "rg"  // config item: region mode's regions, in order (a list)
	attrTakenOver = "rgt" // config item: region → the region draining it (a map)
	attrOwner     = "o"
	attrExpires   = "e"
	attrHead      = "hd"
	attrCleaned   = "cl"
	attrGap       = "g"
	attrGapSince  = "gs"
	attrWake      = "w"
	attrEpoch     = "ep"
	// The acquisition token of the current hold, and what the acquisition
	// replaced (owner, expiry, token), so that a resent Acquire can report
	// what the one that applied saw.
	attrToken       = "tk"
	attrPrevOwner   = "po"
	attrPrevExpires = "pe"
	attrPrevToken   = "ptk"
	// The process instance of the hold that released the lease
	// (outbox.Lease.Process), written by Release and Abandon.
	attrProcess = "pi"
	// rt, rtk, prt and prtk (a release's time and token, before issue 28)
	// are no longer written or read; lease items may still carry them.
	attrSeen = "seen"
	// Why a bucket stopped, on its lease item (outbox.Stuck): ks sequence,
	// ki message id, kt topic, kc class, km reason, kf since (ms), kl last
	// (ms), kn count.
	attrStuckSeq    = "ks"
	attrStuckID     = "ki"
	attrStuckTopic  = "kt"
	attrStuckClass  = "kc"
	attrStuckReason = "km"
	attrStuckSince  = "kf"
	attrStuckLast   = "kl"
	attrStuckCount  = "kn"
)

// Control-table keys.
const (
	configPK = "config"
	configSK = "config"
	leaseSK  = "lease"
	relaysPK = "relays"
)

// Tables names the outbox's two DynamoDB tables.
type Tables struct {
	// Messages holds the messages and fence tombstones (key b, s; stream
	// KEYS_ONLY).
	Messages string
	// Control holds the config item, the per-bucket counters and leases and
	// the relay heartbeats (key pk, sk).
	Control string
}

func (t Tables) validate() error {
	switch {
	case t.Messages == "":
		return &outbox.OptionError{Option: "Tables.Messages", Value: t.Messages, Reason: "the messages table name is required"}
	case t.Control == "":
		return &outbox.OptionError{Option: "Tables.Control", Value: t.Control, Reason: "the control table name is required"}
	case t.Messages == t.Control:
		return &outbox.OptionError{Option: "Tables.Control", Value: t.Control, Reason: "the control table must differ from the messages table"}
	}
	return nil
}

func numAttr(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func strAttr(s string) *types.AttributeValueMemberS {
	return &types.AttributeValueMemberS{Value: s}
}

func messageKey(bucket int, seq int64) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrBucket: numAttr(int64(bucket)), attrSeq: numAttr(seq)}
}

func controlKey(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: strAttr(pk), attrSK: strAttr(sk)}
}

func leaseKey(bucket int) map[string]types.AttributeValue {
	return controlKey(sequence.PartitionKey(bucket), leaseSK)
}

// millis is t in Unix milliseconds, 0 for the zero time.
func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromMillis is the inverse of millis.
func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// wallClock is the real time, which DynamoDB's TTL deletion goes by.
var wallClock = time.Now

// expiresAt is when an item written at now should expire after ttl. DynamoDB
// deletes expired items by its own (real) clock, so the expiry counts from
// the later of now and the wall clock: a caller's fake or slow clock must not
// make a fence expire at once. (DynamoDB Local deletes expired items within
// seconds.)
func expiresAt(now time.Time, ttl time.Duration) time.Time {
	base := wallClock()
	if now.After(base) {
		base = now
	}
	return base.Add(ttl)
}

// ttlSeconds is t as a TTL attribute value: epoch seconds, rounded up.
func ttlSeconds(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

func names(pairs ...string) map[string]string {
	m := make(map[string]string, len(pairs))
	for _, n := range pairs {
		m["#"+n] = n
	}
	return m
}

var str = aws.String
