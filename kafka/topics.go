package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaDefaultMaxMessageBytes is Kafka's documented default for the broker's
// message.max.bytes (and so for a topic's max.message.bytes), used when
// neither the topic nor the broker reports a value.
const kafkaDefaultMaxMessageBytes = 1048588

// topicChecker checks topics once: a topic that passed is remembered for the
// life of the Publisher; one that failed is checked again next time (the
// operator may have created or fixed it meanwhile). Concurrent callers share
// one check per topic.
type topicChecker struct {
	cl              *kgo.Client
	maxMessageBytes int
	// strict: a topic limit below MaxMessageBytes is not an error; records
	// are checked against the limit itself (Strict mode).
	strict bool
	// maxAge, when positive, makes a passed check expire (Strict mode
	// re-reads topic limits, which an operator may lower at any time).
	maxAge time.Duration

	mu     sync.Mutex
	checks map[string]*topicCheck
}

type topicCheck struct {
	done  chan struct{}
	err   error
	limit int // the topic's max.message.bytes as last read (0: unknown)
	at    time.Time
}

func newTopicChecker(cl *kgo.Client, maxMessageBytes int) *topicChecker {
	return &topicChecker{cl: cl, maxMessageBytes: maxMessageBytes, checks: make(map[string]*topicCheck)}
}

// limitOf returns the last known max.message.bytes of a checked topic (0 if
// unknown).
func (c *topicChecker) limitOf(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if tc, ok := c.checks[topic]; ok {
		select {
		case <-tc.done:
			return tc.limit
		default:
		}
	}
	return 0
}

// forget drops a topic's cached check, so the next use checks it again.
func (c *topicChecker) forget(topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if tc, ok := c.checks[topic]; ok {
		select {
		case <-tc.done:
			delete(c.checks, topic)
		default:
		}
	}
}

// check returns the topics that failed, with their error. Topics already
// known good cost nothing; the others are checked in one Metadata and one
// DescribeConfigs request.
func (c *topicChecker) check(ctx context.Context, topics []string) map[string]error {
	var (
		mine    []string
		pending = make(map[string]*topicCheck)
	)
	c.mu.Lock()
	for _, t := range topics {
		if _, seen := pending[t]; seen {
			continue
		}
		tc, ok := c.checks[t]
		if ok && c.maxAge > 0 {
			select {
			case <-tc.done:
				if time.Since(tc.at) > c.maxAge {
					ok = false
				}
			default:
			}
		}
		if !ok {
			tc = &topicCheck{done: make(chan struct{})}
			c.checks[t] = tc
			mine = append(mine, t)
		}
		pending[t] = tc
	}
	c.mu.Unlock()

	if len(mine) > 0 {
		errs, limits := c.describe(ctx, mine)
		c.mu.Lock()
		for _, t := range mine {
			tc := c.checks[t]
			tc.err, tc.limit, tc.at = errs[t], limits[t], time.Now()
			if tc.err != nil {
				delete(c.checks, t) // check again next time
			}
			close(tc.done)
		}
		c.mu.Unlock()
	}

	failed := make(map[string]error)
	for t, tc := range pending {
		select {
		case <-tc.done:
			if tc.err != nil {
				failed[t] = tc.err
			}
		case <-ctx.Done():
			failed[t] = fmt.Errorf("kafka: checking topic %q: %w", t, ctx.Err())
		}
	}
	return failed
}

// describe checks that each topic exists and admits MaxMessageBytes. It
// issues the requests itself rather than through kadm: kadm serves metadata
// from kgo's cache (a topic created a moment ago would still look missing)
// and turns one topic's authorization error into an error for all of them.
func (c *topicChecker) describe(ctx context.Context, topics []string) (map[string]error, map[string]int) {
	errs := make(map[string]error, len(topics))
	limits := make(map[string]int, len(topics))
	exist, brokers := c.existing(ctx, topics, errs)
	if len(exist) == 0 {
		return errs, limits
	}
	c.describeLimits(ctx, exist, brokers, errs, limits)
	return errs, limits
}

// existing asks for topics' metadata: it returns the ones that exist and
// the brokers, and sets errs for the others.
func (c *topicChecker) existing(ctx context.Context, topics []string, errs map[string]error) ([]string, []kmsg.MetadataResponseBroker) {
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.AllowAutoTopicCreation = false // a check must not create topics
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		mreq.Topics = append(mreq.Topics, rt)
	}
	mresp, err := mreq.RequestWith(ctx, c.cl)
	if err != nil {
		for _, t := range topics {
			errs[t] = fmt.Errorf("kafka: checking topic %q: metadata: %w", t, err)
		}
		return nil, nil
	}
	found := make(map[string]error)
	for _, mt := range mresp.Topics {
		if mt.Topic != nil {
			found[*mt.Topic] = kerr.ErrorForCode(mt.ErrorCode)
		}
	}
	var exist []string
	for _, t := range topics {
		err, ok := found[t]
		switch {
		case !ok:
			errs[t] = &TopicError{Topic: t, Err: kerr.UnknownTopicOrPartition}
		case err != nil:
			errs[t] = topicError(t, err)
		default:
			exist = append(exist, t)
		}
	}
	return exist, mresp.Brokers
}

// describeLimits describes the configs of exist, topics that exist: it
// sets limits to each one's max.message.bytes (its own or what it
// inherits from brokers), and errs for one that does not admit
// MaxMessageBytes or cannot be described.
func (c *topicChecker) describeLimits(ctx context.Context, exist []string, brokers []kmsg.MetadataResponseBroker, errs map[string]error, limits map[string]int) {
	dreq := kmsg.NewPtrDescribeConfigsRequest()
	for _, t := range exist {
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType = kmsg.ConfigResourceTypeTopic
		rr.ResourceName = t
		rr.ConfigNames = []string{"max.message.bytes"}
		dreq.Resources = append(dreq.Resources, rr)
	}
	dresp, err := dreq.RequestWith(ctx, c.cl)
	if err != nil {
		for _, t := range exist {
			errs[t] = fmt.Errorf("kafka: checking topic %q: describe configs: %w", t, err)
		}
		return
	}
	described := make(map[string]*kmsg.DescribeConfigsResponseResource)
	for i := range dresp.Resources {
		described[dresp.Resources[i].ResourceName] = &dresp.Resources[i]
	}
	var brokerLimit *limit
	for _, t := range exist {
		r, ok := described[t]
		if !ok {
			errs[t] = &TopicError{Topic: t, Err: errors.New("the broker did not describe the topic's configs")}
			continue
		}
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			errs[t] = topicError(t, err)
			continue
		}
		lim, ok, err := topicLimit(r)
		if err != nil {
			errs[t] = &TopicError{Topic: t, Err: err}
			continue
		}
		if !ok || lim.fromDefault {
			// The topic has no value of its own and the broker reported
			// either none (some Kafka-compatible brokers omit defaults) or
			// Kafka's built-in default: ask a broker for the
			// message.max.bytes that topics inherit.
			if brokerLimit == nil {
				bl, err := c.brokerLimit(ctx, brokers)
				if err != nil {
					errs[t] = fmt.Errorf("kafka: checking topic %q: broker message.max.bytes: %w", t, err)
					continue
				}
				brokerLimit = &bl
			}
			if !ok || !brokerLimit.fromDefault {
				lim = *brokerLimit
			}
		}
		limits[t] = lim.bytes
		if lim.bytes < c.maxMessageBytes && !c.strict {
			errs[t] = &TopicLimitError{Topic: t, TopicMaxMessageBytes: lim.bytes, Source: lim.source, MaxMessageBytes: c.maxMessageBytes}
		}
	}
}

// topicError reports a per-topic error code: a *TopicError for what needs an
// operator (missing topic, permissions), a plain wrap for what Kafka marks
// retriable (a leader election right after the topic was created, ...), so
// that IsRetriable tells them apart.
func topicError(topic string, err error) error {
	if kerr.IsRetriable(err) && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("kafka: checking topic %q: %w", topic, err)
	}
	return &TopicError{Topic: topic, Err: err}
}

type limit struct {
	bytes       int
	source      string
	fromDefault bool // Kafka's built-in default, not a setting
}

// topicLimit reads max.message.bytes from a topic's configs. ok is false when
// the broker did not report it.
func topicLimit(r *kmsg.DescribeConfigsResponseResource) (l limit, ok bool, err error) {
	for _, cfg := range r.Configs {
		if cfg.Name != "max.message.bytes" || cfg.Value == nil {
			continue
		}
		n, err := strconv.Atoi(*cfg.Value)
		if err != nil {
			return l, false, fmt.Errorf("max.message.bytes %q is not a number", *cfg.Value)
		}
		fromDefault := cfg.Source == kmsg.ConfigSourceDefaultConfig || cfg.Source == kmsg.ConfigSourceUnknown
		return limit{n, "max.message.bytes (" + cfg.Source.String() + ")", fromDefault}, true, nil
	}
	return l, false, nil
}

// brokerLimit reads message.max.bytes from one broker, or returns Kafka's
// default when the broker does not report it.
func (c *topicChecker) brokerLimit(ctx context.Context, brokers []kmsg.MetadataResponseBroker) (limit, error) {
	if len(brokers) == 0 {
		return limit{}, errors.New("metadata lists no brokers")
	}
	node := brokers[0].NodeID
	req := kmsg.NewPtrDescribeConfigsRequest()
	rr := kmsg.NewDescribeConfigsRequestResource()
	rr.ResourceType = kmsg.ConfigResourceTypeBroker
	rr.ResourceName = strconv.Itoa(int(node))
	rr.ConfigNames = []string{"message.max.bytes"}
	req.Resources = append(req.Resources, rr)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return limit{}, err
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return limit{}, err
		}
		for _, cfg := range r.Configs {
			if cfg.Name != "message.max.bytes" || cfg.Value == nil {
				continue
			}
			n, err := strconv.Atoi(*cfg.Value)
			if err != nil {
				return limit{}, fmt.Errorf("message.max.bytes %q is not a number", *cfg.Value)
			}
			return limit{bytes: n, source: fmt.Sprintf("broker %d message.max.bytes (%s)", node, cfg.Source)}, nil
		}
	}
	return limit{bytes: kafkaDefaultMaxMessageBytes, source: "Kafka's default message.max.bytes", fromDefault: true}, nil
}
