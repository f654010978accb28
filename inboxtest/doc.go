// Package inboxtest helps unit-test a consumer callback of package inbox
// without DynamoDB or Kafka: NewTx gives the callback the Tx it would get
// for a record, and tx.Items() shows what it added.
//
//	tx, err := inboxtest.NewTx(outboxtest.Record(w.Messages()[0]))
//	err = applyOrder(tx) // the callback under test
//	items := tx.Items()
//
// It is the inbox's counterpart of package outboxtest, which stands in for
// the writer (NewFakeWriter) and turns a message into the record the relay
// publishes (Record).
package inboxtest
