// Package lambdakafka runs the inbox in a Lambda function triggered by an
// Amazon MSK or self-managed Apache Kafka event-source mapping: it
// processes an events.KafkaEvent with the same guarantees as
// inbox.Consumer (each record applied once, each partition in offset order,
// the poison policy of its inbox.Handler) and answers what the mapping
// needs so that a record that was not processed is delivered again, with
// everything after it in its partition.
//
//	h, err := inbox.NewHandler(ib, apply, inbox.OnPoison(inbox.DeadLetterTo(inbox.DeadLetterTable(db, "orders-view-dlq"))))
//	fn, err := lambdakafka.New(h, lambdakafka.ReportBatchItemFailures())
//	lambda.Start(fn.Handle)
//
// It is a package of its own so that a service importing only the writer
// and the inbox does not depend on aws-lambda-go.
//
// # What the mapping is told
//
// Records of one topic-partition (one key of the event's records map) are
// processed in offset order, stopping at the first record that is not done
// (inbox.Handler.Handle returned an error: the policy is Stop, a dead letter
// could not be written, or the invocation's deadline, minus DeadlineMargin,
// came). Then:
//
//   - without ReportBatchItemFailures (the default), Handle returns an
//     error: the mapping retries the whole batch (MaximumRetryAttempts,
//     default -1: until it succeeds) and the inbox recognises the records
//     already applied as duplicates;
//   - with ReportBatchItemFailures (the mapping's FunctionResponseTypes must
//     then include ReportBatchItemFailures), Handle returns a Response whose
//     batchItemFailures name, per topic-partition that stopped, the first
//     record not processed ({"partition": "<topic>-<partition>", "offset":
//     N}); the records after it in that partition were not processed
//     either and are delivered again from it.
//
// docs/deploy.md shows the SAM resource and says which mapping settings
// keep this true.
package lambdakafka
