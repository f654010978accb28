package kafka

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dynakafka/outbox"
)

// With OutboxConfig the publisher takes the shared settings from the config
// item, where they are set (there is no option for them); a Topics topic
// outside the item's list is refused naming it.
func TestOutboxConfigSharedSettings(t *testing.T) {
	stored := outbox.Config{BucketCount: 4, MaxMessageBytes: 2 << 20, Headers: outbox.HeaderNames{Sequence: "seq"}, Topics: []string{"orders", "payments"}}
	build := func(stored outbox.Config, opts ...Option) (cfg, error) {
		c := defaultCfg()
		for _, o := range append([]Option{OutboxConfig(stored)}, opts...) {
			o(&c)
		}
		return c, c.validate()
	}
	c, err := build(stored)
	if err != nil || c.maxMessageBytes != 2<<20 || c.headers.Sequence != "seq" || c.headers.MessageID != outbox.DefaultMessageIDHeader ||
		len(c.topics) != 0 {
		t.Fatalf("took %d %+v %v, %v; want the config item's", c.maxMessageBytes, c.headers, c.topics, err)
	}
	if c, err := build(outbox.Config{}); err != nil || c.maxMessageBytes != outbox.DefaultMaxMessageBytes || c.headers != (outbox.HeaderNames{}).WithDefaults() {
		t.Fatalf("an item that states none: took %d %+v, %v; want the defaults", c.maxMessageBytes, c.headers, err)
	}
	cases := []struct {
		name    string
		stored  outbox.Config
		opts    []Option
		setting string // "" when accepted
	}{
		{"a stored topic", stored, []Option{Topics("orders")}, ""},
		{"a topic outside the list", stored, []Option{Topics("orders", "refunds")}, "Topics"},
		// What the item may hold that this publisher cannot work with.
		{"MaxMessageBytes below what kgo accepts", outbox.Config{MaxMessageBytes: 511}, nil, "MaxMessageBytes"},
		{"MaxMessageBytes above the broker's request limit", outbox.Config{MaxMessageBytes: 100 << 20}, nil, "MaxMessageBytes"},
		{"header names longer than MaxMessageBytes", outbox.Config{MaxMessageBytes: 512, Headers: outbox.HeaderNames{MessageID: strings.Repeat("h", 400)}}, nil, "MaxMessageBytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := build(tc.stored, tc.opts...)
			var me *outbox.MisconfigurationError
			switch {
			case tc.setting == "" && err != nil:
				t.Fatalf("got %v, want it accepted", err)
			case tc.setting != "" && (!errors.As(err, &me) || me.Setting != tc.setting || me.Stored == "" || me.Configured == ""):
				t.Fatalf("got %v, want a *MisconfigurationError for %s", err, tc.setting)
			}
		})
	}
	// Header names the item may not hold (dynamo.Configure refuses them
	// too): an *outbox.OptionError naming the header.
	for _, h := range []outbox.HeaderNames{{MessageID: "x-\xff"}, {Bucket: outbox.DefaultMessageIDHeader}} {
		if _, err := build(outbox.Config{Headers: h}); err == nil {
			t.Errorf("headers %+v accepted", h)
		}
	}
}

// The relay refuses a publisher whose shared settings are not the config
// item's it runs on (outbox.ConfigChecker): one built for another outbox,
// or without OutboxConfig for an outbox that states its own.
func TestCheckConfig(t *testing.T) {
	stored := outbox.Config{BucketCount: 4, MaxMessageBytes: 2 << 20, Headers: outbox.HeaderNames{Sequence: "seq"}}
	with, err := NewPublisher(context.Background(), noBroker, OutboxConfig(stored))
	if err != nil {
		t.Fatal(err)
	}
	defer with.Close()
	without, err := NewPublisher(context.Background(), noBroker)
	if err != nil {
		t.Fatal(err)
	}
	defer without.Close()
	cases := []struct {
		name    string
		p       *Publisher
		item    outbox.Config
		setting string // "" when it passes
	}{
		{"its own item", with, stored, ""},
		{"its own item at another count and epoch", with, outbox.Config{BucketCount: 8, BucketEpoch: 1, MaxMessageBytes: 2 << 20, Headers: outbox.HeaderNames{Sequence: "seq"}}, ""},
		{"another MaxMessageBytes", with, outbox.Config{BucketCount: 4, Headers: outbox.HeaderNames{Sequence: "seq"}}, "MaxMessageBytes"},
		{"another sequence header", with, outbox.Config{BucketCount: 4, MaxMessageBytes: 2 << 20}, "SequenceHeader"},
		{"no item given, one that states none", without, outbox.Config{BucketCount: 4}, ""},
		{"no item given, one that states the defaults", without, outbox.Config{BucketCount: 4, MaxMessageBytes: outbox.DefaultMaxMessageBytes,
			Headers: (outbox.HeaderNames{}).WithDefaults()}, ""},
		{"no item given, one that states its own", without, stored, "MaxMessageBytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.CheckConfig(tc.item)
			var me *outbox.MisconfigurationError
			switch {
			case tc.setting == "" && err != nil:
				t.Fatalf("got %v, want it to pass", err)
			case tc.setting != "" && (!errors.As(err, &me) || me.Setting != tc.setting || !strings.Contains(me.Fix, "OutboxConfig")):
				t.Fatalf("got %v, want a *MisconfigurationError for %s saying OutboxConfig", err, tc.setting)
			}
		})
	}
}
