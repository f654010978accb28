package dynamo

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
)

// DynamoDB limits the writer checks before it writes anything.
const (
	// MaxItemBytes is DynamoDB's item size limit (400 KB), counted by
	// itemSize.
	MaxItemBytes = 400 * 1024
	// MaxTransactionItems is the most actions in one TransactWriteItems.
	MaxTransactionItems = 100
	// MaxTransactionBytes is DynamoDB's limit on a transaction's aggregate
	// item size (4 MB).
	MaxTransactionBytes = 4 * 1024 * 1024
)

// maxSeqForSize is the sequence number assumed when sizing an item before its
// sequence is reserved: the widest int64, so the size is an upper bound.
const maxSeqForSize = math.MaxInt64

// messageItem is the messages-table item of m (m.Bucket and m.Sequence must be
// set), whose sequence number was reserved at BucketCount epoch epoch (its
// stamp; none at epoch 0). An empty non-nil key or value is stored as an
// empty binary attribute; a nil one is omitted.
func messageItem(m outbox.Message, epoch int64) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		attrBucket:  numAttr(int64(m.Bucket)),
		attrSeq:     numAttr(m.Sequence),
		attrVersion: numAttr(outbox.FormatVersion),
		attrID:      strAttr(m.ID),
		attrTopic:   strAttr(m.Topic),
		attrCreated: numAttr(m.CreatedAt.UnixMilli()),
	}
	if m.Key != nil {
		// The SDK sends a nil []byte as "no value", which DynamoDB rejects;
		// an empty key must be a non-nil empty slice.
		item[attrKey] = &types.AttributeValueMemberB{Value: append([]byte{}, m.Key...)}
	}
	if m.Value != nil {
		item[attrValue] = &types.AttributeValueMemberB{Value: append([]byte{}, m.Value...)}
	}
	if h := encodeHeaders(m.Headers); h != nil {
		item[attrHeaders] = &types.AttributeValueMemberB{Value: h}
	}
	if m.Partition != nil {
		item[attrPartition] = numAttr(int64(*m.Partition))
	}
	if epoch > 0 {
		item[attrMsgEpoch] = numAttr(epoch)
	}
	return item
}

// withRetention adds the TTL of a WatermarkMode message to item: the later
// of created and the wall clock, plus retention (DynamoDB expires items by
// its own clock, so a caller's old CreatedAt must not make a message expire
// before it is published). No TTL when retention is 0 (DeleteMode).
func withRetention(item map[string]types.AttributeValue, created time.Time, retention time.Duration) map[string]types.AttributeValue {
	if retention > 0 {
		item[attrTTL] = numAttr(ttlSeconds(expiresAt(created, retention)))
	}
	return item
}

// fenceItem is the fence tombstone at bucket/seq, written at now and expiring
// (by the table's TTL) at expires.
func fenceItem(bucket int, seq int64, now, expires time.Time) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrBucket:  numAttr(int64(bucket)),
		attrSeq:     numAttr(seq),
		attrVersion: numAttr(outbox.FormatVersion),
		attrFence:   &types.AttributeValueMemberBOOL{Value: true},
		attrCreated: numAttr(now.UnixMilli()),
		attrTTL:     numAttr(ttlSeconds(expires)),
	}
}

// publishedItem is the tombstone that replaces the published message at
// bucket/seq: a fence-format item (so every reader treats the sequence
// number as decided) flagged as published, expiring at expires.
func publishedItem(bucket int, seq int64, now, expires time.Time) map[string]types.AttributeValue {
	item := fenceItem(bucket, seq, now, expires)
	item[attrPublished] = &types.AttributeValueMemberBOOL{Value: true}
	return item
}

// ItemError reports a stored item that is not a valid outbox item.
type ItemError struct {
	Attribute string
	Reason    string
	// Newer is true when the item was written in a newer format than this
	// code reads: not a bad record but an old relay.
	Newer bool
}

// OutboxErrorClass implements outbox.Classifier: an item of a newer format
// stops its bucket until the relay is upgraded (Fatal); any other bad item is
// a record-level problem (parked or blocked by policy).
func (e *ItemError) OutboxErrorClass() outbox.ErrorClass {
	if e.Newer {
		return outbox.Fatal
	}
	return outbox.RecordPermanent
}

func (e *ItemError) Error() string {
	return fmt.Sprintf("dynamo: bad outbox item: attribute %s: %s", e.Attribute, e.Reason)
}

// decodeItem decodes one messages-table item into an entry. It is pure and
// never panics: an item it cannot decode yields an entry with Err set (and
// Sequence and Message.Bucket/Sequence filled as far as the key allows), so
// that one bad item never fails a whole read.
func decodeItem(item map[string]types.AttributeValue) outbox.Entry {
	var e outbox.Entry
	bucket, err := intAttr(item, attrBucket, true)
	if err != nil {
		e.Err = err
		return e
	}
	if bucket < 0 || bucket > math.MaxInt32 {
		e.Err = &ItemError{Attribute: attrBucket, Reason: fmt.Sprintf("bucket %d is out of range", bucket)}
		return e
	}
	seq, err := intAttr(item, attrSeq, true)
	if err != nil {
		e.Err = err
		return e
	}
	e.Sequence = seq
	e.Message.Bucket, e.Message.Sequence = int(bucket), seq

	version, err := intAttr(item, attrVersion, true)
	if err != nil {
		e.Err = err
		return e
	}
	if version < 1 || version > outbox.FormatVersion {
		e.Err = &ItemError{Attribute: attrVersion, Reason: fmt.Sprintf("format version %d; this reader understands 1..%d (upgrade the relay)", version, outbox.FormatVersion),
			Newer: version > outbox.FormatVersion}
		return e
	}
	if av, ok := item[attrFence]; ok {
		f, isBool := av.(*types.AttributeValueMemberBOOL)
		if !isBool || !f.Value {
			e.Err = &ItemError{Attribute: attrFence, Reason: "the fence flag must be the boolean true"}
			return e
		}
		e.Fence = true
		if pb, ok := item[attrPublished].(*types.AttributeValueMemberBOOL); ok && pb.Value {
			e.Published = true
		}
		if c, err := intAttr(item, attrCreated, false); err == nil {
			e.Message.CreatedAt = fromMillis(c)
		}
		return e
	}

	if e.Err = decodeMessage(item, &e.Message); e.Err == nil {
		e.Epoch, e.Err = decodeStamp(item)
	}
	return e
}

// decodeStamp reads a message item's BucketCount epoch stamp (0 when it
// has none: written at epoch 0).
func decodeStamp(item map[string]types.AttributeValue) (int64, error) {
	switch ep, err := intAttr(item, attrMsgEpoch, false); {
	case errors.Is(err, errMissing):
		return 0, nil
	case err != nil:
		return 0, err
	case ep < 1:
		return 0, &ItemError{Attribute: attrMsgEpoch, Reason: fmt.Sprintf("BucketCount epoch %d; a stamp is at least 1 (epoch 0 has none)", ep)}
	default:
		return ep, nil
	}
}

// decodeMessage decodes a message item's message attributes into m (its
// bucket and sequence are set): the id, topic, creation time, key, value,
// headers and partition.
func decodeMessage(item map[string]types.AttributeValue, m *outbox.Message) error {
	var err error
	if m.ID, err = stringAttr(item, attrID); err != nil {
		return err
	}
	if m.Topic, err = stringAttr(item, attrTopic); err != nil {
		return err
	}
	created, err := intAttr(item, attrCreated, true)
	if err != nil {
		return err
	}
	m.CreatedAt = time.UnixMilli(created)
	if m.Key, err = binaryAttr(item, attrKey); err != nil {
		return err
	}
	if m.Value, err = binaryAttr(item, attrValue); err != nil {
		return err
	}
	h, err := binaryAttr(item, attrHeaders)
	if err != nil {
		return err
	}
	if h != nil {
		if m.Headers, err = decodeHeaders(h); err != nil {
			return &ItemError{Attribute: attrHeaders, Reason: err.Error()}
		}
	}
	if _, ok := item[attrPartition]; ok {
		p, err := intAttr(item, attrPartition, true)
		if err != nil {
			return err
		}
		if p < 0 || p > math.MaxInt32 {
			return &ItemError{Attribute: attrPartition, Reason: fmt.Sprintf("partition %d is out of range", p)}
		}
		m.Partition = outbox.PartitionOf(int32(p))
	}
	return nil
}

var errMissing = errors.New("missing")

func intAttr(item map[string]types.AttributeValue, name string, required bool) (int64, error) {
	av, ok := item[name]
	if !ok {
		if required {
			return 0, &ItemError{Attribute: name, Reason: "missing"}
		}
		return 0, errMissing
	}
	n, isNum := av.(*types.AttributeValueMemberN)
	if !isNum {
		return 0, &ItemError{Attribute: name, Reason: fmt.Sprintf("want a number, have %T", av)}
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, &ItemError{Attribute: name, Reason: fmt.Sprintf("%q is not a 64-bit integer", n.Value)}
	}
	return v, nil
}

func stringAttr(item map[string]types.AttributeValue, name string) (string, error) {
	av, ok := item[name]
	if !ok {
		return "", &ItemError{Attribute: name, Reason: "missing"}
	}
	s, isStr := av.(*types.AttributeValueMemberS)
	if !isStr {
		return "", &ItemError{Attribute: name, Reason: fmt.Sprintf("want a string, have %T", av)}
	}
	if s.Value == "" {
		return "", &ItemError{Attribute: name, Reason: "empty"}
	}
	return s.Value, nil
}

// binaryAttr returns the attribute's bytes: nil when absent, non-nil (maybe
// empty) when present.
func binaryAttr(item map[string]types.AttributeValue, name string) ([]byte, error) {
	av, ok := item[name]
	if !ok {
		return nil, nil
	}
	b, isBin := av.(*types.AttributeValueMemberB)
	if !isBin {
		return nil, &ItemError{Attribute: name, Reason: fmt.Sprintf("want binary, have %T", av)}
	}
	if b.Value == nil {
		return []byte{}, nil
	}
	return b.Value, nil
}

// itemSize is the size DynamoDB counts for item: for each attribute, the
// UTF-8 length of its name plus the size of its value (see attrValueSize).
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, av := range item {
		n += len(name) + attrValueSize(av)
	}
	return n
}

// attrValueSize follows AWS's documented rules ("Item sizes and formats"):
// strings and binaries count their bytes; a number counts 1 byte per two
// significant digits plus 1; booleans and nulls count 1; lists and maps
// count 3 bytes plus 1 byte per element plus their elements (and a map its
// keys); sets count their elements.
func attrValueSize(av types.AttributeValue) int {
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return numberSize(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, b := range v.Value {
			n += len(b)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range v.Value {
			n += numberSize(s)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + attrValueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += 1 + len(k) + attrValueSize(e)
		}
		return n
	}
	return 0
}

// numberSize is the size of a DynamoDB number: leading and trailing zeroes
// are trimmed, then 1 byte per two significant digits, plus 1.
func numberSize(s string) int {
	s = strings.TrimLeft(s, "+-")
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		s = s[:i]
	}
	digits := strings.Replace(s, ".", "", 1)
	digits = strings.TrimLeft(digits, "0")
	digits = strings.TrimRight(digits, "0")
	if digits == "" {
		return 1
	}
	return (len(digits)+1)/2 + 1
}
