package dynamo

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)

func testMessage() outbox.Message {
	return outbox.Message{
		ID: "0190b2a4-7c1e-7d3a-9f00-0123456789ab", Bucket: 3, Sequence: 42, Topic: "orders",
		Key: []byte("k"), Value: []byte("v"), CreatedAt: t0,
		Headers:   []outbox.Header{{Key: "a", Value: []byte("1")}, {Key: "a", Value: nil}},
		Partition: outbox.PartitionOf(7),
	}
}

func TestMessageItemRoundTrip(t *testing.T) {
	cases := []struct {
		name   string
		change func(*outbox.Message)
	}{
		{"full", func(*outbox.Message) {}},
		{"nil key", func(m *outbox.Message) { m.Key = nil }},
		{"empty key", func(m *outbox.Message) { m.Key = []byte{} }},
		{"tombstone", func(m *outbox.Message) { m.Value = nil }},
		{"empty value", func(m *outbox.Message) { m.Value = []byte{} }},
		{"no headers", func(m *outbox.Message) { m.Headers = nil }},
		{"no partition", func(m *outbox.Message) { m.Partition = nil }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := testMessage()
			c.change(&m)
			e := decodeItem(messageItem(m, 0))
			if e.Err != nil || e.Fence || e.Sequence != m.Sequence {
				t.Fatalf("entry = %+v", e)
			}
			g := e.Message
			if g.ID != m.ID || g.Bucket != m.Bucket || g.Sequence != m.Sequence || g.Topic != m.Topic || !g.CreatedAt.Equal(m.CreatedAt) {
				t.Errorf("identity: got %+v, want %+v", g, m)
			}
			if (g.Key == nil) != (m.Key == nil) || !bytes.Equal(g.Key, m.Key) {
				t.Errorf("key = %v (nil %v), want %v (nil %v)", g.Key, g.Key == nil, m.Key, m.Key == nil)
			}
			if (g.Value == nil) != (m.Value == nil) || !bytes.Equal(g.Value, m.Value) {
				t.Errorf("value = %v (nil %v), want %v (nil %v)", g.Value, g.Value == nil, m.Value, m.Value == nil)
			}
			assertHeaders(t, g.Headers, m.Headers)
			if (g.Partition == nil) != (m.Partition == nil) || g.Partition != nil && *g.Partition != *m.Partition {
				t.Errorf("partition = %v, want %v", g.Partition, m.Partition)
			}
		})
	}
}

func TestMessageItemEmptyBinaryIsNonNil(t *testing.T) {
	// The SDK sends a nil []byte as an empty attribute value, which DynamoDB
	// rejects; an empty key must go out as a non-nil empty slice.
	m := testMessage()
	m.Key, m.Value = []byte{}, []byte{}
	item := messageItem(m, 0)
	for _, name := range []string{attrKey, attrValue} {
		b, ok := item[name].(*types.AttributeValueMemberB)
		if !ok || b.Value == nil {
			t.Errorf("%s = %#v, want a non-nil empty binary", name, item[name])
		}
	}
}

func TestDecodeFence(t *testing.T) {
	e := decodeItem(fenceItem(2, 9, t0, t0.Add(DefaultFenceTTL)))
	if e.Err != nil || !e.Fence || e.Sequence != 9 || e.Message.Bucket != 2 || e.Message.Sequence != 9 {
		t.Fatalf("fence entry = %+v", e)
	}
	if !e.Message.CreatedAt.Equal(t0.Truncate(time.Millisecond)) {
		t.Errorf("fence created = %v", e.Message.CreatedAt)
	}
	item := fenceItem(2, 9, t0, t0.Add(time.Hour))
	if got, want := item[attrTTL].(*types.AttributeValueMemberN).Value, "1767326646"; got != want {
		t.Errorf("fence TTL = %s, want %s (expiry rounded up to a whole second)", got, want)
	}
}

func TestDecodeItemErrors(t *testing.T) {
	cases := []struct {
		name   string
		change func(map[string]types.AttributeValue)
		attr   string
	}{
		{"no bucket", func(i map[string]types.AttributeValue) { delete(i, attrBucket) }, attrBucket},
		{"sequence not a number", func(i map[string]types.AttributeValue) { i[attrSeq] = strAttr("x") }, attrSeq},
		{"sequence fraction", func(i map[string]types.AttributeValue) { i[attrSeq] = &types.AttributeValueMemberN{Value: "1.5"} }, attrSeq},
		{"no version", func(i map[string]types.AttributeValue) { delete(i, attrVersion) }, attrVersion},
		{"newer version", func(i map[string]types.AttributeValue) { i[attrVersion] = numAttr(outbox.FormatVersion + 1) }, attrVersion},
		{"no id", func(i map[string]types.AttributeValue) { delete(i, attrID) }, attrID},
		{"empty topic", func(i map[string]types.AttributeValue) { i[attrTopic] = strAttr("") }, attrTopic},
		{"no created", func(i map[string]types.AttributeValue) { delete(i, attrCreated) }, attrCreated},
		{"key not binary", func(i map[string]types.AttributeValue) { i[attrKey] = strAttr("k") }, attrKey},
		{"bad headers", func(i map[string]types.AttributeValue) {
			i[attrHeaders] = &types.AttributeValueMemberB{Value: []byte{9}}
		}, attrHeaders},
		{"negative partition", func(i map[string]types.AttributeValue) { i[attrPartition] = numAttr(-1) }, attrPartition},
		{"huge partition", func(i map[string]types.AttributeValue) { i[attrPartition] = numAttr(1 << 40) }, attrPartition},
		{"fence not true", func(i map[string]types.AttributeValue) {
			i[attrFence] = &types.AttributeValueMemberBOOL{Value: false}
		}, attrFence},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			item := messageItem(testMessage(), 0)
			c.change(item)
			e := decodeItem(item)
			var ie *ItemError
			if !errors.As(e.Err, &ie) || ie.Attribute != c.attr {
				t.Fatalf("err = %v, want an *ItemError about %s", e.Err, c.attr)
			}
			if c.attr != attrBucket && c.attr != attrSeq && (e.Sequence != 42 || e.Message.Bucket != 3) {
				t.Errorf("a bad item must still say where it is: %+v", e)
			}
		})
	}
}

func TestItemSize(t *testing.T) {
	cases := []struct {
		name string
		item map[string]types.AttributeValue
		want int
	}{
		{"string", map[string]types.AttributeValue{"ab": strAttr("héllo")}, 2 + 6},
		{"binary", map[string]types.AttributeValue{"b": &types.AttributeValueMemberB{Value: make([]byte, 10)}}, 1 + 10},
		{"empty binary", map[string]types.AttributeValue{"k": &types.AttributeValueMemberB{Value: []byte{}}}, 1},
		{"number 1 digit", map[string]types.AttributeValue{"n": numAttr(7)}, 1 + 2},
		{"number 3 digits", map[string]types.AttributeValue{"n": numAttr(123)}, 1 + 3},
		{"number trailing zeros", map[string]types.AttributeValue{"n": numAttr(1000)}, 1 + 2},
		{"number max int64", map[string]types.AttributeValue{"s": numAttr(maxSeqForSize)}, 1 + 11},
		{"number zero", map[string]types.AttributeValue{"n": numAttr(0)}, 1 + 1},
		{"bool", map[string]types.AttributeValue{"f": &types.AttributeValueMemberBOOL{Value: true}}, 2},
		{"map", map[string]types.AttributeValue{"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"a": strAttr("xy")}}}, 1 + 3 + 1 + 1 + 2},
		{"list", map[string]types.AttributeValue{"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{strAttr("xy"), numAttr(5)}}}, 1 + 3 + (1 + 2) + (1 + 2)},
		{"string set", map[string]types.AttributeValue{"ss": &types.AttributeValueMemberSS{Value: []string{"a", "bc"}}}, 2 + 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := itemSize(c.item); got != c.want {
				t.Fatalf("itemSize = %d, want %d", got, c.want)
			}
		})
	}
}
