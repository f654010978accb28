package dynamo

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
)

// Enqueuer is the one method a service needs from a Writer: depend on it
// rather than on *Writer, so that a unit test can hand the service
// outboxtest.FakeWriter, which records writes and fails on demand.
type Enqueuer interface {
	Write(ctx context.Context, items []types.TransactWriteItem, msgs ...outbox.Message) (Result, error)
}

var _ Enqueuer = (*Writer)(nil)
