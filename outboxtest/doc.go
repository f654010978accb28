// Package outboxtest is a test kit for services built on the outbox.
//
// One call gives a test a ready outbox:
//
//	o := outboxtest.New(t, outboxtest.Topics("orders"))
//	svc := orders.NewService(o.Writer) // depends on dynamo.Enqueuer
//	... // place an order
//	recs := o.WaitForRecords(t, "orders", 1)
//
// New sets up both tables in DynamoDB Local (started once per test binary,
// installed on first use; or the endpoint in OUTBOX_TEST_DYNAMODB_ENDPOINT),
// an in-process Kafka (kfake) with the topics, a dynamo.Writer, and a relay
// running Relay.Run until the test ends. With Memory() it uses the memory
// store instead, with no JVM, for tests that need no DynamoDB; the Writer is
// then a FakeWriter feeding the relay.
//
// Outbox.DynamoDB is a client for your own tables there, for example the
// consumer's: inbox.CreateTable(ctx, o.DynamoDB, outboxtest.Name(t, "inbox")),
// then inbox.New and inbox.NewConsumer on o.Brokers.
//
// For unit tests of code that enqueues, NewFakeWriter is a dynamo.Enqueuer
// that checks writes as dynamo.Writer does, records them and fails on demand
// (FailNext). For a consumer callback, inboxtest.NewTx gives it the Tx it
// would get, without DynamoDB, and Record turns a message (a FakeWriter's)
// into the record the relay would publish:
//
//	tx, err := inboxtest.NewTx(outboxtest.Record(w.Messages()[0]))
//	... // call the callback with tx, check tx.Items()
//
// An example service tested both ways: examples/orders in the repository.
//
// outboxtest is a Go module of its own (github.com/dynakafka/outbox/outboxtest,
// beside the library's), because it needs kfake: a service that imports it
// from its tests gets kfake in its module graph (test dependencies only:
// its production code, which imports only the library, does not). Require
// it next to the library, at the same version.
package outboxtest
