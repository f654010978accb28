package kafka

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
)

func TestClass(t *testing.T) {
	wrap := func(err error) error {
		return &outbox.PublishError{Bucket: 1, Sequence: 2, Err: &ProduceError{Topic: "t", Partition: 0, Err: err}}
	}
	cases := []struct {
		err  error
		want outbox.ErrorClass
	}{
		{wrap(kerr.MessageTooLarge), outbox.RecordPermanent},
		{wrap(kerr.InvalidRecord), outbox.RecordPermanent},
		{wrap(kerr.CorruptMessage), outbox.RecordPermanent},
		{&RecordTooLargeError{Size: 10, MaxMessageBytes: 5}, outbox.RecordPermanent},
		{&outbox.ValidationError{Index: 0, Field: "Topic"}, outbox.RecordPermanent},
		{wrap(kerr.TopicAuthorizationFailed), outbox.Fatal},
		{wrap(kerr.ClusterAuthorizationFailed), outbox.Fatal},
		{wrap(kerr.SaslAuthenticationFailed), outbox.Fatal},
		{&TopicError{Topic: "gone", Err: kerr.UnknownTopicOrPartition}, outbox.Fatal},
		{&TopicLimitError{Topic: "t"}, outbox.Fatal},
		{wrap(kerr.UnknownTopicOrPartition), outbox.Retriable},
		{wrap(kerr.NotLeaderForPartition), outbox.Retriable},
		{wrap(kerr.RequestTimedOut), outbox.Retriable},
		{wrap(kerr.NotEnoughReplicas), outbox.Retriable},
		{wrap(kgo.ErrRecordTimeout), outbox.Retriable},
		{wrap(context.Canceled), outbox.Retriable},
		{wrap(ErrSharedBatchCancelled), outbox.Retriable},
		{errors.New("something new"), outbox.Retriable},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.err), func(t *testing.T) {
			if got := outbox.Classify(c.err); got != c.want {
				t.Fatalf("outbox.Classify = %v, want %v", got, c.want)
			}
			if got := Class(c.err); got != c.want {
				t.Fatalf("kafka.Class = %v, want %v", got, c.want)
			}
		})
	}
}
