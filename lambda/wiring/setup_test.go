package wiring

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/internal/lambdalog"
	"github.com/dynakafka/outbox/store/dynamo"
)

// keptMessages runs out through the model of Lambda's log-level filter at
// level and returns the "msg" of each line it keeps, and whether an EMF
// (metrics) line is among them.
func keptMessages(t *testing.T, level string, out []byte) (msgs []string, metrics bool) {
	t.Helper()
	for _, line := range lambdalog.Filter(level, out) {
		var doc map[string]any
		if err := json.Unmarshal(line, &doc); err != nil {
			t.Fatalf("a line that is not JSON: %q", line)
		}
		if _, ok := doc["_aws"]; ok {
			metrics = true
			continue
		}
		msg, _ := doc["msg"].(string)
		msgs = append(msgs, msg)
	}
	return msgs, metrics
}

func hasPrefix(msgs []string, prefix string) bool {
	for _, m := range msgs {
		if strings.HasPrefix(m, prefix) {
			return true
		}
	}
	return false
}

// localCredentials gives the functions' AWS configuration, which they load
// from the environment, DynamoDB Local's credentials (its tables are per
// access key and region).
func localCredentials(t *testing.T, d *testenv.Dynamo) {
	t.Helper()
	creds, err := d.Config.Credentials.Retrieve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", creds.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", creds.SecretAccessKey)
	t.Setenv("AWS_SESSION_TOKEN", creds.SessionToken)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// TestInitFailuresSurviveTheLogLevelFilter runs the functions' real init
// (SetupRelay, SetupSweeper: what lambda/relay and lambda/sweeper run) into
// a failure and the lines it writes through Lambda's documented log-level
// filter (internal/lambdalog): at LogLevel WARN and ERROR the ERROR line
// that says why still reaches CloudWatch Logs. A failed sweeper init
// writes no metric at all, which is why the backlog alarms treat missing
// data as breaching (deploy's TestAlarms).
func TestInitFailuresSurviveTheLogLevelFilter(t *testing.T) {
	d := testenv.DynamoDB(t)
	localCredentials(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tables := dynamo.Tables{Messages: testenv.Name(t, "m"), Control: testenv.Name(t, "c")}
	if err := dynamo.CreateTables(ctx, d.Client, tables, dynamo.BucketCount(4)); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{
		"OUTBOX_MESSAGES_TABLE": tables.Messages, "OUTBOX_CONTROL_TABLE": tables.Control,
		"OUTBOX_DYNAMODB_ENDPOINT": d.Endpoint, "AWS_REGION": d.Config.Region, "KAFKA_AUTH": "none",
		// Port 1 refuses: Kafka unreachable at init.
		"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
	}
	cases := []struct {
		name string
		env  map[string]string
		want string // the message's prefix, after "outbox relay: " or "outbox sweeper: "
	}{
		{"invalid configuration", map[string]string{"OUTBOX_BATCH_SIZE": "many"}, "invalid configuration"},
		{"kafka unreachable", nil, "init failed"},
	}
	for _, c := range cases {
		for _, level := range []string{"WARN", "ERROR", "FATAL"} {
			env := map[string]string{"AWS_LAMBDA_LOG_LEVEL": level}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range c.env {
				env[k] = v
			}
			getenv := func(s string) string { return env[s] }
			t.Run(c.name+" at "+level, func(t *testing.T) {
				var out bytes.Buffer
				if h, ok := SetupRelay(getenv, &out); ok || h != nil {
					t.Fatal("the relay's init succeeded")
				}
				if msgs, _ := keptMessages(t, level, out.Bytes()); !hasPrefix(msgs, "outbox relay: "+c.want) {
					t.Fatalf("kept %q of the relay's output:\n%s", msgs, out.Bytes())
				}
				out.Reset()
				if h, ok := SetupSweeper(getenv, &out); ok || h != nil {
					t.Fatal("the sweeper's init succeeded")
				}
				msgs, metrics := keptMessages(t, level, out.Bytes())
				if !hasPrefix(msgs, "outbox sweeper: "+c.want) {
					t.Fatalf("kept %q of the sweeper's output:\n%s", msgs, out.Bytes())
				}
				if metrics {
					t.Fatalf("a failed init wrote a metric line:\n%s", out.Bytes())
				}
			})
		}
	}
}

// TestSweeperLinesSurviveTheLogLevelFilter: a sweeper built by its real
// init, at LogLevel ERROR, meets messages in a bucket outside its range; its
// MISCONFIGURATION line and its metrics line reach CloudWatch Logs, and the
// INFO summary does not.
func TestSweeperLinesSurviveTheLogLevelFilter(t *testing.T) {
	d := testenv.DynamoDB(t)
	k := testenv.Kafka(t)
	localCredentials(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tables := dynamo.Tables{Messages: testenv.Name(t, "m"), Control: testenv.Name(t, "c")}
	if err := dynamo.CreateTables(ctx, d.Client, tables, dynamo.BucketCount(4)); err != nil {
		t.Fatal(err)
	}
	// A message in bucket 5, as a writer with another BucketCount would
	// leave it (only the keys matter to the sweep's probe).
	if _, err := d.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(tables.Messages), Item: map[string]types.AttributeValue{
		"b": &types.AttributeValueMemberN{Value: "5"}, "s": &types.AttributeValueMemberN{Value: "1"},
	}}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"OUTBOX_MESSAGES_TABLE": tables.Messages, "OUTBOX_CONTROL_TABLE": tables.Control,
		"OUTBOX_DYNAMODB_ENDPOINT": d.Endpoint, "AWS_REGION": d.Config.Region, "KAFKA_AUTH": "none",
		"KAFKA_BOOTSTRAP_SERVERS": strings.Join(k.Brokers, ","), "AWS_LAMBDA_LOG_LEVEL": "ERROR",
	}
	var out bytes.Buffer
	h, ok := SetupSweeper(func(s string) string { return env[s] }, &out)
	if !ok {
		t.Fatalf("init failed:\n%s", out.Bytes())
	}
	if _, err := h.Handle(ctx, events.CloudWatchEvent{}); err == nil {
		t.Fatal("the sweep did not fail on a bucket outside the range")
	}
	msgs, metrics := keptMessages(t, "ERROR", out.Bytes())
	if !hasPrefix(msgs, "outbox sweeper: MISCONFIGURATION") || !metrics || hasPrefix(msgs, "outbox sweeper: backlog") {
		t.Fatalf("kept %q (metrics line kept: %v) of:\n%s", msgs, metrics, out.Bytes())
	}
}
