package deploy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda/messages"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/lambda/handler"
	"github.com/dynakafka/outbox/store/dynamo"
)

// The enqueue function is off by default; cfn-lint checks template.yaml
// as it is (cfn-lint evaluates both branches of a condition), and again
// with the function on by default and business tables named, so neither
// deployment has an error or a warning.
func TestCfnLintEnqueueOn(t *testing.T) {
	t.Parallel() // cfn-lint takes seconds: overlap it with the package's other tests
	src, err := os.ReadFile("../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	on := strings.Replace(string(src), "  EnableEnqueueFunction:\n    Type: String\n    Default: \"false\"",
		"  EnableEnqueueFunction:\n    Type: String\n    Default: \"true\"", 1)
	on = strings.Replace(on, "  EnqueueBusinessTableArns:\n    Type: CommaDelimitedList\n    Default: \"\"",
		"  EnqueueBusinessTableArns:\n    Type: CommaDelimitedList\n    Default: \"arn:aws:dynamodb:us-east-1:123456789012:table/orders\"", 1)
	if on == string(src) || strings.Count(on, `Default: "true"`) != strings.Count(string(src), `Default: "true"`)+1 {
		t.Fatal("could not switch the enqueue function's defaults: update this test with the parameters")
	}
	dir, err := os.MkdirTemp("..", ".enqueue-lint-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "template.yaml"), []byte(on), 0o644); err != nil {
		t.Fatal(err)
	}
	cfnLint(t, filepath.Join(filepath.Base(dir), "template.yaml"))
}

// The recipes of docs/deploy.md (Step Functions, EventBridge, SQS, Pipes)
// are one template, linted.
func TestCfnLintEnqueueRecipes(t *testing.T) {
	t.Parallel()
	cfnLint(t, "docs/enqueue-recipes.yaml")
}

// The state machine of the recipes is docs/enqueue-statemachine.asl.json,
// which the integration test runs through the enqueue function.
func TestEnqueueRecipeStateMachine(t *testing.T) {
	recipes := loadRecipes(t)
	def := at(recipes, "Resources", "PayOrderStateMachine", "Properties", "Definition")
	b, err := os.ReadFile("../docs/enqueue-statemachine.asl.json")
	if err != nil {
		t.Fatal(err)
	}
	var asl any
	if err := json.Unmarshal(b, &asl); err != nil {
		t.Fatal(err)
	}
	// Through JSON: YAML's integers against JSON's numbers.
	jb, err := json.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	var fromYAML any
	if err := json.Unmarshal(jb, &fromYAML); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromYAML, asl) {
		t.Fatalf("the recipes' state machine differs from docs/enqueue-statemachine.asl.json:\nrecipes: %s\nasl:     %s", canon(def), canon(asl))
	}
}

// The enqueue role: WriterPolicy (what dynamo.Writer calls), PutItem of
// the idempotency records on the control table (GetItem of a record is in
// WriterPolicy's control-table statement), the callers' four item
// actions on the business tables named, only when some are, and SendMessage
// to its failure queue (Lambda's on-failure destination sends with it).
func TestEnqueueRole(t *testing.T) {
	tmpl := loadTemplate(t)
	role := at(tmpl, "Resources", "EnqueueRole")
	if got := at(role, "Condition"); got != "UseEnqueue" {
		t.Errorf("EnqueueRole.Condition = %s", canon(got))
	}
	if got, want := at(role, "Properties", "ManagedPolicyArns"), cfn(t, "[!Ref WriterPolicy]"); !reflect.DeepEqual(got, want) {
		t.Errorf("EnqueueRole managed policies %s, want %s", canon(got), canon(want))
	}
	want := cfn(t, `
- Sid: IdempotencyRecords
  Effect: Allow
  Action: dynamodb:PutItem
  Resource: !If [AttachTables, !Sub "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/${ControlTableName}", !If [GlobalTables, !GetAtt ControlGlobalTable.Arn, !GetAtt ControlTable.Arn]]
- !If
  - HasEnqueueBusinessTables
  - Sid: BusinessTables
    Effect: Allow
    Action: [dynamodb:PutItem, dynamodb:UpdateItem, dynamodb:DeleteItem, dynamodb:ConditionCheckItem]
    Resource: !Ref EnqueueBusinessTableArns
  - !Ref AWS::NoValue
- Sid: FailureDestination
  Effect: Allow
  Action: sqs:SendMessage
  Resource: !GetAtt EnqueueFailureQueue.Arn
`)
	policies, _ := at(role, "Properties", "Policies").([]any)
	if len(policies) != 1 {
		t.Fatalf("EnqueueRole policies %s, want one", canon(policies))
	}
	if got := at(policies[0], "PolicyDocument", "Statement"); !reflect.DeepEqual(got, want) {
		t.Errorf("EnqueueRole statements %s, want %s", canon(got), canon(want))
	}
	invoke := at(tmpl, "Resources", "EnqueueInvokePolicy", "Properties", "PolicyDocument", "Statement")
	if want := cfn(t, "[{Sid: InvokeEnqueue, Effect: Allow, Action: lambda:InvokeFunction, Resource: !GetAtt EnqueueFunction.Arn}]"); !reflect.DeepEqual(invoke, want) {
		t.Errorf("EnqueueInvokePolicy statements %s, want %s", canon(invoke), canon(want))
	}
}

// TestEnqueueAsync: what the enqueue function's asynchronous and batch
// callers depend on, each value from what the test observed.
//   - failure_destination: with EnableEnqueueFunction the function's
//     EventInvokeConfig sends failed asynchronous invocations to a queue of
//     the stack that its role may send to (before, they were discarded);
//   - alarms: an Errors alarm on the function and an alarm on that queue,
//     both on the dashboard, deployed only with the function;
//   - poison_only_failed: a Kinesis batch whose first record is unusable,
//     delivered three times as Kinesis redelivers (from the reported
//     record), through the handler on DynamoDB Local: each delivery reports
//     that record alone, and the two good records are committed once;
//   - array_refused: a direct invocation with an array whose request fails
//     answers an error (before: a batch response, a success).
//
// It also checks the reserved concurrency that caps the function, and
// that EnqueueReservedConcurrency -1 reserves none.
func TestEnqueueAsync(t *testing.T) {
	tmpl := loadTemplate(t)
	e, err := newEvaluator(tmpl, map[string]string{"KafkaBootstrapServers": "b:9092", "KafkaAuthMode": "none", "EnableEnqueueFunction": "true"})
	if err != nil {
		t.Fatal(err)
	}
	fn, err := e.Eval(at(tmpl, "Resources", "EnqueueFunction", "Properties"))
	if err != nil {
		t.Fatal(err)
	}
	failureDestination := 0
	dest, _ := at(fn, "EventInvokeConfig", "DestinationConfig", "OnFailure", "Destination").(string)
	queue := strings.TrimSuffix(strings.TrimPrefix(dest, "<"), ".Arn>")
	grants, err := roleGrants(e, "EnqueueRole")
	if err != nil {
		t.Fatal(err)
	}
	included, _ := e.Included(queue)
	switch {
	case at(tmpl, "Resources", queue, "Type") != "AWS::SQS::Queue" || !included:
		t.Errorf("EnqueueFunction's on-failure destination is %q, not a queue of the stack", dest)
	case at(fn, "EventInvokeConfig", "DestinationConfig", "OnFailure", "Type") != "SQS":
		t.Errorf("on-failure destination type %v", at(fn, "EventInvokeConfig", "DestinationConfig", "OnFailure", "Type"))
	case !slices.Contains(grants, grant{Action: "sqs:SendMessage", Resource: dest}):
		t.Errorf("EnqueueRole may not send to %s: %v", dest, grants)
	case at(fn, "EventInvokeConfig", "MaximumRetryAttempts") == nil || at(fn, "EventInvokeConfig", "MaximumEventAgeInSeconds") == nil:
		t.Errorf("EventInvokeConfig %s: want its retries and event age stated", canon(at(fn, "EventInvokeConfig")))
	default:
		failureDestination = 1
	}
	// (c) Capped by a reservation of its own, so a backlog of its callers
	// leaves the account's concurrency to the relay.
	if got := at(fn, "ReservedConcurrentExecutions"); got != "10" && got != 10 {
		t.Errorf("EnqueueFunction ReservedConcurrentExecutions = %s, want the EnqueueReservedConcurrency default 10", canon(got))
	}
	// -1 reserves none: an account whose limit is below 100 + the
	// reservation (new accounts may have 10) still deploys the function.
	uncapped, err := newEvaluator(tmpl, map[string]string{"KafkaBootstrapServers": "b:9092", "KafkaAuthMode": "none",
		"EnableEnqueueFunction": "true", "EnqueueReservedConcurrency": "-1"})
	if err != nil {
		t.Fatal(err)
	}
	if fn, err := uncapped.Eval(at(tmpl, "Resources", "EnqueueFunction", "Properties")); err != nil || at(fn, "ReservedConcurrentExecutions") != nil {
		t.Errorf("EnqueueReservedConcurrency -1: ReservedConcurrentExecutions = %s (%v), want none", canon(at(fn, "ReservedConcurrentExecutions")), err)
	}

	alarms := 0
	watched := map[string]bool{}
	for _, a := range resourcesOfType(tmpl, "AWS::CloudWatch::Alarm") {
		p, err := e.Eval(at(tmpl, "Resources", a, "Properties"))
		if ok, _ := e.Included(a); err != nil || !ok {
			continue
		}
		v, _ := at(p, "Dimensions", 0, "Value").(string)
		watched[at(p, "MetricName").(string)+" "+v] = true
	}
	dash, err := e.Eval(at(tmpl, "Resources", "Dashboard", "Properties", "DashboardBody"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := dash.(string)
	off, err := newEvaluator(tmpl, map[string]string{"KafkaBootstrapServers": "b:9092", "KafkaAuthMode": "none"})
	if err != nil {
		t.Fatal(err)
	}
	onlyWith, _ := off.Included("EnqueueErrorsAlarm")
	if watched["Errors <EnqueueFunction>"] && watched["ApproximateNumberOfMessagesVisible <"+queue+".QueueName>"] && !onlyWith &&
		strings.Contains(body, "<EnqueueErrorsAlarm.Arn>") && strings.Contains(body, "<EnqueueFailureQueueAlarm.Arn>") {
		alarms = 1
	} else {
		t.Errorf("alarms on the enqueue function: %v (deployed without it: %v); dashboard:\n%s", watched, onlyWith, body)
	}

	poisonOnlyFailed := enqueuePoisonBatch(t)
	arrayRefused := 0
	h, _ := newEnqueueHandler(t)
	var ie messages.InvokeResponse_Error
	_, err = h.Handle(context.Background(), json.RawMessage(`[{"messages": [{"topic": "orders", "key": "o-1"}]}]`))
	if errors.As(err, &ie) && ie.Type == handler.ErrorValidation && strings.Contains(ie.Message, `"field":"[0].idempotencyKey"`) {
		arrayRefused = 1
	} else {
		t.Errorf("a direct invocation with an array answered %v; want Outbox.Validation naming [0].idempotencyKey", err)
	}
	fmt.Printf("enqueue-async: failure_destination=%d alarms=%d poison_only_failed=%d array_refused=%d\n",
		failureDestination, alarms, poisonOnlyFailed, arrayRefused)
}

// loadRecipes parses docs/enqueue-recipes.yaml.
func loadRecipes(t *testing.T) map[string]any {
	t.Helper()
	src, err := os.ReadFile("../docs/enqueue-recipes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	recipes, err := parseCFN(src)
	if err != nil {
		t.Fatal(err)
	}
	return recipes
}

// newEnqueueOutbox is the enqueue function's handler on a fresh outbox of
// bucketCount buckets in DynamoDB Local, through a recordingClient.
func newEnqueueOutbox(t *testing.T, bucketCount int) (*testenv.Dynamo, dynamo.Tables, *recordingClient, *handler.Enqueue) {
	t.Helper()
	d, tables, rec := newRecordedOutbox(t, bucketCount)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := dynamo.NewWriter(ctx, rec, tables)
	if err != nil {
		t.Fatal(err)
	}
	h, err := handler.NewEnqueue(w, rec, tables, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d, tables, rec, h
}

// newEnqueueHandler is newEnqueueOutbox's handler, and a count of the
// messages stored.
func newEnqueueHandler(t *testing.T) (*handler.Enqueue, func() int32) {
	t.Helper()
	d, tables, _, h := newEnqueueOutbox(t, 4)
	messagesStored := func() int32 {
		// Not the fences: a replay releases the numbers it reserved.
		out, err := d.Client.Scan(context.Background(), &dynamodb.ScanInput{TableName: &tables.Messages, Select: types.SelectCount,
			FilterExpression: aws.String("attribute_not_exists(f)"), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return out.Count
	}
	return h, messagesStored
}

// enqueuePoisonBatch is 1 when three Kinesis deliveries of [unusable, a, b]
// each report only the unusable record and commit a and b once.
func enqueuePoisonBatch(t *testing.T) int {
	h, messagesStored := newEnqueueHandler(t)
	record := func(seq int, body string) string {
		return fmt.Sprintf(`{"eventSource": "aws:kinesis", "eventID": "shardId-000000000000:%d", "kinesis": {"sequenceNumber": "%d", "data": %q}}`,
			seq, seq, base64.StdEncoding.EncodeToString([]byte(body)))
	}
	recs := []string{record(1, `{"messages": [{"key": "poison"}]}`), // no topic
		record(2, `{"messages": [{"topic": "orders", "key": "a"}]}`), record(3, `{"messages": [{"topic": "orders", "key": "b"}]}`)}
	ok := 1
	for delivery := 1; delivery <= 3; delivery++ {
		out, err := h.Handle(context.Background(), json.RawMessage(`{"Records": [`+strings.Join(recs, ",")+`]}`))
		resp, _ := out.(events.SQSEventResponse)
		if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "1" {
			t.Errorf("delivery %d answered %+v, %v; want only sequence number 1 reported", delivery, out, err)
			ok = 0
		}
		// Kinesis redelivers from the reported record on: here, all three.
	}
	if n := messagesStored(); n != 2 {
		t.Errorf("%d messages stored after 3 deliveries; want a and b, once each", n)
		ok = 0
	}
	return ok
}

// TestEnqueueRecipesBoundRetries: every event source of the recipes bounds
// what a record that keeps failing costs. A Kinesis source reports batch
// item failures, bisects, retries a finite number of times and sends what it
// gives up on to a queue its role may send to; an SQS source reports batch
// item failures, polls at most the function's reserved concurrency (so a
// backlog is not throttled back into the queue) and its queue, like a
// Pipe's, moves a message to a dead-letter queue after maxReceiveCount.
// Together the sources (SQS MaximumConcurrency, Kinesis provisioned shards
// x ParallelizationFactor) stay within the reservation they share.
func TestEnqueueRecipesBoundRetries(t *testing.T) {
	recipes := loadRecipes(t)
	reserved, _ := at(loadTemplate(t), "Parameters", "EnqueueReservedConcurrency", "Default").(int)
	source := func(p any) (string, string) { // the source's type and logical id
		arn, _ := at(p, "Fn::GetAtt").([]any)
		if len(arn) != 2 {
			return "", ""
		}
		id, _ := arn[0].(string)
		typ, _ := at(recipes, "Resources", id, "Type").(string)
		return typ, id
	}
	redriven := func(queue string) bool {
		return at(recipes, "Resources", queue, "Properties", "RedrivePolicy", "maxReceiveCount") != nil
	}
	kinds := map[string]bool{}
	concurrency := map[string]int{} // by event source mapping: the most invocations it runs at once
	for _, name := range resourcesOfType(recipes, "AWS::Lambda::EventSourceMapping") {
		p := at(recipes, "Resources", name, "Properties")
		typ, id := source(at(p, "EventSourceArn"))
		kinds[typ] = true
		if got := at(p, "FunctionResponseTypes"); !reflect.DeepEqual(got, []any{"ReportBatchItemFailures"}) {
			t.Errorf("%s FunctionResponseTypes %s, want [ReportBatchItemFailures]", name, canon(got))
		}
		switch typ {
		case "AWS::Kinesis::Stream":
			retries, _ := at(p, "MaximumRetryAttempts").(int)
			dest := at(p, "DestinationConfig", "OnFailure", "Destination")
			dtyp, did := source(dest)
			if at(p, "BisectBatchOnFunctionError") != true || at(p, "MaximumRetryAttempts") == nil || retries < 0 || dtyp != "AWS::SQS::Queue" {
				t.Errorf("%s: BisectBatchOnFunctionError %v, MaximumRetryAttempts %v, on-failure destination %s: want bisect, finite retries, a queue",
					name, at(p, "BisectBatchOnFunctionError"), at(p, "MaximumRetryAttempts"), canon(dest))
			}
			if !strings.Contains(canon(recipes), `"sqs:SendMessage","Effect":"Allow","Resource":{"Fn::GetAtt":["`+did+`","Arn"]}`) {
				t.Errorf("%s: no statement lets the function's role send to %s", name, did)
			}
			// One invocation per shard and parallelization slot; an
			// on-demand stream's shards are not bounded.
			shards, _ := at(recipes, "Resources", id, "Properties", "ShardCount").(int)
			factor, ok := at(p, "ParallelizationFactor").(int)
			if !ok {
				factor = 1
			}
			if at(recipes, "Resources", id, "Properties", "StreamModeDetails", "StreamMode") != "PROVISIONED" || shards < 1 {
				t.Errorf("%s: stream %s is not provisioned with a ShardCount: its concurrency has no bound", name, id)
			}
			concurrency[name] = shards * factor
		case "AWS::SQS::Queue":
			max, _ := at(p, "ScalingConfig", "MaximumConcurrency").(int)
			if max < 2 || max > reserved {
				t.Errorf("%s ScalingConfig.MaximumConcurrency %v, want 2..%d (EnqueueReservedConcurrency's default)", name, at(p, "ScalingConfig"), reserved)
			}
			concurrency[name] = max
			if !redriven(id) {
				t.Errorf("%s: queue %s has no redrive policy: a message that keeps failing is retried until it expires", name, id)
			}
		default:
			t.Errorf("%s: source %s of type %q", name, id, typ)
		}
	}
	for _, name := range resourcesOfType(recipes, "AWS::Pipes::Pipe") {
		if _, id := source(at(recipes, "Resources", name, "Properties", "Source")); !redriven(id) {
			t.Errorf("%s: source queue %s has no redrive policy", name, id)
		}
	}
	// The sources share the reservation: their sum, not each alone, stays
	// within it (before, 5 for the queue and an on-demand stream's
	// unbounded shards passed one by one).
	total := 0
	for _, n := range concurrency {
		total += n
	}
	if total > reserved {
		t.Errorf("the recipes' event sources run %v at once, %d in all: above EnqueueReservedConcurrency's default %d", concurrency, total, reserved)
	}
	if !kinds["AWS::Kinesis::Stream"] || !kinds["AWS::SQS::Queue"] {
		t.Errorf("the recipes' event sources are %v; want a Kinesis stream and an SQS queue", kinds)
	}
}
