package inbox

import (
	"context"
	"errors"
	"testing"

	"github.com/dynakafka/outbox"
)

// A nil option is refused by each constructor, naming opts, before any I/O.
// (An option given to a constructor it does not serve does not compile:
// the root package's TestMisplacedOptionsDoNotCompile.)
func TestNilOptionRefused(t *testing.T) {
	ib := &Inbox{}
	fn := func(*Tx) error { return nil }
	for name, open := range map[string]func() error{
		"New":         func() error { _, err := New(context.Background(), nil, "t", nil); return err },
		"NewConsumer": func() error { _, err := NewConsumer(ib, fn, MaxPollRecords(10), nil); return err },
		"NewHandler":  func() error { _, err := NewHandler(ib, fn, nil); return err },
	} {
		var oe *outbox.OptionError
		if err := open(); !errors.As(err, &oe) || oe.Option != "opts" {
			t.Errorf("%s: got %v, want an *OptionError for opts", name, err)
		}
	}
}

// With OutboxConfig the inbox reads the header names from the config item;
// without it, those of an item that states none. No option states them.
func TestOutboxConfigHeaders(t *testing.T) {
	stored := outbox.Config{BucketCount: 2, Headers: outbox.HeaderNames{Bucket: "bkt"}}
	build := func(opts ...Option) (config, error) {
		c := defaultConfig()
		for _, o := range opts {
			o.applyInbox(&c)
		}
		return c, c.validate()
	}
	if c, err := build(OutboxConfig(stored)); err != nil || c.headers != stored.SharedHeaders() {
		t.Fatalf("headers %+v, %v; want the config item's", c.headers, err)
	}
	if c, err := build(); err != nil || c.headers != (outbox.HeaderNames{}).WithDefaults() {
		t.Fatalf("without the item: headers %+v, %v; want the default names", c.headers, err)
	}
}
