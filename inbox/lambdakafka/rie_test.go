package lambdakafka

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/examples/orderview"
	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/local/esm"
)

// orderRecord is an OrderPlaced record as a Kafka event-source mapping
// delivers it, with the outbox's stamped headers.
func orderEvent(partition, offset int64, order, customer string, cents int64, seq int64) events.KafkaRecord {
	v, _ := json.Marshal(orderview.OrderPlaced{Type: "OrderPlaced", OrderID: order, Customer: customer, AmountCents: cents})
	return events.KafkaRecord{Topic: "orders", Partition: partition, Offset: offset, TimestampType: "CREATE_TIME",
		Key: base64.StdEncoding.EncodeToString([]byte(customer)), Value: base64.StdEncoding.EncodeToString(v),
		Headers: []map[string]events.JSONNumberBytes{
			{outbox.DefaultMessageIDHeader: events.JSONNumberBytes(outbox.NewID())},
			{outbox.DefaultBucketHeader: events.JSONNumberBytes(strconv.Itoa(int(partition)))},
			{outbox.DefaultSequenceHeader: events.JSONNumberBytes(strconv.FormatInt(seq, 10))},
		}}
}

// The example function examples/orderviewfn, built as the real bootstrap and run under the
// Lambda Runtime Interface Emulator against DynamoDB Local: a batch of two
// partitions with an undecodable record applies the good records once,
// dead-letters the bad one and reports no failure; the same batch
// delivered again changes nothing.
func TestExampleFunctionUnderRIE(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	d := testenv.DynamoDB(t)
	view, inboxTable, dlq := testenv.Name(t, "view"), testenv.Name(t, "inbox"), testenv.Name(t, "dlq")
	if err := orderview.CreateTable(ctx, d.Client, view); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{inboxTable, dlq} {
		if err := inbox.CreateTable(ctx, d.Client, table); err != nil {
			t.Fatal(err)
		}
	}

	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var rieOut bytes.Buffer
	install := exec.Command("bash", filepath.Join(root, "scripts", "install-rie.sh"))
	install.Stderr = &rieOut
	rieBin, err := install.Output()
	if err != nil {
		t.Fatalf("install the Lambda RIE (scripts/install-rie.sh): %v\n%s", err, rieOut.String())
	}
	bootstrap := filepath.Join(t.TempDir(), "bootstrap")
	build := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", bootstrap, ".")
	build.Dir = filepath.Join(root, "examples", "orderviewfn") // its own module
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the bootstrap: %v\n%s", err, out)
	}
	proc, err := esm.StartRIE(ctx, esm.RIEOptions{RIEPath: strings.TrimSpace(string(rieBin)), BootstrapPath: bootstrap,
		Timeout: 30 * time.Second, Output: t.Output(), Env: map[string]string{
			"VIEW_TABLE": view, "INBOX_TABLE": inboxTable, "DEAD_LETTER_TABLE": dlq, "PARTIAL_BATCH": "true",
			"AWS_ENDPOINT_URL_DYNAMODB": d.Endpoint, "AWS_REGION": d.Config.Region,
			"AWS_ACCESS_KEY_ID": dynamolocal.AccessKeyID, "AWS_SECRET_ACCESS_KEY": dynamolocal.SecretAccessKey,
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Close()

	bad := orderEvent(1, 20, "o-bad", "bob", 1, 2)
	bad.Value = base64.StdEncoding.EncodeToString([]byte("not json"))
	ev := events.KafkaEvent{EventSource: "aws:kafka", Records: map[string][]events.KafkaRecord{
		"orders-0": {orderEvent(0, 10, "o1", "alice", 100, 1), orderEvent(0, 11, "o2", "alice", 250, 2), orderEvent(0, 12, "o3", "carol", 5, 3)},
		"orders-1": {orderEvent(1, 19, "o4", "bob", 40, 1), bad, orderEvent(1, 21, "o5", "bob", 60, 3)},
	}}
	for i := range 2 {
		var resp Response
		if err := proc.InvokeJSON(ctx, ev, &resp); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("invocation %d: %+v, %v", i+1, resp, err)
		}
		wantItems := map[string]string{
			"order#o1": "alice", "order#o2": "alice", "order#o3": "carol", "order#o4": "bob", "order#o5": "bob",
			"customer#alice": "orders=2 total=350", "customer#bob": "orders=2 total=100", "customer#carol": "orders=1 total=5",
		}
		got := readView(t, d.Client, view)
		if fmt.Sprint(got) != fmt.Sprint(wantItems) {
			t.Fatalf("after invocation %d the read model is %v, want %v", i+1, got, wantItems)
		}
		out, err := d.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(dlq), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: inbox.DeadLetterKey("orders", 1, 20)}}})
		if err != nil || out.Item == nil {
			t.Fatalf("the undecodable record's dead letter: %v, %v", out, err)
		}
	}
}

func readView(t *testing.T, db *dynamodb.Client, table string) map[string]string {
	t.Helper()
	out, err := db.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, it := range out.Items {
		pk := it["pk"].(*types.AttributeValueMemberS).Value
		if strings.HasPrefix(pk, "order#") {
			got[pk] = it["customer"].(*types.AttributeValueMemberS).Value
		} else {
			got[pk] = "orders=" + it["orders"].(*types.AttributeValueMemberN).Value + " total=" + it["total_cents"].(*types.AttributeValueMemberN).Value
		}
	}
	return got
}
