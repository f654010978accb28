package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
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
	adm             *kadm.Client
	maxMessageBytes int

	mu     sync.Mutex
	checks map[string]*topicCheck
}

type topicCheck struct {
	done chan struct{}
	err  error
}

func newTopicChecker(adm *kadm.Client, maxMessageBytes int) *topicChecker {
	return &topicChecker{adm: adm, maxMessageBytes: maxMessageBytes, checks: make(map[string]*topicCheck)}
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
		if !ok {
			tc = &topicCheck{done: make(chan struct{})}
			c.checks[t] = tc
			mine = append(mine, t)
		}
		pending[t] = tc
	}
	c.mu.Unlock()

	if len(mine) > 0 {
		errs := c.describe(ctx, mine)
		c.mu.Lock()
		for _, t := range mine {
			tc := c.checks[t]
			tc.err = errs[t]
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

// describe checks that each topic exists and admits MaxMessageBytes.
func (c *topicChecker) describe(ctx context.Context, topics []string) map[string]error {
	errs := make(map[string]error, len(topics))
	failAll := func(err error) map[string]error {
		for _, t := range topics {
			if _, ok := errs[t]; !ok {
				errs[t] = err
			}
		}
		return errs
	}

	md, err := c.adm.Metadata(ctx, topics...)
	if err != nil {
		if ae, ok := errors.AsType[*kadm.AuthError](err); ok {
			for _, t := range topics {
				errs[t] = &TopicError{Topic: t, Err: ae.Err}
			}
			return errs
		}
		return failAll(fmt.Errorf("kafka: checking topics %q: metadata: %w", topics, err))
	}
	var exist []string
	for _, t := range topics {
		td, ok := md.Topics[t]
		switch {
		case !ok:
			errs[t] = &TopicError{Topic: t, Err: kerr.UnknownTopicOrPartition}
		case td.Err != nil:
			errs[t] = &TopicError{Topic: t, Err: td.Err}
		default:
			exist = append(exist, t)
		}
	}
	if len(exist) == 0 {
		return errs
	}

	// DescribeTopicConfigs may return partial results with a *ShardErrors;
	// topics without a result get the error.
	rcs, describeErr := c.adm.DescribeTopicConfigs(ctx, exist...)
	var brokerLimit *limit
	for _, t := range exist {
		rc, err := rcs.On(t, nil)
		if err != nil {
			if describeErr != nil {
				errs[t] = fmt.Errorf("kafka: checking topic %q: describe configs: %w", t, describeErr)
			} else {
				errs[t] = &TopicError{Topic: t, Err: err}
			}
			continue
		}
		if rc.Err != nil {
			errs[t] = &TopicError{Topic: t, Err: rc.Err}
			continue
		}
		lim, ok, err := topicLimit(rc)
		if err != nil {
			errs[t] = &TopicError{Topic: t, Err: err}
			continue
		}
		if !ok {
			// The broker did not report the topic's value (some
			// Kafka-compatible brokers omit defaults): fall back to the
			// broker's message.max.bytes, which topics inherit.
			if brokerLimit == nil {
				bl, err := c.brokerLimit(ctx, md)
				if err != nil {
					errs[t] = fmt.Errorf("kafka: checking topic %q: broker message.max.bytes: %w", t, err)
					continue
				}
				brokerLimit = &bl
			}
			lim = *brokerLimit
		}
		if lim.bytes < c.maxMessageBytes {
			errs[t] = &TopicLimitError{Topic: t, TopicMaxMessageBytes: lim.bytes, Source: lim.source, MaxMessageBytes: c.maxMessageBytes}
		}
	}
	return errs
}

type limit struct {
	bytes  int
	source string
}

// topicLimit reads max.message.bytes from a topic's configs. ok is false when
// the broker did not report it.
func topicLimit(rc kadm.ResourceConfig) (l limit, ok bool, err error) {
	for _, cfg := range rc.Configs {
		if cfg.Key != "max.message.bytes" || cfg.Value == nil {
			continue
		}
		n, err := strconv.Atoi(*cfg.Value)
		if err != nil {
			return l, false, fmt.Errorf("max.message.bytes %q is not a number", *cfg.Value)
		}
		return limit{n, "topic config max.message.bytes (" + cfg.Source.String() + ")"}, true, nil
	}
	return l, false, nil
}

// brokerLimit reads message.max.bytes from one broker, or returns Kafka's
// default when the broker does not report it either.
func (c *topicChecker) brokerLimit(ctx context.Context, md kadm.Metadata) (limit, error) {
	if len(md.Brokers) == 0 {
		return limit{}, errors.New("metadata lists no brokers")
	}
	rcs, err := c.adm.DescribeBrokerConfigs(ctx, md.Brokers[0].NodeID)
	if err != nil {
		return limit{}, err
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			return limit{}, rc.Err
		}
		for _, cfg := range rc.Configs {
			if cfg.Key != "message.max.bytes" || cfg.Value == nil {
				continue
			}
			n, err := strconv.Atoi(*cfg.Value)
			if err != nil {
				return limit{}, fmt.Errorf("message.max.bytes %q is not a number", *cfg.Value)
			}
			return limit{n, fmt.Sprintf("broker %d message.max.bytes", md.Brokers[0].NodeID)}, nil
		}
	}
	return limit{kafkaDefaultMaxMessageBytes, "Kafka's default message.max.bytes"}, nil
}
