package inbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dynakafka/outbox"
)

// One option type serves New, NewConsumer and NewHandler: an option given to
// a constructor it does not apply to is refused, naming it, before any I/O.
func TestOptionRefusedWhereItDoesNotApply(t *testing.T) {
	ib := &Inbox{}
	fn := func(*Tx) error { return nil }
	cases := []struct {
		name   string
		open   func() error
		option string
	}{
		{"consumer option to New", func() error { _, err := New(context.Background(), nil, "t", OnPoison(Skip())); return err }, "OnPoison"},
		{"inbox option to NewConsumer", func() error { _, err := NewConsumer(ib, fn, Retention(48*time.Hour)); return err }, "Retention"},
		{"inbox option to NewHandler", func() error { _, err := NewHandler(ib, fn, InOrder()); return err }, "InOrder"},
		{"a nil option", func() error { _, err := NewHandler(ib, fn, nil); return err }, "opts"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var oe *outbox.OptionError
			if err := c.open(); !errors.As(err, &oe) || oe.Option != c.option {
				t.Fatalf("got %v, want an *OptionError for %s", err, c.option)
			}
		})
	}
}

// With OutboxConfig the inbox reads the header names from the config item,
// accepts equal Headers and refuses others naming both values.
func TestOutboxConfigHeaders(t *testing.T) {
	stored := outbox.Config{BucketCount: 2, Headers: outbox.HeaderNames{Bucket: "bkt"}}
	build := func(opts ...Option) (config, error) {
		c := defaultConfig()
		if err := c.apply(forInbox, append([]Option{OutboxConfig(stored)}, opts...)); err != nil {
			return c, err
		}
		return c, c.validate()
	}
	if c, err := build(); err != nil || c.headers != stored.SharedHeaders() {
		t.Fatalf("absent: headers %+v, %v; want the config item's", c.headers, err)
	}
	if _, err := build(Headers(outbox.HeaderNames{Bucket: "bkt"})); err != nil {
		t.Fatalf("equal Headers: %v", err)
	}
	var me *outbox.MisconfigurationError
	if _, err := build(Headers(outbox.HeaderNames{Bucket: outbox.DefaultBucketHeader})); !errors.As(err, &me) || me.Setting != "BucketHeader" || me.Stored != `"bkt"` {
		t.Fatalf("other Headers: %v, want a *MisconfigurationError for BucketHeader", err)
	}
}
