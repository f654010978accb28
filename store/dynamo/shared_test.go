package dynamo

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/testenv"
)

// The shared settings live in the config item: CreateTables writes them,
// NewWriter and NewStore take them from there when not given, accept a
// local value equal to the stored one, and refuse another with a
// *MisconfigurationError naming the setting and both values. An outbox
// created without them (as by older versions) keeps today's behaviour: each
// component's own option, or the default.
func TestSharedSettingsFromConfigItem(t *testing.T) {
	ctx := ctxT(t)
	d, custom := newTables(t, BucketCount(2), MaxMessageBytes(2<<20), BucketHeader("bkt"))
	_, plain := newTables(t, BucketCount(2))
	if item := rawConfigItem(t, d, custom); item[attrMaxBytes] == nil || item[attrBktHeader] == nil || item[attrIDHeader] != nil {
		t.Fatalf("config item %v: want mb and hb, no hi (not given)", item)
	}
	if item := rawConfigItem(t, d, plain); item[attrMaxBytes] != nil || item[attrBktHeader] != nil {
		t.Fatalf("config item %v: want no shared settings (the defaults)", item)
	}
	writer := func(tables Tables, opts ...Option) (*Writer, error) { return NewWriter(ctx, d.Client, tables, opts...) }
	store := func(tables Tables, opts ...Option) error {
		_, err := NewStore(ctx, d.Client, tables, opts...)
		return err
	}
	cases := []struct {
		name    string
		open    func() error
		setting string // "" when accepted
		stored  string
	}{
		{"writer, other MaxMessageBytes", func() error { _, err := writer(custom, MaxMessageBytes(1<<20)); return err }, "MaxMessageBytes", "2097152"},
		{"writer, same MaxMessageBytes", func() error { _, err := writer(custom, MaxMessageBytes(2<<20)); return err }, "", ""},
		{"store, other bucket header", func() error { return store(custom, BucketHeader("b")) }, "BucketHeader", `"bkt"`},
		{"store, default id header as stored", func() error { return store(custom, MessageIDHeader(outbox.DefaultMessageIDHeader)) }, "", ""},
		{"writer on an outbox without them, its own size", func() error { _, err := writer(plain, MaxMessageBytes(2<<20)); return err }, "", ""},
		{"writer on an outbox without them, default size", func() error { _, err := writer(plain, MaxMessageBytes(outbox.DefaultMaxMessageBytes)); return err }, "", ""},
		{"CreateTables again, other size", func() error { return CreateTables(ctx, d.Client, custom, BucketCount(2), MaxMessageBytes(1<<20)) }, "MaxMessageBytes", "2097152"},
		{"CreateTables again, without", func() error { return CreateTables(ctx, d.Client, custom, BucketCount(2)) }, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.open()
			var me *outbox.MisconfigurationError
			switch {
			case c.setting == "" && err != nil:
				t.Fatalf("got %v, want it accepted", err)
			case c.setting != "" && (!errors.As(err, &me) || me.Setting != c.setting || me.Stored != c.stored):
				t.Fatalf("got %v, want a *MisconfigurationError for %s stored %s", err, c.setting, c.stored)
			}
		})
	}
	// Absent: taken from the item.
	w, err := writer(custom)
	if err != nil {
		t.Fatal(err)
	}
	if w.cfg.maxMessageBytes != 2<<20 || w.cfg.headers.Bucket != "bkt" || w.cfg.headers.MessageID != outbox.DefaultMessageIDHeader {
		t.Fatalf("writer took %d %+v from the config item", w.cfg.maxMessageBytes, w.cfg.headers)
	}
	// Configure changes them and says so in the stored Config.
	want := outbox.Config{BucketCount: 2, Mode: outbox.DeleteMode, MaxMessageBytes: 3 << 20}
	if _, err := Configure(ctx, d.Client, plain, want); err != nil {
		t.Fatal(err)
	}
	if c, err := ReadConfig(ctx, d.Client, plain); err != nil || c.MaxMessageBytes != 3<<20 || c.Headers != (outbox.HeaderNames{}) {
		t.Fatalf("ReadConfig = %+v, %v", c, err)
	}
}

// rawConfigItem reads the config item's attributes as stored.
func rawConfigItem(t *testing.T, d *testenv.Dynamo, tables Tables) map[string]types.AttributeValue {
	t.Helper()
	_, item, err := readConfigItem(ctxT(t), d.Client, tables.Control)
	if err != nil {
		t.Fatal(err)
	}
	return item
}
