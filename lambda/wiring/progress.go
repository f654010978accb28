package wiring

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox/lambda/handler"
)

// ProgressAPI is the part of the DynamoDB client ProgressStore uses.
type ProgressAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
}

// The progress item's key and attributes in the control table. Its
// partition ("sweeper") is one no other control item uses.
const (
	progressPK    = "sweeper"
	progressSK    = "progress"
	attrRevision  = "rev" // incremented by every save; saves are conditional on it
	attrWatched   = "bk"  // bucket (decimal) -> {h: head, n: sweeps}
	attrSavedAt   = "at"  // Unix milliseconds of the save, for people reading the table
	attrWatchHead = "h"
	attrWatchN    = "n"
)

// ProgressStore is the sweeper's handler.ProgressStore in the outbox's
// control table: one item (pk "sweeper", sk "progress") read with one
// consistent GetItem and written with one conditional PutItem per sweep.
// The function's role already has both actions on the control table
// (heartbeats and the config item). The item holds an entry per bucket with
// pending messages, a few dozen bytes each: one write capacity unit per
// sweep for up to about 40 such buckets, and far below DynamoDB's 400 KB
// item limit at 4096.
type ProgressStore struct {
	client ProgressAPI
	table  string
	now    func() time.Time
}

var _ handler.ProgressStore = (*ProgressStore)(nil)

// NewProgressStore returns the ProgressStore of the control table.
func NewProgressStore(client ProgressAPI, controlTable string) *ProgressStore {
	return &ProgressStore{client: client, table: controlTable, now: time.Now}
}

func progressKey() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: progressPK},
		"sk": &types.AttributeValueMemberS{Value: progressSK},
	}
}

// LoadProgress implements handler.ProgressStore.
func (s *ProgressStore) LoadProgress(ctx context.Context) (handler.Progress, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: progressKey(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return handler.Progress{}, fmt.Errorf("load sweep progress from %s: %w", s.table, err)
	}
	p := handler.Progress{Buckets: map[int]handler.Watched{}}
	if out.Item == nil {
		return p, nil
	}
	bad := func(why string) (handler.Progress, error) {
		return handler.Progress{}, fmt.Errorf("load sweep progress from %s: item pk=%s sk=%s: %s", s.table, progressPK, progressSK, why)
	}
	if p.Version, err = number(out.Item[attrRevision]); err != nil {
		return bad(attrRevision + " " + err.Error())
	}
	m, ok := out.Item[attrWatched].(*types.AttributeValueMemberM)
	if !ok {
		return bad(attrWatched + " is not a map")
	}
	for k, v := range m.Value {
		b, err := strconv.Atoi(k)
		e, ok := v.(*types.AttributeValueMemberM)
		if err != nil || b < 0 || !ok {
			return bad(fmt.Sprintf("entry %q is not bucket -> map", k))
		}
		head, err1 := number(e.Value[attrWatchHead])
		n, err2 := number(e.Value[attrWatchN])
		if err := errors.Join(err1, err2); err != nil {
			return bad(fmt.Sprintf("entry %q: %v", k, err))
		}
		p.Buckets[b] = handler.Watched{Head: head, Sweeps: int(n)}
	}
	return p, nil
}

// SaveProgress implements handler.ProgressStore.
func (s *ProgressStore) SaveProgress(ctx context.Context, p handler.Progress) error {
	watched := map[string]types.AttributeValue{}
	for b, w := range p.Buckets {
		watched[strconv.Itoa(b)] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			attrWatchHead: num(w.Head), attrWatchN: num(int64(w.Sweeps)),
		}}
	}
	item := progressKey()
	item[attrRevision] = num(p.Version + 1)
	item[attrWatched] = &types.AttributeValueMemberM{Value: watched}
	item[attrSavedAt] = num(s.now().UnixMilli())
	cond, vals := "attribute_not_exists(pk)", map[string]types.AttributeValue(nil)
	if p.Version != 0 {
		cond, vals = "#rev = :rev", map[string]types.AttributeValue{":rev": num(p.Version)}
	}
	in := &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item, ConditionExpression: aws.String(cond),
		ExpressionAttributeValues: vals}
	if p.Version != 0 {
		in.ExpressionAttributeNames = map[string]string{"#rev": attrRevision}
	}
	if _, err := s.client.PutItem(ctx, in); err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return handler.ErrProgressConflict
		}
		return fmt.Errorf("save sweep progress to %s: %w", s.table, err)
	}
	return nil
}

func num(n int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func number(av types.AttributeValue) (int64, error) {
	n, ok := av.(*types.AttributeValueMemberN)
	if !ok {
		return 0, errors.New("is not a number")
	}
	return strconv.ParseInt(n.Value, 10, 64)
}
