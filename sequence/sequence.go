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

// API is the part of the DynamoDB client a Counter uses.
type API interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// SortKey is the sort key of a bucket's counter item in the control table.
const SortKey = "seq"

// PartitionKey returns the control-table partition key of bucket's items
// (its counter and its lease): "bucket#<b>".
func PartitionKey(bucket int) string { return "bucket#" + strconv.Itoa(bucket) }

// MaxReserve bounds how many numbers one Reserve call may take. It is far
// above what one transaction can use (100 items) and keeps a bad argument
// from burning through the counter.
const MaxReserve = 10000

// Counter reserves sequence numbers from the per-bucket counters in one
// control table. It is safe for concurrent use.
type Counter struct {
	client API
	table  string
	// The outbox's config item and this process's region ("" outside
	// region mode), checked at NewCounter and at every reservation.
	stored outbox.Config
	region string
}

// NewCounter returns a Counter over the counters in controlTable of the
// outbox whose config item is stored (as read from it: dynamo.ReadConfig,
// Store.Config), for a process in region ("" outside region mode). Both
// are required, so that no Counter reserves on a region-mode outbox
// without the region check (see the package documentation, Region mode):
// a stored config without a BucketCount (the zero Config: not read from a
// config item) is an *outbox.OptionError; in region mode a process
// without a region or with one the outbox does not list is an
// *outbox.MisconfigurationError, and a client whose region is not the
// process's a *RegionError. Outside region mode, region must be "".
func NewCounter(client API, controlTable string, stored outbox.Config, region string) (*Counter, error) {
	if client == nil {
		return nil, &outbox.OptionError{Option: "client", Value: nil, Reason: "a DynamoDB client is required"}
	}
	if controlTable == "" {
		return nil, &outbox.OptionError{Option: "controlTable", Value: controlTable, Reason: "the control table name is required"}
	}
	if !outbox.ValidBucketCount(stored.BucketCount) {
		return nil, &outbox.OptionError{Option: "stored", Value: stored.BucketCount,
			Reason: fmt.Sprintf("pass the outbox's config as read from its config item (dynamo.ReadConfig, Store.Config): its BucketCount must be 1..%d, "+
				"and its Regions tell the Counter whether it may reserve only in region's slice", outbox.MaxBucketCount)}
	}
	c := &Counter{client: client, table: controlTable, stored: stored, region: region}
	if err := c.checkRegion(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reserve reserves n consecutive sequence numbers of bucket and returns the
// first: the range is [first, first+n-1]. It makes exactly one UpdateItem
// (ADD n), so concurrent reservations never overlap. Numbers start at 1.
//
// Call it after reading the aggregate the messages belong to and immediately
// before the commit (see the package documentation for why). A reservation
// that is not committed leaves a gap, which relays fence after their gap
// timeout; fencing it at once (as the dynamo Writer does) is kinder.
func (c *Counter) Reserve(ctx context.Context, bucket int, n int) (first int64, err error) {
	return c.ReserveAt(ctx, bucket, n, 0)
}

var errNoCounter = errors.New("the counter update returned no attribute n")

func lastReserved(attrs map[string]types.AttributeValue) (int64, error) {
	av, ok := attrs["n"].(*types.AttributeValueMemberN)
	if !ok {
		return 0, errNoCounter
	}
	last, err := strconv.ParseInt(av.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the counter holds %q, not an integer: %w", av.Value, err)
	}
	return last, nil
}

// ReadAPI is the part of the DynamoDB client Last uses.
type ReadAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// Last returns the last sequence number reserved in bucket (0 when none has
// been), read consistently from the counter item in controlTable: one GetItem.
// Status tools use it with a bucket's head to count what is pending; writers
// never need it.
func Last(ctx context.Context, client ReadAPI, controlTable string, bucket int) (int64, error) {
	if bucket < 0 || bucket >= outbox.MaxBucketCount {
		return 0, fmt.Errorf("sequence: read bucket %d: bucket must be 0..%d", bucket, outbox.MaxBucketCount-1)
	}
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(controlTable),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: PartitionKey(bucket)},
			"sk": &types.AttributeValueMemberS{Value: SortKey},
		},
		ProjectionExpression:     aws.String("#n, #q, #cf"),
		ExpressionAttributeNames: map[string]string{"#n": attrLegacy, "#q": attrCounter, "#cf": attrChangeFence},
		ConsistentRead:           aws.Bool(true),
	})
	if err != nil {
		return 0, fmt.Errorf("sequence: read the counter of bucket %d in table %s: %w", bucket, controlTable, err)
	}
	if len(out.Item) == 0 {
		return 0, nil
	}
	// n before any BucketCount change, q after, cf while frozen.
	var last int64
	found := false
	for _, a := range []string{attrLegacy, attrCounter, attrChangeFence} {
		if v, ok := numOf(out.Item, a); ok {
			last, found = max(last, v), true
		}
	}
	if !found {
		return 0, fmt.Errorf("sequence: read the counter of bucket %d in table %s: %w", bucket, controlTable, errNoCounter)
	}
	return last, nil
}
