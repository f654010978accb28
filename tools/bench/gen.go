package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/sequence"
	"github.com/dynakafka/outbox/store/dynamo"
)

// valueBytes is the size of every message value: an order event in JSON,
// padded with words so that the stored item stays below 1 KB (about 960
// bytes with the key, id, topic, header and numbers; see itemBytes).
const valueBytes = 820

// keysPerBucket is how many distinct message keys each bucket gets.
const keysPerBucket = 32

// gen makes benchmark messages: keys that land in the wanted bucket (by the
// writer's own bucketing, outbox.BucketForKey), JSON values of valueBytes
// with varied content (so lz4 compresses them as it would real events, not
// as one repeated record), and one header, like the demo's order events.
type gen struct {
	buckets int
	keys    [][]string
	mu      sync.Mutex
	rng     *rand.Rand
}

var words = strings.Fields(`order placed paid shipped customer invoice line item amount currency
	eur usd gbp warehouse berlin dublin lisbon parcel express standard discount coupon tax net gross
	address street city postal country priority gift wrap note return window days sku quantity`)

func newGen(buckets int, seed uint64) *gen {
	g := &gen{buckets: buckets, keys: make([][]string, buckets), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	missing := buckets
	for i := 0; missing > 0; i++ {
		k := fmt.Sprintf("customer-%06d", i)
		b := outbox.BucketForKey([]byte(k), buckets)
		if len(g.keys[b]) < keysPerBucket {
			g.keys[b] = append(g.keys[b], k)
			if len(g.keys[b]) == keysPerBucket {
				missing--
			}
		}
	}
	return g
}

// message returns a new message for bucket (Bucket set; Sequence left 0).
func (g *gen) message(topic string, bucket int) outbox.Message {
	g.mu.Lock()
	key := g.keys[bucket][g.rng.IntN(keysPerBucket)]
	amount := 100 + g.rng.IntN(100_000)
	pad := make([]string, 0, 160)
	for range cap(pad) {
		pad = append(pad, words[g.rng.IntN(len(words))])
	}
	g.mu.Unlock()
	id := outbox.NewID()
	v := fmt.Sprintf(`{"type":"OrderPlaced","order_id":%q,"customer":%q,"amount_cents":%d,"currency":"EUR","note":"%s`,
		id, key, amount, strings.Join(pad, " "))
	v = v[:valueBytes-2] + `"}`
	return outbox.Message{
		ID: id, Topic: topic, Bucket: bucket, Key: []byte(key), Value: []byte(v),
		Headers:   []outbox.Header{{Key: "type", Value: []byte("OrderPlaced")}},
		CreatedAt: time.UnixMilli(time.Now().UnixMilli()),
	}
}

// input is g.message for a Writer: without the Bucket, which the writer
// assigns from the key (and refuses when set).
func (g *gen) input(topic string, bucket int) outbox.Message {
	m := g.message(topic, bucket)
	m.Bucket = 0
	return m
}

// record is the Kafka record the publisher makes of m (headers, then the
// message-id header; CreatedAt as the timestamp).
func record(m outbox.Message) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(m.Headers)+1)
	for _, h := range m.Headers {
		hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	hs = append(hs, kgo.RecordHeader{Key: outbox.DefaultMessageIDHeader, Value: []byte(m.ID)})
	return &kgo.Record{Topic: m.Topic, Key: m.Key, Value: m.Value, Headers: hs, Timestamp: m.CreatedAt}
}

// template is a message item exactly as dynamo.Writer stored it, read back
// from the table. Backlogs are made from it by replacing the attributes that
// differ per message, so the relay reads items in the writer's own format
// (format version, header encoding and all) without the cost of one
// transaction per 100 messages.
type template struct {
	base map[string]types.AttributeValue
}

// perMessage are the attributes a backlog item replaces: bucket, sequence,
// id, topic, key, value, created-at. The rest (format version v, headers h)
// stay as the writer wrote them; every bench message has the same header.
var perMessage = []string{"b", "s", "id", "t", "k", "val", "c"}

// newTemplate writes one message with a dynamo.Writer to st's outbox, reads
// its item back and deletes it again (a leftover would be relayed).
func newTemplate(ctx context.Context, st *stage, g *gen) (*template, error) {
	w, err := dynamo.NewWriter(ctx, st.plain, st.tables)
	if err != nil {
		return nil, err
	}
	res, err := w.Write(ctx, nil, g.input(st.topic, 0))
	if err != nil {
		return nil, fmt.Errorf("write the template message: %w", err)
	}
	m := res.Messages[0]
	key := map[string]types.AttributeValue{"b": num(int64(m.Bucket)), "s": num(m.Sequence)}
	out, err := st.plain.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.tables.Messages), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	for _, a := range append([]string{"v", "h"}, perMessage...) {
		if _, ok := out.Item[a]; !ok {
			return nil, fmt.Errorf("the writer's item has no attribute %q: the item format changed; update tools/bench", a)
		}
	}
	if _, err := st.plain.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(st.tables.Messages), Key: key}); err != nil {
		return nil, err
	}
	return &template{base: out.Item}, nil
}

// item is m as the writer would store it.
func (t *template) item(m outbox.Message) map[string]types.AttributeValue {
	it := maps.Clone(t.base)
	it["b"] = num(int64(m.Bucket))
	it["s"] = num(m.Sequence)
	it["id"] = &types.AttributeValueMemberS{Value: m.ID}
	it["t"] = &types.AttributeValueMemberS{Value: m.Topic}
	it["k"] = &types.AttributeValueMemberB{Value: m.Key}
	it["val"] = &types.AttributeValueMemberB{Value: m.Value}
	it["c"] = num(m.CreatedAt.UnixMilli())
	return it
}

func num(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// backlog is what prefill stored.
type backlog struct {
	Messages    int `json:"messages"`
	Buckets     int `json:"buckets"`
	MaxItemSize int `json:"max_item_bytes"`
	// Seconds is how long the pre-fill took (not part of any figure).
	Seconds float64 `json:"prefill_seconds"`
	// Last is each bucket's highest sequence number, what the stream's
	// last hint for the bucket would name.
	Last []int64 `json:"-"`
}

// counter is a Counter over st's outbox as its writers have one: over the
// config item the stage's outbox was created with (the default mode, so
// no region).
func (st *stage) counter(ctx context.Context) (*sequence.Counter, error) {
	stored, err := dynamo.ReadConfig(ctx, st.plain, st.tables)
	if err != nil {
		return nil, err
	}
	return sequence.NewCounter(st.plain, st.tables.Control, stored, "")
}

// prefill stores n messages spread evenly over st's buckets: the counters
// are advanced with sequence.Counter (one reservation per bucket, as a
// writer would), and the items written with BatchWriteItem, 25 per call,
// 8 calls at once. It fails if an item would exceed 1 KB.
func prefill(ctx context.Context, st *stage, g *gen, t *template, n int) (backlog, error) {
	start := time.Now()
	bl := backlog{Messages: n, Buckets: st.buckets, Last: make([]int64, st.buckets)}
	counter, err := st.counter(ctx)
	if err != nil {
		return bl, err
	}
	type chunk []map[string]types.AttributeValue
	chunks := make(chan chunk, 16)
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	for range 8 {
		wg.Go(func() {
			for c := range chunks {
				if err := batchPut(ctx, st.plain, st.tables.Messages, c); err != nil {
					fail(err)
				}
			}
		})
	}
	var cur chunk
	for b := range st.buckets {
		count := n / st.buckets
		if b < n%st.buckets {
			count++
		}
		if count == 0 {
			continue
		}
		var first, reserved int64
		for i := range count {
			if reserved == 0 {
				n := min(count-i, sequence.MaxReserve)
				if first, err = counter.Reserve(ctx, b, n); err != nil {
					break
				}
				reserved = int64(n)
			}
			m := g.message(st.topic, b)
			m.Sequence = first
			bl.Last[b] = first
			first++
			reserved--
			it := t.item(m)
			if size := itemBytes(it); size > bl.MaxItemSize {
				bl.MaxItemSize = size
				if size > 1024 {
					fail(fmt.Errorf("a backlog item is %d bytes; the benchmark is for items of at most 1 KB", size))
				}
			}
			cur = append(cur, it)
			if len(cur) == 25 {
				chunks <- cur
				cur = nil
			}
		}
		if err != nil {
			fail(err)
			break
		}
	}
	if len(cur) > 0 {
		chunks <- cur
	}
	close(chunks)
	wg.Wait()
	bl.Seconds = time.Since(start).Seconds()
	return bl, firstErr
}

func batchPut(ctx context.Context, db *dynamodb.Client, table string, items []map[string]types.AttributeValue) error {
	reqs := make([]types.WriteRequest, len(items))
	for i, it := range items {
		reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: it}}
	}
	return batchWrite(ctx, db, table, reqs)
}

// batchWrite sends one BatchWriteItem and retries its unprocessed items.
func batchWrite(ctx context.Context, db *dynamodb.Client, table string, reqs []types.WriteRequest) error {
	for attempt := 0; len(reqs) > 0; attempt++ {
		if attempt == 20 {
			return errors.New("batch write: items still unprocessed after 20 attempts")
		}
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 20 * time.Millisecond)
		}
		out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}})
		if err != nil {
			return err
		}
		reqs = out.UnprocessedItems[table]
	}
	return nil
}

// itemBytes is an item's size by AWS's rules ("Item sizes and formats"):
// per attribute, the length of its name plus its value's size, where
// strings and binaries count their bytes, numbers one byte per two
// significant digits plus one, and booleans one. (The bench's items hold no
// other types.)
func itemBytes(item map[string]types.AttributeValue) int {
	total := 0
	for name, av := range item {
		total += len(name)
		switch v := av.(type) {
		case *types.AttributeValueMemberS:
			total += len(v.Value)
		case *types.AttributeValueMemberB:
			total += len(v.Value)
		case *types.AttributeValueMemberBOOL:
			total++
		case *types.AttributeValueMemberN:
			digits := strings.Trim(strings.TrimLeft(v.Value, "-"), "0")
			total += (len(digits)+1)/2 + 1
		}
	}
	return total
}
