package dynamo

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
)

// rawConfig reads the config item as stored.
func rawConfig(t *testing.T, e *env) map[string]types.AttributeValue {
	t.Helper()
	return e.getItem(t, e.tables.Control, controlKey(configPK, configSK))
}

// TestConfigItemByMode: a DeleteMode outbox keeps the config item every
// earlier release wrote (version 1, bucket count only), so older relays
// and writers still open it; a WatermarkMode one is version 2 with mode and
// retention, which older code refuses (it accepts versions up to 1) instead
// of tombstoning retained messages or writing messages without a TTL.
func TestConfigItemByMode(t *testing.T) {
	cases := []struct {
		name      string
		opts      []TablesOption
		mode      outbox.Mode
		retention time.Duration
		version   int64
		attrs     []string // every attribute of the item
	}{
		{"delete (default)", nil, outbox.DeleteMode, 0, 1, []string{"bc", "mt", "pk", "sk", "v"}},
		{"delete (explicit)", []TablesOption{WithMode(outbox.DeleteMode)}, outbox.DeleteMode, 0, 1, []string{"bc", "mt", "pk", "sk", "v"}},
		{"watermark, default retention", []TablesOption{WithMode(outbox.WatermarkMode)}, outbox.WatermarkMode, DefaultRetention, 2,
			[]string{"bc", "md", "mt", "pk", "rt", "sk", "v"}},
		{"watermark, 3 days", []TablesOption{WithMode(outbox.WatermarkMode), Retention(72 * time.Hour)}, outbox.WatermarkMode, 72 * time.Hour, 2,
			[]string{"bc", "md", "mt", "pk", "rt", "sk", "v"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 4, c.opts...)
			item := rawConfig(t, e)
			var attrs []string
			for k := range item {
				attrs = append(attrs, k)
			}
			slices.Sort(attrs)
			if strings.Join(attrs, ",") != strings.Join(c.attrs, ",") {
				t.Errorf("config item attributes %v, want %v", attrs, c.attrs)
			}
			v, _ := intAttr(item, attrVersion, true)
			if v != c.version {
				t.Errorf("config item version %d, want %d", v, c.version)
			}
			// What code from before the modes checks: it refuses a
			// version above its FormatVersion, 1.
			if olderRefuses := v > 1; olderRefuses != (c.mode == outbox.WatermarkMode) {
				t.Errorf("older readers refuse: %v, want %v", olderRefuses, c.mode == outbox.WatermarkMode)
			}
			cfg, err := e.store.Config(ctxT(t))
			if err != nil || cfg.Mode != c.mode || cfg.Retention != c.retention || cfg.BucketCount != 4 || cfg.FormatVersion != outbox.FormatVersion {
				t.Fatalf("Config = %+v, %v; want mode %v retention %v", cfg, err, c.mode, c.retention)
			}
			// The relay engine accepts it (CheckConfig).
			if err := outbox.CheckConfig(cfg); err != nil {
				t.Errorf("CheckConfig: %v", err)
			}
		})
	}
}

// TestDecodeConfig: what a config item may say, and how each way of being
// wrong is refused.
func TestDecodeConfig(t *testing.T) {
	n := func(v int64) types.AttributeValue { return numAttr(v) }
	s := func(v string) types.AttributeValue { return strAttr(v) }
	l := func(vs ...string) types.AttributeValue {
		out := &types.AttributeValueMemberL{}
		for _, v := range vs {
			out.Value = append(out.Value, strAttr(v))
		}
		return out
	}
	item := func(kv ...any) map[string]types.AttributeValue {
		m := controlKey(configPK, configSK)
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1].(types.AttributeValue)
		}
		return m
	}
	cases := []struct {
		name string
		item map[string]types.AttributeValue
		want outbox.Config
		// err: "" for none; "newer" for a *MisconfigurationError; else the
		// attribute an *ItemError names.
		err string
	}{
		{"version 1, as every release wrote it", item("bc", n(8), "v", n(1)), outbox.Config{BucketCount: 8, FormatVersion: 1}, ""},
		{"watermark", item("bc", n(8), "v", n(2), "md", s("watermark"), "rt", n(86400)),
			outbox.Config{BucketCount: 8, FormatVersion: 1, Mode: outbox.WatermarkMode, Retention: 24 * time.Hour}, ""},
		{"delete spelled out", item("bc", n(8), "v", n(2), "md", s("delete")), outbox.Config{BucketCount: 8, FormatVersion: 1}, ""},
		{"a newer format", item("bc", n(8), "v", n(5)), outbox.Config{}, "newer"},
		{"an old epoch draining", item("bc", n(16), "v", n(4), "be", n(1), "ob", n(8), "cd", n(1772366400000)),
			outbox.Config{BucketCount: 16, FormatVersion: 1, BucketEpoch: 1, OldBucketCount: 8, ChangeDeadline: time.UnixMilli(1772366400000)}, ""},
		{"an old epoch draining in a version-3 item (older code would publish without the gate)", item("bc", n(16), "v", n(3), "be", n(1), "ob", n(8), "cd", n(1772366400000)),
			outbox.Config{}, "v"},
		{"region mode", item("bc", n(8), "v", n(3), "rg", l("a", "b"), "rgt", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"a": s("b")}}),
			outbox.Config{BucketCount: 8, FormatVersion: 1, Regions: []string{"a", "b"}, TakenOver: map[string]string{"a": "b"}}, ""},
		{"regions in a version-2 item (older code would ignore them)", item("bc", n(8), "v", n(2), "rg", l("a", "b")), outbox.Config{}, "v"},
		{"regions that do not divide the bucket count", item("bc", n(8), "v", n(3), "rg", l("a", "b", "c")), outbox.Config{}, "rg"},
		{"a takeover without regions", item("bc", n(8), "v", n(3), "rgt", &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"a": s("b")}}), outbox.Config{}, "rgt"},
		{"watermark in a version-1 item (older code would ignore it)", item("bc", n(8), "v", n(1), "md", s("watermark"), "rt", n(86400)), outbox.Config{}, "v"},
		{"watermark without retention", item("bc", n(8), "v", n(2), "md", s("watermark")), outbox.Config{}, "rt"},
		{"watermark with a retention under an hour", item("bc", n(8), "v", n(2), "md", s("watermark"), "rt", n(600)), outbox.Config{}, "rt"},
		{"a retention in delete mode", item("bc", n(8), "v", n(1), "rt", n(86400)), outbox.Config{}, "rt"},
		{"an unknown mode", item("bc", n(8), "v", n(2), "md", s("archive"), "rt", n(86400)), outbox.Config{}, "md"},
		{"a mode that is not a string", item("bc", n(8), "v", n(2), "md", n(1), "rt", n(86400)), outbox.Config{}, "md"},
		{"a retention that is not a number", item("bc", n(8), "v", n(2), "md", s("watermark"), "rt", s("1d")), outbox.Config{}, "rt"},
		{"no bucket count", item("v", n(1)), outbox.Config{}, "bc"},
		{"topics in a version-1 item (older code ignores them)", item("bc", n(8), "v", n(1), "tp", &types.AttributeValueMemberSS{Value: []string{"orders", "audit"}}),
			outbox.Config{BucketCount: 8, FormatVersion: 1, Topics: []string{"audit", "orders"}}, ""},
		{"topics that are not a string set", item("bc", n(8), "v", n(1), "tp", s("orders")), outbox.Config{}, "tp"},
		{"a topic Kafka refuses", item("bc", n(8), "v", n(1), "tp", &types.AttributeValueMemberSS{Value: []string{"orders events"}}), outbox.Config{}, "tp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := decodeConfig(c.item)
			var me *outbox.MisconfigurationError
			var ie *ItemError
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("decodeConfig: %v", err)
			case c.err == "" && !reflect.DeepEqual(got, c.want):
				t.Fatalf("decodeConfig = %+v, want %+v", got, c.want)
			case c.err == "newer" && (!errors.As(err, &me) || me.Setting != "FormatVersion"):
				t.Fatalf("decodeConfig = %v, want a *MisconfigurationError for FormatVersion", err)
			case c.err != "" && c.err != "newer" && (!errors.As(err, &ie) || ie.Attribute != c.err):
				t.Fatalf("decodeConfig = %+v, %v; want an *ItemError naming %s", got, err, c.err)
			}
		})
	}
}

func TestTablesOptionsValidated(t *testing.T) {
	var d neverClient
	cases := []struct {
		name   string
		opts   []TablesOption
		option string
	}{
		{"retention without watermark mode", []TablesOption{Retention(48 * time.Hour)}, "Retention"},
		{"retention in delete mode", []TablesOption{WithMode(outbox.DeleteMode), Retention(48 * time.Hour)}, "Retention"},
		{"retention under an hour", []TablesOption{WithMode(outbox.WatermarkMode), Retention(59 * time.Minute)}, "Retention"},
		{"retention in fractions of a second", []TablesOption{WithMode(outbox.WatermarkMode), Retention(2*time.Hour + time.Millisecond)}, "Retention"},
		{"an unknown mode", []TablesOption{WithMode(outbox.Mode(7))}, "WithMode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var oe *outbox.OptionError
			err := CreateTables(ctxT(t), d, Tables{Messages: "never-m", Control: "never-c"}, c.opts...)
			if !errors.As(err, &oe) || oe.Option != c.option {
				t.Fatalf("CreateTables = %v, want an *OptionError for %s", err, c.option)
			}
		})
	}
}

// neverClient fails every call: it stands for a client that must not be used.
type neverClient struct{ AdminAPI }

// TestCreateTablesKeepsTheMode: an existing outbox in another mode, or with
// another retention, is refused, naming both values; the same settings
// change nothing.
func TestCreateTablesKeepsTheMode(t *testing.T) {
	wm := []TablesOption{WithMode(outbox.WatermarkMode), Retention(48 * time.Hour)}
	e := newEnv(t, 4, wm...)
	ctx := ctxT(t)
	if err := CreateTables(ctx, e.d.Client, e.tables, append([]TablesOption{BucketCount(4)}, wm...)...); err != nil {
		t.Fatalf("the same settings again: %v", err)
	}
	var me *outbox.MisconfigurationError
	for _, c := range []struct {
		opts                      []TablesOption
		setting, configured, held string
	}{
		{[]TablesOption{BucketCount(4)}, "Mode", "delete", "watermark"},
		{[]TablesOption{BucketCount(4), WithMode(outbox.WatermarkMode)}, "Retention", "24h0m0s", "48h0m0s"},
	} {
		err := CreateTables(ctx, e.d.Client, e.tables, c.opts...)
		if !errors.As(err, &me) || me.Setting != c.setting || me.Configured != c.configured || me.Stored != c.held {
			t.Errorf("CreateTables = %v, want a *MisconfigurationError %s %s over %s", err, c.setting, c.configured, c.held)
		}
	}
}

// TestOpenTakesTheMode: a store and a writer run in the config item's
// mode; none is configured with one.
func TestOpenTakesTheMode(t *testing.T) {
	ctx := ctxT(t)
	for _, stored := range []outbox.Mode{outbox.DeleteMode, outbox.WatermarkMode} {
		e := newEnv(t, 2, WithMode(stored))
		if s, err := NewStore(ctx, e.d.Client, e.tables); err != nil || s.Opened().Mode != stored {
			t.Errorf("NewStore on a %v outbox: %v, mode %v", stored, err, s.Opened().Mode)
		}
		w, err := NewWriter(ctx, e.d.Client, e.tables)
		if err != nil {
			t.Fatalf("NewWriter on a %v outbox: %v", stored, err)
		}
		if (w.retention != 0) != (stored == outbox.WatermarkMode) {
			t.Errorf("writer on a %v outbox puts a TTL of %v on its messages", stored, w.retention)
		}
	}
}

// TestWriterTTLByMode: in WatermarkMode every message item gets x = the
// later of its CreatedAt and the wall clock, plus the retention (so an old
// CreatedAt cannot make a message expire before it is published); in
// DeleteMode none does. A dead letter replayed in WatermarkMode gets one too.
func TestWriterTTLByMode(t *testing.T) {
	const retention = 5 * time.Hour
	for _, c := range []struct {
		name string
		opts []TablesOption
		ttl  bool
	}{
		{"delete", nil, false},
		{"watermark", []TablesOption{WithMode(outbox.WatermarkMode), Retention(retention)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 1, c.opts...)
			ctx := ctxT(t)
			past, future := time.Now().Add(-30*24*time.Hour), time.Now().Add(3*time.Hour)
			w, err := NewWriter(ctx, e.d.Client, e.tables, WithClock(fixedClock{past}))
			if err != nil {
				t.Fatal(err)
			}
			before := time.Now()
			res, err := w.Write(ctx, nil,
				outbox.Message{Topic: "orders", Key: []byte("a"), Value: []byte("clock in the past")},
				outbox.Message{Topic: "orders", Key: []byte("a"), Value: []byte("created in the future"), CreatedAt: future})
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range res.Messages {
				item := e.getItem(t, e.tables.Messages, messageKey(m.Bucket, m.Sequence))
				_, has := item[attrTTL]
				switch {
				case has != c.ttl:
					t.Errorf("message %d: TTL attribute present %v, want %v", i, has, c.ttl)
				case c.ttl:
					assertTTL(t, item, m.CreatedAt, before, retention)
				}
			}
			// Park the first and replay it: the replayed copy is a new
			// item and gets a TTL from now.
			l, err := e.store.Acquire(ctx, 0, "r", time.Now(), 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.Park(ctx, l, outbox.Parked{Bucket: 0, Sequence: 1, Reason: "test", Attempts: 1}, time.Now()); err != nil {
				t.Fatal(err)
			}
			before = time.Now()
			m, err := e.store.ReplayParked(ctx, 0, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			item := e.getItem(t, e.tables.Messages, messageKey(0, m.Sequence))
			if _, has := item[attrTTL]; has != c.ttl {
				t.Errorf("replayed dead letter: TTL attribute present %v, want %v", has, c.ttl)
			} else if c.ttl {
				assertTTL(t, item, m.CreatedAt, before, retention)
			}
		})
	}
}

// TestConfigure: what Configure writes over each stored configuration, and
// what it refuses while messages are pending.
func TestConfigure(t *testing.T) {
	wm := func(r time.Duration) outbox.Config {
		return outbox.Config{BucketCount: 4, Mode: outbox.WatermarkMode, Retention: r}
	}
	del := outbox.Config{BucketCount: 4, Mode: outbox.DeleteMode}
	cases := []struct {
		name    string
		stored  *outbox.Config // nil: no config item
		pending bool           // a message pending in bucket 1
		want    outbox.Config
		refused error // the error type expected, nil for none
		after   outbox.Config
	}{
		{"writes a missing item", nil, false, wm(0), nil, wm(DefaultRetention)},
		{"the same settings", &del, true, del, nil, del},
		{"delete to watermark, empty", &del, false, wm(48 * time.Hour), nil, wm(48 * time.Hour)},
		{"watermark to delete, empty", new(wm(48 * time.Hour)), false, del, nil, del},
		{"delete to watermark, pending", &del, true, wm(48 * time.Hour), &ModeChangeError{}, del},
		{"the retention alone, pending", new(wm(48 * time.Hour)), true, wm(2 * time.Hour), nil, wm(2 * time.Hour)},
		{"bucket count and mode, pending", &del, true, outbox.Config{BucketCount: 8, Mode: outbox.WatermarkMode}, &BucketCountChangeError{}, del},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var opts []TablesOption
			if c.stored != nil && c.stored.Mode == outbox.WatermarkMode {
				opts = []TablesOption{WithMode(outbox.WatermarkMode), Retention(c.stored.Retention)}
			}
			e := newEnv(t, 4, opts...)
			if c.stored == nil {
				deleteConfig(t, e)
			}
			if c.pending {
				e.mustPut(t, message(1, 1))
			}
			prev, err := Configure(ctxT(t), e.d.Client, e.tables, c.want)
			switch c.refused.(type) {
			case nil:
				if err != nil {
					t.Fatalf("Configure: %v", err)
				}
			case *ModeChangeError:
				var me *ModeChangeError
				if !errors.As(err, &me) || me.Bucket != 1 || me.Stored != c.stored.Mode || me.Requested != c.want.Mode {
					t.Fatalf("Configure = %v, want a *ModeChangeError naming bucket 1", err)
				}
			case *BucketCountChangeError:
				var be *BucketCountChangeError
				if !errors.As(err, &be) || be.Bucket != 1 {
					t.Fatalf("Configure = %v, want a *BucketCountChangeError naming bucket 1", err)
				}
			}
			if c.stored != nil && !sameConfig(prev, *c.stored) {
				t.Errorf("previous = %+v, want %+v", prev, *c.stored)
			}
			if got := storedConfig(t, e.d.Client, e.tables); !sameConfig(got, c.after) {
				t.Errorf("stored afterwards %+v, want %+v", got, c.after)
			}
			// The item is the one CreateTables writes for that config:
			// back to version 1 without md and rt in delete mode, and it
			// records its messages table.
			got, want := rawConfig(t, e), configItem(c.after)
			want[attrMessagesTable] = strAttr(e.tables.Messages)
			if len(got) != len(want) || stringOf(got[attrMessagesTable]) != e.tables.Messages {
				t.Errorf("config item %v, want %v", got, want)
			}
		})
	}
}

func TestConfigureRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		want   outbox.Config
		option string
	}{
		{outbox.Config{BucketCount: 0}, "BucketCount"},
		{outbox.Config{BucketCount: 4, Mode: outbox.DeleteMode, Retention: time.Hour}, "Retention"},
		{outbox.Config{BucketCount: 4, Mode: outbox.WatermarkMode, Retention: time.Minute}, "Retention"},
		{outbox.Config{BucketCount: 4, Mode: outbox.Mode(3)}, "Mode"},
	} {
		var oe *outbox.OptionError
		if _, err := Configure(ctxT(t), nil, Tables{Messages: "m", Control: "c"}, c.want); !errors.As(err, &oe) || oe.Option != c.option {
			t.Errorf("Configure(%+v) = %v, want an *OptionError for %s", c.want, err, c.option)
		}
	}
}

// TestRetained: the lowest message at or below head, past fences, and
// nothing above head.
func TestRetained(t *testing.T) {
	e := newEnv(t, 2, WithMode(outbox.WatermarkMode))
	ctx := ctxT(t)
	if first, _, err := e.store.Retained(ctx, 0, 10); err != nil || first != 0 {
		t.Fatalf("empty bucket: first %d, %v", first, err)
	}
	seqs := make([]int64, 40)
	for i := range seqs {
		seqs[i] = int64(i + 1)
	}
	fence(t, e, 0, seqs...)
	m := message(0, 41)
	m.CreatedAt = time.UnixMilli(1_700_000_000_000)
	e.mustPut(t, m, message(0, 42), message(0, 50))
	for _, c := range []struct {
		head, first int64
	}{
		{0, 0},
		{40, 0},  // only fences at or below head
		{41, 41}, // past 40 fences
		{45, 41},
		{60, 41},
	} {
		first, oldest, err := e.store.Retained(ctx, 0, c.head)
		if err != nil || first != c.first {
			t.Errorf("head %d: first %d, %v; want %d", c.head, first, err, c.first)
		}
		if c.first == 41 && !oldest.Equal(m.CreatedAt) {
			t.Errorf("head %d: oldest %v, want %v", c.head, oldest, m.CreatedAt)
		}
	}
}
