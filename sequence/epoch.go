package sequence

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
)

// BucketCount epochs (docs/design.md §13). Every online BucketCount change
// moves the outbox to the next epoch, and every counter item records the
// epoch it serves:
//
//   - epoch 0 (never changed): the counter is attribute n, and the item has
//     no ce. Code that predates epochs reserves here unconditionally.
//   - epoch E ≥ 1: the counter is attribute q and ce = E; n holds the
//     string MovedCounter, so an unconditional ADD on n by code that
//     predates epochs fails loudly (a ValidationException) instead of
//     handing out numbers under a stale BucketCount.
//   - frozen for the change to epoch E: ce = -E and cf is the last number
//     reserved before the freeze (the change's fence point in this
//     bucket); every reservation fails until the change ends.
//
// A reservation is conditional on ce being the writer's epoch, so a writer
// that has not seen a change learns of it from the condition of the
// counter update it makes anyway: no extra read per write.
const (
	attrLegacy      = "n"
	attrCounter     = "q"
	attrEpoch       = "ce"
	attrChangeFence = "cf"
	// MovedCounter is what attribute n holds once a counter has served an
	// epoch ≥ 1.
	MovedCounter = "moved to q by an online BucketCount change: upgrade this writer (docs/deploy.md, Changing BucketCount)"
)

// EpochError is a reservation, freeze or thaw refused because the counter
// item serves another epoch than the caller's. Counter is the counter's
// epoch (ce): negative while a change to epoch -Counter is in progress.
// Fence is the counter's cf (0 when it has none).
type EpochError struct {
	Bucket  int
	Epoch   int64 // the caller's
	Counter int64
	Fence   int64
}

func (e *EpochError) Error() string {
	if e.Counter < 0 {
		return fmt.Sprintf("sequence: bucket %d's counter is frozen by a BucketCount change to epoch %d (the caller's epoch is %d)", e.Bucket, -e.Counter, e.Epoch)
	}
	return fmt.Sprintf("sequence: bucket %d's counter serves BucketCount epoch %d, the caller's is %d: re-read the config item", e.Bucket, e.Counter, e.Epoch)
}

// Frozen reports whether the counter is frozen by a change in progress.
func (e *EpochError) Frozen() bool { return e.Counter < 0 }

// ErrEpoch matches every *EpochError with errors.Is.
var ErrEpoch = errors.New("sequence: BucketCount epoch changed")

// Is makes an EpochError match ErrEpoch.
func (e *EpochError) Is(target error) bool { return target == ErrEpoch }

func counterKey(bucket int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: PartitionKey(bucket)},
		"sk": &types.AttributeValueMemberS{Value: SortKey},
	}
}

func numAV(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// numOf reads a number attribute; ok is false when it is absent or not a
// number (n once moved).
func numOf(item map[string]types.AttributeValue, name string) (int64, bool) {
	av, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(av.Value, 10, 64)
	return n, err == nil
}

// epochError decodes the old image of a counter update whose condition
// failed.
func epochError(bucket int, epoch int64, old map[string]types.AttributeValue) *EpochError {
	ce, _ := numOf(old, attrEpoch)
	cf, _ := numOf(old, attrChangeFence)
	return &EpochError{Bucket: bucket, Epoch: epoch, Counter: ce, Fence: cf}
}

func conditionFailed(err error) (map[string]types.AttributeValue, bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, true
	}
	return nil, false
}

// ReserveAt is Reserve for a writer that read BucketCount epoch epoch from
// the config item: the counter update is conditional on the counter serving
// that epoch, and fails with an *EpochError (nothing reserved) when it does
// not — the outbox's BucketCount changed, or is changing. In region mode
// (the stored config lists regions), a bucket outside the process's region's slice is a
// *RegionError, and nothing is sent.
func (c *Counter) ReserveAt(ctx context.Context, bucket, n int, epoch int64) (first int64, err error) {
	if bucket < 0 || bucket >= outbox.MaxBucketCount {
		return 0, fmt.Errorf("sequence: reserve in bucket %d: bucket must be 0..%d", bucket, outbox.MaxBucketCount-1)
	}
	if n < 1 || n > MaxReserve {
		return 0, fmt.Errorf("sequence: reserve %d numbers in bucket %d: n must be 1..%d", n, bucket, MaxReserve)
	}
	if epoch < 0 {
		return 0, fmt.Errorf("sequence: reserve in bucket %d: epoch %d is negative", bucket, epoch)
	}
	if err := c.owns(bucket); err != nil {
		return 0, err // region mode: another region's counter
	}
	in := &dynamodb.UpdateItemInput{
		TableName:        aws.String(c.table),
		Key:              counterKey(bucket),
		UpdateExpression: aws.String("ADD #n :n SET #v = :v"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":n": numAV(int64(n)),
			":v": numAV(outbox.FormatVersion),
		},
		ReturnValues:                        types.ReturnValueUpdatedNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if epoch == 0 {
		in.ConditionExpression = aws.String("attribute_not_exists(#ce)")
		in.ExpressionAttributeNames = map[string]string{"#n": attrLegacy, "#v": "v", "#ce": attrEpoch}
	} else {
		in.ConditionExpression = aws.String("#ce = :e")
		in.ExpressionAttributeNames = map[string]string{"#n": attrCounter, "#v": "v", "#ce": attrEpoch}
		in.ExpressionAttributeValues[":e"] = numAV(epoch)
	}
	out, err := c.client.UpdateItem(ctx, in)
	if old, ok := conditionFailed(err); ok {
		return 0, epochError(bucket, epoch, old)
	}
	if err != nil {
		return 0, fmt.Errorf("sequence: reserve %d numbers in bucket %d of table %s: %w", n, bucket, c.table, err)
	}
	av, ok := out.Attributes[in.ExpressionAttributeNames["#n"]]
	last, err := lastReserved(map[string]types.AttributeValue{"n": av})
	if !ok || err != nil {
		return 0, fmt.Errorf("sequence: reserve %d numbers in bucket %d of table %s: %w", n, bucket, c.table, errors.Join(errNoCounter, err))
	}
	return last - int64(n) + 1, nil
}

// Freeze stops every reservation in bucket for the change from epoch from
// to epoch from+1 and returns the bucket's fence point: the last number
// reserved before the freeze. Frozen already for this change (a resent or
// resumed freeze), or already thawed into epoch from+1, it returns the
// recorded fence point. A counter at another epoch is an *EpochError.
func Freeze(ctx context.Context, client API, table string, bucket int, from int64) (fence int64, err error) {
	frozen := -(from + 1)
	vals := map[string]types.AttributeValue{":z": numAV(0), ":frz": numAV(frozen)}
	names := map[string]string{"#cf": attrChangeFence, "#ce": attrEpoch}
	// A counter that never served an epoch ≥ 1 (from 0, or a bucket no
	// earlier count reached) counts in n: move it out of code that
	// predates epochs' reach.
	legacy := func() *dynamodb.UpdateItemInput {
		v := map[string]types.AttributeValue{":moved": &types.AttributeValueMemberS{Value: MovedCounter}}
		for k, x := range vals {
			v[k] = x
		}
		return &dynamodb.UpdateItemInput{
			TableName:                 aws.String(table),
			Key:                       counterKey(bucket),
			UpdateExpression:          aws.String("SET #cf = if_not_exists(#n, :z), #n = :moved, #ce = :frz"),
			ConditionExpression:       aws.String("attribute_not_exists(#ce)"),
			ExpressionAttributeNames:  map[string]string{"#cf": attrChangeFence, "#ce": attrEpoch, "#n": attrLegacy},
			ExpressionAttributeValues: v,
			ReturnValues:              types.ReturnValueAllNew, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}
	}
	in := legacy()
	if from > 0 {
		// A counter at an earlier epoch than from is one that no count
		// since reached (each change freezes every bucket below both
		// counts): no writer reserves there, and it freezes the same way.
		v := map[string]types.AttributeValue{":e": numAV(from), ":one": numAV(1)}
		for k, x := range vals {
			v[k] = x
		}
		names["#q"] = attrCounter
		in = &dynamodb.UpdateItemInput{
			TableName:                 aws.String(table),
			Key:                       counterKey(bucket),
			UpdateExpression:          aws.String("SET #cf = if_not_exists(#q, :z), #ce = :frz"),
			ConditionExpression:       aws.String("#ce BETWEEN :one AND :e"),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: v,
			ReturnValues:              types.ReturnValueAllNew, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}
	}
	for range 2 {
		out, err := client.UpdateItem(ctx, in)
		old, failed := conditionFailed(err)
		switch {
		case err == nil:
			cf, _ := numOf(out.Attributes, attrChangeFence)
			return cf, nil
		case !failed:
			return 0, fmt.Errorf("sequence: freeze bucket %d of table %s: %w", bucket, table, err)
		}
		e := epochError(bucket, from, old)
		_, hasEpoch := old[attrEpoch]
		switch {
		case e.Counter == frozen || e.Counter == from+1:
			return e.Fence, nil
		case !hasEpoch && from > 0:
			in = legacy()
			continue
		}
		return 0, e
	}
	return 0, fmt.Errorf("sequence: freeze bucket %d of table %s: the counter item kept changing", bucket, table)
}

// Thaw ends the freeze of the change to epoch to in bucket: the counter
// serves epoch to, counting on from fence (Freeze's). Already thawed, it
// succeeds; a counter at another epoch is an *EpochError.
func Thaw(ctx context.Context, client API, table string, bucket int, to, fence int64) error {
	_, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(table),
		Key:                                 counterKey(bucket),
		UpdateExpression:                    aws.String("SET #q = :cf, #ce = :e"),
		ConditionExpression:                 aws.String("#ce = :frz"),
		ExpressionAttributeNames:            map[string]string{"#q": attrCounter, "#ce": attrEpoch},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":cf": numAV(fence), ":e": numAV(to), ":frz": numAV(-to)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if old, ok := conditionFailed(err); ok {
		if e := epochError(bucket, to, old); e.Counter != to {
			return e
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("sequence: thaw bucket %d of table %s: %w", bucket, table, err)
	}
	return nil
}
