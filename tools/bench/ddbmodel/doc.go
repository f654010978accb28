// Package ddbmodel is a model of DynamoDB for the bench's modelled stage:
// an in-memory engine with DynamoDB's API, reached in process (DB's
// methods have *dynamodb.Client's signatures; Streams has the streams
// client's) or over DynamoDB's HTTP protocol (Serve), so that the real SDK
// client and the real store/dynamo code run on it unchanged.
//
// What it models, by DynamoDB's documentation:
//
//   - the operations the outbox uses: GetItem, PutItem, UpdateItem,
//     DeleteItem, Query, BatchGetItem, BatchWriteItem, TransactWriteItems,
//     DescribeTable, CreateTable, UpdateTable (streams), the TTL calls,
//     ListTables; and the streams API DescribeStream, GetShardIterator and
//     GetRecords (in process);
//   - condition, filter, key-condition, update and projection expressions,
//     parsed and evaluated (every conditional write is decided on the item
//     as stored; placeholders are checked, unused ones refused; the
//     condition is evaluated before the update);
//   - transactions: every item's condition, all or nothing, with a
//     cancellation reason per item (and the old item on request), one item
//     at most once, a ClientRequestToken making a resend of a committed
//     transaction a success that writes nothing;
//   - capacity units by the documented rules (ItemSize, WriteUnits,
//     ReadUnits) and each partition key value's ceilings, 1,000 WCU/s and
//     3,000 RCU/s, as token buckets banking a second: beyond them a call is
//     answered ProvisionedThroughputExceeded (reason
//     Table{Write,Read}KeyRangeThroughputExceeded), a batch returns the
//     refused keys unprocessed, a transaction is cancelled with
//     ThrottlingError — which the SDK's retryer and the store handle as
//     they would DynamoDB's;
//   - a latency per call, drawn from a distribution (Dist: log-normal by
//     median and 99th percentile, empirical, or a measured trace replayed
//     in time), half before the call takes effect and half after;
//   - a stream per table: every change (INSERT, MODIFY, REMOVE; none for
//     a write that changes nothing) with its keys, in write order per
//     partition key, in one of Config.Shards shards by the key's hash;
//     GetRecords returns at most 1,000 records or 1 MB.
//
// What it leaves out: secondary indexes, Scan, PartiQL, TransactGetItems,
// global tables and regions (one region), TTL deletions (runs are shorter
// than DynamoDB's deletion delay), the 10 GB item collection limit,
// transaction conflicts between concurrent transactions (one lock orders
// every call: the writes of DynamoDB's partitions are serialised per item,
// the model's all at once), adaptive capacity and table-level quotas
// (40,000 WRU/s per table by default, raisable; only the per-key ceilings
// are modelled), a new on-demand table's initial throughput and its
// doubling (the model's tables are as warm as the load needs), stream
// shard splits and the delay before a record is readable, the time a call
// takes by its size (a Query of 500 items draws the same latency as a
// GetItem), IdempotentParameterMismatch (a token is remembered for the
// model's life, not 10 minutes, and not compared with its request) and
// DynamoDB's 570 reserved words.
//
// Its tests check the unit and capacity arithmetic and the throttling
// (table tests), the expression language, the stream, the HTTP API under
// the real SDK, a script of calls answered alike by DynamoDB Local and the
// model (TestAgreesWithDynamoDBLocal, which also lists where DynamoDB
// Local departs from AWS's documentation and the model follows the
// documentation), and store/dynamo's own test suite run on the model
// (TestStoreSuiteOnModel).
package ddbmodel
