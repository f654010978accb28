// Package sequence reserves per-bucket sequence numbers for outbox messages
// from an atomic counter in the outbox's control table.
//
// Each bucket has one counter item (pk "bucket#<b>", sk "seq") whose
// attribute n is the last sequence number handed out. Reserve adds n to it
// with a single UpdateItem and returns the first number of the reserved
// range. Numbers are monotonic per bucket and never handed out twice; gaps
// are allowed: a writer that reserves and then does not commit (it crashed,
// its business condition failed, it gave up) leaves its numbers unused. A
// relay waits a bounded time for a missing number and then fences it (see
// the outbox package), so a gap delays a bucket but never blocks it.
//
// # Reserve after reading the aggregate, immediately before the commit
//
// A relay publishes a bucket in sequence order. For that order to be the
// order in which the writes happened, sequence order must equal commit order
// for any two writers that write the same aggregate (and therefore the same
// key and bucket). Writers of one aggregate serialize on its version: each
// reads the aggregate, then commits conditional on the version it read, so
// a commit based on a stale read fails. The rule that makes the orders agree
// is: reserve after reading the aggregate, immediately before the commit.
//
// Why reserving before the read breaks it. Writers W1 and W2 update
// aggregate A, currently at version 1:
//
//  1. W2 reserves sequence 10 (before reading A), then stalls.
//  2. W1 reserves 11, reads A at version 1, commits version 2 with its
//     message at 11.
//  3. W2 wakes, reads A at version 2 (W1's committed write), commits
//     version 3 with its message at 10.
//
// W1 committed first but holds the higher number. If the relay saw 11 while
// 10 was still missing it waited on the gap; W2's commit filled it within
// the gap timeout, and the relay publishes 10 (version 3) before 11
// (version 2): consumers see the aggregate's history backwards.
//
// Why reserving after the read fixes it. Suppose W1 commits before W2 and
// both commits succeed. W2's commit is conditional on the version it read,
// so W2 must have read W1's committed version (had it read an older one,
// its commit would have failed). W2 reserves after that read, so after W1's
// commit, and W1 reserved before its commit. The counter is atomic and
// monotonic, so W2's number is higher than W1's. Retrying a conflicted or
// throttled commit with the same numbers keeps this, since the numbers were
// still reserved after the read the retried items were built from.
//
// # Region mode
//
// On a region-mode outbox (a DynamoDB global table) each region's writers
// alone write its slice's counters, in its own replica. NewCounter takes
// the config item and the process's region as required arguments, and
// refuses a process without a region or with a client of another region;
// Reserve refuses a bucket of another region's slice (a *RegionError;
// nothing reserved).
//
// The check is in the Counter, not in its callers, and cannot be left out:
// a Counter is the only way this library reserves (the dynamo Writer, the
// replay of parked messages and the enqueue function all reserve through
// one), and there is no constructor without the config. An option that
// switched the check on would leave every caller that forgot it (a tool
// that pre-fills counters, a test helper) reserving in any region's slice
// of a region-mode outbox, a loss that nothing reports. The Counter does
// not read the config item itself because its format belongs to the
// store (store/dynamo's ReadConfig), and a writer already holds what it
// read; a zero Config (one not read from a config item) is refused. The
// Python writer, which does not use this package, makes the same checks
// when it is created (docs/contract.md section 2).
//
// Writers that do not serialize on anything (two unconditional writes to
// one key) have no defined order at the business level either; the outbox
// then promises nothing beyond "each message is published at least once".
package sequence
