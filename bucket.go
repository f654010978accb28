package outbox

import (
	"fmt"

	"github.com/google/uuid"
)

// DefaultBucketCount is the number of buckets a new outbox is created with.
const DefaultBucketCount = 8

// MaxBucketCount bounds BucketCount. Each bucket is one DynamoDB partition key
// and one lease; more buckets than this buys nothing on one stream shard.
const MaxBucketCount = 4096

// ValidBucketCount reports whether n is a bucket count an outbox can have:
// 1..MaxBucketCount. It is the one check of a BucketCount's range in Go
// (an int64 as decoded from an item is checked before it is converted);
// the Python writer (clients/python) keeps its own, which its tests hold to
// this one.
func ValidBucketCount[N ~int | ~int64](n N) bool { return n >= 1 && n <= MaxBucketCount }

// Murmur2 is Kafka's murmur2 hash (the Java client's Utils.murmur2, seed
// 0x9747b28c), as used by its default partitioner. It is reproduced here so
// that writers in any language can compute buckets: every Kafka client ships it.
func Murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for len(b) >= 4 {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		b = b[4:]
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// BucketForKey returns the bucket of a keyed message:
//
//	bucket = (murmur2(key) & 0x7fffffff) mod bucketCount
//
// which is exactly how Kafka's default partitioner maps a key to one of
// bucketCount partitions. An empty key is a real key and hashes like any other.
// The committed vectors in testdata/bucket_vectors.json pin this function.
func BucketForKey(key []byte, bucketCount int) int {
	return int((Murmur2(key) & 0x7fffffff) % uint32(bucketCount))
}

// BucketFor returns the bucket of m for the given bucket count:
//   - with an explicit Partition, the partition mod bucketCount, so records
//     pinned to one partition share one order;
//   - with a key (nil is keyless, empty is a key), BucketForKey;
//   - keyless, the hash of the message id's 16 bytes (no order is promised
//     for keyless messages; the id only spreads them over the buckets).
//
// Mixing an explicit partition and a partitioner-chosen one for the same key
// puts that key in two buckets, and therefore gives it two independent orders.
func BucketFor(m Message, bucketCount int) (int, error) {
	if !ValidBucketCount(bucketCount) {
		return 0, &ValidationError{Index: -1, Field: "BucketCount", Reason: fmt.Sprintf("%d is outside 1..%d", bucketCount, MaxBucketCount)}
	}
	switch {
	case m.Partition != nil:
		if *m.Partition < 0 {
			return 0, &ValidationError{Index: -1, Field: "Partition", Reason: fmt.Sprintf("%d is negative", *m.Partition)}
		}
		return int(*m.Partition) % bucketCount, nil
	case m.Key != nil:
		return BucketForKey(m.Key, bucketCount), nil
	default:
		id, err := uuid.Parse(m.ID)
		if err != nil {
			return 0, &ValidationError{Index: -1, Field: "ID", Reason: fmt.Sprintf("%q is not a UUID: %v", m.ID, err)}
		}
		return BucketForKey(id[:], bucketCount), nil
	}
}

// OldBucketsOf returns the buckets of count oldCount whose keys can land
// in bucket under count newCount: a message's bucket is h mod count for a
// hash h that does not depend on the count, and h mod oldCount ≡ h mod
// newCount modulo g = gcd(oldCount, newCount), so they are the buckets
// b < oldCount with b ≡ bucket (mod g). For 8 → 16 that is one bucket
// (bucket mod 8); for 16 → 8, bucket and bucket+8; for 8 → 9, all eight.
func OldBucketsOf(bucket, oldCount, newCount int) []int {
	g := gcd(oldCount, newCount)
	var out []int
	for b := bucket % g; b < oldCount; b += g {
		out = append(out, b)
	}
	return out
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// OutOfRangeProbe is how far beyond BucketCount Sweep looks for stray
// messages: buckets BucketCount..max(2*BucketCount, 64)-1.
func OutOfRangeProbe(bucketCount int) int {
	return min(max(2*bucketCount, 64), MaxBucketCount)
}
