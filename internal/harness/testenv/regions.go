package testenv

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox/local/dynamolocal"
)

// OtherRegion returns d's client's region and another AWS region, for a
// region-mode outbox's two regions.
func (d *Dynamo) OtherRegion() (own, other string) {
	own, other = d.Config.Region, "eu-west-1"
	if own == other {
		other = "us-east-1"
	}
	return own, other
}

// InRegion returns a client of d's endpoint for region. DynamoDB Local and
// LocalStack keep each region's tables apart, so its tables stand for
// another region's replicas of a global table; nothing replicates between
// them (Replicate copies what a test needs copied).
func (d *Dynamo) InRegion(region string) *dynamodb.Client {
	cfg := d.Config.Copy()
	cfg.Region = region
	return dynamolocal.NewClient(cfg, d.Endpoint)
}

// Replicate copies the items of partition pk of table from one region's
// replica to another's, as global-table replication does, and returns how
// many it copied (at least one, or the test fails).
func Replicate(ctx context.Context, t testing.TB, from, to *dynamodb.Client, table, pk string) int {
	t.Helper()
	out, err := from.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(table), KeyConditionExpression: aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk}}})
	if err != nil || len(out.Items) == 0 {
		t.Fatalf("testenv.Replicate: the items of %s in %s: %d, %v", pk, table, len(out.Items), err)
	}
	for _, it := range out.Items {
		if _, err := to.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: it}); err != nil {
			t.Fatalf("testenv.Replicate: %v", err)
		}
	}
	return len(out.Items)
}
