package ddbmodel

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// A table's stream: its shards, each partition key's changes in one shard
// in the order they were made (the model's shards never split or close:
// a run is shorter than a shard's life, about four hours). GetRecords
// returns at most 1,000 records or 1 MB, as DynamoDB Streams does.

type stream struct {
	arn, label string
	view       types.StreamViewType
	shards     []*shard
}

type shard struct {
	id   string
	recs []streamRec
}

type streamRec struct {
	rec  stypes.Record
	size int
}

const streamSeqDigits = 21

func (s *stream) append(pk string, it Item, t *table, name stypes.OperationType, seq uint64, now time.Time) {
	keys := map[string]stypes.AttributeValue{}
	for _, k := range []string{t.hash.name, t.rng.name} {
		if k == "" {
			continue
		}
		switch v := it[k].(type) {
		case *types.AttributeValueMemberS:
			keys[k] = &stypes.AttributeValueMemberS{Value: v.Value}
		case *types.AttributeValueMemberN:
			keys[k] = &stypes.AttributeValueMemberN{Value: v.Value}
		case *types.AttributeValueMemberB:
			keys[k] = &stypes.AttributeValueMemberB{Value: v.Value}
		}
	}
	size := ItemSize(t.keyItem(it))
	sn := fmt.Sprintf("%0*d", streamSeqDigits, seq)
	sh := s.shards[shardOf(pk, len(s.shards))]
	sh.recs = append(sh.recs, streamRec{size: size, rec: stypes.Record{
		EventID: aws.String(sn), EventName: name, EventVersion: aws.String("1.1"),
		EventSource: aws.String("aws:dynamodb"), AwsRegion: aws.String(strings.Split(t.arn, ":")[3]),
		Dynamodb: &stypes.StreamRecord{
			ApproximateCreationDateTime: aws.Time(now), Keys: keys, SequenceNumber: aws.String(sn),
			SizeBytes: aws.Int64(int64(size)), StreamViewType: stypes.StreamViewType(s.view),
		},
	}})
}

// Streams is the model's DynamoDB Streams API (what local/esm calls:
// DescribeStream, GetShardIterator, GetRecords), in process, each call
// with the model's latency (OpLatency "GetRecords", ...).
type Streams struct{ db *DB }

// Streams returns the model's streams API.
func (db *DB) Streams() *Streams { return &Streams{db} }

func (db *DB) streamTable(arn string) (*table, error) {
	for _, t := range db.tables {
		if t.stream != nil && t.stream.arn == arn {
			return t, nil
		}
	}
	return nil, &stypes.ResourceNotFoundException{Message: aws.String("Requested resource not found: Stream: " + arn + " not found")}
}

// DescribeStream lists the stream's shards, 100 at a time.
func (s *Streams) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	var out *dynamodbstreams.DescribeStreamOutput
	err := s.db.call(WithRole(ctx, "stream"), "DescribeStream", func(time.Time, *callCount) error {
		t, err := s.db.streamTable(aws.ToString(in.StreamArn))
		if err != nil {
			return err
		}
		d := &stypes.StreamDescription{
			StreamArn: aws.String(t.stream.arn), StreamLabel: aws.String(t.stream.label), StreamStatus: stypes.StreamStatusEnabled,
			StreamViewType: stypes.StreamViewType(t.stream.view), TableName: aws.String(t.name), CreationRequestDateTime: aws.Time(t.created),
		}
		for _, k := range t.input.KeySchema {
			d.KeySchema = append(d.KeySchema, stypes.KeySchemaElement{AttributeName: k.AttributeName, KeyType: stypes.KeyType(k.KeyType)})
		}
		started := in.ExclusiveStartShardId == nil
		for _, sh := range t.stream.shards {
			if !started {
				started = sh.id == *in.ExclusiveStartShardId
				continue
			}
			if len(d.Shards) == 100 {
				d.LastEvaluatedShardId = d.Shards[len(d.Shards)-1].ShardId
				break
			}
			d.Shards = append(d.Shards, stypes.Shard{ShardId: aws.String(sh.id),
				SequenceNumberRange: &stypes.SequenceNumberRange{StartingSequenceNumber: aws.String(fmt.Sprintf("%0*d", streamSeqDigits, 0))}})
		}
		out = &dynamodbstreams.DescribeStreamOutput{StreamDescription: d}
		return nil
	})
	return out, err
}

func (db *DB) shardOf(t *table, id string) (int, error) {
	for i, sh := range t.stream.shards {
		if sh.id == id {
			return i, nil
		}
	}
	return 0, &stypes.ResourceNotFoundException{Message: aws.String("Requested resource not found: Shard: " + id + " not found")}
}

// GetShardIterator positions an iterator: TRIM_HORIZON, LATEST,
// AT_SEQUENCE_NUMBER or AFTER_SEQUENCE_NUMBER.
func (s *Streams) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	var out *dynamodbstreams.GetShardIteratorOutput
	err := s.db.call(WithRole(ctx, "stream"), "GetShardIterator", func(time.Time, *callCount) error {
		t, err := s.db.streamTable(aws.ToString(in.StreamArn))
		if err != nil {
			return err
		}
		i, err := s.db.shardOf(t, aws.ToString(in.ShardId))
		if err != nil {
			return err
		}
		recs := t.stream.shards[i].recs
		pos := 0
		switch in.ShardIteratorType {
		case stypes.ShardIteratorTypeTrimHorizon:
		case stypes.ShardIteratorTypeLatest:
			pos = len(recs)
		case stypes.ShardIteratorTypeAtSequenceNumber, stypes.ShardIteratorTypeAfterSequenceNumber:
			sn := aws.ToString(in.SequenceNumber)
			pos = len(recs)
			for j, r := range recs {
				if c := strings.Compare(*r.rec.Dynamodb.SequenceNumber, sn); c >= 0 {
					pos = j
					if c == 0 && in.ShardIteratorType == stypes.ShardIteratorTypeAfterSequenceNumber {
						pos++
					}
					break
				}
			}
		default:
			return &stypes.ResourceNotFoundException{Message: aws.String("bad ShardIteratorType")}
		}
		out = &dynamodbstreams.GetShardIteratorOutput{ShardIterator: aws.String(iterator(t.name, i, pos))}
		return nil
	})
	return out, err
}

func iterator(table string, shard, pos int) string {
	return fmt.Sprintf("m|%s|%d|%d", table, shard, pos)
}

// GetRecords reads from an iterator: at most Limit records (default and
// most 1,000) and 1 MB.
func (s *Streams) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	var out *dynamodbstreams.GetRecordsOutput
	err := s.db.call(WithRole(ctx, "stream"), "GetRecords", func(time.Time, *callCount) error {
		f := strings.Split(aws.ToString(in.ShardIterator), "|")
		bad := &stypes.ExpiredIteratorException{Message: aws.String("Iterator is not valid")}
		if len(f) != 4 || f[0] != "m" {
			return bad
		}
		t, ok := s.db.tables[f[1]]
		i, err1 := strconv.Atoi(f[2])
		pos, err2 := strconv.Atoi(f[3])
		if !ok || t.stream == nil || err1 != nil || err2 != nil || i >= len(t.stream.shards) {
			return bad
		}
		limit := int(aws.ToInt32(in.Limit))
		if limit <= 0 || limit > 1000 {
			limit = 1000
		}
		recs := t.stream.shards[i].recs
		out = &dynamodbstreams.GetRecordsOutput{}
		bytes := 0
		for pos < len(recs) && len(out.Records) < limit && bytes < 1<<20 {
			out.Records = append(out.Records, recs[pos].rec)
			bytes += recs[pos].size
			pos++
		}
		out.NextShardIterator = aws.String(iterator(t.name, i, pos))
		return nil
	})
	return out, err
}
