// Package inboxtx lets package inboxtest build the Tx a consumer callback
// gets, without a test constructor in package inbox's API: package inbox
// sets New when it is initialised (it cannot be named here, as inbox
// imports this package).
package inboxtx

// New is func(*kgo.Record) (*inbox.Tx, error): the Tx for a record, read
// with the default header names, with context.Background().
var New any
