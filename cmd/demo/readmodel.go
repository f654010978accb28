package main

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox/examples/orderview"
	"github.com/dynakafka/outbox/inbox"
)

// readModel is the demo's consumer: the example service (package
// examples/orderview, also runnable alone as cmd/orderview) on the inbox,
// in in-order mode, in process. The demo's delivery counts and latencies come
// from the orders it applied, and its final check compares the read model
// with the orders the writers committed.
type readModel struct {
	view    string
	skipped atomic.Int64 // copies the inbox skipped (duplicates, stale)
	done    chan struct{}
	err     error
}

// startReadModel creates the read model's and the inbox's tables and runs
// the consumer until ctx ends. A consumer that stops on an error is
// replaced, as a supervisor would restart the service: it resumes at the
// first record not applied. The group reads from the run's start time, so
// a topic that already holds other runs' orders works too.
func startReadModel(ctx context.Context, db *dynamodb.Client, brokers []string, topic, prefix string, since time.Time, st *stats,
	progress func(string, ...any)) (*readModel, error) {
	m := &readModel{view: prefix + "-view", done: make(chan struct{})}
	inboxTable := prefix + "-view-inbox"
	if err := orderview.CreateTable(ctx, db, m.view); err != nil {
		return nil, err
	}
	if err := inbox.CreateTable(ctx, db, inboxTable); err != nil {
		return nil, err
	}
	ib, err := inbox.New(ctx, db, inboxTable, inbox.InOrder(), inbox.WithMetrics(metricsFunc(func(r inbox.Result, err error) {
		switch r.Status {
		case inbox.Applied:
			st.delivered(r.Message.ID, time.Now())
		case inbox.Duplicate, inbox.Stale:
			m.skipped.Add(1)
		}
	})))
	if err != nil {
		return nil, err
	}
	newConsumer := func() (*inbox.Consumer, error) {
		return inbox.NewConsumer(ib, orderview.Apply(m.view), inbox.ClientOptions(
			kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(prefix+"-orderview"), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(since.UnixMilli())), kgo.FetchMaxWait(50*time.Millisecond)))
	}
	c, err := newConsumer()
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(m.done)
		for {
			err := c.Run(ctx)
			if cerr := c.Close(); err == nil {
				err = cerr
			}
			if ctx.Err() != nil {
				return
			}
			progress("read model consumer stopped (%v); restarting it", err)
			if c, err = newConsumer(); err != nil {
				m.err = err
				return
			}
		}
	}()
	return m, nil
}

// wait waits for the consumer to stop (after ctx ended).
func (m *readModel) wait() error {
	<-m.done
	return m.err
}

// check compares the read model with the committed orders.
func (m *readModel) check(ctx context.Context, db *dynamodb.Client, ordersTable string) (orderview.Report, error) {
	r, err := orderview.Check(ctx, db, ordersTable, m.view)
	if err != nil {
		return r, errors.Join(errors.New("read model check"), err)
	}
	return r, nil
}

type metricsFunc func(inbox.Result, error)

func (f metricsFunc) Processed(r inbox.Result, err error) { f(r, err) }
