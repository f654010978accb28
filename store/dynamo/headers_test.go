package dynamo

import (
	"bytes"
	"errors"
	"testing"

	"github.com/dynakafka/outbox"
)

func TestHeadersRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		hs   []outbox.Header
	}{
		{"one", []outbox.Header{{Key: "a", Value: []byte("1")}}},
		{"nil value", []outbox.Header{{Key: "a", Value: nil}}},
		{"empty value", []outbox.Header{{Key: "a", Value: []byte{}}}},
		{"empty key", []outbox.Header{{Key: "", Value: []byte("v")}}},
		{"duplicates in order", []outbox.Header{
			{Key: "dup", Value: []byte("2")}, {Key: "dup", Value: []byte("1")}, {Key: "x", Value: nil}, {Key: "dup", Value: []byte{}},
		}},
		{"binary and utf-8", []outbox.Header{{Key: "ключ", Value: []byte{0, 255, 0x80, 10}}}},
		{"long value", []outbox.Header{{Key: "big", Value: bytes.Repeat([]byte{7}, 70000)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := encodeHeaders(c.hs)
			got, err := decodeHeaders(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			assertHeaders(t, got, c.hs)
		})
	}
}

func assertHeaders(t *testing.T, got, want []outbox.Header) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d headers, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Key != w.Key || (g.Value == nil) != (w.Value == nil) || !bytes.Equal(g.Value, w.Value) {
			t.Errorf("header %d = %q:%v (nil %v), want %q:%v (nil %v)", i, g.Key, g.Value, g.Value == nil, w.Key, w.Value, w.Value == nil)
		}
	}
}

func TestEncodeHeadersNone(t *testing.T) {
	if b := encodeHeaders(nil); b != nil {
		t.Fatalf("encodeHeaders(nil) = %v, want nil (no attribute)", b)
	}
	if b := encodeHeaders([]outbox.Header{}); b != nil {
		t.Fatalf("encodeHeaders(empty) = %v, want nil", b)
	}
}

func TestEncodeHeadersLayout(t *testing.T) {
	got := encodeHeaders([]outbox.Header{{Key: "ab", Value: []byte("x")}, {Key: "c", Value: nil}})
	want := []byte{1, 2, 2, 'a', 'b', 1, 1, 'x', 1, 'c', 0}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoding = %v, want %v", got, want)
	}
}

func TestDecodeHeadersErrors(t *testing.T) {
	cases := []struct {
		name   string
		b      []byte
		offset int
	}{
		{"empty", []byte{}, 0},
		{"unknown version", []byte{2, 1, 1, 'a', 0}, 0},
		{"missing count", []byte{1}, 1},
		{"zero count", []byte{1, 0}, 2},
		{"count beyond input", []byte{1, 200, 1, 1, 'a', 0}, 3},
		{"key beyond input", []byte{1, 1, 9, 'a', 0}, 3},
		{"missing presence", []byte{1, 1, 1, 'a'}, 4},
		{"bad presence", []byte{1, 1, 1, 'a', 2}, 4},
		{"value beyond input", []byte{1, 1, 1, 'a', 1, 5, 'x'}, 6},
		{"trailing bytes", []byte{1, 1, 1, 'a', 0, 0}, 5},
		{"overlong varint", []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hs, err := decodeHeaders(c.b)
			var he *HeaderError
			if !errors.As(err, &he) {
				t.Fatalf("decodeHeaders(%v) = %v, %v; want a *HeaderError", c.b, hs, err)
			}
			if he.Offset != c.offset {
				t.Errorf("offset = %d, want %d (%v)", he.Offset, c.offset, err)
			}
		})
	}
}
