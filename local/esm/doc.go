// Package esm is a local stand-in for the Lambda service's event-source
// mapping from a DynamoDB stream to a function, for demos, end-to-end tests
// and benchmarks against DynamoDB Local.
//
// A Mapping polls the stream the way Lambda does: it discovers shards with
// DescribeStream (and again whenever a shard ends, to find its children),
// reads a child shard only after its parent is exhausted, calls GetRecords
// four times a second per idle shard, replaces expired iterators, filters
// records (INSERT only by default, like the FilterCriteria
// {"eventName":["INSERT"]}), batches them (BatchSize, MaximumBatchingWindow)
// and invokes the function with an events.DynamoDBEvent shaped exactly like
// Lambda's. Batches of one shard are strictly sequential
// (ParallelizationFactor 1). Failures follow Lambda's rules: a function error
// retries the whole batch (bisecting it if BisectBatchOnFunctionError);
// reported batchItemFailures resume from the lowest reported sequence number;
// an identifier that names no record of the batch fails the whole batch;
// after MaximumRetryAttempts retries (or past MaximumRecordAge) the records
// are dropped and described to OnFailure in the JSON shape Lambda sends to an
// on-failure destination.
//
// Two Invokers run the function: InProcess calls a Go handler in this process
// (through JSON, with a Lambda context and a timeout), and an RIEProcess runs
// a real bootstrap binary under the AWS Lambda Runtime Interface Emulator
// (installed by scripts/install-rie.sh) and invokes it over HTTP.
//
// Not reproduced: the 6 MB invocation payload limit (batches are cut by
// count only), ParallelizationFactor above 1, tumbling windows, and
// checkpoints that survive a restart (each Run starts at StartPosition).
package esm
