// Package faults injects DynamoDB faults into an aws-sdk-go-v2 DynamoDB
// client, as DynamoDB and the network produce them, so that tests and soaks
// see what production sees: throttling, server errors, timeouts, partial
// batch writes and responses lost after the write committed.
//
//	inj, err := faults.New(faults.Seed(7),
//		faults.For("TransactWriteItems", faults.Policy{ResponseLost: 0.05, Throttle: 0.05}),
//		faults.For("BatchWriteItem", faults.Policy{Unprocessed: 0.2}))
//	client := dynamodb.NewFromConfig(cfg, inj.Install)
//	... // faults fire
//	inj.Disable() // a clean drain at the end
//	n := inj.Count(faults.ResponseLost, "TransactWriteItems")
//
// # How each fault is produced
//
// Per attempt (inside the SDK's retry loop, as the innermost deserialize
// middleware, where the HTTP round trip happens):
//
//   - Throttle, Throttling, ServerError: the request is not sent; the SDK
//     receives a fabricated DynamoDB HTTP error response (400 with
//     ProvisionedThroughputExceededException or ThrottlingException, 500
//     with InternalServerError, JSON body, request id and CRC32 header) and
//     its own deserializer turns it into *types.ProvisionedThroughputExceededException,
//     *types.ThrottlingException or *types.InternalServerError, wrapped the
//     way real errors are (smithy.OperationError, awshttp.ResponseError).
//   - Timeout: the request is not sent; the attempt fails with the error an
//     HTTP client timeout gives: *smithyhttp.RequestSendError wrapping a
//     *url.Error wrapping a *TimeoutError (Timeout() is true).
//   - ResponseLost: the request is sent and DynamoDB executes it; its
//     response (whatever it was) is read and discarded and the attempt fails
//     with the same timeout error. The caller cannot tell whether the write
//     happened, which is the point.
//
// Timeout and ResponseLost fail at once: no time passes.
//
// Because these sit below the retry middleware, the SDK's retryer treats
// them exactly like real ones: throttles are retried as throttles, 500s and
// timeouts as transient errors; each retry is a new attempt that may draw
// another fault. Build clients with NoRetries to see every injected fault at
// the caller. What the SDK's standard retryer does with them (DynamoDB
// clients: 4 attempts, 25 ms base backoff) is worth knowing:
//
//   - throttles back off from a 1 s base whatever BaseDelay says (up to
//     1+2+4 s of sleeping in one call);
//   - retries draw on a per-client quota of 500 tokens (14 per retry, 5 per
//     throttle retry, given back only when the retry succeeds): under a
//     sustained fault rate it runs dry and the SDK stops retrying, failing
//     calls after one attempt with a ratelimit.QuotaExceededError joined to
//     the fault (set StandardOptions.RateLimiter to ratelimit.None to lift
//     it);
//   - a lost response is retried by resending the request: idempotent for
//     TransactWriteItems (the client request token is in the resent body),
//     but a conditional PutItem or UpdateItem then fails its condition
//     against its own first write.
//
// Per call (BatchWriteItem only, before serialization, outside the retry
// loop because a partial result is a success that the SDK never retries):
//
//   - Unprocessed: as DynamoDB does under partial throttling, only a random
//     non-empty proper subset of the requests is sent and executed; the
//     others come back in UnprocessedItems, untouched. Batches of one
//     request are never split (DynamoDB would throttle the whole call).
//
// Every injected fault is counted by kind and operation (Count, Counts) and
// reported to the OnFault hook, so a soak can assert that each kind fired
// and attribute duplicates to the faults that caused them. Enable and
// Disable switch injection at run time; counters keep their values.
// Decisions come from one seeded generator: a single-goroutine run with the
// same seed injects the same faults.
package faults
