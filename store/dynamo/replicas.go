package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
)

// describeTableAPI is the DescribeTable of the replica check.
type describeTableAPI interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// globalTableFix says why a global table is refused, and what to do.
const globalTableFix = "the outbox does not support DynamoDB global tables: writers in two regions increment the same sequence counter, " +
	"replication resolves it last-writer-wins, so both regions' messages get the same (bucket, sequence) and one overwrites the other — " +
	"a committed message is lost without an error. Put the outbox in region mode (the stack's Regions parameter, outbox init --regions, dynamo.Regions; " +
	"docs/deploy.md, Global tables), or use tables without replicas (remove them, or run one outbox with its own tables per region)"

// checkSingleRegion refuses an outbox whose messages or control table has
// replicas (DescribeTable's Replicas: a global table) with a
// *outbox.MisconfigurationError per table, joined, unless the outbox is (or
// is being made) in region mode, which is safe on a global table and needs
// no check. A table that does not exist is left to the checks that name it
// (*TableError).
func checkSingleRegion(ctx context.Context, client describeTableAPI, tables Tables, regionMode bool) error {
	if regionMode {
		return nil
	}
	// Both tables at once: this is on every writer's and relay's init path.
	roles := []struct{ role, name string }{{"Tables.Messages", tables.Messages}, {"Tables.Control", tables.Control}}
	errs := make([]error, len(roles))
	var wg sync.WaitGroup
	for i, t := range roles {
		wg.Go(func() { errs[i] = checkTableRegion(ctx, client, t.role, t.name) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// checkTableRegion is checkSingleRegion for one table.
func checkTableRegion(ctx context.Context, client describeTableAPI, role, name string) error {
	out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: str(name)})
	var missing *types.ResourceNotFoundException
	switch {
	case errors.As(err, &missing):
		return nil
	case err != nil:
		return fmt.Errorf("dynamo: describe table %s, to refuse a global table (grant dynamodb:DescribeTable on it): %w", name, err)
	case out.Table == nil || len(out.Table.Replicas) == 0:
		return nil
	}
	var regions []string
	for _, r := range out.Table.Replicas {
		regions = append(regions, aws.ToString(r.RegionName))
	}
	return &outbox.MisconfigurationError{Setting: role,
		Configured: fmt.Sprintf("%s (the outbox needs a table in one region)", name),
		Stored:     fmt.Sprintf("replicas in %s (a global table)", strings.Join(regions, ", ")),
		Fix:        globalTableFix}
}
