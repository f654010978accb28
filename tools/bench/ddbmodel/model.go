package ddbmodel

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// Config is the model's behaviour. The zero Config is DynamoDB's
// documented defaults with the latency the bench assumes.
type Config struct {
	// Latency is added to every call (half before the call takes effect,
	// half after, as a network round trip around it). Default
	// LogNormal{5ms, 20ms}. OpLatency overrides it per operation
	// ("GetItem", "Query", "GetRecords", ...).
	Latency   Dist
	OpLatency map[string]Dist
	// WCUPerKey and RCUPerKey are each partition key value's capacity per
	// second (default 1,000 and 3,000: DynamoDB's per-partition ceilings,
	// which an on-demand table's hot key meets whatever the table's
	// size). BurstSeconds is how many seconds of it a key may bank
	// (default 1). Negative: no ceiling.
	WCUPerKey, RCUPerKey float64
	BurstSeconds         float64
	// Shards is the number of shards of each table's stream (default 1).
	// A partition key's records all go to one shard, in order.
	Shards int
	// Region is the tables' region (default us-east-1).
	Region string
	// Now is the clock of the token buckets and stream records (default
	// time.Now).
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Latency == nil {
		c.Latency = LogNormal{P50: 5 * time.Millisecond, P99: 20 * time.Millisecond}
	}
	if c.WCUPerKey == 0 {
		c.WCUPerKey = 1000
	}
	if c.RCUPerKey == 0 {
		c.RCUPerKey = 3000
	}
	if c.BurstSeconds == 0 {
		c.BurstSeconds = 1
	}
	if c.Shards < 1 {
		c.Shards = 1
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// DB is the model: tables, their streams, the capacity of each partition
// key, and counts of every call by the role of its caller. Its methods
// have the signatures of *dynamodb.Client's (and of the streams client's),
// so code that takes the SDK's interfaces runs on it in process; Handler
// serves the same over DynamoDB's HTTP protocol. Every call is atomic: one
// lock orders them (DynamoDB orders writes per item; the model orders all).
type DB struct {
	cfg    Config
	mu     sync.Mutex
	tables map[string]*table
	seq    uint64 // the last stream sequence number given
	tokens map[string]bool
	counts counts
}

// New returns an empty model.
func New(cfg Config) *DB {
	return &DB{cfg: cfg.withDefaults(), tables: map[string]*table{}, tokens: map[string]bool{}, counts: counts{m: map[countKey]*OpCount{}}}
}

// Config returns the model's configuration, defaults filled in.
func (db *DB) Config() Config { return db.cfg }

type keyDef struct{ name, typ string }

type table struct {
	name, arn string
	created   time.Time
	hash, rng keyDef // rng.name "": no sort key
	parts     map[string]*partition
	items     int
	bytes     int
	billing   types.BillingMode
	ttlAttr   string
	stream    *stream // nil: no stream
	input     *dynamodb.CreateTableInput
}

// partition is one partition key value's items, in sort-key order, and its
// capacity.
type partition struct {
	entries []entry
	w, r    tokenBucket
}

type entry struct {
	rk   types.AttributeValue
	item Item
}

// keyString is a partition key value in a canonical form (numbers by value).
func keyString(v types.AttributeValue) string {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return "S" + x.Value
	case *types.AttributeValueMemberB:
		return "B" + string(x.Value)
	case *types.AttributeValueMemberN:
		d, err := parseDecimal(x.Value)
		if err != nil {
			return "N" + x.Value
		}
		sign := ""
		if d.neg {
			sign = "-"
		}
		return "N" + sign + d.digits + "e" + strconv.Itoa(d.exp)
	}
	return ""
}

// shardOf is the stream shard of a partition key value.
func shardOf(pk string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(pk))
	return int(h.Sum32() % uint32(shards))
}

func (db *DB) table(name string) (*table, error) {
	t, ok := db.tables[name]
	if !ok {
		return nil, notFound(name)
	}
	return t, nil
}

// key validates a primary key (exactly the key attributes, of the key's
// types) and returns its partition key string and sort key value.
func (t *table) key(k Item) (string, types.AttributeValue, error) {
	want := 1
	if t.rng.name != "" {
		want = 2
	}
	if len(k) != want {
		return "", nil, validation("The provided key element does not match the schema")
	}
	return t.keyOf(k)
}

// keyOf reads the key attributes of an item.
func (t *table) keyOf(it Item) (string, types.AttributeValue, error) {
	h, ok := it[t.hash.name]
	if !ok || typeOf(h) != t.hash.typ {
		return "", nil, validation("One or more parameter values were invalid: Missing the key %s in the item, or it has the wrong type", t.hash.name)
	}
	if t.rng.name == "" {
		return keyString(h), nil, nil
	}
	r, ok := it[t.rng.name]
	if !ok || typeOf(r) != t.rng.typ {
		return "", nil, validation("One or more parameter values were invalid: Missing the key %s in the item, or it has the wrong type", t.rng.name)
	}
	return keyString(h), r, nil
}

func (t *table) part(pk string) *partition {
	p, ok := t.parts[pk]
	if !ok {
		p = &partition{}
		t.parts[pk] = p
	}
	return p
}

// find returns the index of the entry with sort key rk (or where it would
// go) and whether it is there.
func (p *partition) find(rk types.AttributeValue) (int, bool) {
	if rk == nil {
		return 0, len(p.entries) == 1
	}
	i := sort.Search(len(p.entries), func(i int) bool {
		c, _ := compare(p.entries[i].rk, rk)
		return c >= 0
	})
	if i < len(p.entries) {
		c, _ := compare(p.entries[i].rk, rk)
		return i, c == 0
	}
	return i, false
}

// get returns the stored item at the key, or nil.
func (t *table) get(pk string, rk types.AttributeValue) Item {
	p, ok := t.parts[pk]
	if !ok {
		return nil
	}
	if i, ok := p.find(rk); ok {
		return p.entries[i].item
	}
	return nil
}

// put stores it (nil: deletes) at the key and records the change in the
// stream. It returns the item it replaced.
func (db *DB) put(t *table, pk string, rk types.AttributeValue, it Item, now time.Time) Item {
	p := t.part(pk)
	i, found := p.find(rk)
	var old Item
	if found {
		old = p.entries[i].item
	}
	switch {
	case it == nil && found:
		p.entries = append(p.entries[:i], p.entries[i+1:]...)
		t.items--
		t.bytes -= ItemSize(old)
	case it == nil:
		return nil
	case found:
		p.entries[i].item = it
		t.bytes += ItemSize(it) - ItemSize(old)
	default:
		p.entries = append(p.entries, entry{})
		copy(p.entries[i+1:], p.entries[i:])
		p.entries[i] = entry{rk: rk, item: it}
		t.items++
		t.bytes += ItemSize(it)
	}
	if t.stream != nil {
		var name stypes.OperationType
		switch {
		case old == nil:
			name = stypes.OperationTypeInsert
		case it == nil:
			name = stypes.OperationTypeRemove
		case equalItems(old, it):
			return old // no change: no stream record
		default:
			name = stypes.OperationTypeModify
		}
		keyItem := old
		if it != nil {
			keyItem = it
		}
		db.seq++
		t.stream.append(pk, keyItem, t, name, db.seq, now)
	}
	return old
}

// CreateTable creates a table (on-demand or provisioned: the model treats
// both alike), with its stream if the input enables one.
func (db *DB) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	name := aws.ToString(in.TableName)
	if name == "" {
		return nil, validation("TableName must not be empty")
	}
	if _, ok := db.tables[name]; ok {
		return nil, &types.ResourceInUseException{Message: aws.String("Table already exists: " + name)}
	}
	typesOf := map[string]string{}
	for _, a := range in.AttributeDefinitions {
		typesOf[aws.ToString(a.AttributeName)] = string(a.AttributeType)
	}
	now := db.cfg.Now()
	t := &table{name: name, created: now, parts: map[string]*partition{}, billing: in.BillingMode, input: in,
		arn: fmt.Sprintf("arn:aws:dynamodb:%s:000000000000:table/%s", db.cfg.Region, name)}
	for _, k := range in.KeySchema {
		n := aws.ToString(k.AttributeName)
		d := keyDef{n, typesOf[n]}
		if d.typ == "" {
			return nil, validation("One or more parameter values were invalid: key %s has no attribute definition", n)
		}
		if k.KeyType == types.KeyTypeHash {
			t.hash = d
		} else {
			t.rng = d
		}
	}
	if t.hash.name == "" {
		return nil, validation("One or more parameter values were invalid: no HASH key")
	}
	if s := in.StreamSpecification; s != nil && aws.ToBool(s.StreamEnabled) {
		t.stream = db.newStream(t, s.StreamViewType)
	}
	db.tables[name] = t
	return &dynamodb.CreateTableOutput{TableDescription: t.describe()}, nil
}

func (t *table) describe() *types.TableDescription {
	d := &types.TableDescription{
		TableName: aws.String(t.name), TableArn: aws.String(t.arn), TableId: aws.String(t.name),
		TableStatus: types.TableStatusActive, CreationDateTime: aws.Time(t.created),
		ItemCount: aws.Int64(int64(t.items)), TableSizeBytes: aws.Int64(int64(t.bytes)),
		AttributeDefinitions: t.input.AttributeDefinitions, KeySchema: t.input.KeySchema,
		BillingModeSummary: &types.BillingModeSummary{BillingMode: t.billing},
	}
	if t.billing == "" {
		d.BillingModeSummary = nil
		d.ProvisionedThroughput = &types.ProvisionedThroughputDescription{
			ReadCapacityUnits: aws.Int64(0), WriteCapacityUnits: aws.Int64(0), NumberOfDecreasesToday: aws.Int64(0)}
	}
	if t.stream != nil {
		d.StreamSpecification = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: t.stream.view}
		d.LatestStreamArn, d.LatestStreamLabel = aws.String(t.stream.arn), aws.String(t.stream.label)
	}
	return d
}

// DescribeTable describes a table. Unlike DynamoDB Local's, it does not
// count the items to answer (DynamoDB's ItemCount is refreshed about every
// six hours; the model's is kept as it goes).
func (db *DB) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	var out *dynamodb.DescribeTableOutput
	err := db.call(ctx, "DescribeTable", func(now time.Time, c *callCount) error {
		t, err := db.table(aws.ToString(in.TableName))
		if err != nil {
			return err
		}
		c.table = t.name
		out = &dynamodb.DescribeTableOutput{Table: t.describe()}
		return nil
	})
	return out, err
}

// UpdateTable turns a table's stream on or off (the only change the model
// makes; the others are accepted and change nothing).
func (db *DB) UpdateTable(ctx context.Context, in *dynamodb.UpdateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	t, err := db.table(aws.ToString(in.TableName))
	if err != nil {
		return nil, err
	}
	if s := in.StreamSpecification; s != nil {
		switch on := aws.ToBool(s.StreamEnabled); {
		case on && t.stream != nil:
			return nil, validation("Table already has an enabled stream: %s", t.name)
		case on:
			t.stream = db.newStream(t, s.StreamViewType)
		case t.stream == nil:
			return nil, validation("Table does not have a stream to disable: %s", t.name)
		default:
			t.stream = nil
		}
	}
	return &dynamodb.UpdateTableOutput{TableDescription: t.describe()}, nil
}

// newStream is a new stream of t with the model's shards.
func (db *DB) newStream(t *table, view types.StreamViewType) *stream {
	now := db.cfg.Now()
	label := now.UTC().Format("2006-01-02T15:04:05.000")
	s := &stream{label: label, arn: t.arn + "/stream/" + label, view: view, shards: make([]*shard, db.cfg.Shards)}
	for i := range s.shards {
		s.shards[i] = &shard{id: fmt.Sprintf("shardId-%020d-%08x", now.UnixMilli(), i)}
	}
	return s
}

// UpdateTimeToLive records the TTL attribute (the model never expires
// items: a run is shorter than DynamoDB's deletion delay).
func (db *DB) UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	t, err := db.table(aws.ToString(in.TableName))
	if err != nil {
		return nil, err
	}
	if s := in.TimeToLiveSpecification; s != nil {
		if aws.ToBool(s.Enabled) {
			t.ttlAttr = aws.ToString(s.AttributeName)
		} else {
			t.ttlAttr = ""
		}
	}
	return &dynamodb.UpdateTimeToLiveOutput{TimeToLiveSpecification: in.TimeToLiveSpecification}, nil
}

// DescribeTimeToLive tells the TTL attribute, if any.
func (db *DB) DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	t, err := db.table(aws.ToString(in.TableName))
	if err != nil {
		return nil, err
	}
	d := &types.TimeToLiveDescription{TimeToLiveStatus: types.TimeToLiveStatusDisabled}
	if t.ttlAttr != "" {
		d.TimeToLiveStatus, d.AttributeName = types.TimeToLiveStatusEnabled, aws.String(t.ttlAttr)
	}
	return &dynamodb.DescribeTimeToLiveOutput{TimeToLiveDescription: d}, nil
}

// ListTables lists the tables' names, in order.
func (db *DB) ListTables(ctx context.Context, in *dynamodb.ListTablesInput, _ ...func(*dynamodb.Options)) (*dynamodb.ListTablesOutput, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	var names []string
	for n := range db.tables {
		if in.ExclusiveStartTableName == nil || n > *in.ExclusiveStartTableName {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return &dynamodb.ListTablesOutput{TableNames: names}, nil
}
