package outbox

import "strconv"

// The shared settings: writers, relays, publishers and consumers of one
// outbox must agree on them, so they live once, in the outbox's config item
// (Config), and every component reads them there when it starts
// (docs/design.md §11.1). A component given one of them locally accepts it
// when it equals the stored value and refuses it with a
// *MisconfigurationError otherwise; given none, it takes the stored one.
//
// A config item written before these settings were stored has none of
// them and says the defaults: DefaultMaxMessageBytes and the default
// header names.

// SharedMaxMessageBytes is the config item's MaxMessageBytes:
// DefaultMaxMessageBytes when the item has none.
func (c Config) SharedMaxMessageBytes() int {
	if c.MaxMessageBytes == 0 {
		return DefaultMaxMessageBytes
	}
	return c.MaxMessageBytes
}

// SharedHeaders is the config item's header names, defaults filled in.
func (c Config) SharedHeaders() HeaderNames { return c.Headers.WithDefaults() }

// CheckShared compares a component's local shared settings with the stored
// configuration: maxMessageBytes 0 and empty header names are not set
// locally (take the stored ones). It returns a *MisconfigurationError
// naming the first setting that differs, both values and the fix.
func CheckShared(stored Config, maxMessageBytes int, headers HeaderNames) error {
	fix := func(opt string) string {
		return "remove the " + opt + " option to take the outbox's value from its config item, or set it to the stored value " +
			"(every writer, relay, publisher and consumer of one outbox must agree: to change it, change the config item with dynamo.Configure, then restart them)"
	}
	if maxMessageBytes != 0 && maxMessageBytes != stored.SharedMaxMessageBytes() {
		return &MisconfigurationError{Setting: "MaxMessageBytes", Configured: strconv.Itoa(maxMessageBytes),
			Stored: strconv.Itoa(stored.SharedMaxMessageBytes()), Fix: fix("MaxMessageBytes")}
	}
	sh := stored.SharedHeaders()
	for _, h := range []struct{ setting, local, stored string }{
		{"MessageIDHeader", headers.MessageID, sh.MessageID},
		{"BucketHeader", headers.Bucket, sh.Bucket},
		{"SequenceHeader", headers.Sequence, sh.Sequence},
	} {
		if h.local != "" && h.local != h.stored {
			return &MisconfigurationError{Setting: h.setting, Configured: strconv.Quote(h.local), Stored: strconv.Quote(h.stored), Fix: fix(h.setting)}
		}
	}
	return nil
}
