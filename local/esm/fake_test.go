package esm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

const fakeARN = "arn:aws:dynamodb:us-east-1:000000000000:table/t/stream/2024-01-01T00:00:00.000"

// fakeStreams is an in-memory DynamoDB stream with shards that tests open,
// fill, close and split, and faults they inject.
type fakeStreams struct {
	mu       sync.Mutex
	shards   []*fakeShard
	next     int // index of the next record, across shards
	pageSize int // DescribeStream page size; 0 for all at once

	faults  map[string]map[int]error // shard -> GetRecords call number (1-based) -> its error
	missing bool                     // DescribeStream answers ResourceNotFound

	getRecords []string // shard of every GetRecords call, in order
	iterators  []string // "shard type [seq]" of every GetShardIterator call
}

type fakeShard struct {
	id, parent string
	records    []types.Record
	closed     bool
	calls      int
}

func newFakeStreams(shards ...string) *fakeStreams {
	f := &fakeStreams{faults: map[string]map[int]error{}}
	for _, id := range shards {
		f.addShard(id, "")
	}
	return f
}

// seqOf is the sequence number of the i-th record put into the fake: real
// sequence numbers are long decimal strings too.
func seqOf(i int) string { return fmt.Sprintf("1%020d", i) }

// indexOf inverts seqOf.
func indexOf(seq string) int {
	i, err := strconv.Atoi(strings.TrimLeft(seq[1:], "0"))
	if err != nil {
		return 0
	}
	return i
}

func (f *fakeStreams) addShard(id, parent string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shards = append(f.shards, &fakeShard{id: id, parent: parent})
}

func (f *fakeStreams) shard(id string) *fakeShard {
	for _, s := range f.shards {
		if s.id == id {
			return s
		}
	}
	panic("fake: no shard " + id)
}

// put appends records of the given kinds to a shard, created now, and returns
// their indexes.
func (f *fakeStreams) put(shard string, kinds ...types.OperationType) []int {
	return f.putAt(shard, time.Now(), kinds...)
}

func (f *fakeStreams) putAt(shard string, created time.Time, kinds ...types.OperationType) []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.shard(shard)
	if s.closed {
		panic("fake: put into closed shard " + shard)
	}
	var idx []int
	for _, k := range kinds {
		i := f.next
		f.next++
		seq := seqOf(i)
		r := streamRecord(fmt.Sprintf("event-%d", i), k, types.StreamViewTypeKeysOnly, 0, seq, 12,
			messageKeys("0", strconv.Itoa(i)), nil, nil)
		r.Dynamodb.ApproximateCreationDateTime = &created
		s.records = append(s.records, r)
		idx = append(idx, i)
	}
	return idx
}

func (f *fakeStreams) inserts(shard string, n int) []int {
	kinds := make([]types.OperationType, n)
	for i := range kinds {
		kinds[i] = types.OperationTypeInsert
	}
	return f.put(shard, kinds...)
}

func (f *fakeStreams) close(shard string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shard(shard).closed = true
}

func (f *fakeStreams) log() (getRecords, iterators []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.getRecords...), append([]string(nil), f.iterators...)
}

func (f *fakeStreams) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.missing || deref(in.StreamArn) != fakeARN {
		return nil, &types.ResourceNotFoundException{Message: ptr("Requested resource not found")}
	}
	start := 0
	if in.ExclusiveStartShardId != nil {
		for i, s := range f.shards {
			if s.id == *in.ExclusiveStartShardId {
				start = i + 1
			}
		}
	}
	end := len(f.shards)
	if f.pageSize > 0 {
		end = min(end, start+f.pageSize)
	}
	desc := &types.StreamDescription{StreamArn: in.StreamArn, StreamStatus: types.StreamStatusEnabled}
	for _, s := range f.shards[start:end] {
		sh := types.Shard{ShardId: ptr(s.id), SequenceNumberRange: &types.SequenceNumberRange{StartingSequenceNumber: ptr(seqOf(0))}}
		if s.parent != "" {
			sh.ParentShardId = ptr(s.parent)
		}
		if s.closed {
			sh.SequenceNumberRange.EndingSequenceNumber = ptr(seqOf(f.next))
		}
		desc.Shards = append(desc.Shards, sh)
	}
	if end < len(f.shards) {
		desc.LastEvaluatedShardId = ptr(f.shards[end-1].id)
	}
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: desc}, nil
}

func (f *fakeStreams) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.shard(deref(in.ShardId))
	entry := fmt.Sprintf("%s %s", s.id, in.ShardIteratorType)
	pos := 0
	switch in.ShardIteratorType {
	case types.ShardIteratorTypeTrimHorizon:
	case types.ShardIteratorTypeLatest:
		pos = len(s.records)
	case types.ShardIteratorTypeAfterSequenceNumber:
		entry += " " + deref(in.SequenceNumber)
		pos = -1
		for i, r := range s.records {
			if *r.Dynamodb.SequenceNumber == deref(in.SequenceNumber) {
				pos = i + 1
			}
		}
		if pos < 0 {
			return nil, fmt.Errorf("fake: no record %s in shard %s", deref(in.SequenceNumber), s.id)
		}
	default:
		return nil, fmt.Errorf("fake: iterator type %s not supported", in.ShardIteratorType)
	}
	f.iterators = append(f.iterators, entry)
	return &dynamodbstreams.GetShardIteratorOutput{ShardIterator: ptr(fmt.Sprintf("%s/%d", s.id, pos))}, nil
}

func (f *fakeStreams) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, p, _ := strings.Cut(deref(in.ShardIterator), "/")
	pos, err := strconv.Atoi(p)
	if err != nil {
		return nil, fmt.Errorf("fake: bad iterator %q", deref(in.ShardIterator))
	}
	s := f.shard(id)
	s.calls++
	f.getRecords = append(f.getRecords, id)
	if err := f.faults[id][s.calls]; err != nil {
		return nil, err
	}
	limit := 1000
	if in.Limit != nil {
		limit = int(*in.Limit)
	}
	end := min(len(s.records), pos+limit)
	out := &dynamodbstreams.GetRecordsOutput{Records: append([]types.Record(nil), s.records[pos:end]...)}
	if !s.closed || end < len(s.records) {
		out.NextShardIterator = ptr(fmt.Sprintf("%s/%d", id, end))
	}
	return out, nil
}
