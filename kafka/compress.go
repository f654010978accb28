package kafka

import (
	"bytes"
	"sync"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// lz4BlockSize is the lz4 frame block size of the Publisher's batches:
// 64 KiB, as Kafka's Java producer writes them. kgo's own lz4 writer uses
// the library's default of 4 MiB blocks and holds two such buffers (input
// and output) per batch being compressed, 8 MiB each time whatever the
// batch's size (at most ProducerBatchMaxBytes, about 1 MiB by default): in
// the relay Lambda that was half of the heap in use while draining
// (docs/capacity.md). lz4 looks back at most 64 KiB anyway, so smaller
// blocks compress about as well.
const lz4BlockSize = lz4.Block64Kb

// lz4Compressor is a kgo.Compressor that compresses every batch with lz4 at
// the fastest level, in lz4BlockSize blocks. The Publisher uses it when lz4
// at its default level is the first codec of Compression: kgo would pick lz4
// for every produce version then (only zstd needs a newer broker), so the
// preference order is unchanged.
type lz4Compressor struct{ pool sync.Pool }

func newLZ4Compressor() *lz4Compressor {
	c := &lz4Compressor{}
	c.pool.New = func() any {
		w := lz4.NewWriter(nil)
		// Cannot fail: a valid block size and level.
		_ = w.Apply(lz4.BlockSizeOption(lz4BlockSize), lz4.CompressionLevelOption(lz4.Fast))
		return w
	}
	return c
}

// Compress implements kgo.Compressor: src as one lz4 frame in dst (kgo
// sends the batch uncompressed when that is not smaller, or on nil: an
// error, as kgo's own compressor reports it).
func (c *lz4Compressor) Compress(dst *bytes.Buffer, src []byte, _ ...kgo.CompressFlag) ([]byte, kgo.CompressionCodecType) {
	w := c.pool.Get().(*lz4.Writer)
	defer c.pool.Put(w)
	w.Reset(dst)
	if _, err := w.Write(src); err != nil {
		return nil, kgo.CodecNone
	}
	if err := w.Close(); err != nil {
		return nil, kgo.CodecNone
	}
	return dst.Bytes(), kgo.CodecLz4
}

// compressorOpts are the kgo options that compress batches as codecs says,
// in order of preference.
func compressorOpts(codecs []kgo.CompressionCodec) []kgo.Opt {
	opts := []kgo.Opt{kgo.ProducerBatchCompression(codecs...)}
	if len(codecs) > 0 && codecs[0] == kgo.Lz4Compression() {
		opts = append(opts, kgo.WithCompressor(newLZ4Compressor()))
	}
	return opts
}
