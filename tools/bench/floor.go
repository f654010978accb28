package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kgo"
)

// batchGetLimit is the most keys one BatchGetItem may name.
const batchGetLimit = 100

// floor is the least a stream-triggered relay of this architecture can do,
// as a Lambda handler: per invocation it reads the items its INSERT records
// name (one consistent BatchGetItem, or one per 100 hints, all at once) and
// produces them with the publisher's producer settings, waiting for every
// ack — with no lease, no order and no delete. Like the raw pipeline it
// produces each item as it is stored (key, value, the id as the message-id
// header) without decoding it, which only flatters it.
type floor struct {
	db        *dynamodb.Client // the stage's metered client
	table     string
	topic     string
	producer  *kgo.Client
	published atomic.Int64
}

// newFloor builds the floor's clients, once per container as a Lambda
// function would.
func newFloor(st *stage) (*floor, error) {
	cl, err := kgo.NewClient(producerOptions(st.brokers)...)
	if err != nil {
		return nil, err
	}
	return &floor{db: st.metered, table: st.tables.Messages, topic: st.topic, producer: cl}, nil
}

func (f *floor) close() { f.producer.Close() }

// Handle is the floor's Lambda handler. Any failure fails the whole batch
// (the mapping retries it); the floor reports no item failures.
func (f *floor) Handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	var resp events.DynamoDBEventResponse
	keys, err := hintedKeys(ev)
	if err != nil || len(keys) == 0 {
		return resp, err
	}
	var chunks [][]map[string]types.AttributeValue
	for i := 0; i < len(keys); i += batchGetLimit {
		chunks = append(chunks, keys[i:min(i+batchGetLimit, len(keys))])
	}
	items := make([][]map[string]types.AttributeValue, len(chunks))
	err = forBuckets(len(chunks), len(chunks), func(i int) (err error) {
		items[i], err = f.get(ctx, chunks[i])
		return err
	})
	if err != nil {
		return resp, err
	}
	recs := make([]*kgo.Record, 0, len(keys))
	for _, its := range items {
		for _, it := range its {
			recs = append(recs, itemRecord(f.topic, it))
		}
	}
	if len(recs) < len(keys) {
		// Without deletes a hinted item is always there.
		return resp, fmt.Errorf("floor: %d of %d hinted items not found", len(keys)-len(recs), len(keys))
	}
	if err := f.producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return resp, err
	}
	f.published.Add(int64(len(recs)))
	return resp, nil
}

// hintedKeys are the distinct message keys (b, s) of the batch's INSERT
// records.
func hintedKeys(ev events.DynamoDBEvent) ([]map[string]types.AttributeValue, error) {
	seen := map[[2]string]bool{}
	var keys []map[string]types.AttributeValue
	for _, rec := range ev.Records {
		if rec.EventName != string(events.DynamoDBOperationTypeInsert) {
			continue
		}
		b, okb := rec.Change.Keys["b"]
		s, oks := rec.Change.Keys["s"]
		if !okb || !oks || b.DataType() != events.DataTypeNumber || s.DataType() != events.DataTypeNumber {
			return nil, fmt.Errorf("floor: stream record %s has no numeric keys b and s", rec.EventID)
		}
		k := [2]string{b.Number(), s.Number()}
		if seen[k] {
			continue
		}
		seen[k] = true
		keys = append(keys, map[string]types.AttributeValue{
			"b": &types.AttributeValueMemberN{Value: k[0]}, "s": &types.AttributeValueMemberN{Value: k[1]},
		})
	}
	return keys, nil
}

// get reads keys with consistent BatchGetItem calls, again for the keys
// that come back unprocessed.
func (f *floor) get(ctx context.Context, keys []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	var items []map[string]types.AttributeValue
	for attempt := 0; len(keys) > 0; attempt++ {
		if attempt == 20 {
			return nil, errors.New("floor: batch get: keys still unprocessed after 20 attempts")
		}
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 20 * time.Millisecond)
		}
		out, err := f.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
			f.table: {Keys: keys, ConsistentRead: aws.Bool(true)},
		}})
		if err != nil {
			return nil, err
		}
		items = append(items, out.Responses[f.table]...)
		keys = out.UnprocessedKeys[f.table].Keys
	}
	return items, nil
}
