// Package inbox is the consuming half of the outbox: it processes Kafka
// records effectively once, in the consumer's own DynamoDB transaction.
//
// The relay delivers at least once; the consumer promises to be idempotent.
// Inbox.Process makes that promise hold for consumers whose state lives in
// DynamoDB: the callback adds the business operations (the same
// types.TransactWriteItem values the writer takes), and the inbox adds a
// conditional put of the record's message id on its processed-ids table, in
// the same TransactWriteItems. A message already processed cancels the
// transaction: its business operations are never applied twice.
//
//	ib, err := inbox.New(ctx, client, "orders-view-inbox", inbox.InOrder())
//	c, err := inbox.NewConsumer(ib, func(tx *inbox.Tx) error {
//		tx.Add(applyOrder(tx.Record()))
//		return nil
//	}, inbox.ClientOptions(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("orders-view"), kgo.ConsumeTopics("orders")))
//	err = c.Run(ctx)
//
// # Two modes
//
// Id-only (default): a message id is processed once within Retention. A
// copy arriving later than that after the first processing is applied again;
// a first delivery that arrives after a newer record of its key is applied
// (out of order).
//
// In-order (InOrder): the inbox also keeps, per (topic, partition, bucket),
// the highest sequence number applied, in the same transaction, and skips a
// record whose sequence is not above it (Stale). Records of a bucket are then
// applied in sequence order, never twice, whatever the window; a record that
// arrives after a newer one of its bucket is dropped, and counted.
//
// docs/inbox.md states the guarantees exactly, how to size Retention and what
// each mode costs.
//
// # Processed-ids table
//
// Key pk (S), TTL on x (see CreateTable):
//
//	pk "m#<message id>"                    x (TTL, epoch s), at (ms), tok, t, p, o, v
//	pk "q#<topic>#<partition>#<bucket>"    s (highest applied sequence), id, at, tok, v   (in-order mode)
//
// # Offsets
//
// Commit a record's offset only after Process returned nil for it. Consumer
// does that with kgo's marked autocommits, processing partitions in
// parallel and each partition in order, reading read_committed.
//
// # Records it cannot process
//
// A record that cannot be processed — a *RecordError (not from the outbox),
// a callback error wrapped with Permanent, or a transient error still
// failing after RecordRetries — goes to the consumer's policy, OnPoison:
// Stop (the default: Run returns its error), Skip (logged, counted as
// Skipped, committed) or DeadLetterTo a DeadLetterTopic or DeadLetterTable
// (counted as DeadLettered, then committed). Handler is that per-record
// logic alone, for consumers that get their records another way; the
// Lambda adapter for Kafka event-source mappings is
// github.com/dynakafka/outbox/inbox/lambdakafka. Package
// github.com/dynakafka/outbox/inboxtest gives a callback its Tx in a unit
// test.
//
// # Trace context
//
// With WithTracer, Process starts its consumer span as a child of the W3C
// trace context in the record's headers (written by the writer's tracer and
// passed through by the relay): one trace from the writer to the consumer.
package inbox
