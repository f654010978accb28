// Package dynamo stores the outbox in two DynamoDB tables: it implements
// outbox.Store (and outbox.BucketProbe) for the relay, and Writer, which
// writes messages in the same transaction as a service's own items.
//
// # Tables
//
// Messages table, key b (N, bucket) / s (N, sequence), stream KEYS_ONLY, TTL
// on x. A message item holds v (format version), id, t (topic), k (key;
// absent for a nil key, empty binary for an empty key), val (value; absent
// for a tombstone), h (headers, see below; absent for none), p (explicit
// partition, optional) and c (created-at, Unix ms), and in WatermarkMode x
// (TTL, epoch seconds: created-at, or the writer's wall clock if later,
// plus the outbox's retention). A fence tombstone holds b, s, v, f (true),
// c and x; the tombstone of a published message (DeleteMode) also pb
// (true).
//
// Control table, key pk (S) / sk (S), TTL on x:
//
//	pk "config",     sk "config"  bc (bucket count), v (1; 2 in WatermarkMode, with
//	                              md "watermark" and rt retention in seconds)
//	pk "bucket#<b>", sk "seq"     n (last reserved sequence), v   (package sequence)
//	pk "bucket#<b>", sk "lease"   o owner, e expiry ms, hd head, cl cleaned,
//	                              g gap, gs gap-since ms, w wake, ep epoch, v
//	pk "relays",     sk <id>      seen ms, x TTL, v
//
// CreateTables creates both and writes the config item (Configure changes
// it). Sequence numbers start at 1; head and cleaned start at 0.
//
// The items, versioned, for writers in any language: docs/contract.md and
// the JSON Schemas in schema/.
//
// # Modes
//
// In DeleteMode (the default) the relay replaces each published message by
// a tombstone. In WatermarkMode (the Mode option of CreateTables) it writes
// nothing per message: the Writer puts a TTL on every message (Retention,
// default 1 day) and DynamoDB deletes it then; until then Store.Pending
// still returns it below the head, which is what package replay publishes
// again, and Store.Retained finds a bucket's retained range. NewStore and
// NewWriter with the Mode option refuse an outbox in the other mode.
//
// # Headers
//
// The h attribute is a versioned binary encoding: a version byte (1), a
// uvarint header count, then per header a uvarint key length and the key, a
// presence byte (0: nil value, nothing follows; 1: present) and, when
// present, a uvarint value length and the value. Order, duplicate keys and
// the difference between nil and empty values survive a round trip.
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
// nothing releases the reserved numbers at once by fencing them. The Writer
// is the one layer that retries these calls (the client's retryer is off for
// them): MaxAttempts is the number of requests on the wire. WithLogger
// reports each retry (silent by default).
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
// The common case, "update my order if its version is still v, and enqueue
// this event", is UpdateIfVersion plus Write (see the Writer.Write example).
//
// # Leases
//
// Every lease change is one conditional UpdateItem on the lease item, with
// the expiry compared against the caller's clock in Unix milliseconds: a
// relay's clock must be within the lease renewal slack of its peers' (see
// the outbox package). A failed condition returns the item as it was
// (ReturnValuesOnConditionCheckFailure), which tells Acquire who holds the
// lease and Release whether it was woken or lost.
//
// # Errors
//
// SDK errors are translated at this boundary: failed lease conditions
// become outbox.ErrLeaseHeld, ErrLeaseLost or ErrWoken, a fence over a
// stored item ErrAlreadyWritten, and Write's failures a *TransactionError
// that matches the outbox sentinels and keeps the SDK error and the
// cancellation reasons.
package dynamo
