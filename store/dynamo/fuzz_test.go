package dynamo

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
)

// FuzzDecodeHeaders: any bytes decode to a *HeaderError located inside the
// input, or to headers whose encoding is the input itself. The encoding is
// canonical except for varints: decodeHeaders accepts a non-minimal varint
// (as encoding/binary does), which re-encodes shorter. So the re-encoding is
// either the input or strictly shorter, and it is a fixed point that decodes
// to the same headers.
func FuzzDecodeHeaders(f *testing.F) {
	f.Add(encodeHeaders([]outbox.Header{{Key: "a", Value: []byte("1")}, {Key: "b"}, {Key: "c", Value: []byte{}}}))
	f.Add([]byte{1, 1, 1, 'a', 0})
	f.Add([]byte{1, 0x80})
	f.Add([]byte{1, 1, 0x81, 0x00, 'a', 0})          // key length 1 as a two-byte varint
	f.Add([]byte{1, 2, 0, 0, 0, 1, 0})               // empty keys, nil and empty values
	f.Add([]byte{1, 1, 1, 'a', 1, 0xff, 0xff, 0x7f}) // value length beyond the input
	f.Fuzz(func(t *testing.T, b []byte) {
		in := append([]byte(nil), b...)
		hs, err := decodeHeaders(in)
		if err != nil {
			var he *HeaderError
			if !errors.As(err, &he) || he.Offset < 0 || he.Offset > len(b) {
				t.Fatalf("error %v (%T) is not a *HeaderError within the input", err, err)
			}
			if hs != nil {
				t.Fatalf("decodeHeaders returned %d headers with its error", len(hs))
			}
			return
		}
		if len(hs) == 0 {
			t.Fatalf("%v decodes to no headers without an error; no headers has no attribute", b)
		}
		// Values are copies: the SDK may reuse the attribute's buffer.
		snapshot := make([]outbox.Header, len(hs))
		for i, h := range hs {
			snapshot[i] = outbox.Header{Key: h.Key, Value: bytes.Clone(h.Value)}
		}
		for i := range in {
			in[i] ^= 0xff
		}
		assertHeaders(t, hs, snapshot)
		enc := encodeHeaders(hs)
		if !bytes.Equal(enc, b) && len(enc) >= len(b) {
			t.Fatalf("%v decodes to %d headers that re-encode to %v: neither the input nor a shorter (minimal-varint) form", b, len(hs), enc)
		}
		again, err := decodeHeaders(enc)
		if err != nil {
			t.Fatalf("re-encoding %v of a decoded value does not decode: %v", enc, err)
		}
		assertHeaders(t, again, hs)
		if enc2 := encodeHeaders(again); !bytes.Equal(enc2, enc) {
			t.Fatalf("encoding is not a fixed point: %v then %v", enc, enc2)
		}
	})
}

// FuzzEncodeHeaders: any headers built from the input (empty and binary
// keys, nil and empty values, duplicates) round trip exactly through the
// encoding, in order, and the encoding has the documented layout's length.
func FuzzEncodeHeaders(f *testing.F) {
	f.Add([]byte{3, 1, 'a', 1, '1', 1, 'b', 0xff, 0, 0})
	f.Add([]byte{1, 0, 0})
	f.Add(bytes.Repeat([]byte{200}, 300))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzBytes{b: data}
		hs := r.headers(int(r.byte()))
		enc := encodeHeaders(hs)
		if len(hs) == 0 {
			if enc != nil {
				t.Fatalf("no headers encode to %v, want nil (no attribute)", enc)
			}
			return
		}
		want := 1 + uvarintLen(uint64(len(hs)))
		for _, h := range hs {
			want += uvarintLen(uint64(len(h.Key))) + len(h.Key) + 1
			if h.Value != nil {
				want += uvarintLen(uint64(len(h.Value))) + len(h.Value)
			}
		}
		if len(enc) != want {
			t.Fatalf("%d headers encode to %d bytes, want %d", len(hs), len(enc), want)
		}
		got, err := decodeHeaders(enc)
		if err != nil {
			t.Fatalf("decode(encode(%v)): %v", hs, err)
		}
		assertHeaders(t, got, hs)
	})
}

func uvarintLen(v uint64) int { return len(binary.AppendUvarint(nil, v)) }

// FuzzDecodeItem decodes attribute maps generated from the input: a stored
// message or fence (or nothing), then attributes set to any kind of value
// (real names and junk, numbers in every spelling) or removed. decodeItem
// must not change the item and must yield either
//   - an entry with Err a typed *ItemError or *HeaderError, still placed at
//     its bucket and sequence when those keys are valid; or
//   - an entry that re-encodes (messageItem, or fenceItem for a fence) to an
//     item decoding to an equal entry, whose attributes are the input's own
//     values: nothing invented, nothing of a message dropped.
func FuzzDecodeItem(f *testing.F) {
	// Layout: base (0 none, 1 message, 2 fence); a message is bucket, seq,
	// topic, key, value (length-prefixed, 0xff nil), header count and
	// headers, partition (<0 none), created; a fence is created, bucket,
	// seq. Then edits: name index (1 b, 2 s, 3 v, 4 id, 5 t, 8 h, 9 p,
	// 10 c, 11 f, 15 pk), op (0 delete), value kind (0 N, 2 S, 4 BOOL, 7 M,
	// 11 header encoding), contents.
	msg := []byte{1, 3, 42, 6, 'o', 'r', 'd', 'e', 'r', 's', 1, 'k', 1, 'v', 2, 1, 'a', 1, '1', 1, 'b', 0xff, 7, 100}
	edit := func(ops ...byte) []byte { return append(append([]byte{}, msg...), ops...) }
	for _, seed := range [][]byte{
		msg,            // a full message
		{2, 100, 3, 9}, // a fence
		{1, 3, 42, 1, 't', 0xff, 0, 0, 0xe0, 0xf8}, // nil key, empty value, no headers or partition, created MaxInt64
		edit(2, 1, 0, 4, 0),                        // s := "1.5"
		{2, 100, 3, 9, 11, 1, 4, 0},                // fence, f := false
		edit(8, 1, 11, 1, 1, 'x', 0),               // h := another valid encoding
		edit(4, 0),                                 // id removed
		edit(3, 1, 0, 0, 2),                        // v := 2, a newer format
		edit(1, 1, 0, 4, 2),                        // b := "007"
		edit(9, 1, 0, 4, 13),                       // p := "2147483648"
		edit(15, 1, 7, 2, 1, 0, 0, 5, 0, 3, 0xff),  // junk attribute pk := {b: 5, zz: nil binary}
		{0, 1, 1, 0, 0, 5, 2, 1, 0, 0, 1, 3, 1, 0, 0, 1, 4, 1, 2, 1, 'i', 5, 1, 2, 1, 't', 10, 1, 0, 0, 0}, // built attribute by attribute
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzBytes{b: data}
		item := r.item()
		before := cloneItem(item)
		e := decodeItem(item)
		if !reflect.DeepEqual(item, before) {
			t.Fatalf("decodeItem changed its input: %v became %v", before, item)
		}
		if e2 := decodeItem(item); !reflect.DeepEqual(e, e2) {
			t.Fatalf("decodeItem is not deterministic: %+v then %+v", e, e2)
		}

		b, okB := oracleInt(item[attrBucket], 0, math.MaxInt32)
		s, okS := oracleInt(item[attrSeq], math.MinInt64, math.MaxInt64)
		if e.Err != nil {
			var ie *ItemError
			var he *HeaderError
			if !errors.As(e.Err, &ie) && !errors.As(e.Err, &he) {
				t.Fatalf("Err = %v (%T), want an *ItemError or *HeaderError", e.Err, e.Err)
			}
			if ie != nil && !knownAttr[ie.Attribute] {
				t.Fatalf("ItemError names attribute %q, not one of the item format's", ie.Attribute)
			}
			if !strings.HasPrefix(e.Err.Error(), "dynamo: ") {
				t.Fatalf("error without the package prefix: %v", e.Err)
			}
			if e.Fence {
				t.Fatalf("a bad item reported as a fence: %+v", e)
			}
			if okB && okS && (e.Sequence != s || e.Message.Bucket != int(b) || e.Message.Sequence != s) {
				t.Fatalf("bad item at bucket %d seq %d reported at %d/%d/%d: %v", b, s, e.Message.Bucket, e.Sequence, e.Message.Sequence, e.Err)
			}
			return
		}
		if !okB || !okS || e.Sequence != s || e.Message.Bucket != int(b) || e.Message.Sequence != s {
			t.Fatalf("entry at %d/%d from keys b=%v s=%v", e.Message.Bucket, e.Sequence, item[attrBucket], item[attrSeq])
		}
		if _, ok := oracleInt(item[attrVersion], 1, outbox.FormatVersion); !ok {
			t.Fatalf("decoded an item of version %v (want 1..%d) without an error", item[attrVersion], outbox.FormatVersion)
		}

		var re map[string]types.AttributeValue
		if e.Fence {
			if fb, ok := item[attrFence].(*types.AttributeValueMemberBOOL); !ok || !fb.Value {
				t.Fatalf("fence entry from f=%v", item[attrFence])
			}
			if !reflect.DeepEqual(e.Message, outbox.Message{Bucket: e.Message.Bucket, Sequence: e.Sequence, CreatedAt: e.Message.CreatedAt}) {
				t.Fatalf("fence entry carries message fields: %+v", e.Message)
			}
			re = fenceItem(e.Message.Bucket, e.Sequence, e.Message.CreatedAt, e.Message.CreatedAt.Add(time.Hour))
		} else {
			if _, ok := item[attrFence]; ok {
				t.Fatalf("message entry from an item with f=%v", item[attrFence])
			}
			re = messageItem(e.Message, 0)
			for _, name := range []string{attrBucket, attrSeq, attrVersion, attrID, attrTopic, attrKey, attrValue, attrHeaders, attrPartition, attrCreated} {
				orig, had := item[name]
				now, has := re[name]
				if had != has {
					t.Fatalf("attribute %s: input has it: %v, re-encoding has it: %v (%v)", name, had, has, orig)
				}
				if had && name != attrHeaders && !sameValue(orig, now) {
					t.Fatalf("attribute %s: input %#v, re-encoded %#v", name, orig, now)
				}
				if b, ok := now.(*types.AttributeValueMemberB); ok && b.Value == nil {
					t.Fatalf("attribute %s re-encoded as a nil binary, which the SDK sends as no value and DynamoDB rejects", name)
				}
			}
		}
		e2 := decodeItem(re)
		if !sameEntry(e, e2) {
			t.Fatalf("round trip: %+v re-encodes to an item decoding to %+v", e, e2)
		}
	})
}

var knownAttr = map[string]bool{
	attrBucket: true, attrSeq: true, attrVersion: true, attrID: true, attrTopic: true, attrKey: true,
	attrValue: true, attrHeaders: true, attrPartition: true, attrCreated: true, attrFence: true, attrTTL: true,
}

var decimalInteger = regexp.MustCompile(`^[+-]?[0-9]+$`)

// oracleInt reads av as a decimal integer number in lo..hi, without strconv.
func oracleInt(av types.AttributeValue, lo, hi int64) (int64, bool) {
	n, ok := av.(*types.AttributeValueMemberN)
	if !ok || !decimalInteger.MatchString(n.Value) {
		return 0, false
	}
	v, ok := new(big.Int).SetString(n.Value, 10)
	if !ok || v.Cmp(big.NewInt(lo)) < 0 || v.Cmp(big.NewInt(hi)) > 0 {
		return 0, false
	}
	return v.Int64(), true
}

// sameValue: numbers compare by value ("007" is 7), binaries by bytes (DynamoDB
// has no nil binary), everything else exactly.
func sameValue(a, b types.AttributeValue) bool {
	switch x := a.(type) {
	case *types.AttributeValueMemberN:
		y, ok := b.(*types.AttributeValueMemberN)
		if !ok {
			return false
		}
		vx, okx := new(big.Int).SetString(x.Value, 10)
		vy, oky := new(big.Int).SetString(y.Value, 10)
		return okx && oky && vx.Cmp(vy) == 0
	case *types.AttributeValueMemberB:
		y, ok := b.(*types.AttributeValueMemberB)
		return ok && bytes.Equal(x.Value, y.Value)
	}
	return reflect.DeepEqual(a, b)
}

// sameEntry compares entries exactly (nil and empty keys, values and header
// values differ), times by instant.
func sameEntry(a, b outbox.Entry) bool {
	if a.Err != nil || b.Err != nil || !a.Message.CreatedAt.Equal(b.Message.CreatedAt) {
		return false
	}
	a.Message.CreatedAt, b.Message.CreatedAt = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func cloneItem(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	if item == nil {
		return nil
	}
	out := make(map[string]types.AttributeValue, len(item))
	for k, v := range item {
		out[k] = cloneValue(v)
	}
	return out
}

func cloneValue(av types.AttributeValue) types.AttributeValue {
	switch v := av.(type) {
	case *types.AttributeValueMemberB:
		c := *v
		c.Value = bytes.Clone(v.Value)
		return &c
	case *types.AttributeValueMemberL:
		c := &types.AttributeValueMemberL{Value: make([]types.AttributeValue, len(v.Value))}
		for i, e := range v.Value {
			c.Value[i] = cloneValue(e)
		}
		return c
	case *types.AttributeValueMemberM:
		return &types.AttributeValueMemberM{Value: cloneItem(v.Value)}
	case *types.AttributeValueMemberSS:
		return &types.AttributeValueMemberSS{Value: append([]string(nil), v.Value...)}
	case *types.AttributeValueMemberNS:
		return &types.AttributeValueMemberNS{Value: append([]string(nil), v.Value...)}
	case *types.AttributeValueMemberBS:
		c := &types.AttributeValueMemberBS{Value: make([][]byte, len(v.Value))}
		for i, b := range v.Value {
			c.Value[i] = bytes.Clone(b)
		}
		return c
	case *types.AttributeValueMemberS:
		c := *v
		return &c
	case *types.AttributeValueMemberN:
		c := *v
		return &c
	case *types.AttributeValueMemberBOOL:
		c := *v
		return &c
	case *types.AttributeValueMemberNULL:
		c := *v
		return &c
	case *types.UnknownUnionMember:
		return &types.UnknownUnionMember{Tag: v.Tag, Value: bytes.Clone(v.Value)}
	}
	return av
}

// fuzzBytes hands out the fuzz input; past its end every read is zero.
type fuzzBytes struct{ b []byte }

func (r *fuzzBytes) more() bool { return len(r.b) > 0 }

func (r *fuzzBytes) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// bytes: a length byte (0xff: nil), then that many bytes modulo 64.
func (r *fuzzBytes) bytes() []byte {
	n := r.byte()
	if n == 0xff {
		return nil
	}
	out := []byte{}
	for i := 0; i < int(n)%64; i++ {
		out = append(out, r.byte())
	}
	return out
}

func (r *fuzzBytes) str() string { return string(r.bytes()) }

func (r *fuzzBytes) uint64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(r.byte())
	}
	return v
}

// int64: mostly small (one byte: 0..223, or -1..-16), sometimes any 64-bit
// value or an edge.
func (r *fuzzBytes) int64() int64 {
	switch m := r.byte(); {
	case m < 0xe0:
		return int64(m)
	case m < 0xf0:
		return 0xdf - int64(m)
	case m < 0xf8:
		return int64(r.uint64())
	default:
		edges := []int64{math.MaxInt64, math.MinInt64, math.MaxInt32, math.MaxInt32 + 1, 1 << 40, -62135596800000, 0, 0}
		return edges[m-0xf8]
	}
}

// number spells a DynamoDB number, often oddly.
func (r *fuzzBytes) number() string {
	switch m := r.byte(); m % 8 {
	case 0, 1, 2, 3:
		return numAttr(r.int64()).Value
	case 4:
		odd := []string{"1.5", "+5", "007", "-0", "1e3", "1E1", "9223372036854775808", "-9223372036854775809",
			" 1", "", "0x10", "1_0", "١", "2147483648", "4294967296", "1.0"}
		return odd[int(r.byte())%len(odd)]
	default:
		return r.str()
	}
}

func (r *fuzzBytes) headers(n int) []outbox.Header {
	var hs []outbox.Header
	for range n % 6 {
		hs = append(hs, outbox.Header{Key: r.str(), Value: r.bytes()})
	}
	return hs
}

// fuzzNames: index 0 (what an exhausted input reads) is junk.
var fuzzNames = []string{"zz", attrBucket, attrSeq, attrVersion, attrID, attrTopic, attrKey, attrValue, attrHeaders,
	attrPartition, attrCreated, attrFence, attrTTL, "", "B", "pk", "hd", "val ", "ĥ", "id\x00"}

func (r *fuzzBytes) name() string {
	i := int(r.byte())
	if i < 2*len(fuzzNames) {
		return fuzzNames[i%len(fuzzNames)]
	}
	return r.str()
}

func (r *fuzzBytes) value(depth int) types.AttributeValue {
	switch k := r.byte() % 13; k {
	case 0, 1:
		return &types.AttributeValueMemberN{Value: r.number()}
	case 2:
		return &types.AttributeValueMemberS{Value: r.str()}
	case 3:
		return &types.AttributeValueMemberB{Value: r.bytes()}
	case 4:
		return &types.AttributeValueMemberBOOL{Value: r.byte()%2 == 1}
	case 5:
		return &types.AttributeValueMemberNULL{Value: r.byte()%2 == 1}
	case 6, 7:
		n := 0
		if depth < 2 {
			n = int(r.byte()) % 4
		}
		if k == 6 {
			l := &types.AttributeValueMemberL{Value: []types.AttributeValue{}}
			for range n {
				l.Value = append(l.Value, r.value(depth+1))
			}
			return l
		}
		m := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
		for range n {
			m.Value[r.name()] = r.value(depth + 1)
		}
		return m
	case 8:
		return &types.AttributeValueMemberSS{Value: []string{r.str(), r.str()}}
	case 9:
		return &types.AttributeValueMemberNS{Value: []string{r.number()}}
	case 10:
		return &types.AttributeValueMemberBS{Value: [][]byte{r.bytes()}}
	case 11:
		return &types.AttributeValueMemberB{Value: encodeHeaders(r.headers(int(r.byte())))}
	default:
		return &types.UnknownUnionMember{Tag: r.str(), Value: r.bytes()}
	}
}

// item: a base (0 nothing, 1 a message, 2 a fence), then edits until the
// input ends: remove an attribute or set one.
func (r *fuzzBytes) item() map[string]types.AttributeValue {
	var item map[string]types.AttributeValue
	switch r.byte() % 3 {
	case 0:
		item = map[string]types.AttributeValue{}
	case 1:
		m := outbox.Message{
			Bucket: int(r.int64()), Sequence: r.int64(), Topic: r.str(),
			Key: r.bytes(), Value: r.bytes(), ID: "0190b2a4-7c1e-7d3a-9f00-0123456789ab",
		}
		m.Headers = r.headers(int(r.byte()))
		if p := r.int64(); p >= 0 {
			m.Partition = outbox.PartitionOf(int32(p))
		}
		m.CreatedAt = time.UnixMilli(r.int64())
		item = messageItem(m, 0)
	default:
		now := time.UnixMilli(r.int64())
		item = fenceItem(int(r.int64()), r.int64(), now, now.Add(time.Hour))
	}
	for r.more() {
		name := r.name()
		if r.byte()%4 == 0 {
			delete(item, name)
			continue
		}
		item[name] = r.value(0)
	}
	return item
}
