// Package dynamo keeps the outbox in two DynamoDB tables: it writes
// messages in the same transaction as a service's own items (Writer), and
// implements outbox.Store for the relay (Store).
//
// # Where to start
//
// Service writers open a [Writer] with [NewWriter] (it reads the outbox's
// config item and checks both tables) and call [Writer.Write] with their
// own items and the messages, or [Writer.WriteWithToken] to resend one
// request. Build the items with [Put], [Update], [UpdateIfVersion],
// [Check] and [Delete]; the common case, "update my order if its version
// is still v, and enqueue this event", is UpdateIfVersion plus Write (see
// the Writer.Write example). A service that only enqueues can depend on
// [Enqueuer]. A failed write is a [*TransactionError] that matches the
// outbox sentinels (outbox.ErrConditionFailed: its CallerReasons()[i].Item
// is what made your item i fail).
//
// People who run the relay create the tables with [CreateTables] (or the
// stack's setup function, which calls [Configure]), open a [Store] with
// [NewStore] and give it to relay.New. Dead letters:
// [Store.ListParked], [Store.ReplayParked], [Store.DropParked]. The
// count of buckets changes online with [ChangeBucketCount]; region mode
// (global tables) hands a region's buckets over with [TakeOver] and
// [HandBack].
//
// Implementers of another store read this one as the production example
// of outbox.Store: each lease change is one conditional UpdateItem, and it
// passes the conformance suite in package storetest.
//
// Options: [TablesOption] for CreateTables, [StoreOption] for NewStore,
// [WriterOption] for NewWriter, [ChangeOption] for the BucketCount change;
// an option given to another constructor does not compile. Every option's
// doc states its default.
//
// # Tables
//
// Messages table, key b (N, bucket) / s (N, sequence), stream KEYS_ONLY,
// TTL on x: the messages, fences and tombstones. Control table, key pk (S)
// / sk (S), TTL on x: the config item, the per-bucket counters and
// leases, the relays' heartbeats and the dead letters. Every attribute,
// item by item, is in docs/contract.md ("Every attribute at a glance"),
// for writers in any language, with the JSON Schemas in schema/; the
// message headers' binary encoding (attribute h) is its section 3.1.
//
// # Modes
//
// In DeleteMode (the default) the relay replaces each published message by
// a tombstone. In WatermarkMode (the WithMode option of CreateTables) it
// writes nothing per message: the Writer puts a TTL on every message
// (Retention, default 1 day) and DynamoDB deletes it then; until then
// Store.Pending still returns it below the head, which is what package
// replay publishes again, and Store.Retained finds a bucket's retained
// range. CreateTables refuses to give an existing outbox the other mode
// (Configure changes it, on an empty outbox); writers and relays read it
// from the config item.
//
// # Writing
//
// Writer.Write validates the messages, reserves their sequence numbers
// (package sequence) immediately before the commit, and runs the caller's
// items and one put per message (conditional on the sequence number being
// free) as one TransactWriteItems, retried with the same client request
// token when the response is lost, so that a committed transaction is never
// reported failed. If a relay fenced a reserved number first (the writer
// took longer than the relay's gap timeout), the put's condition fails and
// Write takes new numbers and resubmits. Every failure that certainly wrote
// nothing releases the reserved numbers at once by fencing them.
//
// The Writer is the one layer that retries these calls (the client's
// retryer is off for them): MaxAttempts is the number of requests on the
// wire. WithLogger reports each retry (silent by default).
//
// # Your items
//
// Put, Update, UpdateIfVersion, Check and Delete build the items a service
// passes to Writer.Write with the SDK's expression builder (package
// github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression) and
// attributevalue, so that no expression string or placeholder is written by
// hand. Items and keys are Go values marshalled with
// attributevalue.MarshalMap — a struct with dynamodbav tags or a
// map[string]any — or a map[string]types.AttributeValue, used as it is.
// Conditions given together must all hold. A failed condition returns the
// item as it was (ReturnValuesOnConditionCheckFailure ALL_OLD): after
// outbox.ErrConditionFailed, TransactionError.CallerReasons()[i].Item is
// what made your item i fail, for example with its current version. They
// send nothing; what they cannot build is an *OperationError naming the
// part to fix.
//
// # Leases
//
// Every lease change is one conditional UpdateItem on the lease item, with
// the expiry compared against the caller's clock in Unix milliseconds: a
// relay's clock must be within the lease renewal slack of its peers' (see
// the outbox package). A failed condition returns the item as it was
// (ReturnValuesOnConditionCheckFailure), which tells Acquire who holds the
// lease and Release whether it was woken or lost. docs/design.md (§4) walks
// through the hand-overs.
//
// # Errors
//
// SDK errors are translated at this boundary: failed lease conditions
// become outbox.ErrLeaseHeld, ErrLeaseLost or ErrWoken, a fence over a
// stored item ErrAlreadyWritten, and Write's failures a *TransactionError
// that matches the outbox sentinels and keeps the SDK error and the
// cancellation reasons.
package dynamo
