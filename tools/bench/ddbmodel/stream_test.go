package ddbmodel

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

func shardIterInput(arn, shard string) *dynamodbstreams.GetShardIteratorInput {
	return &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(arn), ShardId: aws.String(shard), ShardIteratorType: stypes.ShardIteratorTypeTrimHorizon}
}

func recordsInput(it *string) *dynamodbstreams.GetRecordsInput {
	return &dynamodbstreams.GetRecordsInput{ShardIterator: it}
}

func attrN(v stypes.AttributeValue) string {
	if n, ok := v.(*stypes.AttributeValueMemberN); ok {
		return n.Value
	}
	return "?"
}

// TestStream: every change is a record (INSERT, MODIFY, REMOVE; none for
// a write that changes nothing) in its partition key's shard, in the
// order of the writes; GetRecords honours Limit and continues from its
// iterator.
func TestStream(t *testing.T) {
	ctx := context.Background()
	db := newDB(t, newClock(), 4)
	for seq := int64(1); seq <= 3; seq++ {
		for bucket := int64(0); bucket < 8; bucket++ {
			if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("msgs"), Item: msg(bucket, seq, 10)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("msgs"), Item: msg(0, 1, 10)}); err != nil {
		t.Fatal(err) // the same item again: no change, no record
	}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("msgs"), Item: msg(0, 1, 11)}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String("msgs"), Key: Item{"b": n(0), "s": n(2)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String("msgs"), Key: Item{"b": n(0), "s": n(9)}}); err != nil {
		t.Fatal(err) // nothing to delete: no record
	}
	st := db.Streams()
	desc, err := st.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(db.tables["msgs"].stream.arn)})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(desc.StreamDescription.Shards); n != 4 {
		t.Fatalf("%d shards, want 4", n)
	}
	byBucket := map[string][]string{}
	shardOfBucket := map[string]string{}
	for _, sh := range desc.StreamDescription.Shards {
		it, err := st.GetShardIterator(ctx, shardIterInput(db.tables["msgs"].stream.arn, *sh.ShardId))
		if err != nil {
			t.Fatal(err)
		}
		var last string
		for iter := it.ShardIterator; ; {
			out, err := st.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(2)})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Records) > 2 {
				t.Fatalf("%d records with Limit 2", len(out.Records))
			}
			if len(out.Records) == 0 {
				break
			}
			for _, r := range out.Records {
				if sn := *r.Dynamodb.SequenceNumber; sn <= last {
					t.Errorf("sequence %s after %s in shard %s", sn, last, *sh.ShardId)
				} else {
					last = sn
				}
				bk := attrN(r.Dynamodb.Keys["b"])
				if prev, ok := shardOfBucket[bk]; ok && prev != *sh.ShardId {
					t.Errorf("bucket %s in shards %s and %s", bk, prev, *sh.ShardId)
				}
				shardOfBucket[bk] = *sh.ShardId
				byBucket[bk] = append(byBucket[bk], fmt.Sprintf("%s %s", r.EventName, attrN(r.Dynamodb.Keys["s"])))
			}
			iter = out.NextShardIterator
		}
	}
	if got := fmt.Sprint(byBucket["0"]); got != "[INSERT 1 INSERT 2 INSERT 3 MODIFY 1 REMOVE 2]" {
		t.Errorf("bucket 0's records %s", got)
	}
	for bk := range 8 {
		if got := fmt.Sprint(byBucket[fmt.Sprint(bk)]); bk > 0 && got != "[INSERT 1 INSERT 2 INSERT 3]" {
			t.Errorf("bucket %d's records %s", bk, got)
		}
	}
	shards := slices.Compact(slices.Sorted(func(yield func(string) bool) {
		for _, s := range shardOfBucket {
			if !yield(s) {
				return
			}
		}
	}))
	if len(shards) < 2 {
		t.Errorf("8 buckets all in %d shard(s) of 4", len(shards))
	}
}
