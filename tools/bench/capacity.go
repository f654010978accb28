package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/store/dynamo"
)

// On-demand prices used for the cost per million messages: us-east-1,
// standard table class, as published on the DynamoDB pricing page since
// the price reduction of 1 November 2024. An assumption to check against
// the current price list before relying on it.
const (
	priceDate          = "2024-11-01"
	pricePerMillionWRU = 0.625
	pricePerMillionRRU = 0.125
)

// Lambda's on-demand prices (us-east-1, arm64, the first pricing tier),
// and the memory template.yaml gives the relay (FunctionMemorySize's
// default): the relay's cost per message is its invocations per message
// times (the request price + its mean duration at that memory). The same
// caveat applies; Kafka (MSK) is a fixed cost per broker-hour, not per
// message, and is not included.
const (
	lambdaPricePerMillionRequests = 0.20
	lambdaPricePerGBSecond        = 0.0000133334
	relayMemoryGB                 = 512.0 / 1024
)

// writerRow is the writer's capacity per message at k messages per
// transaction (all of one transaction's messages share a key, so one
// bucket and one counter reservation).
type writerRow struct {
	PerTxn       int      `json:"messages_per_transaction"`
	Transactions int      `json:"transactions"`
	Messages     int      `json:"messages"`
	ModelWCU     float64  `json:"model_wcu_per_msg"`
	AWSRuleWCU   float64  `json:"aws_rule_wcu_per_msg"`
	LocalWCU     float64  `json:"dynamodb_local_wcu_per_msg"`
	CallsPerMsg  float64  `json:"dynamodb_calls_per_msg"`
	TxnWCU       float64  `json:"aws_rule_transact_wcu_per_msg"`
	CounterWCU   float64  `json:"aws_rule_counter_wcu_per_msg"`
	Dynamo       snapshot `json:"dynamodb"`
}

// relayCapacity is the relay's capacity per message, from the relay stage.
type relayCapacity struct {
	Messages    int     `json:"messages"`
	Buckets     int     `json:"buckets"`
	ModelWCU    float64 `json:"model_wcu_per_msg"`
	MinWCU      float64 `json:"min_wcu_per_msg"`
	AWSRuleWCU  float64 `json:"aws_rule_wcu_per_msg"`
	LocalWCU    float64 `json:"dynamodb_local_wcu_per_msg"`
	ModelRCU    float64 `json:"model_rcu_per_msg"`
	MinRCU      float64 `json:"min_rcu_per_msg"`
	AWSRuleRCU  float64 `json:"aws_rule_rcu_per_msg"`
	LocalRCU    float64 `json:"dynamodb_local_rcu_per_msg"`
	CallsPerMsg float64 `json:"dynamodb_calls_per_msg"`
}

// totalRow is writer + relay per message at k messages per transaction,
// with the on-demand cost per million messages.
type totalRow struct {
	PerTxn        int     `json:"messages_per_transaction"`
	ModelWCU      float64 `json:"model_wcu_per_msg"`
	MinWCU        float64 `json:"min_wcu_per_msg"`
	AWSRuleWCU    float64 `json:"aws_rule_wcu_per_msg"`
	ModelRCU      float64 `json:"model_rcu_per_msg"`
	USDPerMillion float64 `json:"usd_per_million_messages"`
}

type capacityResult struct {
	MessageItemBytes int            `json:"message_item_bytes"`
	CounterItemBytes int            `json:"counter_item_bytes"`
	LeaseItemBytes   int            `json:"lease_item_bytes"`
	FenceItemBytes   int            `json:"fence_item_bytes"`
	FenceAWSRuleWCU  float64        `json:"fence_aws_rule_wcu"`
	FenceLocalWCU    float64        `json:"fence_dynamodb_local_wcu"`
	Writer           []writerRow    `json:"writer"`
	Relay            relayCapacity  `json:"relay"`
	Total            []totalRow     `json:"total"`
	Naive            relayCapacity  `json:"naive_relay"`
	LocalVsAWS       []string       `json:"dynamodb_local_vs_aws"`
	Prices           map[string]any `json:"prices"`
}

// writerCapacity writes, for k = 1, 10 and 100 messages per transaction,
// txns[k] transactions through a dynamo.Writer on the metered client and
// records what each k cost per message (k without transactions: no row).
func writerCapacity(ctx context.Context, st *stage, g *gen, itemBytes int, txns map[int]int) ([]writerRow, error) {
	w, err := dynamo.NewWriter(ctx, st.metered, st.tables)
	if err != nil {
		return nil, err
	}
	var rows []writerRow
	for _, k := range []int{1, 10, 100} {
		if txns[k] == 0 {
			continue
		}
		st.meter.reset()
		row := writerRow{PerTxn: k, Transactions: txns[k]}
		for i := range txns[k] {
			b := i % st.buckets
			msgs := make([]outbox.Message, k)
			first := g.input(st.topic, b)
			for j := range msgs {
				msgs[j] = g.input(st.topic, b)
				msgs[j].Key = first.Key // one aggregate: one bucket, one reservation
			}
			if _, err := w.Write(ctx, nil, msgs...); err != nil {
				return nil, fmt.Errorf("write %d messages in one transaction: %w", k, err)
			}
			row.Messages += k
		}
		row.Dynamo = st.meter.snapshot(st.roles())
		n := float64(row.Messages)
		local, rule := row.Dynamo.capacity(func(op, _ string) bool { return !isRead(op) })
		row.LocalWCU, row.AWSRuleWCU = local/n, rule/n
		_, txn := row.Dynamo.capacity(func(op, _ string) bool { return op == "TransactWriteItems" })
		_, ctr := row.Dynamo.capacity(func(op, t string) bool { return op == "UpdateItem" && t == "control" })
		row.TxnWCU, row.CounterWCU = txn/n, ctr/n
		calls, _ := row.Dynamo.calls()
		row.CallsPerMsg = float64(calls) / n
		row.ModelWCU = 2*writeUnits(itemBytes) + 1/float64(k)
		rows = append(rows, row)
	}
	return rows, nil
}

// fenceCost writes one fence tombstone with dynamo.Store.Fence above every
// reserved sequence number of bucket 0 and returns its reported and AWS-rule
// cost and its size.
func fenceCost(ctx context.Context, st *stage) (local, rule float64, size int, err error) {
	store, err := dynamo.NewStore(ctx, st.metered, st.tables)
	if err != nil {
		return 0, 0, 0, err
	}
	counter, err := st.counter(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	seq, err := counter.Reserve(ctx, 0, 1)
	if err != nil {
		return 0, 0, 0, err
	}
	st.meter.reset()
	if err := store.Fence(ctx, 0, seq, time.Now()); err != nil {
		return 0, 0, 0, err
	}
	snap := st.meter.snapshot(st.roles())
	local, rule = snap.capacity(func(op, _ string) bool { return op == "PutItem" })
	size, err = storedSize(ctx, st, st.tables.Messages, map[string]types.AttributeValue{"b": num(0), "s": num(seq)})
	return local, rule, size, err
}

// storedSize reads an item and returns its size by AWS's rules.
func storedSize(ctx context.Context, st *stage, table string, key map[string]types.AttributeValue) (int, error) {
	out, err := st.plain.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, err
	}
	return itemBytes(out.Item), nil
}

func controlKey(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk}}
}

// relayModel is the relay's capacity per message by AWS's rules for a
// drain of perBucket messages in each of buckets buckets, items of
// itemBytes, as this engine reads them: per batch a consistent Query of
// BatchSize+1 items (one lookahead item), one head update, the deletes;
// per drain one acquire, one release and a last, empty Query.
func relayModel(perBucket []int, itemBytes int) (wcu, rcu float64) {
	msgs := 0
	for _, m := range perBucket {
		msgs += m
		batches := ceilDiv(m, relayBatch)
		wcu += float64(m)*writeUnits(itemBytes) + float64(batches) + 2
		for b := range batches {
			read := relayBatch + 1
			if b == batches-1 {
				read = m - b*relayBatch
			}
			rcu += float64(ceilDiv(read*itemBytes, readUnitBytes))
		}
		rcu++ // the empty Query that ends the drain
	}
	return wcu / float64(msgs), rcu / float64(msgs)
}

// relayMin is the least a relay publishing in batches of BatchSize can
// spend per message: the delete, one head update per batch, and reading
// each item once.
func relayMin(itemBytes int) (wcu, rcu float64) {
	return writeUnits(itemBytes) + 1.0/relayBatch, float64(itemBytes) / readUnitBytes
}

// relayCapacityOf derives the relay's capacity per message from a drain.
func relayCapacityOf(r drainResult, itemBytes int) relayCapacity {
	n := float64(r.Messages)
	c := relayCapacity{Messages: r.Messages, Buckets: r.Backlog.Buckets}
	if n == 0 {
		return c
	}
	lw, aw := r.Dynamo.capacity(func(op, _ string) bool { return !isRead(op) })
	lr, ar := r.Dynamo.capacity(func(op, _ string) bool { return isRead(op) })
	c.LocalWCU, c.AWSRuleWCU, c.LocalRCU, c.AWSRuleRCU = lw/n, aw/n, lr/n, ar/n
	c.CallsPerMsg = r.CallsPerM
	per := make([]int, r.Backlog.Buckets)
	for i := range r.Messages {
		per[i%len(per)]++
	}
	c.ModelWCU, c.ModelRCU = relayModel(per, itemBytes)
	c.MinWCU, c.MinRCU = relayMin(itemBytes)
	return c
}

// totals adds writer and relay per k and prices them.
func totals(writer []writerRow, relay relayCapacity, itemBytes int) []totalRow {
	var out []totalRow
	for _, w := range writer {
		t := totalRow{
			PerTxn:     w.PerTxn,
			ModelWCU:   w.ModelWCU + relay.ModelWCU,
			MinWCU:     w.ModelWCU + relay.MinWCU,
			AWSRuleWCU: w.AWSRuleWCU + relay.AWSRuleWCU,
			ModelRCU:   relay.ModelRCU,
		}
		t.USDPerMillion = t.ModelWCU*pricePerMillionWRU + t.ModelRCU*pricePerMillionRRU
		out = append(out, t)
	}
	return out
}

// localDifferences compares, per operation, what DynamoDB Local reported
// with what AWS's rules give for the same calls.
func localDifferences(snaps ...snapshot) []string {
	type sum struct {
		local, rule     float64
		calls, reported int64
	}
	byOp := map[string]*sum{}
	var order []string
	for _, s := range snaps {
		for _, k := range s.keys() {
			op, _ := splitKey(k)
			v := s.Ops[k]
			if v.Calls == 0 {
				continue
			}
			cur, ok := byOp[op]
			if !ok {
				cur = &sum{}
				byOp[op] = cur
				order = append(order, op)
			}
			cur.local += v.Capacity
			cur.rule += v.AWSUnits
			cur.calls += v.Calls
			cur.reported += v.Reported
		}
	}
	var notes []string
	for _, op := range order {
		s := byOp[op]
		switch {
		case s.reported == 0:
			notes = append(notes, fmt.Sprintf("%s: DynamoDB Local reported no ConsumedCapacity in %d calls (AWS's rules: %.2f units per call)", op, s.calls, s.rule/float64(s.calls)))
		case math.Abs(s.local-s.rule) > 0.005*math.Max(1, s.rule):
			notes = append(notes, fmt.Sprintf("%s: DynamoDB Local reported %.2f units per call, AWS's rules give %.2f (ratio %.2f) over %d calls",
				op, s.local/float64(s.reported), s.rule/float64(s.calls), s.local/math.Max(s.rule, 1e-9), s.calls))
		default:
			notes = append(notes, fmt.Sprintf("%s: DynamoDB Local agrees with AWS's rules (%.2f units per call over %d calls)", op, s.rule/float64(s.calls), s.calls))
		}
	}
	return notes
}
