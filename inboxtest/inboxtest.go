package inboxtest

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/internal/inboxtx"
)

// NewTx returns the Tx a callback gets for r, without an Inbox or
// DynamoDB, so that a callback can be unit-tested: call it with the Tx and
// read what it added with Items. r's stamped headers are read with the
// default names (outbox.DefaultMessageIDHeader, ...); a record without
// them is the *inbox.RecordError Process would return (and the Tx is nil);
// a nil r is an *outbox.OptionError. The Tx's Context is
// context.Background().
func NewTx(r *kgo.Record) (*inbox.Tx, error) {
	return inboxtx.New.(func(*kgo.Record) (*inbox.Tx, error))(r)
}
