package esm

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

const (
	ordersStream = "arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/2024-06-01T12:00:00.000"
	outboxStream = "arn:aws:dynamodb:eu-west-1:123456789012:table/outbox-messages/stream/2024-06-01T12:00:00.000"
)

func avS(s string) types.AttributeValue  { return &types.AttributeValueMemberS{Value: s} }
func avN(s string) types.AttributeValue  { return &types.AttributeValueMemberN{Value: s} }
func avB(b []byte) types.AttributeValue  { return &types.AttributeValueMemberB{Value: b} }
func avBool(b bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: b} }

// streamRecord is a record as GetRecords returns it.
func streamRecord(id string, name types.OperationType, view types.StreamViewType, unix float64, seq string, size int64,
	keys, newImage, oldImage map[string]types.AttributeValue) types.Record {
	created := time.Unix(0, int64(unix*1e9))
	return types.Record{
		AwsRegion:    ptr("eu-west-1"),
		EventID:      &id,
		EventName:    name,
		EventSource:  ptr("aws:dynamodb"),
		EventVersion: ptr("1.1"),
		Dynamodb: &types.StreamRecord{
			ApproximateCreationDateTime: &created,
			Keys:                        keys,
			NewImage:                    newImage,
			OldImage:                    oldImage,
			SequenceNumber:              &seq,
			SizeBytes:                   &size,
			StreamViewType:              view,
		},
	}
}

func messageKeys(b, s string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"b": avN(b), "s": avN(s)}
}

var blob1, blob2 = []byte{0, 1, 42, 65}, []byte{65, 42, 1, 0}

// fixtureRecords are the stream records behind each fixture in testdata.
var fixtureRecords = map[string]struct {
	arn     string
	records []types.Record
}{
	"insert.json": {ordersStream, []types.Record{
		// A fractional creation time: Lambda delivers whole seconds.
		streamRecord("c4ca4238a0b923820dcc509a6f75849b", types.OperationTypeInsert, types.StreamViewTypeNewAndOldImages,
			1717243200.734, "4421584500000000017450439091", 214,
			map[string]types.AttributeValue{"pk": avS("order#42"), "sk": avN("7")},
			map[string]types.AttributeValue{
				"pk":      avS("order#42"),
				"sk":      avN("7"),
				"payload": avB(blob1),
				"paid":    avBool(true),
				"note":    &types.AttributeValueMemberNULL{Value: true},
				"lines": &types.AttributeValueMemberL{Value: []types.AttributeValue{
					avS("widget"), avN("3.5"), &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"qty": avN("2")}},
				}},
				"customer": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
					"name": avS("Ana"), "tags": &types.AttributeValueMemberSS{Value: []string{"gold", "eu"}},
				}},
				"tags":   &types.AttributeValueMemberSS{Value: []string{"new", "web"}},
				"scores": &types.AttributeValueMemberNS{Value: []string{"1", "2.5"}},
				"blobs":  &types.AttributeValueMemberBS{Value: [][]byte{blob1, blob2}},
			}, nil),
	}},
	"modify.json": {ordersStream, []types.Record{
		streamRecord("c81e728d9d4c2f636f067f89cc14862c", types.OperationTypeModify, types.StreamViewTypeNewAndOldImages,
			1717243261, "4421584600000000017450439217", 121,
			map[string]types.AttributeValue{"pk": avS("order#42"), "sk": avN("7")},
			map[string]types.AttributeValue{"pk": avS("order#42"), "sk": avN("7"), "status": avS("shipped"), "version": avN("2")},
			map[string]types.AttributeValue{"pk": avS("order#42"), "sk": avN("7"), "status": avS("paid"), "version": avN("1")}),
	}},
	"remove-keys-only.json": {outboxStream, []types.Record{func() types.Record {
		// A TTL deletion carries the DynamoDB service as its user identity.
		r := streamRecord("eccbc87e4b5ce2fe28308fd9f2a7baf3", types.OperationTypeRemove, types.StreamViewTypeKeysOnly,
			1717246800, "4421591200000000017450441356", 14, messageKeys("17", "1204"), nil, nil)
		r.UserIdentity = &types.Identity{Type: ptr("Service"), PrincipalId: ptr("dynamodb.amazonaws.com")}
		return r
	}()}},
	"batch.json": {outboxStream, []types.Record{
		streamRecord("a87ff679a2f3e71d9181a67b7542122c", types.OperationTypeInsert, types.StreamViewTypeKeysOnly,
			1717243200.1, "4421584500000000017450439301", 12, messageKeys("3", "1"), nil, nil),
		streamRecord("e4da3b7fbbce2345d7772b0674a318d5", types.OperationTypeInsert, types.StreamViewTypeKeysOnly,
			1717243200.9, "4421584500000000017450439302", 12, messageKeys("3", "2"), nil, nil),
		streamRecord("1679091c5a880faf6fb5e6087eb1b2dc", types.OperationTypeInsert, types.StreamViewTypeKeysOnly,
			1717243201, "4421584600000000017450439318", 13, messageKeys("11", "1"), nil, nil),
	}},
}

// jsonValue decodes JSON into generic values, so that two documents compare
// equal regardless of key order and spacing.
func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

func TestBuildEventMatchesFixtures(t *testing.T) {
	for name, f := range fixtureRecords {
		t.Run(name, func(t *testing.T) {
			want, _ := fixture(t, name)
			ev, err := BuildEvent(f.arn, f.records...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := jsonValue(t, got), jsonValue(t, want); !reflect.DeepEqual(g, w) {
				t.Errorf("built event differs from the fixture\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

// TestFixturesUnmarshal checks that every fixture decodes into the
// aws-lambda-go types (as lambda.Start would) and encodes back unchanged, so
// the fixtures hold nothing the handler would not see.
func TestFixturesUnmarshal(t *testing.T) {
	names, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < len(fixtureRecords) {
		t.Fatalf("found %d fixtures, want at least %d", len(names), len(fixtureRecords))
	}
	for _, name := range names {
		t.Run(filepath.Base(name), func(t *testing.T) {
			raw, ev := fixture(t, filepath.Base(name))
			if len(ev.Records) == 0 {
				t.Fatal("no records")
			}
			for i, r := range ev.Records {
				if r.EventSource != "aws:dynamodb" || r.EventVersion != "1.1" || r.Change.SequenceNumber == "" ||
					len(r.Change.Keys) == 0 || r.Change.ApproximateCreationDateTime.IsZero() {
					t.Errorf("record %d is missing a field Lambda always sets: %+v", i, r)
				}
			}
			again, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := jsonValue(t, again), jsonValue(t, raw); !reflect.DeepEqual(g, w) {
				t.Errorf("round trip changed the event\n got: %s\nwant: %s", again, raw)
			}
		})
	}
}

func TestBuildEventDefaults(t *testing.T) {
	// A record with neither region nor version takes the region from the
	// stream ARN and version 1.1.
	r := streamRecord("x", types.OperationTypeInsert, types.StreamViewTypeKeysOnly, 1, "1", 1, messageKeys("0", "1"), nil, nil)
	r.AwsRegion, r.EventVersion = nil, nil
	ev, err := BuildEvent(outboxStream, r)
	if err != nil {
		t.Fatal(err)
	}
	got := ev.Records[0]
	if got.AWSRegion != "eu-west-1" || got.EventVersion != "1.1" || got.EventSourceArn != outboxStream {
		t.Errorf("got region %q version %q arn %q", got.AWSRegion, got.EventVersion, got.EventSourceArn)
	}
}

func TestBuildEventRejectsUnknownAttributeType(t *testing.T) {
	r := streamRecord("x", types.OperationTypeInsert, types.StreamViewTypeKeysOnly, 1, "1", 1,
		map[string]types.AttributeValue{"b": &types.UnknownUnionMember{Tag: "XX"}}, nil, nil)
	if _, err := BuildEvent(outboxStream, r); err == nil {
		t.Fatal("want an error for an attribute type Lambda events cannot carry")
	}
}

// normalize blanks the fields of a delivered event that differ on every run
// (ids, sequence numbers, times, sizes, region and stream), so that an event
// read from a real stream can be compared with a fixture.
func normalize(t *testing.T, ev events.DynamoDBEvent) any {
	t.Helper()
	for i := range ev.Records {
		r := &ev.Records[i]
		r.EventID, r.AWSRegion, r.EventSourceArn = "ID", "REGION", "ARN"
		r.Change.SequenceNumber = "SEQ"
		r.Change.SizeBytes = 1
		r.Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: time.Unix(1, 0)}
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return jsonValue(t, b)
}

// fixture reads testdata/name and decodes it as lambda.Start would.
func fixture(t *testing.T, name string) ([]byte, events.DynamoDBEvent) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	return raw, ev
}
