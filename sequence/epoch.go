package sequence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

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
//     handing out numbers under a stale BucketCount. cf is the counter's
//     cut point: the last number reserved on it before it moved to E (Cut).
//
// A reservation is conditional on ce being the writer's epoch, so a writer
// that has not seen a change learns of it from the condition of the
// counter update it makes anyway: no extra read per write. (Versions
// before the cut-over froze counters during a change, ce = -E; Cut thaws
// such a counter.)
const (
	attrLegacy      = "n"
	attrCounter     = "q"
	attrEpoch       = "ce"
	attrChangeFence = "cf" // the cut point
	// MovedCounter is what attribute n holds once a counter has served an
	// epoch ≥ 1.
	MovedCounter = "moved to q by an online BucketCount change: upgrade this writer (docs/deploy.md, Changing BucketCount)"
)

// EpochError is a reservation or a cut refused because the counter item
// serves another epoch than the caller's. Counter is the counter's epoch
// (ce; negative: frozen for the change to epoch -Counter by a version
// before the cut-over). Fence is the counter's cut point, cf (0 when it has
// none).
type EpochError struct {
	Bucket  int
	Epoch   int64 // the caller's
	Counter int64
	Fence   int64
}

func (e *EpochError) Error() string {
	if e.Counter < 0 {
		return fmt.Sprintf("sequence: bucket %d's counter is frozen by an older version's BucketCount change to epoch %d (the caller's epoch is %d)", e.Bucket, -e.Counter, e.Epoch)
	}
	return fmt.Sprintf("sequence: bucket %d's counter serves BucketCount epoch %d, the caller's is %d: re-read the config item", e.Bucket, e.Counter, e.Epoch)
}

// Later reports whether the counter serves a later epoch than the
// caller's (a change the caller has not seen: read the config item), as
// opposed to an earlier one (not cut yet: Cut it, then reserve again) or a
// freeze by a version before the cut-over.
func (e *EpochError) Later() bool { return e.Counter > e.Epoch }

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

// Cut moves bucket's counter to epoch to, for an online BucketCount change
// that flipped the config item to epoch to (docs/design.md §13), and
// returns its cut point: the last number reserved on it before, at an
// earlier epoch. From then on reservations at the old epoch are refused
// (theirs is conditional on the counter serving it) and reservations at to
// count on from the cut point; so every number at or below it was reserved
// at an earlier epoch, and every number above it at to or later. One
// conditional UpdateItem: a counter at an earlier epoch (to-1, or older:
// a bucket no count reached since) or at none (epoch 0, or never used)
// moves; one already at to (cut by another party, or a resend of this
// write that applied) returns the recorded cut point. A counter a version
// before the cut-over froze for the change to to (ce = -to) is thawed into
// to the same way. A counter at a later epoch is an *EpochError.
func Cut(ctx context.Context, client API, table string, bucket int, to int64) (cut int64, err error) {
	if to < 1 {
		return 0, fmt.Errorf("sequence: cut bucket %d into epoch %d: the epoch of a change is at least 1", bucket, to)
	}
	// input is the conditional update: update if cond, the new image
	// back, the old image on a failed condition (DynamoDB refuses unused
	// names: n only where the update uses it).
	input := func(update, cond string, extra map[string]types.AttributeValue) *dynamodb.UpdateItemInput {
		v := map[string]types.AttributeValue{":z": numAV(0), ":to": numAV(to)}
		for k, x := range extra {
			v[k] = x
		}
		names := map[string]string{"#cf": attrChangeFence, "#q": attrCounter, "#ce": attrEpoch}
		if strings.Contains(update, "#n") {
			names["#n"] = attrLegacy
		}
		return &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: counterKey(bucket), UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: v,
			ReturnValues:              types.ReturnValueAllNew, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}
	}
	// A counter that never served an epoch ≥ 1 (epoch 0, or never used)
	// counts in n: move it to q, out of the reach of code that predates
	// epochs (MovedCounter).
	legacy := input("SET #cf = if_not_exists(#n, :z), #q = if_not_exists(#n, :z), #n = :moved, #ce = :to", "attribute_not_exists(#ce)",
		map[string]types.AttributeValue{":moved": &types.AttributeValueMemberS{Value: MovedCounter}})
	// A counter at an earlier epoch ≥ 1 keeps counting in q.
	earlier := input("SET #cf = if_not_exists(#q, :z), #ce = :to", "#ce BETWEEN :one AND :before",
		map[string]types.AttributeValue{":one": numAV(1), ":before": numAV(to - 1)})
	// Frozen by a version before the cut-over for the change to to: its cf
	// is the last number reserved before the freeze.
	frozen := input("SET #q = if_not_exists(#cf, :z), #ce = :to", "#ce = :frz", map[string]types.AttributeValue{":frz": numAV(-to)})
	in := earlier
	if to == 1 {
		in = legacy // the first change: every counter is at epoch 0
	}
	for range 3 {
		out, err := client.UpdateItem(ctx, in)
		old, failed := conditionFailed(err)
		switch {
		case err == nil:
			cf, _ := numOf(out.Attributes, attrChangeFence)
			return cf, nil
		case !failed:
			return 0, fmt.Errorf("sequence: cut bucket %d of table %s into epoch %d: %w", bucket, table, to, err)
		}
		e := epochError(bucket, to, old)
		_, hasEpoch := old[attrEpoch]
		switch {
		case e.Counter == to:
			return e.Fence, nil // cut already
		case !hasEpoch:
			in = legacy
		case e.Counter == -to:
			in = frozen
		case e.Counter >= 1 && e.Counter < to:
			in = earlier // it moved between the reads: try again
		default:
			return 0, e
		}
	}
	return 0, fmt.Errorf("sequence: cut bucket %d of table %s into epoch %d: the counter item kept changing", bucket, table, to)
}
