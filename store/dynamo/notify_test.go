package dynamo

import (
	"errors"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/relay"
)

// The Writer notifies the buckets of a transaction after it committed, and
// nothing for one that failed.
func TestWriterNotifiesCommittedBuckets(t *testing.T) {
	n := relay.NewNotifier()
	w := newWriterEnv(t, 4, WithNotifier(n))
	ctx := ctxT(t)
	k0, k3 := keyInBucket(t, 0, 4), keyInBucket(t, 3, 4)
	if _, err := w.writer.Write(ctx, []types.TransactWriteItem{w.bump("agg", 0)}, keyed(k3), keyed(k0), keyed(k3)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Ready():
	default:
		t.Fatal("no notification after a committed Write")
	}
	if got := n.Take(); !slices.Equal(got, []int{0, 3}) {
		t.Fatalf("notified %v, want [0 3]", got)
	}
	// A stale version: the transaction is cancelled, nothing notified.
	if _, err := w.writer.Write(ctx, []types.TransactWriteItem{w.bump("agg", 0)}, keyed(k0)); !errors.Is(err, outbox.ErrConditionFailed) {
		t.Fatalf("err = %v, want ErrConditionFailed", err)
	}
	select {
	case <-n.Ready():
		t.Fatalf("notified %v after a failed Write", n.Take())
	default:
	}
}

func TestWriterNotifierMustNotBeNil(t *testing.T) {
	e := newEnv(t, 1)
	_, err := NewWriter(ctxT(t), e.d.Client, e.tables, WithNotifier(nil))
	var oe *outbox.OptionError
	if !errors.As(err, &oe) || oe.Option != "WithNotifier" {
		t.Fatalf("err = %v, want an *OptionError on WithNotifier", err)
	}
}
