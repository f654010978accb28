package outbox

// The shared settings: writers, relays, publishers and consumers of one
// outbox must agree on them, so they live once, in the outbox's config item
// (Config), and every component reads them there when it starts
// (docs/design.md §12). No option or variable states them elsewhere: the
// config item is written by dynamo.CreateTables (outbox init) and
// dynamo.Configure (the stack's setup), and each of those refuses what it
// cannot change.
//
// A config item that does not state MaxMessageBytes or a header name — one
// written before these were stored, or by a stack that does not state
// them — means the default: DefaultMaxMessageBytes and the default names.

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
