package kafka

import (
	"errors"
	"testing"

	"github.com/dynakafka/outbox"
)

// With OutboxConfig the publisher takes the shared settings from the config
// item, accepts equal local ones and refuses others naming both values.
func TestOutboxConfigSharedSettings(t *testing.T) {
	stored := outbox.Config{BucketCount: 4, MaxMessageBytes: 2 << 20, Headers: outbox.HeaderNames{Sequence: "seq"}, Topics: []string{"orders", "payments"}}
	build := func(opts ...Option) (cfg, error) {
		c := defaultCfg()
		for _, o := range append([]Option{OutboxConfig(stored)}, opts...) {
			o(&c)
		}
		return c, c.validate()
	}
	c, err := build()
	if err != nil || c.maxMessageBytes != 2<<20 || c.headers.Sequence != "seq" || c.headers.MessageID != outbox.DefaultMessageIDHeader ||
		len(c.topics) != 0 {
		t.Fatalf("absent: took %d %+v %v, %v; want the config item's", c.maxMessageBytes, c.headers, c.topics, err)
	}
	cases := []struct {
		name    string
		opts    []Option
		setting string // "" when accepted
	}{
		{"same size", []Option{MaxMessageBytes(2 << 20)}, ""},
		{"other size", []Option{MaxMessageBytes(1 << 20)}, "MaxMessageBytes"},
		{"same sequence header", []Option{SequenceHeader("seq")}, ""},
		{"other sequence header", []Option{SequenceHeader(outbox.DefaultSequenceHeader)}, "SequenceHeader"},
		{"an id header the item does not state", []Option{MessageIDHeader("id")}, ""},
		{"a stored topic", []Option{Topics("orders")}, ""},
		{"a topic outside the list", []Option{Topics("orders", "refunds")}, "Topics"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := build(tc.opts...)
			var me *outbox.MisconfigurationError
			switch {
			case tc.setting == "" && err != nil:
				t.Fatalf("got %v, want it accepted", err)
			case tc.setting != "" && (!errors.As(err, &me) || me.Setting != tc.setting || me.Stored == "" || me.Configured == ""):
				t.Fatalf("got %v, want a *MisconfigurationError for %s", err, tc.setting)
			}
		})
	}
}
