package dynamo

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
)

// The config item records the name of its messages table (attribute mt),
// so that a control table is never used with another outbox's messages
// table: its counters and heads number that table's messages, and a
// mistyped messages table name would otherwise be an empty outbox that
// looks healthy (outbox status) or, created fresh, would be paired with
// the real outbox's counters (outbox init). CreateTables and Configure
// record it; NewStore and NewWriter refuse a messages table other than the
// recorded one with a *outbox.MisconfigurationError. A config item from
// before the attribute pairs with any messages table until CreateTables or
// Configure records it (the attribute changes no version: older code
// ignores it).
const attrMessagesTable = "mt"

// pairingFix says what to do about a pairing that does not hold.
const pairingFix = "use the messages table this control table was created with (the stack's MessagesTableName output); " +
	"a new outbox needs two new tables"

// checkPairing compares the config item's recorded messages table (if any)
// with tables.Messages.
func checkPairing(item map[string]types.AttributeValue, tables Tables) error {
	rec, ok := item[attrMessagesTable].(*types.AttributeValueMemberS)
	if !ok || rec.Value == tables.Messages {
		return nil
	}
	return &outbox.MisconfigurationError{Setting: "Tables.Messages", Configured: tables.Messages, Stored: rec.Value,
		Fix: fmt.Sprintf("control table %s belongs to messages table %s; %s", tables.Control, rec.Value, pairingFix)}
}

// recordPairing writes tables.Messages into the config item unless it
// records another one (then the *outbox.MisconfigurationError of
// checkPairing). A resend finds its own value and succeeds.
func recordPairing(ctx context.Context, client pairingAPI, tables Tables) error {
	_, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 str(tables.Control),
		Key:                       controlKey(configPK, configSK),
		UpdateExpression:          str("SET #mt = :mt"),
		ConditionExpression:       str("attribute_exists(#bc) AND (attribute_not_exists(#mt) OR #mt = :mt)"),
		ExpressionAttributeNames:  map[string]string{"#mt": attrMessagesTable, "#bc": attrBuckets},
		ExpressionAttributeValues: map[string]types.AttributeValue{":mt": strAttr(tables.Messages)},
	})
	if !isConditionFailed(err) {
		if err != nil {
			return fmt.Errorf("dynamo: record messages table %s in the config item of %s: %w", tables.Messages, tables.Control, err)
		}
		return nil
	}
	_, item, err := readConfigItem(ctx, client, tables.Control)
	if err != nil {
		return err
	}
	if err := checkPairing(item, tables); err != nil {
		return err
	}
	return fmt.Errorf("dynamo: record messages table %s in the config item of %s: the item changed meanwhile; run again", tables.Messages, tables.Control)
}

// pairingAPI is what recordPairing calls.
type pairingAPI interface {
	getItemAPI
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// checkNewPairing runs before CreateTables creates anything: when the
// control table already holds a config item, the messages table must be
// the one it records and must exist. A mistyped messages table name would
// otherwise create a new empty table and pair it with the existing
// outbox's counters and heads.
func checkNewPairing(ctx context.Context, client AdminAPI, tables Tables) error {
	_, item, err := readConfigItem(ctx, client, tables.Control)
	var notFound *types.ResourceNotFoundException
	switch {
	case errors.As(err, &notFound):
		return nil // a new control table
	case errors.Is(err, ErrNoConfig) && !errors.As(err, new(*TableError)):
		return nil // a control table without an outbox yet
	case err != nil:
		return err
	}
	if err := checkPairing(item, tables); err != nil {
		return err
	}
	_, err = client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: str(tables.Messages)})
	if errors.As(err, &notFound) {
		return &outbox.MisconfigurationError{Setting: "Tables.Messages", Configured: tables.Messages, Stored: "(an existing outbox)",
			Fix: fmt.Sprintf("control table %s already holds an outbox's config item, and messages table %s does not exist: "+
				"nothing was created; correct the messages table's name, or create a new outbox with two new tables", tables.Control, tables.Messages)}
	}
	if err != nil {
		return fmt.Errorf("dynamo: describe table %s: %w", tables.Messages, err)
	}
	return nil
}

// CheckTables checks, before a tool reads or writes anything else, that
// both tables exist with the outbox's keys and belong together: the control
// table's config item (ErrNoConfig, or a *TableError naming swapped names),
// the messages table it records (a *outbox.MisconfigurationError naming
// both), the messages table's key (a *TableError). It returns every problem
// it finds, joined.
func CheckTables(ctx context.Context, client interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}, tables Tables) error {
	if err := tables.validate(); err != nil {
		return err
	}
	_, item, err := readConfigItem(ctx, client, tables.Control)
	if err == nil {
		err = checkPairing(item, tables)
	}
	return errors.Join(err, checkMessagesTable(ctx, client, tables.Messages))
}

// ReadConfigPaired is ReadConfig that also returns the pairing check's
// verdict on the item it read (the *outbox.MisconfigurationError of a
// messages table other than the one the item records; nil when it records
// none: an item from before the record), from the one read. It writes
// nothing: for a reader that may not write the item, such as a Tables
// attach stack's setup function.
func ReadConfigPaired(ctx context.Context, client interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}, tables Tables) (c outbox.Config, pairing error, err error) {
	c, item, err := readConfigItem(ctx, client, tables.Control)
	if err != nil {
		return c, nil, err
	}
	return c, checkPairing(item, tables), nil
}
