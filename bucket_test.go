package outbox_test

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"testing"
	"unicode/utf8"

	"github.com/dynakafka/outbox"
)

var update = flag.Bool("update", false, "rewrite testdata/bucket_vectors.json")

// Kafka's own test vectors for Utils.murmur2 (clients UtilsTest), as signed
// 32-bit Java ints.
func TestMurmur2MatchesKafka(t *testing.T) {
	cases := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for in, want := range cases {
		if got := int32(outbox.Murmur2([]byte(in))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

type vector struct {
	KeyHex  string      `json:"key_hex"`
	KeyText string      `json:"key_text,omitempty"`
	Murmur2 uint32      `json:"murmur2"`
	Buckets map[int]int `json:"buckets"` // bucket count -> bucket
}

var vectorCounts = []int{1, 2, 8, 16, 64, 1000, 4096}

func vectorKeys() [][]byte {
	keys := [][]byte{{}, {0}, {0xff}, {0, 0, 0, 0}, {0xde, 0xad, 0xbe, 0xef, 0x01}}
	for _, s := range []string{"a", "ab", "abc", "abcd", "abcde", "order-1", "order-2", "customer/42",
		"21", "foobar", "ünïcødé", "a-little-bit-longer-string", "01890a5d-ac96-774b-bcce-b302099a8057"} {
		keys = append(keys, []byte(s))
	}
	return keys
}

// TestBucketVectors pins BucketForKey to committed vectors so writers in
// other languages can check their implementation against the same file.
func TestBucketVectors(t *testing.T) {
	path := "testdata/bucket_vectors.json"
	var computed []vector
	for _, k := range vectorKeys() {
		v := vector{KeyHex: hex.EncodeToString(k), Murmur2: outbox.Murmur2(k), Buckets: map[int]int{}}
		if isText(k) {
			v.KeyText = string(k)
		}
		for _, n := range vectorCounts {
			v.Buckets[n] = outbox.BucketForKey(k, n)
		}
		computed = append(computed, v)
	}
	committed := golden(t, path, computed)
	for _, v := range committed {
		k, _ := hex.DecodeString(v.KeyHex)
		if got := outbox.Murmur2(k); got != v.Murmur2 {
			t.Errorf("murmur2(%s) = %d, committed %d", v.KeyHex, got, v.Murmur2)
		}
		for n, want := range v.Buckets {
			if got := outbox.BucketForKey(k, n); got != want {
				t.Errorf("BucketForKey(%s, %d) = %d, committed %d", v.KeyHex, n, got, want)
			}
		}
	}
}

func isText(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return len(b) > 0 && utf8.Valid(b)
}

func TestBucketFor(t *testing.T) {
	id := "01890a5d-ac96-774b-bcce-b302099a8057"
	idBytes, _ := hex.DecodeString("01890a5dac96774bbcceb302099a8057")
	cases := []struct {
		name string
		m    outbox.Message
		n    int
		want int
		err  string
	}{
		{"keyed", outbox.Message{Key: []byte("order-1")}, 8, outbox.BucketForKey([]byte("order-1"), 8), ""},
		{"empty key is a key", outbox.Message{Key: []byte{}, ID: id}, 8, outbox.BucketForKey([]byte{}, 8), ""},
		{"keyless by id bytes", outbox.Message{ID: id}, 8, outbox.BucketForKey(idBytes, 8), ""},
		{"explicit partition wins over key", outbox.Message{Key: []byte("order-1"), Partition: outbox.PartitionOf(13)}, 8, 5, ""},
		{"negative partition", outbox.Message{Partition: outbox.PartitionOf(-1)}, 8, 0, "Partition"},
		{"keyless without id", outbox.Message{}, 8, 0, "ID"},
		{"zero buckets", outbox.Message{Key: []byte("k")}, 0, 0, "BucketCount"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := outbox.BucketFor(c.m, c.n)
			if c.err != "" {
				var ve *outbox.ValidationError
				if !errors.As(err, &ve) || ve.Field != c.err {
					t.Fatalf("err = %v, want a ValidationError on %s", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("BucketFor = %d, %v; want %d", got, err, c.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	long := make([]byte, 250)
	for i := range long {
		long[i] = 'a'
	}
	big := make([]byte, 2000)
	cases := []struct {
		name  string
		m     outbox.Message
		field string
	}{
		{"ok", outbox.Message{Topic: "orders.v1_x-y", Value: []byte("v")}, ""},
		{"empty topic", outbox.Message{}, "Topic"},
		{"long topic", outbox.Message{Topic: string(long)}, "Topic"},
		{"dot topic", outbox.Message{Topic: ".."}, "Topic"},
		{"bad char", outbox.Message{Topic: "orders/v1"}, "Topic"},
		{"too large", outbox.Message{Topic: "t", Value: big}, "Value"},
		{"id header reused", outbox.Message{Topic: "t", Headers: []outbox.Header{{Key: outbox.DefaultMessageIDHeader}}}, "Headers[0].Key"},
		{"bucket header reused", outbox.Message{Topic: "t", Headers: []outbox.Header{{Key: "a"}, {Key: outbox.DefaultBucketHeader}}}, "Headers[1].Key"},
		{"sequence header reused", outbox.Message{Topic: "t", Headers: []outbox.Header{{Key: outbox.DefaultSequenceHeader}}}, "Headers[0].Key"},
		{"trace context is an ordinary header", outbox.Message{Topic: "t", Headers: []outbox.Header{{Key: outbox.TraceParentHeader, Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}}}, ""},
		{"invalid utf8 header", outbox.Message{Topic: "t", Headers: []outbox.Header{{Key: "ok"}, {Key: "\xff"}}}, "Headers[1].Key"},
		{"negative partition", outbox.Message{Topic: "t", Partition: outbox.PartitionOf(-3)}, "Partition"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := outbox.Validate(c.m, 7, 1024, outbox.DefaultMessageIDHeader)
			if c.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ve *outbox.ValidationError
			if !errors.As(err, &ve) || ve.Field != c.field || ve.Index != 7 {
				t.Fatalf("err = %v, want a ValidationError on message 7 field %s", err, c.field)
			}
		})
	}
	// The size bound is exact: at the limit passes, one byte more fails.
	m := outbox.Message{Topic: "t", Key: []byte("k")}
	m.Value = make([]byte, 1024-outbox.RecordSize(m, outbox.DefaultMessageIDHeader))
	if err := outbox.Validate(m, 0, 1024, outbox.DefaultMessageIDHeader); err != nil {
		t.Fatalf("record at exactly the limit: %v", err)
	}
	m.Value = append(m.Value, 0)
	if err := outbox.Validate(m, 0, 1024, outbox.DefaultMessageIDHeader); err == nil {
		t.Fatal("record one byte over the limit passed")
	}
	// Custom stamped-header names: refused in messages, counted in the size.
	names := outbox.HeaderNames{Bucket: "b", Sequence: "s"}
	if err := names.Validate(outbox.Message{Topic: "t", Headers: []outbox.Header{{Key: "s"}}}, 0, 1024); err == nil {
		t.Fatal("a message carrying the custom sequence header passed")
	}
	if err := names.Validate(outbox.Message{Topic: "t", Headers: []outbox.Header{{Key: outbox.DefaultSequenceHeader}}}, 0, 1024); err != nil {
		t.Fatalf("the default name is an ordinary header when another is configured: %v", err)
	}
	if d := outbox.RecordSize(m, outbox.DefaultMessageIDHeader) - names.RecordSize(m); d != len(outbox.DefaultBucketHeader)+len(outbox.DefaultSequenceHeader)-2 {
		t.Fatalf("size difference between default and one-letter names = %d", d)
	}
	if s := fmt.Sprint(&outbox.ValidationError{Index: -1, Field: "Transaction", Reason: "r"}); s != "outbox: invalid Transaction: r" {
		t.Fatalf("message = %q", s)
	}
}

func TestHeaderNamesCheck(t *testing.T) {
	cases := []struct {
		name   string
		names  outbox.HeaderNames
		option string // "" when valid
	}{
		{"defaults", outbox.HeaderNames{}, ""},
		{"custom", outbox.HeaderNames{MessageID: "id", Bucket: "b", Sequence: "s"}, ""},
		{"bucket not UTF-8", outbox.HeaderNames{Bucket: "b\xff"}, "BucketHeader"},
		{"bucket equals id", outbox.HeaderNames{Bucket: outbox.DefaultMessageIDHeader}, "BucketHeader"},
		{"sequence equals bucket", outbox.HeaderNames{Bucket: "x", Sequence: "x"}, "SequenceHeader"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.names.Check()
			var oe *outbox.OptionError
			switch {
			case c.option == "" && err != nil:
				t.Fatalf("Check = %v", err)
			case c.option != "" && (!errors.As(err, &oe) || oe.Option != c.option):
				t.Fatalf("Check = %v, want an *OptionError for %s", err, c.option)
			}
		})
	}
}

// messageVector is one message's bucket placement (outbox.BucketFor): the
// key vectors above cover murmur2; these cover what picks the hashed bytes.
type messageVector struct {
	Case        string  `json:"case"`
	ID          string  `json:"id"`
	KeyHex      *string `json:"key_hex"`   // null: keyless (hash the id's 16 bytes)
	Partition   *int32  `json:"partition"` // null: none; set: partition mod bucket_count, whatever the key
	BucketCount int     `json:"bucket_count"`
	Bucket      int     `json:"bucket"`
}

func messageVectorCases() []messageVector {
	str := func(s string) *string { return &s }
	ids := []string{"01890a5d-ac96-774b-bcce-b302099a8057", "0192f6a0-1c2b-7d3e-8f40-5a6b7c8d9e0f", "00000000-0000-0000-0000-000000000000"}
	var out []messageVector
	for _, n := range vectorCounts {
		for _, c := range []messageVector{
			{Case: "keyed", ID: ids[0], KeyHex: str(hex.EncodeToString([]byte("order-1")))},
			{Case: "empty key is a key (not keyless)", ID: ids[0], KeyHex: str("")},
			{Case: "keyless: murmur2 of the id's 16 bytes", ID: ids[0]},
			{Case: "keyless: murmur2 of the id's 16 bytes", ID: ids[1]},
			{Case: "keyless: murmur2 of the id's 16 bytes", ID: ids[2]},
			{Case: "partition wins over the key", ID: ids[0], KeyHex: str(hex.EncodeToString([]byte("order-1"))), Partition: outbox.PartitionOf(13)},
			{Case: "partition, keyless", ID: ids[1], Partition: outbox.PartitionOf(0)},
			{Case: "partition", ID: ids[1], Partition: outbox.PartitionOf(4095)},
			{Case: "partition", ID: ids[1], Partition: outbox.PartitionOf(4096)},
			{Case: "partition", ID: ids[1], Partition: outbox.PartitionOf(2147483647)},
		} {
			c.BucketCount = n
			out = append(out, c)
		}
	}
	return out
}

// TestMessageBucketVectors pins BucketFor (keyless, empty key, partition
// overrides) to testdata/bucket_message_vectors.json, which the Python
// writer's tests and docs/contract.md use too.
func TestMessageBucketVectors(t *testing.T) {
	path := "testdata/bucket_message_vectors.json"
	computed := messageVectorCases()
	for i := range computed {
		c := &computed[i]
		b, err := outbox.BucketFor(c.message(), c.BucketCount)
		if err != nil {
			t.Fatal(err)
		}
		c.Bucket = b
	}
	committed := golden(t, path, computed)
	for i, v := range committed {
		got, err := outbox.BucketFor(v.message(), v.BucketCount)
		if err != nil || got != v.Bucket {
			t.Errorf("vector %d (%s, bucket count %d): BucketFor = %d, %v; committed %d", i, v.Case, v.BucketCount, got, err, v.Bucket)
		}
		if c := computed[i]; v.Case != c.Case || v.ID != c.ID || v.BucketCount != c.BucketCount {
			t.Errorf("vector %d differs from the generated case %s (run go test -run TestMessageBucketVectors -update)", i, computed[i].Case)
		}
	}
}

// message is the message the vector describes.
func (v messageVector) message() outbox.Message {
	m := outbox.Message{ID: v.ID, Partition: v.Partition}
	if v.KeyHex != nil {
		m.Key, _ = hex.DecodeString(*v.KeyHex)
		if m.Key == nil {
			m.Key = []byte{} // the empty key, not keyless
		}
	}
	return m
}

// golden writes computed to path under -update, then returns what path
// holds, failing the test unless it has as many vectors as computed.
func golden[T any](t *testing.T, path string, computed []T) []T {
	t.Helper()
	if *update {
		b, _ := json.MarshalIndent(computed, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var committed []T
	if err := json.Unmarshal(b, &committed); err != nil {
		t.Fatal(err)
	}
	if len(committed) != len(computed) {
		t.Fatalf("%s: %d committed vectors, %d computed (go test -run %s -update rewrites it)", path, len(committed), len(computed), t.Name())
	}
	return committed
}

func TestValidBucketCount(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want bool
	}{{math.MinInt64, false}, {-1, false}, {0, false}, {1, true}, {outbox.MaxBucketCount, true}, {outbox.MaxBucketCount + 1, false}, {math.MaxInt64, false}} {
		if got := outbox.ValidBucketCount(c.n); got != c.want {
			t.Errorf("ValidBucketCount(int64 %d) = %v, want %v", c.n, got, c.want)
		}
		if c.n >= math.MinInt32 && c.n <= math.MaxInt32 {
			if got := outbox.ValidBucketCount(int(c.n)); got != c.want {
				t.Errorf("ValidBucketCount(%d) = %v, want %v", c.n, got, c.want)
			}
		}
	}
}
