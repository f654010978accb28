package outbox

import "time"

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

// DefaultGapTimeout is the relay's GapTimeout default, and the time
// store/dynamo's writer waits out a gap in a BucketCount change.
const DefaultGapTimeout = 10 * time.Second
