package dynamo

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// Probes of the endpoint under test, for DynamoDB behaviours an emulator
// may lack (moto: make test-moto). Each uses the SDK alone, no outbox
// code, and is asked only where an assertion that needs the behaviour
// failed: on DynamoDB Local every probe holds and the assertion stands.

// honoursTokens reports whether the endpoint answers a TransactWriteItems
// resent with the same ClientRequestToken as DynamoDB documents: with
// success, without running it again. DynamoDB Local does; moto runs the
// resend and cancels it on its condition.
func (e *env) honoursTokens(t *testing.T) bool {
	t.Helper()
	in := &dynamodb.TransactWriteItemsInput{
		ClientRequestToken: str(uuid.NewString()),
		TransactItems: []types.TransactWriteItem{{Put: &types.Put{
			TableName:           str(e.probeTable(t)),
			Item:                map[string]types.AttributeValue{"id": strAttr("token-probe-" + uuid.NewString())},
			ConditionExpression: str("attribute_not_exists(id)"),
		}}},
	}
	for i := range 2 {
		if _, err := e.d.Client.TransactWriteItems(ctxT(t), in); err != nil {
			if i == 0 {
				t.Fatalf("token probe: %v", err)
			}
			t.Logf("%s does not honour ClientRequestToken (its answer to the same transaction resent: %v): DynamoDB's side of this test is skipped, the writer's is checked",
				e.d.Endpoint, err)
			return false
		}
	}
	return true
}

// takesMaxItems reports whether the endpoint stores an item of exactly
// MaxItemBytes as DynamoDB documents the size (attribute names' and
// values' lengths: "id" + "p" + "v" + 409,596 bytes). DynamoDB Local does;
// moto counts differently and refuses it.
func (e *env) takesMaxItems(t *testing.T) bool {
	t.Helper()
	item := map[string]types.AttributeValue{
		"id": strAttr("p"),
		"v":  &types.AttributeValueMemberB{Value: make([]byte, MaxItemBytes-len("id")-len("p")-len("v"))},
	}
	if _, err := e.d.Client.PutItem(ctxT(t), &dynamodb.PutItemInput{TableName: str(e.probeTable(t)), Item: item}); err != nil {
		t.Logf("%s refuses an item of %d bytes as DynamoDB counts them (%v): the largest message's write is not checked there", e.d.Endpoint, MaxItemBytes, err)
		return false
	}
	return true
}

// isolatesTransactions reports whether the endpoint serializes
// TransactWriteItems as DynamoDB documents: of 8 concurrent transactions
// that each bump one item's version conditional on the version they read,
// exactly one commits per round (20 rounds). moto commits several at once
// under concurrent requests.
func (e *env) isolatesTransactions(t *testing.T) bool {
	t.Helper()
	id := "isolation-probe-" + uuid.NewString()
	// A round where all 8 conflict commits none; it is run again.
	for version, rounds := 0, 0; version < 20 && rounds < 100; rounds++ {
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if _, err := e.d.Client.TransactWriteItems(ctxT(t), &dynamodb.TransactWriteItemsInput{
					TransactItems: []types.TransactWriteItem{probeBump(e.probeTable(t), id, version)},
				}); err == nil {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		n := int(wins.Load())
		if n > 1 {
			t.Logf("%s committed %d of 8 concurrent transactions that bump version %d of one item: it does not serialize transactions, so commit order cannot be checked there",
				e.d.Endpoint, n, version)
			return false
		}
		version += n
	}
	return true
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
