// Package replay publishes again, in sequence order and with their original
// message ids, the messages of one bucket that an outbox in WatermarkMode
// still retains: every message at or below the bucket's head (published and
// acknowledged) whose TTL has not yet removed it.
//
//	st, err := replay.Range(ctx, store, publisher, 3, 1200, 1500)
//
// It knows only the outbox.Store and outbox.Publisher contracts, so it works
// with any store and the same publisher the relay uses (which stamps the
// message id, bucket and sequence headers). It takes no lease and writes
// nothing: the relay goes on publishing above the head meanwhile, so a
// consumer sees the replayed copies after newer records; consumers that
// deduplicate on the message id (package inbox) drop them, and consumers
// that rebuild state from the topic can read them again. An outbox in
// DeleteMode keeps nothing to replay, and Range refuses it.
//
// The CLI's `outbox replay --bucket B --from S1 --to S2` runs Range.
package replay
