package outbox

import "strconv"

// The shared settings: writers, relays, publishers and consumers of one
// outbox must agree on them, so they live once, in the outbox's config item
// (Config), and every component reads them there when it starts
// (docs/design.md §11.1). A component given one of them locally accepts it
// when it equals the stored value and refuses it with a
// *MisconfigurationError otherwise; given none, it takes the stored one.
//
// A config item written before these settings were stored, or without
// them, keeps today's behaviour for the settings it does not state: each
// component uses its own option, default DefaultMaxMessageBytes and the
// default header names.

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

// ResolveShared compares a component's local shared settings with the
// stored configuration (maxMessageBytes 0 and empty header names: not set
// locally) and returns the ones to use: the stored value where the config
// item states one, else the local one, else the default. A local value
// that differs from a stored one is a *MisconfigurationError naming the
// setting, both values and the fix.
func ResolveShared(stored Config, maxMessageBytes int, headers HeaderNames) (int, HeaderNames, error) {
	fix := func(opt string) string {
		return "remove the " + opt + " option to take the outbox's value from its config item, or set it to the stored value " +
			"(every writer, relay, publisher and consumer of one outbox must agree: to change it, change the config item with dynamo.Configure, then restart them)"
	}
	if maxMessageBytes != 0 && stored.MaxMessageBytes != 0 && maxMessageBytes != stored.MaxMessageBytes {
		return 0, HeaderNames{}, &MisconfigurationError{Setting: "MaxMessageBytes", Configured: strconv.Itoa(maxMessageBytes),
			Stored: strconv.Itoa(stored.MaxMessageBytes), Fix: fix("MaxMessageBytes")}
	}
	if stored.MaxMessageBytes != 0 {
		maxMessageBytes = stored.MaxMessageBytes
	}
	if maxMessageBytes == 0 {
		maxMessageBytes = DefaultMaxMessageBytes
	}
	for _, h := range []struct {
		setting string
		local   *string
		stored  string
	}{
		{"MessageIDHeader", &headers.MessageID, stored.Headers.MessageID},
		{"BucketHeader", &headers.Bucket, stored.Headers.Bucket},
		{"SequenceHeader", &headers.Sequence, stored.Headers.Sequence},
	} {
		switch {
		case h.stored == "":
		case *h.local != "" && *h.local != h.stored:
			return 0, HeaderNames{}, &MisconfigurationError{Setting: h.setting, Configured: strconv.Quote(*h.local), Stored: strconv.Quote(h.stored), Fix: fix(h.setting)}
		default:
			*h.local = h.stored
		}
	}
	return maxMessageBytes, headers.WithDefaults(), nil
}
