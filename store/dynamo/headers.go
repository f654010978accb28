package dynamo

import (
	"encoding/binary"
	"fmt"

	"github.com/dynakafka/outbox"
)

// headerFormat is the version byte of the header encoding.
const headerFormat = 1

// HeaderError reports an undecodable header attribute: where decoding
// stopped and why.
type HeaderError struct {
	Offset int
	Reason string
}

func (e *HeaderError) Error() string {
	return fmt.Sprintf("dynamo: undecodable headers at byte %d: %s", e.Offset, e.Reason)
}

// encodeHeaders encodes headers for the h attribute:
//
//	byte    version (1)
//	uvarint count
//	count times:
//	  uvarint keyLen, key bytes
//	  byte    presence: 0 = nil value (nothing follows), 1 = present
//	  if present: uvarint valLen, value bytes
//
// Order and duplicates are preserved, and so is the difference between a
// nil and an empty value. No headers encode to nil (the attribute is then
// omitted).
func encodeHeaders(hs []outbox.Header) []byte {
	if len(hs) == 0 {
		return nil
	}
	n := 1 + binary.MaxVarintLen64
	for _, h := range hs {
		n += 2*binary.MaxVarintLen64 + 1 + len(h.Key) + len(h.Value)
	}
	b := make([]byte, 0, n)
	b = append(b, headerFormat)
	b = binary.AppendUvarint(b, uint64(len(hs)))
	for _, h := range hs {
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
		if h.Value == nil {
			b = append(b, 0)
			continue
		}
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(h.Value)))
		b = append(b, h.Value...)
	}
	return b
}

// decodeHeaders is the inverse of encodeHeaders. It never panics on bad
// input; it returns a *HeaderError. Present values, including empty ones,
// are non-nil.
func decodeHeaders(b []byte) ([]outbox.Header, error) {
	d := headerDecoder{b: b}
	if len(b) == 0 {
		return nil, d.fail("empty header attribute (no headers is encoded as no attribute)")
	}
	if b[0] != headerFormat {
		return nil, d.fail(fmt.Sprintf("unknown header format version %d (this reader knows %d)", b[0], headerFormat))
	}
	d.off = 1
	count, err := d.uvarint("header count")
	if err != nil {
		return nil, err
	}
	// Every header takes at least 2 bytes (key length and presence), which
	// bounds the allocation by the input size.
	if count == 0 || count > uint64(len(b)-d.off)/2 {
		return nil, d.fail(fmt.Sprintf("header count %d does not fit in %d remaining bytes", count, len(b)-d.off))
	}
	hs := make([]outbox.Header, 0, count)
	for i := uint64(0); i < count; i++ {
		key, err := d.bytes(fmt.Sprintf("header %d key", i))
		if err != nil {
			return nil, err
		}
		if d.off >= len(b) {
			return nil, d.fail(fmt.Sprintf("header %d: missing value presence byte", i))
		}
		presence := b[d.off]
		d.off++
		h := outbox.Header{Key: string(key)}
		switch presence {
		case 0:
		case 1:
			v, err := d.bytes(fmt.Sprintf("header %d value", i))
			if err != nil {
				return nil, err
			}
			h.Value = append(make([]byte, 0, len(v)), v...)
		default:
			d.off--
			return nil, d.fail(fmt.Sprintf("header %d: presence byte is %d, want 0 or 1", i, presence))
		}
		hs = append(hs, h)
	}
	if d.off != len(b) {
		return nil, d.fail(fmt.Sprintf("%d trailing bytes after %d headers", len(b)-d.off, count))
	}
	return hs, nil
}

type headerDecoder struct {
	b   []byte
	off int
}

func (d *headerDecoder) fail(reason string) error { return &HeaderError{Offset: d.off, Reason: reason} }

func (d *headerDecoder) uvarint(what string) (uint64, error) {
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		return 0, d.fail("truncated or overlong varint for " + what)
	}
	d.off += n
	return v, nil
}

func (d *headerDecoder) bytes(what string) ([]byte, error) {
	n, err := d.uvarint(what + " length")
	if err != nil {
		return nil, err
	}
	if n > uint64(len(d.b)-d.off) {
		return nil, d.fail(fmt.Sprintf("%s length %d exceeds the %d remaining bytes", what, n, len(d.b)-d.off))
	}
	v := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return v, nil
}
