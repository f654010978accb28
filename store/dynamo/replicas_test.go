package dynamo

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
)

// replicated answers DescribeTable of one table as DynamoDB does for a
// global table (DynamoDB Local has none): with replicas.
type replicated struct {
	*dynamodb.Client
	table string
}

func (r replicated) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	out, err := r.Client.DescribeTable(ctx, in, o...)
	if err == nil && aws.ToString(in.TableName) == r.table {
		out.Table.Replicas = []types.ReplicaDescription{{RegionName: aws.String("us-east-1")}, {RegionName: aws.String("eu-west-1")}}
	}
	return out, err
}

// Every entry point refuses an outbox whose messages or control table is a
// global table, at init, saying why; with single-region tables they work.
func TestGlobalTablesRefused(t *testing.T) {
	e := newEnv(t, 2)
	ctx := ctxT(t)
	for _, c := range []struct{ role, table string }{{"Tables.Messages", e.tables.Messages}, {"Tables.Control", e.tables.Control}} {
		client := replicated{Client: e.d.Client, table: c.table}
		check := func(what string, err error) {
			t.Helper()
			var me *outbox.MisconfigurationError
			if !errors.As(err, &me) || me.Setting != c.role || !strings.Contains(err.Error(), c.table) || !strings.Contains(err.Error(), "eu-west-1") ||
				!strings.Contains(err.Error(), "last-writer-wins") || !strings.Contains(err.Error(), "lost") {
				t.Errorf("%s with %s replicated: err = %v, want a *MisconfigurationError for %s saying why", what, c.table, err, c.role)
			}
		}
		_, err := NewWriter(ctx, client, e.tables)
		check("NewWriter", err)
		_, err = NewStore(ctx, client, e.tables)
		check("NewStore", err)
		_, err = Configure(ctx, client, e.tables, outbox.Config{BucketCount: 2})
		check("Configure", err)
		check("CreateTables", CreateTables(ctx, client, e.tables, BucketCount(2)))
	}
	if _, err := NewWriter(ctx, e.d.Client, e.tables); err != nil {
		t.Fatalf("NewWriter on single-region tables: %v", err)
	}
}
