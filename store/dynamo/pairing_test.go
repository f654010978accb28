package dynamo

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

func tableExists(t *testing.T, e *env, name string) bool {
	t.Helper()
	_, err := e.d.Client.DescribeTable(ctxT(t), &dynamodb.DescribeTableInput{TableName: str(name)})
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// wantPairingError: err is a *outbox.MisconfigurationError on
// Tables.Messages that names both tables.
func wantPairingError(t *testing.T, err error, names ...string) {
	t.Helper()
	var me *outbox.MisconfigurationError
	if !errors.As(err, &me) || me.Setting != "Tables.Messages" {
		t.Fatalf("err = %v, want a *outbox.MisconfigurationError on Tables.Messages", err)
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Fatalf("err = %v does not name %s", err, n)
		}
	}
}

// TestControlTableRecordsItsMessagesTable: the config item records the
// messages table CreateTables (or Configure) paired it with; a store, a
// writer or CreateTables given another messages table refuses, naming
// both, and CreateTables creates nothing then — also for a config item
// from before the record, when the messages table named does not exist.
func TestControlTableRecordsItsMessagesTable(t *testing.T) {
	e := newEnv(t, 4)
	if got := stringOf(rawConfig(t, e)[attrMessagesTable]); got != e.tables.Messages {
		t.Fatalf("config item records messages table %q, want %q", got, e.tables.Messages)
	}
	ctx := ctxT(t)
	typo := Tables{Messages: testenv.Name(t, "typo"), Control: e.tables.Control}
	_, err := NewStore(ctx, e.d.Client, typo)
	wantPairingError(t, err, typo.Messages, e.tables.Messages, e.tables.Control)
	_, err = NewWriter(ctx, e.d.Client, typo)
	wantPairingError(t, err, typo.Messages, e.tables.Messages)
	var te *TableError
	if !errors.As(err, &te) || te.Option != "Tables.Messages" {
		t.Fatalf("NewWriter: %v; want the missing table said too", err)
	}

	// outbox init with a mistyped messages table: refused, nothing created.
	err = CreateTables(ctx, e.d.Client, typo, BucketCount(4))
	wantPairingError(t, err, typo.Messages, e.tables.Messages)
	if tableExists(t, e, typo.Messages) {
		t.Fatal("CreateTables created the mistyped messages table")
	}
	// Another existing messages table: refused too.
	other := newEnv(t, 4)
	err = CreateTables(ctx, e.d.Client, Tables{Messages: other.tables.Messages, Control: e.tables.Control}, BucketCount(4))
	wantPairingError(t, err, other.tables.Messages, e.tables.Messages)
	if _, err := Configure(ctx, e.d.Client, Tables{Messages: other.tables.Messages, Control: e.tables.Control}, outbox.Config{BucketCount: 8}); err == nil {
		t.Fatal("Configure changed another outbox's config item")
	}
	if c := storedConfig(t, e.d.Client, e.tables); c.BucketCount != 4 {
		t.Fatalf("the config item changed: %+v", c)
	}

	// A config item from before the record: a messages table that does
	// not exist is refused, the right one is recorded.
	if _, err := e.d.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: str(e.tables.Control), Key: controlKey(configPK, configSK),
		UpdateExpression: str("REMOVE " + attrMessagesTable)}); err != nil {
		t.Fatal(err)
	}
	err = CreateTables(ctx, e.d.Client, typo, BucketCount(4))
	wantPairingError(t, err, typo.Messages, e.tables.Control)
	if tableExists(t, e, typo.Messages) {
		t.Fatal("CreateTables created the mistyped messages table")
	}
	if err := CreateTables(ctx, e.d.Client, e.tables, BucketCount(4)); err != nil {
		t.Fatal(err)
	}
	if got := stringOf(rawConfig(t, e)[attrMessagesTable]); got != e.tables.Messages {
		t.Fatalf("config item records messages table %q, want %q", got, e.tables.Messages)
	}
	// Again: the record is idempotent.
	if err := CreateTables(ctx, e.d.Client, e.tables, BucketCount(4)); err != nil {
		t.Fatal(err)
	}
}

// TestSwappedTableNamesAreNamed: DynamoDB answers a control-table key on
// the messages table with "One of the required keys was not given a
// value"; the store says which names look swapped.
func TestSwappedTableNamesAreNamed(t *testing.T) {
	e := newEnv(t, 4)
	swapped := Tables{Messages: e.tables.Control, Control: e.tables.Messages}
	_, err := NewStore(ctxT(t), e.d.Client, swapped)
	var te *TableError
	if !errors.As(err, &te) || te.Option != "Tables.Control" || !strings.Contains(err.Error(), "swapped") {
		t.Fatalf("NewStore with swapped names: %v; want a *TableError on Tables.Control that says swapped", err)
	}
	if err := CreateTables(ctxT(t), e.d.Client, swapped, BucketCount(4)); err == nil || !strings.Contains(err.Error(), "swapped") {
		t.Fatalf("CreateTables with swapped names: %v", err)
	}
}
