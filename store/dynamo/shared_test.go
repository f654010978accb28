package dynamo

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// The shared settings live in the config item: CreateTables writes them,
// NewWriter and NewStore take them from there (no option states them).
// CreateTables on an existing outbox is outbox init's expected-value guard:
// a value equal to the stored one, or none, is accepted, another refused
// with a *MisconfigurationError naming the setting and both values. An
// outbox created without them (as by older versions) has the defaults.
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
	cases := []struct {
		name    string
		opts    []TablesOption
		setting string // "" when accepted
		stored  string
	}{
		{"other size", []TablesOption{MaxMessageBytes(1 << 20)}, "MaxMessageBytes", "2097152"},
		{"same size", []TablesOption{MaxMessageBytes(2 << 20)}, "", ""},
		{"other bucket header", []TablesOption{BucketHeader("b")}, "BucketHeader", `"bkt"`},
		{"the default id header, which the item does not state", []TablesOption{MessageIDHeader(outbox.DefaultMessageIDHeader)}, "", ""},
		{"another id header than the default", []TablesOption{MessageIDHeader("id")}, "MessageIDHeader", `"` + outbox.DefaultMessageIDHeader + `"`},
		{"without", nil, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CreateTables(ctx, d.Client, custom, append([]TablesOption{BucketCount(2)}, c.opts...)...)
			var me *outbox.MisconfigurationError
			switch {
			case c.setting == "" && err != nil:
				t.Fatalf("got %v, want it accepted", err)
			case c.setting != "" && (!errors.As(err, &me) || me.Setting != c.setting || me.Stored != c.stored):
				t.Fatalf("got %v, want a *MisconfigurationError for %s stored %s", err, c.setting, c.stored)
			}
		})
	}
	for _, c := range []struct {
		tables  Tables
		bytes   int
		headers outbox.HeaderNames
	}{
		{custom, 2 << 20, outbox.HeaderNames{Bucket: "bkt"}.WithDefaults()},
		{plain, outbox.DefaultMaxMessageBytes, outbox.HeaderNames{}.WithDefaults()},
	} {
		w, err := NewWriter(ctx, d.Client, c.tables)
		if err != nil {
			t.Fatal(err)
		}
		if w.cfg.maxMessageBytes != c.bytes || w.cfg.headers != c.headers {
			t.Errorf("writer took %d %+v from the config item, want %d %+v", w.cfg.maxMessageBytes, w.cfg.headers, c.bytes, c.headers)
		}
		s, err := NewStore(ctx, d.Client, c.tables)
		if err != nil {
			t.Fatal(err)
		}
		if s.cfg.maxMessageBytes != c.bytes || s.cfg.headers != c.headers {
			t.Errorf("store took %d %+v from the config item, want %d %+v", s.cfg.maxMessageBytes, s.cfg.headers, c.bytes, c.headers)
		}
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
