package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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
	n, exists, err := partitionCount(ctx, cl, topic)
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
		if n, _, err = partitionCount(ctx, cl, topic); err != nil {
			return false, err
		}
	}
	if n != partitions {
		return false, &TopicError{Topic: topic, Partitions: n, Want: partitions}
	}
	return false, nil
}

// partitionCount returns how many partitions topic has, and whether it
// exists. It asks a broker each time: kadm's listings answer from a metadata
// cache that still says "unknown topic" for seconds after a creation.
func partitionCount(ctx context.Context, cl *kgo.Client, topic string) (int32, bool, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, false, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		err := kerr.ErrorForCode(t.ErrorCode)
		switch {
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			return 0, false, nil
		case err != nil:
			return 0, false, fmt.Errorf("describe topic %s: %w", topic, err)
		}
		return int32(len(t.Partitions)), true, nil
	}
	return 0, false, nil
}

// startOffsets is where the demo's consumer starts: at the start of a topic
// it just created, at the current end of an existing one, so that earlier
// runs' records are neither read nor counted.
func startOffsets(ctx context.Context, cl *kgo.Client, topic string, partitions int32, created bool) (map[string]map[int32]kgo.Offset, error) {
	if created {
		at := make(map[int32]kgo.Offset, partitions)
		for p := range partitions {
			at[p] = kgo.NewOffset().AtStart()
		}
		return map[string]map[int32]kgo.Offset{topic: at}, nil
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list the end offsets of topic %s: %w", topic, err)
	}
	return ends.KOffsets(), nil
}
