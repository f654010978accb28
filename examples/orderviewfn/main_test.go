package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
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
	"gopkg.in/yaml.v3"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/examples/orderview"
	"github.com/dynakafka/outbox/inbox"
	"github.com/dynakafka/outbox/inbox/lambdakafka"
	"github.com/dynakafka/outbox/internal/testenv"
	"github.com/dynakafka/outbox/local/dynamolocal"
	"github.com/dynakafka/outbox/local/esm"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// orderRecord is an OrderPlaced record as a Kafka event-source mapping
// delivers it, with the outbox's stamped headers.
func orderRecord(partition, offset int64, order, customer string, cents int64, seq int64) events.KafkaRecord {
	v, _ := json.Marshal(orderview.OrderPlaced{Type: "OrderPlaced", OrderID: order, Customer: customer, AmountCents: cents})
	return events.KafkaRecord{Topic: "orders", Partition: partition, Offset: offset, TimestampType: "CREATE_TIME",
		Key: base64.StdEncoding.EncodeToString([]byte(customer)), Value: base64.StdEncoding.EncodeToString(v),
		Headers: []map[string]events.JSONNumberBytes{
			{outbox.DefaultMessageIDHeader: events.JSONNumberBytes(outbox.NewID())},
			{outbox.DefaultBucketHeader: events.JSONNumberBytes(strconv.Itoa(int(partition)))},
			{outbox.DefaultSequenceHeader: events.JSONNumberBytes(strconv.FormatInt(seq, 10))},
		}}
}

// The example function, built as the real bootstrap and run under the
// Lambda Runtime Interface Emulator against DynamoDB Local: a batch of two
// partitions with an undecodable record applies the good records once,
// dead-letters the bad one and reports no failure; the same batch
// delivered again changes nothing.
func TestFunctionUnderRIE(t *testing.T) {
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

	bad := orderRecord(1, 20, "o-bad", "bob", 1, 2)
	bad.Value = base64.StdEncoding.EncodeToString([]byte("not json"))
	ev := events.KafkaEvent{EventSource: "aws:kafka", Records: map[string][]events.KafkaRecord{
		"orders-0": {orderRecord(0, 10, "o1", "alice", 100, 1), orderRecord(0, 11, "o2", "alice", 250, 2), orderRecord(0, 12, "o3", "carol", 5, 3)},
		"orders-1": {orderRecord(1, 19, "o4", "bob", 40, 1), bad, orderRecord(1, 21, "o5", "bob", 60, 3)},
	}}
	for i := range 2 {
		var resp lambdakafka.Response
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

// The function refuses a missing table name at init, naming every problem.
func TestSetupRefusesAMissingTable(t *testing.T) {
	env := map[string]string{"PARTIAL_BATCH": "yes"}
	_, err := setup(context.Background(), func(k string) string { return env[k] }, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "VIEW_TABLE") || !strings.Contains(err.Error(), "INBOX_TABLE") || !strings.Contains(err.Error(), "PARTIAL_BATCH") {
		t.Fatalf("setup = %v, want the three problems named", err)
	}
}

// TestDeployDocSnippet: the SAM resource in docs/deploy.md builds this
// function, sets exactly the variables setup reads, and pairs
// PARTIAL_BATCH with the mapping's FunctionResponseTypes, with retries
// that never discard a batch.
func TestDeployDocSnippet(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "## Serverless consumers")
	_, block, ok2 := strings.Cut(sec, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/deploy.md has no yaml block under \"## Serverless consumers\"")
	}
	type event struct {
		Type       string               `yaml:"Type"`
		Properties map[string]yaml.Node `yaml:"Properties"`
	}
	var res map[string]struct {
		Type       string `yaml:"Type"`
		Properties struct {
			CodeUri     string `yaml:"CodeUri"`
			Environment struct {
				Variables map[string]yaml.Node `yaml:"Variables"`
			} `yaml:"Environment"`
			Events map[string]event `yaml:"Events"`
		} `yaml:"Properties"`
	}
	if err := yaml.Unmarshal([]byte(block), &res); err != nil {
		t.Fatalf("the snippet does not parse: %v", err)
	}
	fn, ok := res["OrderViewFunction"]
	if !ok || fn.Type != "AWS::Serverless::Function" || fn.Properties.CodeUri != "examples/orderviewfn" {
		t.Fatalf("snippet: %+v", res)
	}
	read := map[string]bool{}
	setup(context.Background(), func(k string) string { read[k] = true; return "" }, slog.New(slog.DiscardHandler))
	for k := range fn.Properties.Environment.Variables {
		if !read[k] {
			t.Errorf("the snippet sets %s, which the function does not read", k)
		}
	}
	for _, k := range []string{"VIEW_TABLE", "INBOX_TABLE"} {
		if _, ok := fn.Properties.Environment.Variables[k]; !ok {
			t.Errorf("the snippet does not set %s", k)
		}
	}
	partial := fn.Properties.Environment.Variables["PARTIAL_BATCH"]
	for name, ev := range fn.Properties.Events {
		if ev.Type != "MSK" && ev.Type != "SelfManagedKafka" {
			t.Errorf("event %s is %s", name, ev.Type)
		}
		types := ev.Properties["FunctionResponseTypes"]
		reports := strings.Contains(fmt.Sprint(nodeStrings(&types)), "ReportBatchItemFailures")
		if reports != (partial.Value == "true") {
			t.Errorf("event %s: FunctionResponseTypes %v with PARTIAL_BATCH=%q: set both or neither", name, nodeStrings(&types), partial.Value)
		}
		if r := ev.Properties["MaximumRetryAttempts"]; r.Value != "" && r.Value != "-1" {
			t.Errorf("event %s: MaximumRetryAttempts %s discards batches", name, r.Value)
		}
		if b := ev.Properties["BisectBatchOnFunctionError"]; b.Value == "true" {
			t.Errorf("event %s bisects batches", name)
		}
		if _, ok := ev.Properties["ProvisionedPollerConfig"]; reports && !ok {
			t.Errorf("event %s: the error handling controls need provisioned mode (ProvisionedPollerConfig)", name)
		}
	}
	if _, err := os.Stat("main.go"); err != nil {
		t.Fatal(err)
	}
}

func nodeStrings(n *yaml.Node) []string {
	var out []string
	for _, c := range n.Content {
		out = append(out, c.Value)
	}
	return out
}
