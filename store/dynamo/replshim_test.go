package dynamo

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// replShim replicates two DynamoDB endpoints' tables into each other the
// way a global table does: it reads each side's streams and applies every
// change to the other side, resolving concurrent writes of one item
// last-writer-wins (by the stream record's creation time, then by the
// side's rank, as DynamoDB resolves them by its own timestamp). It counts
// the conflicts it resolved: writes of one item in both regions whose
// images differ, where the loser's write is discarded (a deletion by
// DynamoDB's TTL, which every region makes on its own, is none).
//
// What it does not model: it copies the source's current image (the
// messages table's stream is KEYS_ONLY); it orders writes of one item read
// in different rounds by the round (DynamoDB Local's record times are too
// coarse to order them); and a write that lands on the destination between
// the shim's read of a round of records and its copy is overwritten — a
// window real global tables do not have. Region mode
// never writes one item in two regions, so its run never meets that window
// (and shows conflicts=0); the default-mode run writes while the shim is
// paused, so all its conflicting writes are in one round.
type replShim struct {
	sides  [2]shimSide
	tables []string

	mu         sync.Mutex
	paused     bool
	winners    map[string]shimVersion // table+key → the last write applied everywhere
	echoes     map[string]int         // side+table+key → copies of ours still to come back on that side's stream
	iters      map[string]string      // side+shard → sequence number of the last record read ("" when the shard is finished)
	arns       map[string]string      // side+table → stream ARN
	trimmed    map[string]int         // side+shard → TrimmedDataAccessExceptions in a row
	conflicts  int
	conflicted []string // the items of the conflicts
	copies     int
	// markerSeq numbers sync's markers; awaited holds the markers (side,
	// table and key) the current sync has not yet read.
	markerSeq int
	awaited   map[string]bool
}

type shimSide struct {
	name    string
	db      *dynamodb.Client
	streams *dynamodbstreams.Client
}

type shimVersion struct {
	at     time.Time
	origin int
	seq    string
}

func (v shimVersion) after(w shimVersion) bool {
	if !v.at.Equal(w.at) {
		return v.at.After(w.at)
	}
	if v.origin != w.origin {
		return v.origin < w.origin // ties: the first side wins, as a fixed order of regions would
	}
	return len(v.seq) > len(w.seq) || len(v.seq) == len(w.seq) && v.seq > w.seq
}

// newReplShim replicates tables between a and b: the messages table first
// (sync's markers in it are positions b = -1), then the control table.
func newReplShim(a, b shimSide, tables ...string) *replShim {
	return &replShim{sides: [2]shimSide{a, b}, tables: tables, echoes: map[string]int{},
		iters: map[string]string{}, arns: map[string]string{}, trimmed: map[string]int{}}
}

// pause stops replication (a regional outage cuts both directions);
// resume starts it again.
func (s *replShim) pause()  { s.mu.Lock(); s.paused = true; s.mu.Unlock() }
func (s *replShim) resume() { s.mu.Lock(); s.paused = false; s.mu.Unlock() }

// run replicates every interval until ctx is done.
func (s *replShim) run(ctx context.Context, t *testing.T, interval time.Duration) {
	for ctx.Err() == nil {
		if _, err := s.round(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("replication shim: %v", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

// sync returns once every write made on either side before the call has
// been replicated: it writes a marker item on each side's stream of each
// table and runs rounds until the shim has read all of them. A round reads
// each shard from where the last one stopped to its end, and a stream
// keeps each shard's records in order, so a marker read means every record
// before it in its shard was read and applied (DynamoDB Local keeps one
// open shard per table: an older shard was closed, and read to its end in
// the same or an earlier round, before the marker's was opened). It waits
// for a condition, not for quiet: the relays renew leases every second,
// and on a busy machine a round can take longer than that, so "two rounds
// in a row found nothing" may never come (it did not, in a busy make test).
func (s *replShim) sync(ctx context.Context) error {
	s.mu.Lock()
	if s.paused {
		s.mu.Unlock()
		return errors.New("replication shim: sync while paused would never end")
	}
	s.markerSeq++
	want := map[string]bool{}
	for side, sd := range s.sides {
		for _, table := range s.tables {
			key := s.markerKey(table, s.markerSeq)
			if _, err := sd.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: key}); err != nil {
				s.mu.Unlock()
				return fmt.Errorf("replication shim: write a marker on %s's %s: %w", sd.name, table, err)
			}
			want[fmt.Sprint(side, "|", table, "|", keyString(key))] = true
		}
	}
	s.awaited = want
	s.mu.Unlock()
	for {
		if _, err := s.round(ctx); err != nil {
			return err
		}
		s.mu.Lock()
		left := len(s.awaited)
		s.mu.Unlock()
		if left == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// markerKey is the key of sync's n-th marker in table: a messages-table
// position in no bucket (b = -1, which no relay reads and no writer
// writes), or a control-table item no part of the outbox reads.
func (s *replShim) markerKey(table string, n int) map[string]types.AttributeValue {
	if table == s.tables[0] {
		return map[string]types.AttributeValue{"b": &types.AttributeValueMemberN{Value: "-1"}, "s": &types.AttributeValueMemberN{Value: fmt.Sprint(n)}}
	}
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "replshim-marker"}, "sk": &types.AttributeValueMemberS{Value: fmt.Sprint(n)}}
}

// isMarker reports whether key is one of sync's markers in table.
func (s *replShim) isMarker(table string, key map[string]types.AttributeValue) bool {
	if table == s.tables[0] {
		b, ok := key["b"].(*types.AttributeValueMemberN)
		return ok && b.Value == "-1"
	}
	pk, ok := key["pk"].(*types.AttributeValueMemberS)
	return ok && pk.Value == "replshim-marker"
}

type shimRecord struct {
	side  int
	table string
	key   map[string]types.AttributeValue
	id    string
	v     shimVersion
	// ttl: a deletion by DynamoDB's TTL, which each region makes on its
	// own (an expired heartbeat, fence or tombstone), not a region's write.
	ttl bool
	// what: the event and who made it, for the conflicts' report.
	what string
}

// round reads every new stream record of both sides and applies them; it
// returns how many records it read (echoes of its own copies included).
func (s *replShim) round(ctx context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused {
		return 0, nil
	}
	var recs []shimRecord
	for side := range s.sides {
		for _, table := range s.tables {
			r, err := s.read(ctx, side, table)
			if err != nil {
				return 0, err
			}
			recs = append(recs, r...)
		}
	}
	// The latest write of each item in this round, per side.
	type touched struct {
		table  string
		key    map[string]types.AttributeValue
		latest [2]*shimVersion
		ttl    [2]bool // the latest is a TTL deletion
		what   [2]string
	}
	items := map[string]*touched{}
	var order []string
	for _, r := range recs {
		if s.isMarker(r.table, r.key) {
			// sync's: read, not replicated.
			delete(s.awaited, fmt.Sprint(r.side, "|", r.id))
			continue
		}
		ek := fmt.Sprint(r.side, "|", r.id)
		if s.echoes[ek] > 0 && !r.ttl { // a TTL deletion is never a copy of ours
			s.echoes[ek]--
			continue
		}
		it, ok := items[r.id]
		if !ok {
			it = &touched{table: r.table, key: r.key}
			items[r.id] = it
			order = append(order, r.id)
		}
		if l := it.latest[r.side]; l == nil || r.v.after(*l) {
			v := r.v
			it.latest[r.side], it.ttl[r.side], it.what[r.side] = &v, r.ttl, r.what
		}
	}
	// Items are independent: resolve and copy them in parallel (each is
	// one or two reads and a write), then account for them.
	type result struct {
		conflict string
		echo     string
		err      error
	}
	results := make([]result, len(order))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, id := range order {
		it := items[id]
		win := -1
		for side, v := range it.latest {
			if v != nil && (win < 0 || v.after(*it.latest[win])) {
				win = side
			}
		}
		if loser := 1 - win; it.ttl[win] && it.latest[loser] != nil && !it.ttl[loser] {
			// A TTL deletion removed an expired copy; the other side's
			// write renewed the item (a heartbeat), and wins.
			win = loser
		}
		loser := 1 - win
		both := it.latest[loser] != nil && !it.ttl[0] && !it.ttl[1]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			res := &results[i]
			if both {
				// Both sides wrote the item in this round: concurrent writes.
				same, err := s.same(ctx, it.table, it.key)
				if res.err = err; err != nil {
					return
				}
				if !same {
					res.conflict = fmt.Sprintf("%s (%s: %s; %s: %s)", id, s.sides[0].name, it.what[0], s.sides[1].name, it.what[1])
				}
			}
			wrote, err := s.copy(ctx, win, loser, it.table, it.key)
			if res.err = err; wrote {
				res.echo = fmt.Sprint(loser, "|", id)
			}
		}()
	}
	wg.Wait()
	for _, res := range results {
		if res.err != nil {
			return 0, res.err
		}
		if res.conflict != "" {
			s.conflicts++
			s.conflicted = append(s.conflicted, res.conflict)
		}
		if res.echo != "" {
			s.copies++
			s.echoes[res.echo]++
		}
	}
	return len(recs), nil
}

// read returns side's new stream records of table.
func (s *replShim) read(ctx context.Context, side int, table string) ([]shimRecord, error) {
	sd := s.sides[side]
	ak := sd.name + "|" + table
	arn := s.arns[ak]
	if arn == "" {
		out, err := sd.db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return nil, err
		}
		if arn = aws.ToString(out.Table.LatestStreamArn); arn == "" {
			return nil, fmt.Errorf("table %s of %s has no stream", table, sd.name)
		}
		s.arns[ak] = arn
	}
	// DescribeStream lists at most 100 shards a call: page through them
	// (a shard missed would be a stream never read again).
	var shards []stypes.Shard
	for after := (*string)(nil); ; {
		desc, err := sd.streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(arn), ExclusiveStartShardId: after})
		if err != nil {
			return nil, err
		}
		shards = append(shards, desc.StreamDescription.Shards...)
		if after = desc.StreamDescription.LastEvaluatedShardId; after == nil {
			break
		}
	}
	sort.Slice(shards, func(i, j int) bool {
		return aws.ToString(shards[i].SequenceNumberRange.StartingSequenceNumber) < aws.ToString(shards[j].SequenceNumberRange.StartingSequenceNumber)
	})
	var out []shimRecord
	for _, sh := range shards {
		ik := ak + "|" + aws.ToString(sh.ShardId)
		last, ok := s.iters[ik] // the sequence number of the last record read
		if ok && last == "" {
			continue // finished
		}
		in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(arn), ShardId: sh.ShardId, ShardIteratorType: stypes.ShardIteratorTypeTrimHorizon}
		if ok {
			in.ShardIteratorType, in.SequenceNumber = stypes.ShardIteratorTypeAfterSequenceNumber, aws.String(last)
		}
		gi, err := sd.streams.GetShardIterator(ctx, in)
		if err != nil {
			return nil, err
		}
		it := aws.ToString(gi.ShardIterator)
		for it != "" {
			gr, err := sd.streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String(it), Limit: aws.Int32(1000)})
			var (
				trimmed *stypes.TrimmedDataAccessException
				expired *stypes.ExpiredIteratorException
			)
			if errors.As(err, &expired) {
				// A slow round outlived its iterator (they last 15
				// minutes): the next round takes a new one after the last
				// record read.
				break
			}
			if errors.As(err, &trimmed) && s.trimmed[ik] < 100 {
				// DynamoDB Local answers a fresh iterator so now and then
				// while the shard is being written; the next round reads
				// from the same place.
				s.trimmed[ik]++
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: table %s shard %s (%s..%s) after %q: %w", sd.name, table, aws.ToString(sh.ShardId),
					aws.ToString(sh.SequenceNumberRange.StartingSequenceNumber), aws.ToString(sh.SequenceNumberRange.EndingSequenceNumber), last, err)
			}
			s.trimmed[ik] = 0
			for _, r := range gr.Records {
				key := map[string]types.AttributeValue{}
				for name, av := range r.Dynamodb.Keys {
					switch v := av.(type) {
					case *stypes.AttributeValueMemberN:
						key[name] = &types.AttributeValueMemberN{Value: v.Value}
					case *stypes.AttributeValueMemberS:
						key[name] = &types.AttributeValueMemberS{Value: v.Value}
					default:
						return nil, fmt.Errorf("key %s of type %T", name, av)
					}
				}
				// DynamoDB marks a TTL deletion with its service identity;
				// DynamoDB Local streams it as an event its SDK cannot name
				// (UNKNOWN_TO_SDK_VERSION), with no identity.
				ttl := r.UserIdentity != nil && aws.ToString(r.UserIdentity.PrincipalId) == "dynamodb.amazonaws.com" ||
					r.EventName != stypes.OperationTypeInsert && r.EventName != stypes.OperationTypeModify && r.EventName != stypes.OperationTypeRemove
				what := string(r.EventName)
				if r.UserIdentity != nil {
					what += " by " + aws.ToString(r.UserIdentity.Type) + "/" + aws.ToString(r.UserIdentity.PrincipalId)
				}
				out = append(out, shimRecord{side: side, table: table, key: key, id: table + "|" + keyString(key), ttl: ttl, what: what,
					v: shimVersion{at: aws.ToTime(r.Dynamodb.ApproximateCreationDateTime), origin: side, seq: aws.ToString(r.Dynamodb.SequenceNumber)}})
			}
			if n := len(gr.Records); n > 0 {
				s.iters[ik] = aws.ToString(gr.Records[n-1].Dynamodb.SequenceNumber)
			}
			it = aws.ToString(gr.NextShardIterator)
			if it == "" {
				s.iters[ik] = "" // a closed shard read to its end: never read again
				break
			}
			if len(gr.Records) == 0 {
				break // the open shard's end, for now
			}
		}
	}
	return out, nil
}

func keyString(key map[string]types.AttributeValue) string {
	var parts []string
	for name, av := range key {
		switch v := av.(type) {
		case *types.AttributeValueMemberN:
			parts = append(parts, name+"="+v.Value)
		case *types.AttributeValueMemberS:
			parts = append(parts, name+"="+v.Value)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (s *replShim) get(ctx context.Context, side int, table string, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	out, err := s.sides[side].db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// same reports whether both sides hold the same image of the item.
func (s *replShim) same(ctx context.Context, table string, key map[string]types.AttributeValue) (bool, error) {
	a, err := s.get(ctx, 0, table, key)
	if err != nil {
		return false, err
	}
	b, err := s.get(ctx, 1, table, key)
	if err != nil {
		return false, err
	}
	return reflect.DeepEqual(a, b), nil
}

// copy makes dst's image of the item src's, and reports whether it wrote
// (a copy that would change nothing writes nothing: DynamoDB streams no
// record for it, so no echo is to come).
func (s *replShim) copy(ctx context.Context, src, dst int, table string, key map[string]types.AttributeValue) (bool, error) {
	img, err := s.get(ctx, src, table, key)
	if err != nil {
		return false, err
	}
	cur, err := s.get(ctx, dst, table, key)
	if err != nil || reflect.DeepEqual(img, cur) {
		return false, err
	}
	db := s.sides[dst].db
	if img == nil {
		_, err = db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key})
	} else {
		_, err = db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: img})
	}
	return err == nil, err
}

// conflictedItems returns the items of the conflicts so far.
func (s *replShim) conflictedItems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.conflicted...)
}

func (s *replShim) stats() (conflicts, copies int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conflicts, s.copies
}
