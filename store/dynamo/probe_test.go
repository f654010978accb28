package dynamo

import (
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// Probes of the endpoint under test, for DynamoDB behaviours moto lacks
// (make test-moto). They are asked only when OUTBOX_TEST_DYNAMODB_EMULATOR
// is "moto" (make test-moto sets it) and only where an assertion that
// needs the behaviour failed; anywhere else every probe holds without
// asking, so on DynamoDB Local and DynamoDB the assertions always stand.
// Each probe uses the SDK alone, no outbox code, and reports the behaviour
// missing only on moto's own answer for it; any other error fails the
// test.

// emulatorEnv names the DynamoDB emulator the tests run against, when it is
// one whose known gaps the probes may excuse ("moto").
const emulatorEnv = "OUTBOX_TEST_DYNAMODB_EMULATOR"

func onMoto() bool { return os.Getenv(emulatorEnv) == "moto" }

// honoursTokens reports whether the endpoint answers a TransactWriteItems
// resent with the same ClientRequestToken as DynamoDB documents: with
// success, without running it again. moto runs the resend and cancels it
// on its condition (ConditionalCheckFailed).
func (e *env) honoursTokens(t *testing.T) bool {
	t.Helper()
	if !onMoto() {
		return true
	}
	in := &dynamodb.TransactWriteItemsInput{
		ClientRequestToken: str(uuid.NewString()),
		TransactItems: []types.TransactWriteItem{{Put: &types.Put{
			TableName:           str(e.probeTable(t)),
			Item:                map[string]types.AttributeValue{"id": strAttr("token-probe-" + uuid.NewString())},
			ConditionExpression: str("attribute_not_exists(id)"),
		}}},
	}
	if _, err := e.d.Client.TransactWriteItems(ctxT(t), in); err != nil {
		t.Fatalf("token probe, first call: %v", err)
	}
	_, err := e.d.Client.TransactWriteItems(ctxT(t), in)
	var tce *types.TransactionCanceledException
	switch {
	case err == nil:
		return true
	case errors.As(err, &tce) && len(tce.CancellationReasons) == 1 && tce.CancellationReasons[0].Code != nil &&
		*tce.CancellationReasons[0].Code == "ConditionalCheckFailed":
		t.Logf("%s ran a transaction resent with the same ClientRequestToken again (%v): DynamoDB's side of this test is skipped there, the writer's is checked",
			e.d.Endpoint, err)
		return false
	}
	t.Fatalf("token probe, the resend: %v", err)
	return false
}

// takesMaxItems reports whether the endpoint stores an item of exactly
// MaxItemBytes as DynamoDB documents the size (attribute names' and
// values' lengths: "id" + "p" + "v" + 409,596 bytes). moto counts
// otherwise and refuses it: "Item size has exceeded the maximum allowed
// size".
func (e *env) takesMaxItems(t *testing.T) bool {
	t.Helper()
	if !onMoto() {
		return true
	}
	item := map[string]types.AttributeValue{
		"id": strAttr("p"),
		"v":  &types.AttributeValueMemberB{Value: make([]byte, MaxItemBytes-len("id")-len("p")-len("v"))},
	}
	_, err := e.d.Client.PutItem(ctxT(t), &dynamodb.PutItemInput{TableName: str(e.probeTable(t)), Item: item})
	switch {
	case err == nil:
		return true
	case strings.Contains(err.Error(), "Item size has exceeded the maximum allowed size"):
		t.Logf("%s refuses an item of %d bytes as DynamoDB counts them (%v): the largest message's write is not checked there", e.d.Endpoint, MaxItemBytes, err)
		return false
	}
	t.Fatalf("item size probe: %v", err)
	return false
}

// isolatesTransactions reports whether the endpoint serializes
// TransactWriteItems as DynamoDB documents: of 8 concurrent transactions
// that each bump one item's version conditional on the version they read,
// at most one commits per round (until 20 have). moto commits several at
// once under concurrent requests.
func (e *env) isolatesTransactions(t *testing.T) bool {
	t.Helper()
	if !onMoto() {
		return true
	}
	table, id := e.probeTable(t), "isolation-probe-"+uuid.NewString()
	// A round where all 8 conflict commits none; it is run again.
	for version, rounds := 0, 0; version < 20 && rounds < 100; rounds++ {
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if _, err := e.d.Client.TransactWriteItems(ctxT(t), &dynamodb.TransactWriteItemsInput{
					TransactItems: []types.TransactWriteItem{probeBump(table, id, version)},
				}); err == nil {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		n := int(wins.Load())
		if n > 1 {
			t.Logf("%s committed %d of 8 concurrent transactions that bump version %d of one item: it does not serialize transactions",
				e.d.Endpoint, n, version)
			return false
		}
		version += n
	}
	return true
}

// skipUnlessIsolated skips t when errs are all what an endpoint that does
// not serialize transactions causes here (two writers handed one sequence
// number: "the reserved sequence number holds another outbox's message")
// and the endpoint is found not to serialize them; otherwise it returns
// and the caller fails on errs.
func (e *env) skipUnlessIsolated(t *testing.T, errs []error) {
	t.Helper()
	if len(errs) == 0 {
		return
	}
	for _, err := range errs {
		if !strings.Contains(err.Error(), "the reserved sequence number holds another outbox's message") {
			return
		}
	}
	if !e.isolatesTransactions(t) {
		t.Skipf("two writers were handed one sequence number, as an endpoint that does not serialize transactions allows; nothing here can hold there: %v", errs)
	}
}

// probeTable creates, once per env, a table keyed by a string id for the
// endpoint probes above, and returns its name.
func (e *env) probeTable(t *testing.T) string {
	t.Helper()
	e.probeOnce.Do(func() {
		e.probe = testenv.Name(t, "probe")
		_, err := e.d.Client.CreateTable(ctxT(t), &dynamodb.CreateTableInput{
			TableName:            str(e.probe),
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: str("id"), AttributeType: types.ScalarAttributeTypeS}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: str("id"), KeyType: types.KeyTypeHash}},
			BillingMode:          types.BillingModePayPerRequest,
		})
		if err != nil {
			t.Fatalf("probe table: %v", err)
		}
	})
	return e.probe
}

// probeBump adds 1 to item id's n conditional on its version being version
// (0: absent), and sets version+1.
func probeBump(table, id string, version int) types.TransactWriteItem {
	cond, values := "attribute_not_exists(#ver)", map[string]types.AttributeValue{":one": numAttr(1), ":next": numAttr(int64(version + 1))}
	if version != 0 {
		cond, values[":ver"] = "#ver = :ver", numAttr(int64(version))
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 str(table),
		Key:                       map[string]types.AttributeValue{"id": strAttr(id)},
		UpdateExpression:          str("ADD #n :one SET #ver = :next"),
		ConditionExpression:       str(cond),
		ExpressionAttributeNames:  map[string]string{"#n": "n", "#ver": "ver"},
		ExpressionAttributeValues: values,
	}}
}
