package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/dynamoerr"
)

// AdminAPI is the part of the DynamoDB client CreateTable uses.
// *dynamodb.Client has it.
type AdminAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// tableWait bounds how long CreateTable waits for the table to be ACTIVE.
const tableWait = 5 * time.Minute

// CreateTable creates the processed-ids table if it does not exist: key pk
// (S), PAY_PER_REQUEST, TTL on attribute x (which expires processed ids after
// Retention). It waits until the table is ACTIVE. It is idempotent; an
// existing table with another key schema, or TTL on another attribute, is a
// *outbox.MisconfigurationError and nothing is changed. One table serves one
// consuming application (all its topics and partitions); two applications
// consuming the same messages need a table each.
func CreateTable(ctx context.Context, client AdminAPI, table string) error {
	if client == nil {
		return &outbox.OptionError{Option: "client", Value: nil, Reason: "a DynamoDB client is required"}
	}
	if err := checkTableName(table); err != nil {
		return err
	}
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	switch {
	case errors.As(err, &inUse):
		if err := checkSchema(ctx, client, table); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("inbox: create table %s: %w", table, err)
	}
	if err := dynamodb.NewTableExistsWaiter(client).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, tableWait); err != nil {
		return fmt.Errorf("inbox: wait for table %s to become active: %w", table, err)
	}
	return enableTTL(ctx, client, table)
}

func checkSchema(ctx context.Context, client AdminAPI, table string) error {
	out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return fmt.Errorf("inbox: describe existing table %s: %w", table, err)
	}
	have := ""
	for _, k := range out.Table.KeySchema {
		have += fmt.Sprintf("%s %s ", aws.ToString(k.AttributeName), k.KeyType)
	}
	for _, a := range out.Table.AttributeDefinitions {
		if aws.ToString(a.AttributeName) == attrPK {
			have += string(a.AttributeType)
		}
	}
	if want := "pk HASH S"; have != want {
		return &outbox.MisconfigurationError{Setting: "inbox table", Configured: table + ": key " + want, Stored: "key " + have,
			Fix: "name a table that does not exist yet (CreateTable creates it) or one created by inbox.CreateTable"}
	}
	return nil
}

// errUnknownOperation is what DynamoDB Local answers for an API it lacks.
const errUnknownOperation = "UnknownOperationException"

func enableTTL(ctx context.Context, client AdminAPI, table string) error {
	d, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if dynamoerr.Code(err) == errUnknownOperation {
		return nil // a local engine without TTL: ids never expire there, which Process does not rely on
	}
	if err != nil {
		return fmt.Errorf("inbox: describe TTL of table %s: %w", table, err)
	}
	if desc := d.TimeToLiveDescription; desc != nil {
		switch desc.TimeToLiveStatus {
		case types.TimeToLiveStatusEnabled, types.TimeToLiveStatusEnabling:
			if attr := aws.ToString(desc.AttributeName); attr != attrTTL {
				return &outbox.MisconfigurationError{Setting: "inbox table TTL", Configured: attrTTL, Stored: attr,
					Fix: "the inbox expires processed ids by attribute x; disable the table's TTL or use another table"}
			}
			return nil
		}
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(attrTTL), Enabled: aws.Bool(true)},
	})
	if err != nil && dynamoerr.Code(err) != errUnknownOperation {
		return fmt.Errorf("inbox: enable TTL on attribute %s of table %s: %w", attrTTL, table, err)
	}
	return nil
}

func checkTableName(table string) error {
	if len(table) < 3 || len(table) > 255 {
		return &outbox.OptionError{Option: "table", Value: table, Reason: "a DynamoDB table name has 3 to 255 characters"}
	}
	for _, c := range table {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return &outbox.OptionError{Option: "table", Value: table, Reason: fmt.Sprintf("%q is not allowed in a DynamoDB table name (a-z A-Z 0-9 _ - .)", c)}
		}
	}
	return nil
}
