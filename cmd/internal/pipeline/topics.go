package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CreateTopics creates topics with partitions partitions each (replication
// the cluster's default) and waits until the broker lists each of them: a
// real broker learns of a new topic from its controller after CreateTopics
// answers, and the relay's publisher refuses a topic it is told does not
// exist.
func CreateTopics(ctx context.Context, cl *kgo.Client, topics []string, partitions int32) error {
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, partitions, -1, nil, topics...)
	if err != nil {
		return fmt.Errorf("create topics %s: %w", strings.Join(topics, ","), err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil {
			return fmt.Errorf("create topic %s with %d partitions: %w", r.Topic, partitions, r.Err)
		}
	}
	for _, topic := range topics {
		for {
			n, exists, err := PartitionCount(ctx, cl, topic)
			if err == nil && exists && n == partitions {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("topic %s was created but the broker does not list it with %d partitions: %w", topic, partitions, errors.Join(err, ctx.Err()))
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// PartitionCount returns how many partitions topic has, and whether it
// exists. It asks a broker each time: kadm's listings answer from a metadata
// cache that still says "unknown topic" for seconds after a creation.
func PartitionCount(ctx context.Context, cl *kgo.Client, topic string) (int32, bool, error) {
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

// SplitList splits a comma-separated list (of brokers, of topics), dropping
// blanks.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
