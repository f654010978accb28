package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox/cmd/internal/pipeline"
)

// TopicError reports an existing topic that the demo cannot use as it is.
type TopicError struct {
	Topic      string
	Partitions int32 // the topic's
	Want       int32 // the demo's buckets
}

func (e *TopicError) Error() string {
	return fmt.Sprintf("topic %q exists with %d partitions, but the demo runs %d buckets and uses one partition per bucket "+
		"(docs/capacity.md: with BucketCount equal to the partition count a bucket is exactly a partition's keys); "+
		"run with -buckets %d, or name a new topic with -topic", e.Topic, e.Partitions, e.Want, e.Partitions)
}

// ensureTopic creates topic with partitions partitions, or checks that the
// existing topic has exactly that many (a *TopicError otherwise). It looks
// first, so that a cluster where the demo may not create topics still works
// with a topic created beforehand. created is false for an existing topic.
func ensureTopic(ctx context.Context, cl *kgo.Client, topic string, partitions int32) (created bool, err error) {
	n, exists, err := pipeline.PartitionCount(ctx, cl, topic)
	if err != nil {
		return false, err
	}
	if !exists {
		// CreateTopic returns the topic's own error code as its error.
		_, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, -1, nil, topic)
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, kerr.TopicAlreadyExists):
			return false, fmt.Errorf("create topic %s with %d partitions: %w", topic, partitions, err)
		}
		// Created meanwhile, by someone else.
		if n, _, err = pipeline.PartitionCount(ctx, cl, topic); err != nil {
			return false, err
		}
	}
	if n != partitions {
		return false, &TopicError{Topic: topic, Partitions: n, Want: partitions}
	}
	return false, nil
}
