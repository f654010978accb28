package dynamo

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
)

// The item contract (docs/contract.md, schema/) from the Go side: what the
// Go writer's and relay's item builders produce validates against the
// schemas, and the relay's decoders read every schema example as the
// contract says. integration/pywriter_test.go checks the items both
// writers and the relay store on DynamoDB Local.

// TestItemBuildersMatchSchemas runs schema/validate.py on the output of
// messageItem (with the watermark TTL too), fenceItem, publishedItem and
// configItem.
func TestItemBuildersMatchSchemas(t *testing.T) {
	created := time.UnixMilli(1764547200123)
	msgs := []outbox.Message{
		{ID: outbox.NewID(), Bucket: 3, Sequence: 9, Topic: "order-events", Key: []byte("order-1"), Value: []byte("v"), CreatedAt: created,
			Headers: []outbox.Header{{Key: "a", Value: []byte("1")}, {Key: "nil"}, {Key: "", Value: []byte{}}}},
		{ID: outbox.NewID(), Bucket: 0, Sequence: 1, Topic: "t", Key: []byte{}, CreatedAt: created},
		{ID: outbox.NewID(), Bucket: 4095, Sequence: 1 << 62, Topic: "t.x_y-z", Partition: outbox.PartitionOf(2147483647), Value: []byte{}, CreatedAt: time.UnixMilli(0)},
	}
	var rows []testenv.SchemaRow
	for _, m := range msgs {
		rows = append(rows,
			testenv.SchemaRow{Table: "messages", Item: messageItem(m, 0)},
			testenv.SchemaRow{Table: "messages", Item: withRetention(messageItem(m, 0), m.CreatedAt, DefaultRetention)})
	}
	rows = append(rows,
		testenv.SchemaRow{Table: "messages", Item: fenceItem(3, 10, created, created.Add(DefaultFenceTTL))},
		testenv.SchemaRow{Table: "messages", Item: publishedItem(3, 9, created, created.Add(time.Hour))},
		testenv.SchemaRow{Table: "control", Item: configItem(outbox.Config{BucketCount: 1})},
		testenv.SchemaRow{Table: "control", Item: configItem(outbox.Config{BucketCount: outbox.MaxBucketCount})},
		testenv.SchemaRow{Table: "control", Item: configItem(outbox.Config{BucketCount: 8, Mode: outbox.WatermarkMode, Retention: MinRetention})},
		testenv.SchemaRow{Table: "control", Item: configItem(outbox.Config{BucketCount: 8, Topics: []string{"order-events", "payments.v1_x"}})},
		testenv.SchemaRow{Table: "control", Item: configItem(outbox.Config{BucketCount: 8, Regions: []string{"us-east-1", "eu-west-1"}, TakenOver: map[string]string{"us-east-1": "eu-west-1"}})},
		testenv.SchemaRow{Table: "control", Item: configItem(outbox.Config{BucketCount: 8, BucketEpoch: 2, NextBucketCount: 16, ChangeDeadline: time.UnixMilli(1796182310780)})},
	)
	sum := testenv.ValidateSchemas(context.Background(), t, "go-builders", true, rows)
	if !strings.Contains(sum, "messages=6 fences=2") || !strings.Contains(sum, "configs=6") {
		t.Fatalf("validate.py classified the builders' items as %q", sum)
	}
}

// TestSchemaExamplesDecode reads schema/examples with the relay's decoders:
// every example is an item the relay accepts, meaning what its name says.
func TestSchemaExamplesDecode(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "schema", "examples", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schema examples: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			item, err := testenv.ParseDynamoJSON(b)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case strings.HasPrefix(name, "config"):
				c, err := decodeConfig(item)
				if err != nil {
					t.Fatal(err)
				}
				if want := strings.HasSuffix(name, "watermark"); (c.Mode == outbox.WatermarkMode) != want {
					t.Fatalf("mode %v", c.Mode)
				}
				if want := strings.HasSuffix(name, "topics"); (len(c.Topics) > 0) != want {
					t.Fatalf("topics %v", c.Topics)
				}
			case strings.HasPrefix(name, "counter"):
				if _, ok := item["n"].(*types.AttributeValueMemberN); !ok || item["sk"].(*types.AttributeValueMemberS).Value != "seq" {
					t.Fatalf("counter example %v", item)
				}
			default:
				e := decodeItem(item)
				if e.Err != nil {
					t.Fatal(e.Err)
				}
				fence := name == "fence" || name == "published-tombstone"
				if e.Fence != fence || e.Published != (name == "published-tombstone") {
					t.Fatalf("decoded fence=%v published=%v", e.Fence, e.Published)
				}
				if name == "message-empty-key-tombstone" && (e.Message.Key == nil || len(e.Message.Key) != 0 || e.Message.Value != nil) {
					t.Fatalf("empty key %v / nil value %v not kept apart", e.Message.Key, e.Message.Value)
				}
				if name == "message-keyed" && (len(e.Message.Headers) != 2 || e.Message.Headers[1].Value != nil) {
					t.Fatalf("headers %v", e.Message.Headers)
				}
			}
		})
	}
}
