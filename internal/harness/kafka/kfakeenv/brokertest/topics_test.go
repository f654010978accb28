package brokertest

import (
	"errors"
	"github.com/dynakafka/outbox/internal/harness/kafka/kfakeenv"
	"github.com/dynakafka/outbox/kafka"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// stripTopicLimits makes the cluster answer DescribeConfigs for topics without
// any config, as some Kafka-compatible brokers do for defaults, so that the
// publisher has to fall back to the broker's message.max.bytes.
func stripTopicLimits(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.DescribeConfigs), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.DescribeConfigsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		resp.Version = req.Version
		for _, rr := range req.Resources {
			if rr.ResourceType != kmsg.ConfigResourceTypeTopic {
				return nil, nil, false
			}
			r := kmsg.NewDescribeConfigsResponseResource()
			r.ResourceType, r.ResourceName = rr.ResourceType, rr.ResourceName
			resp.Resources = append(resp.Resources, r)
		}
		return resp, nil, true
	})
}

func TestNewPublisherChecksTopics(t *testing.T) {
	tests := []struct {
		name        string
		cluster     []kfake.Opt
		topicConfig map[string]string
		max         int
		strip       bool // the topic reports no max.message.bytes
		missing     bool
		wantLimit   int    // kafka.TopicLimitError.TopicMaxMessageBytes; 0 for no error
		wantSource  string // in kafka.TopicLimitError.Source
	}{
		{name: "defaults pass", max: outbox.DefaultMaxMessageBytes},
		{name: "missing topic", missing: true, max: outbox.DefaultMaxMessageBytes},
		{name: "topic limit below MaxMessageBytes", topicConfig: map[string]string{"max.message.bytes": "100000"},
			max: 100001, wantLimit: 100000, wantSource: "max.message.bytes"},
		{name: "topic limit equal to MaxMessageBytes", topicConfig: map[string]string{"max.message.bytes": "100000"}, max: 100000},
		{name: "topic limit raised above the default", topicConfig: map[string]string{"max.message.bytes": "5000000"}, max: 4 << 20},
		{name: "broker limit inherited", cluster: []kfake.Opt{kfake.BrokerConfigs(map[string]string{"message.max.bytes": "600000"})},
			max: outbox.DefaultMaxMessageBytes, wantLimit: 600000, wantSource: "message.max.bytes"},
		{name: "topic override beats broker limit", cluster: []kfake.Opt{kfake.BrokerConfigs(map[string]string{"message.max.bytes": "600000"})},
			topicConfig: map[string]string{"max.message.bytes": "2000000"}, max: outbox.DefaultMaxMessageBytes},
		{name: "topic reports nothing, broker limit below", cluster: []kfake.Opt{kfake.BrokerConfigs(map[string]string{"message.max.bytes": "700000"})},
			strip: true, max: outbox.DefaultMaxMessageBytes, wantLimit: 700000, wantSource: "broker"},
		{name: "topic reports nothing, broker limit enough", cluster: []kfake.Opt{kfake.BrokerConfigs(map[string]string{"message.max.bytes": "700000"})},
			strip: true, max: 700000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := kfakeenv.Kafka(t, tt.cluster...)
			if tt.cluster != nil || tt.strip {
				kfakeenv.RequireKfake(t, k)
			}
			topic := testenv.Name(t, "missing")
			if !tt.missing {
				topic = newTopic(t, k.KafkaCluster, 2, tt.topicConfig)
			}
			if tt.strip {
				stripTopicLimits(k.Cluster)
			}
			p, err := kafka.NewPublisher(testCtx(t), k.Brokers, kafka.Topics(topic), kafka.OutboxConfig(outbox.Config{MaxMessageBytes: tt.max}))
			if p != nil {
				defer p.Close()
			}
			switch {
			case tt.missing:
				te, ok := errors.AsType[*kafka.TopicError](err)
				if !ok || te.Topic != topic || !errors.Is(err, kerr.UnknownTopicOrPartition) {
					t.Fatalf("error %v (%T): want a *kafka.TopicError for %q matching kerr.UnknownTopicOrPartition", err, err, topic)
				}
				if !strings.Contains(err.Error(), topic) {
					t.Errorf("error %q does not name the topic", err)
				}
			case tt.wantLimit != 0:
				le, ok := errors.AsType[*kafka.TopicLimitError](err)
				if !ok {
					t.Fatalf("error %v (%T): want a *kafka.TopicLimitError", err, err)
				}
				if le.Topic != topic || le.TopicMaxMessageBytes != tt.wantLimit || le.MaxMessageBytes != tt.max || !strings.Contains(le.Source, tt.wantSource) {
					t.Fatalf("got %+v, want topic %q, limit %d from %q, MaxMessageBytes %d", le, topic, tt.wantLimit, tt.wantSource, tt.max)
				}
				for _, s := range []string{topic, strconv.Itoa(tt.wantLimit), strconv.Itoa(tt.max)} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %s", err, s)
					}
				}
				if kafka.IsRetriable(err) {
					t.Errorf("IsRetriable(%v) = true", err)
				}
			case err != nil:
				t.Fatalf("NewPublisher: %v", err)
			}
		})
	}
}

// A topic not listed in Topics is checked when first published to; a topic
// that passed is not checked again, one that failed is.
func TestPublishChecksUnlistedTopics(t *testing.T) {
	k := kfakeenv.Kafka(t)
	kfakeenv.RequireKfake(t, k)
	var describes atomic.Int32
	k.Cluster.ControlKey(int16(kmsg.DescribeConfigs), func(kmsg.Request) (kmsg.Response, error, bool) {
		describes.Add(1)
		return nil, nil, false // observe only
	})
	good := newTopic(t, k.KafkaCluster, 1, nil)
	small := newTopic(t, k.KafkaCluster, 1, map[string]string{"max.message.bytes": "50000"})
	missing := testenv.Name(t, "later")
	p := newPublisher(t, k.KafkaCluster, kafka.OutboxConfig(outbox.Config{MaxMessageBytes: 60000}))
	if n := describes.Load(); n != 0 {
		t.Fatalf("NewPublisher without kafka.Topics described %d topics", n)
	}

	msgs := messages(good, 4, sameKey("k"))
	msgs[2].Topic = missing
	acked, err := p.Publish(testCtx(t), msgs)
	if acked != 2 {
		t.Fatalf("acked %d, want 2 (err %v)", acked, err)
	}
	publishErr(t, err, msgs[2])
	if te, ok := errors.AsType[*kafka.TopicError](err); !ok || te.Topic != missing || !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("error %v: want a *kafka.TopicError for %q", err, missing)
	}
	if got, want := ids(t, consumeAll(t, k.KafkaCluster, good)), msgIDs(msgs[:2]); !slices.Equal(got, want) {
		t.Fatalf("%s holds %v, want %v (the message after the failed one must not be produced)", good, got, want)
	}

	// Publishing to the checked topic again costs no DescribeConfigs.
	before := describes.Load()
	if acked, err := p.Publish(testCtx(t), messages(good, 2, sameKey("k"))); acked != 2 || err != nil {
		t.Fatalf("Publish = %d, %v", acked, err)
	}
	if n := describes.Load() - before; n != 0 {
		t.Errorf("publishing to a checked topic described configs %d more times", n)
	}

	// A topic too small for MaxMessageBytes fails every time, naming both values.
	for range 2 {
		m := messages(small, 1, sameKey("k"))
		acked, err := p.Publish(testCtx(t), m)
		le, ok := errors.AsType[*kafka.TopicLimitError](err)
		if acked != 0 || !ok || le.TopicMaxMessageBytes != 50000 || le.MaxMessageBytes != 60000 {
			t.Fatalf("Publish = %d, %v; want 0 and a *kafka.TopicLimitError 50000 < 60000", acked, err)
		}
	}

	// The missing topic is checked again once it exists.
	if _, err := newAdmin(t, k.KafkaCluster).CreateTopic(testCtx(t), 1, -1, nil, missing); err != nil {
		t.Fatal(err)
	}
	m := messages(missing, 1, sameKey("k"))
	if acked, err := p.Publish(testCtx(t), m); acked != 1 || err != nil {
		t.Fatalf("Publish after creating %q = %d, %v; want 1, nil", missing, acked, err)
	}
}

func TestTopicCheckAuthorization(t *testing.T) {
	k := kfakeenv.Kafka(t)
	kfakeenv.RequireKfake(t, k)
	topic := newTopic(t, k.KafkaCluster, 1, nil)
	k.Cluster.Fault(kfake.Fault{
		Keys:     []kmsg.Key{kmsg.DescribeConfigs},
		Resource: topic,
		Err:      kerr.TopicAuthorizationFailed,
		Count:    -1,
	})
	_, err := kafka.NewPublisher(testCtx(t), k.Brokers, kafka.Topics(topic))
	te, ok := errors.AsType[*kafka.TopicError](err)
	if !ok || te.Topic != topic || !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("error %v (%T): want a *kafka.TopicError for %q matching kerr.TopicAuthorizationFailed", err, err, topic)
	}
	if !strings.Contains(err.Error(), "DescribeConfigs") {
		t.Errorf("error %q does not say which permission is missing", err)
	}
}
