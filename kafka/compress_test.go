package kafka

import (
	"bytes"
	"io"
	"strconv"
	"testing"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// compressible is n bytes of JSON-like text.
func compressible(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		b.WriteString(`{"order":` + strconv.Itoa(i) + `,"status":"shipped","items":[1,2,3]}`)
	}
	return b.Bytes()[:n]
}

func TestLZ4CompressorFrames(t *testing.T) {
	c := newLZ4Compressor()
	for _, n := range []int{1, 1000, 64 << 10, 300 << 10, 1 << 20} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			src := compressible(n)
			var dst bytes.Buffer
			out, codec := c.Compress(&dst, src)
			if codec != kgo.CodecLz4 {
				t.Fatalf("codec %v, want lz4", codec)
			}
			// An lz4 frame: magic (4 bytes), FLG, BD; BD's bits 4-6 are
			// the block size index, 4 for 64 KiB.
			if len(out) < 6 || !bytes.Equal(out[:4], []byte{0x04, 0x22, 0x4d, 0x18}) {
				t.Fatalf("not an lz4 frame: % x", out[:min(len(out), 8)])
			}
			if idx := out[5] >> 4 & 7; idx != 4 {
				t.Errorf("block size index %d, want 4 (64 KiB)", idx)
			}
			got, err := io.ReadAll(lz4.NewReader(bytes.NewReader(out)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, src) {
				t.Fatalf("the frame decompresses to %d bytes that differ from the %d compressed", len(got), len(src))
			}
			if n >= 1000 && len(out) >= n/2 {
				t.Errorf("%d bytes of text compressed to %d", n, len(out))
			}
		})
	}
}

func TestCompressorOpts(t *testing.T) {
	tests := []struct {
		name   string
		codecs []kgo.CompressionCodec
		ours   bool // the Publisher's lz4 compressor, not kgo's
	}{
		{"default: lz4 then none", DefaultCompression(), true},
		{"lz4 alone", []kgo.CompressionCodec{kgo.Lz4Compression()}, true},
		{"lz4 at another level: kgo's", []kgo.CompressionCodec{kgo.Lz4Compression().WithLevel(9)}, false},
		{"zstd first: kgo's", []kgo.CompressionCodec{kgo.ZstdCompression(), kgo.Lz4Compression()}, false},
		{"none", []kgo.CompressionCodec{kgo.NoCompression()}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, compressorOpts(tt.codecs)...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			_, ours := cl.OptValue(kgo.WithCompressor).(*lz4Compressor)
			if ours != tt.ours {
				t.Errorf("compressor %T, want ours=%v", cl.OptValue(kgo.WithCompressor), tt.ours)
			}
		})
	}
}

// TestPublisherLZ4RoundTrip produces compressible records through the
// Publisher's enforced options (lz4 first, the default) and reads them back.
func TestPublisherLZ4RoundTrip(t *testing.T) {
	k := testenv.Kafka(t)
	topic := newTopic(t, k, 1, nil)
	c := defaultCfg()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.Brokers...)}, enforcedOpts(&c)...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range 200 {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: noPartition, Key: []byte(strconv.Itoa(i)), Value: compressible(2000 + i)})
	}
	for i, err := range produceAll(t, cl, recs) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	got := consumeAll(t, k, topic)
	if len(got) != len(recs) {
		t.Fatalf("topic holds %d records, want %d", len(got), len(recs))
	}
	for _, r := range got {
		i, err := strconv.Atoi(string(r.Key))
		if err != nil || !bytes.Equal(r.Value, compressible(2000+i)) {
			t.Fatalf("record %q came back with a %d-byte value that differs", r.Key, len(r.Value))
		}
	}
}
