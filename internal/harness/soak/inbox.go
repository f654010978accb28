package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/internal/harness/checker"
)

// readModel is the soak's consuming side: members of one consumer group,
// each an inbox.Consumer in in-order mode on the faulty DynamoDB client,
// apply every record to a read model (per aggregate: how many messages, the
// sum and the last of their orders). While the faults are on, members are
// restarted every few seconds (rebalances, in the middle of batches too)
// and a share of offset commits fail, so records whose transactions
// committed are delivered again. At the end the read model must equal the
// committed writes exactly.
type readModel struct {
	view    string
	seeds   []string
	applied atomic.Int64
	skipped atomic.Int64
	stale   atomic.Int64
	errs    atomic.Int64
	lastErr atomic.Value
	chaos   atomic.Bool
	commit  *kfake.FaultHandle
	wg      sync.WaitGroup
	stop    context.CancelFunc
}

const readModelMembers = 2

func startReadModel(ctx context.Context, faulty, clean *dynamodb.Client, cluster *kfake.Cluster, brokers []string, name, topic string,
	seed uint64, d *dice, tl *tally) (*readModel, error) {
	m := &readModel{view: name + "-view", seeds: brokers}
	inboxTable, group := name+"-inbox", name+"-view"
	if err := inbox.CreateTable(ctx, clean, inboxTable); err != nil {
		return nil, err
	}
	if err := createAggregates(ctx, clean, m.view, 0, 0); err != nil {
		return nil, err
	}
	m.chaos.Store(true)
	if cluster != nil { // a real cluster fails no offset commit on purpose
		m.commit = cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Count: -1,
			When: func(kmsg.Request) bool { return m.chaos.Load() && d.fires("kafka:offset-commit", 0.3) }})
	}
	metrics := metricsFunc(func(r inbox.Result, err error) {
		switch r.Status {
		case inbox.Applied:
			m.applied.Add(1)
		case inbox.Duplicate:
			m.skipped.Add(1)
		case inbox.Stale:
			m.skipped.Add(1)
			m.stale.Add(1)
		}
	})
	apply := func(tx *inbox.Tx) error {
		var p payload
		if err := json.Unmarshal(tx.Record().Value, &p); err != nil {
			return err
		}
		order := &types.AttributeValueMemberN{Value: strconv.FormatInt(p.order(), 10)}
		tx.Add(types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String(m.view),
			Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: p.Agg}},
			UpdateExpression:          aws.String("ADD #n :one, #sum :order SET #last = :order"),
			ExpressionAttributeNames:  map[string]string{"#n": "n", "#sum": "sum", "#last": "last"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": num(1), ":order": order},
		}})
		return nil
	}
	ctx, m.stop = context.WithCancel(ctx)
	for i := range readModelMembers {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		m.wg.Go(func() {
			for ctx.Err() == nil {
				m.member(ctx, faulty, inboxTable, group, topic, apply, metrics, rng, tl)
			}
		})
	}
	return m, nil
}

// member runs one incarnation of a group member: until an error, the end,
// or (with the faults on) a restart after 1 to 5 seconds.
func (m *readModel) member(ctx context.Context, client *dynamodb.Client, table, group, topic string, apply func(*inbox.Tx) error,
	metrics inbox.Metrics, rng *rand.Rand, tl *tally) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if m.chaos.Load() {
		restart := time.AfterFunc(time.Second+time.Duration(rng.Int64N(int64(4*time.Second))), func() {
			if m.chaos.Load() {
				tl.add("consumer:restart", 1)
				cancel()
			}
		})
		defer restart.Stop()
	}
	ib, err := inbox.New(runCtx, client, table, inbox.InOrder(), inbox.WithMetrics(metrics))
	if err == nil {
		var c *inbox.Consumer
		c, err = inbox.NewConsumer(ib, apply, inbox.MaxPollRecords(200), inbox.ClientOptions(kgo.SeedBrokers(m.seeds...),
			kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(50*time.Millisecond)))
		if err == nil {
			err = errors.Join(c.Run(runCtx), c.Close())
		}
	}
	if err != nil && ctx.Err() == nil {
		m.errs.Add(1) // a Process that ran out of retries, a failed commit: restart, as a supervisor would
		m.lastErr.Store(err.Error())
		sleep(ctx, 100*time.Millisecond)
	}
}

// settle turns the chaos off, waits until the read model holds as many
// applications as expected (the applied count of the inbox's metrics can
// fall short: a commit whose outcome was unknown is Duplicate when
// processed again), then stops the members.
func (m *readModel) settle(ctx context.Context, clean *dynamodb.Client, expected map[string]checker.Totals, tl *tally) error {
	m.chaos.Store(false)
	if m.commit != nil {
		tl.add("kafka:offset-commit", int(m.commit.Hits()))
		m.commit.Remove()
	}
	want := 0
	for _, t := range expected {
		want += t.N
	}
	got := 0
	for deadline := time.Now().Add(3 * time.Minute); ctx.Err() == nil && time.Now().Before(deadline); sleep(ctx, 500*time.Millisecond) {
		view, err := m.read(ctx, clean)
		if err != nil {
			return err
		}
		got = 0
		for _, t := range view {
			got += t.N
		}
		if got >= want {
			break
		}
	}
	sleep(ctx, 500*time.Millisecond) // late duplicates
	m.stop()
	m.wg.Wait()
	if got < want {
		return fmt.Errorf("the read model holds %d of %d messages 3 minutes after the faults stopped (stale %d, consumer errors %d, the last: %v)",
			got, want, m.stale.Load(), m.errs.Load(), m.lastErr.Load())
	}
	return nil
}

// read returns the read model.
func (m *readModel) read(ctx context.Context, clean *dynamodb.Client) (map[string]checker.Totals, error) {
	got := map[string]checker.Totals{}
	in := &dynamodb.ScanInput{TableName: aws.String(m.view), ConsistentRead: aws.Bool(true)}
	for {
		out, err := clean.Scan(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, item := range out.Items {
			id := item["id"].(*types.AttributeValueMemberS).Value
			got[id] = checker.Totals{N: int(intAttr(item["n"])), Sum: intAttr(item["sum"]), Max: intAttr(item["last"])}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return got, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// mismatches compares the read model with expected: aggregates whose count,
// sum or last order differ, and aggregates that should not be there.
func (m *readModel) mismatches(ctx context.Context, clean *dynamodb.Client, expected map[string]checker.Totals) (int, []string, error) {
	got, err := m.read(ctx, clean)
	if err != nil {
		return 0, nil, err
	}
	var bad []string
	for agg, w := range expected {
		if g := got[agg]; g != w {
			bad = append(bad, fmt.Sprintf("%s: %+v, want %+v", agg, g, w))
		}
	}
	for agg, g := range got {
		if _, ok := expected[agg]; !ok {
			bad = append(bad, fmt.Sprintf("%s: %+v, want nothing", agg, g))
		}
	}
	return len(bad), bad[:min(5, len(bad))], nil
}

func intAttr(av types.AttributeValue) int64 {
	if n, ok := av.(*types.AttributeValueMemberN); ok {
		v, _ := strconv.ParseInt(n.Value, 10, 64)
		return v
	}
	return 0
}

type metricsFunc func(inbox.Result, error)

func (f metricsFunc) Processed(r inbox.Result, err error) { f(r, err) }

// viewResult sums the rounds' read-model verdicts.
type viewResult struct {
	mismatches int
	examples   []string
	applied    int64
	skipped    int64
}

// add settles round's read model and compares it with the committed writes.
func (v *viewResult) add(ctx context.Context, m *readModel, clean *dynamodb.Client, expected map[string]checker.Totals, tl *tally) error {
	if err := m.settle(ctx, clean, expected, tl); err != nil {
		return err
	}
	n, examples, err := m.mismatches(ctx, clean, expected)
	if err != nil {
		return err
	}
	v.mismatches += n
	v.examples = append(v.examples, examples...)
	v.applied += m.applied.Load()
	v.skipped += m.skipped.Load()
	return nil
}
