package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func TestTemplateHeader(t *testing.T) {
	tmpl := loadTemplate(t)
	if got := tmpl["Transform"]; got != "AWS::Serverless-2016-10-31" {
		t.Errorf("Transform = %s, want AWS::Serverless-2016-10-31", canon(got))
	}
	desc, _ := tmpl["Description"].(string)
	lower := strings.ToLower(desc)
	for _, want := range []string{"global", "replica", "gateway endpoint", "secrets manager interface endpoint", "nat"} {
		if !strings.Contains(lower, want) {
			t.Errorf("Description does not mention %q:\n%s", want, desc)
		}
	}
	if len(desc) > 1024 {
		t.Errorf("Description is %d characters; CloudFormation allows 1024", len(desc))
	}
}

func TestTables(t *testing.T) {
	tmpl := loadTemplate(t)
	tests := []struct {
		name      string
		resource  string
		keys      string // KeySchema and AttributeDefinitions, as YAML
		streamSet bool
	}{
		{"messages", "MessagesTable", `
KeySchema: [{AttributeName: b, KeyType: HASH}, {AttributeName: s, KeyType: RANGE}]
AttributeDefinitions: [{AttributeName: b, AttributeType: N}, {AttributeName: s, AttributeType: N}]`, true},
		{"control", "ControlTable", `
KeySchema: [{AttributeName: pk, KeyType: HASH}, {AttributeName: sk, KeyType: RANGE}]
AttributeDefinitions: [{AttributeName: pk, AttributeType: S}, {AttributeName: sk, AttributeType: S}]`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := at(tmpl, "Resources", tc.resource)
			if at(r, "Type") != "AWS::DynamoDB::Table" {
				t.Fatalf("%s is %s, want AWS::DynamoDB::Table", tc.resource, canon(at(r, "Type")))
			}
			p := at(r, "Properties")
			want := cfn(t, tc.keys)
			for _, k := range []string{"KeySchema", "AttributeDefinitions"} {
				if !reflect.DeepEqual(at(p, k), at(want, k)) {
					t.Errorf("%s = %s, want %s", k, canon(at(p, k)), canon(at(want, k)))
				}
			}
			if got := at(p, "BillingMode"); got != "PAY_PER_REQUEST" {
				t.Errorf("BillingMode = %s, want PAY_PER_REQUEST", canon(got))
			}
			if got := at(p, "PointInTimeRecoverySpecification", "PointInTimeRecoveryEnabled"); got != true {
				t.Errorf("PointInTimeRecoveryEnabled = %s, want true", canon(got))
			}
			if got := at(p, "TimeToLiveSpecification"); !reflect.DeepEqual(got, cfn(t, "{AttributeName: x, Enabled: true}")) {
				t.Errorf("TimeToLiveSpecification = %s, want attribute x enabled", canon(got))
			}
			stream := at(p, "StreamSpecification")
			switch {
			case tc.streamSet && !reflect.DeepEqual(stream, cfn(t, "{StreamViewType: KEYS_ONLY}")):
				t.Errorf("StreamSpecification = %s, want KEYS_ONLY", canon(stream))
			case !tc.streamSet && stream != nil:
				t.Errorf("StreamSpecification = %s, want none", canon(stream))
			}
			// Outbox data must survive a stack deletion or a replacement.
			for _, k := range []string{"DeletionPolicy", "UpdateReplacePolicy"} {
				if got := at(r, k); got != "Retain" {
					t.Errorf("%s = %s, want Retain", k, canon(got))
				}
			}
			if at(p, "Replicas") != nil || at(p, "TableName") != nil {
				t.Errorf("table sets Replicas or a fixed TableName: %s", canon(p))
			}
		})
	}
}

// TestGlobalTablesDocumented: global tables only with Tables global
// (TestStackShapes); the docs say how region mode uses them.
func TestGlobalTablesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"global table", "tables attach", "tables global"} {
		if !strings.Contains(strings.ToLower(string(doc)), want) {
			t.Errorf("docs/deploy.md does not discuss %q", want)
		}
	}
}

// function returns the function's properties with the Globals it inherits,
// merged as SAM merges them: maps key by key (Environment.Variables), an
// intrinsic function (!Ref AWS::NoValue, say) like a plain value, so a
// function's own value of any other kind wins.
func function(t *testing.T, tmpl map[string]any, name string) map[string]any {
	t.Helper()
	if at(tmpl, "Resources", name, "Type") != "AWS::Serverless::Function" {
		t.Fatalf("%s is %s, want AWS::Serverless::Function", name, canon(at(tmpl, "Resources", name, "Type")))
	}
	global, _ := at(tmpl, "Globals", "Function").(map[string]any)
	local, _ := at(tmpl, "Resources", name, "Properties").(map[string]any)
	return samMerge(global, local).(map[string]any)
}

func isIntrinsic(v any) bool {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return false
	}
	for k := range m {
		return k == "Ref" || k == "Condition" || strings.HasPrefix(k, "Fn::")
	}
	return false
}

func samMerge(global, local any) any {
	g, gok := global.(map[string]any)
	l, lok := local.(map[string]any)
	switch {
	case global == nil:
		return local
	case local == nil:
		return global
	case !gok || !lok || isIntrinsic(g) || isIntrinsic(l):
		return local
	}
	out := map[string]any{}
	for k, v := range g {
		out[k] = v
	}
	for k, v := range l {
		out[k] = samMerge(out[k], v)
	}
	return out
}

func TestFunctions(t *testing.T) {
	tmpl := loadTemplate(t)
	tests := []struct {
		resource, codeURI, role string
		timeout, memory         string // as YAML
		dependsOn               string // as YAML; "" for none
		reserved                string // ReservedConcurrentExecutions as YAML; "" for none
		ownNetwork              bool   // outside the VPC, without the shared environment
	}{
		{"RelayFunction", "lambda/relay", "RelayRole", "!Ref RelayTimeout", "!Ref FunctionMemorySize", "",
			"!If [HasRelayReservedConcurrency, !Ref RelayReservedConcurrency, !Ref AWS::NoValue]", false},
		{"SweeperFunction", "lambda/sweeper", "SweeperRole", "!Ref SweeperTimeout", "!Ref FunctionMemorySize", "",
			"!If [HasSweeperReservedConcurrency, !Ref SweeperReservedConcurrency, !Ref AWS::NoValue]", false},
		{"SetupFunction", "lambda/setup", "SetupRole", "300", "256", "", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.resource, func(t *testing.T) {
			fn := function(t, tmpl, tc.resource)
			want := map[string]any{
				"CodeUri":       tc.codeURI,
				"Handler":       "bootstrap",
				"Runtime":       "provided.al2023",
				"Architectures": cfn(t, "[!Ref Architecture]"),
				"Timeout":       cfn(t, tc.timeout),
				"MemorySize":    cfn(t, tc.memory),
				"Role":          cfn(t, "!GetAtt "+tc.role+".Arn"),
				// JSON at LogLevel: Lambda passes the level as
				// AWS_LAMBDA_LOG_LEVEL, which wiring.Logger honours.
				"LoggingConfig": cfn(t, "{LogFormat: JSON, ApplicationLogLevel: !Ref LogLevel, SystemLogLevel: INFO}"),
			}
			if tc.reserved != "" {
				want["ReservedConcurrentExecutions"] = cfn(t, tc.reserved)
			}
			if tc.ownNetwork {
				want["VpcConfig"] = cfn(t, "!Ref AWS::NoValue")
				want["Environment"] = cfn(t, "!Ref AWS::NoValue")
			}
			for k, w := range want {
				if !reflect.DeepEqual(fn[k], w) {
					t.Errorf("%s = %s, want %s", k, canon(fn[k]), canon(w))
				}
			}
			if got := at(fn, "ReservedConcurrentExecutions"); tc.reserved == "" && got != nil {
				t.Errorf("ReservedConcurrentExecutions = %s", canon(got))
			}
			var dep any
			if tc.dependsOn != "" {
				dep = tc.dependsOn
			}
			if got := at(tmpl, "Resources", tc.resource, "DependsOn"); !reflect.DeepEqual(got, dep) {
				t.Errorf("DependsOn = %s, want %s", canon(got), canon(dep))
			}
			// SAM's go1.x build method builds provided.al2023 Go functions
			// (GOOS=linux, GOARCH from Architectures, output bootstrap).
			if got := at(tmpl, "Resources", tc.resource, "Metadata", "BuildMethod"); got != "go1.x" {
				t.Errorf("Metadata.BuildMethod = %s, want go1.x", canon(got))
			}
			if fn["Policies"] != nil {
				t.Errorf("Policies set beside an explicit Role: %s", canon(fn["Policies"]))
			}
			if _, err := os.Stat(filepath.Join("..", tc.codeURI, "main.go")); err != nil {
				t.Errorf("CodeUri %s: %v", tc.codeURI, err)
			}
		})
	}
	// The relay renews its lease while it publishes, so the lease need not
	// cover a whole batch, but an invocation must outlive a few renewals.
	timeout := num(t, at(tmpl, "Parameters", "RelayTimeout", "Default"))
	lease := num(t, at(tmpl, "Parameters", "LeaseDurationSeconds", "Default"))
	if timeout < 2*lease {
		t.Errorf("default RelayTimeout %v < 2 x default LeaseDurationSeconds %v", timeout, lease)
	}
	// Sweeps never overlap: every timeout the parameter allows ends before
	// the next tick of rate(1 minute).
	if max := num(t, at(tmpl, "Parameters", "SweeperTimeout", "MaxValue")); max >= 60 {
		t.Errorf("SweeperTimeout allows %vs, not below the one-minute schedule", max)
	}
	// The custom resource's function answers before CloudFormation gives up.
	service := num(t, at(tmpl, "Resources", "OutboxConfig", "Properties", "ServiceTimeout"))
	if setup := num(t, at(tmpl, "Resources", "SetupFunction", "Properties", "Timeout")); setup >= service {
		t.Errorf("SetupFunction Timeout %v is not below the custom resource's ServiceTimeout %v", setup, service)
	}
}

func num(t *testing.T, v any) float64 {
	t.Helper()
	switch x := v.(type) {
	case int:
		return float64(x)
	case float64:
		return x
	}
	t.Fatalf("%s is not a number", canon(v))
	return 0
}

func TestRelayStreamEvent(t *testing.T) {
	tmpl := loadTemplate(t)
	events, _ := at(tmpl, "Resources", "RelayFunction", "Properties", "Events").(map[string]any)
	if len(events) != 1 {
		t.Fatalf("relay has %d events, want exactly the stream: %s", len(events), canon(events))
	}
	var ev any
	for _, e := range events {
		ev = e
	}
	if at(ev, "Type") != "DynamoDB" {
		t.Fatalf("relay event type %s, want DynamoDB", canon(at(ev, "Type")))
	}
	p, _ := at(ev, "Properties").(map[string]any)
	exact := map[string]string{
		"Stream":                         "!If [AttachTables, !GetAtt OutboxConfig.MessagesStreamArn, !If [GlobalTables, !GetAtt MessagesGlobalTable.StreamArn, !GetAtt MessagesTable.StreamArn]]", // TestStackShapes evaluates each shape
		"StartingPosition":               "TRIM_HORIZON",
		"BatchSize":                      "!Ref StreamBatchSize",
		"MaximumBatchingWindowInSeconds": "!Ref StreamBatchingWindowSeconds",
		"ParallelizationFactor":          "1",
		"FunctionResponseTypes":          "[ReportBatchItemFailures]",
		"BisectBatchOnFunctionError":     "true",
		"DestinationConfig":              "{OnFailure: {Destination: !GetAtt RelayFailureQueue.Arn}}",
	}
	for k, src := range exact {
		t.Run(k, func(t *testing.T) {
			if want := cfn(t, src); !reflect.DeepEqual(p[k], want) {
				t.Errorf("%s = %s, want %s", k, canon(p[k]), canon(want))
			}
		})
	}
	t.Run("finite retries", func(t *testing.T) {
		// -1 (the default) retries until the record expires after 24 h,
		// blocking the shard; the event source allows 0..10000.
		if n, ok := p["MaximumRetryAttempts"].(int); !ok || n < 0 || n > 10000 {
			t.Errorf("MaximumRetryAttempts = %s, want an int in 0..10000", canon(p["MaximumRetryAttempts"]))
		}
		if n, ok := p["MaximumRecordAgeInSeconds"].(int); !ok || n < 60 || n > 604800 {
			t.Errorf("MaximumRecordAgeInSeconds = %s, want an int in 60..604800", canon(p["MaximumRecordAgeInSeconds"]))
		}
	})
	t.Run("FilterCriteria", func(t *testing.T) {
		filters, _ := at(p, "FilterCriteria", "Filters").([]any)
		if len(filters) != 1 {
			t.Fatalf("FilterCriteria = %s, want one filter", canon(p["FilterCriteria"]))
		}
		pattern, _ := at(filters[0], "Pattern").(string)
		var got any
		if err := json.Unmarshal([]byte(pattern), &got); err != nil {
			t.Fatalf("Pattern %q is not JSON: %v", pattern, err)
		}
		if want := map[string]any{"eventName": []any{"INSERT"}}; !reflect.DeepEqual(got, want) {
			t.Errorf("Pattern = %s, want %s", canon(got), canon(want))
		}
	})
	t.Run("failure queue", func(t *testing.T) {
		if typ := at(tmpl, "Resources", "RelayFailureQueue", "Type"); typ != "AWS::SQS::Queue" {
			t.Errorf("RelayFailureQueue is %s, want AWS::SQS::Queue", canon(typ))
		}
	})
	t.Run("no unexpected properties", func(t *testing.T) {
		known := map[string]bool{"MaximumRetryAttempts": true, "MaximumRecordAgeInSeconds": true, "FilterCriteria": true}
		for k := range exact {
			known[k] = true
		}
		for k := range p {
			if !known[k] {
				t.Errorf("unexpected stream event property %s = %s", k, canon(p[k]))
			}
		}
	})
}

func TestSweeperSchedule(t *testing.T) {
	tmpl := loadTemplate(t)
	events, _ := at(tmpl, "Resources", "SweeperFunction", "Properties", "Events").(map[string]any)
	if len(events) != 1 {
		t.Fatalf("sweeper has %d events, want exactly the schedule: %s", len(events), canon(events))
	}
	for _, ev := range events {
		// Schedule (an EventBridge rule), not ScheduleV2 (EventBridge
		// Scheduler), which LocalStack does not run.
		if at(ev, "Type") != "Schedule" {
			t.Errorf("sweeper event type %s, want Schedule", canon(at(ev, "Type")))
		}
		if got := at(ev, "Properties", "Schedule"); got != "rate(1 minute)" {
			t.Errorf("Schedule = %s, want rate(1 minute)", canon(got))
		}
		if got := at(ev, "Properties", "Enabled"); got != nil && got != true {
			t.Errorf("Enabled = %s", canon(got))
		}
	}
}

func TestParameters(t *testing.T) {
	tmpl := loadTemplate(t)
	tests := []struct {
		name string
		want string // the parameter's definition as YAML, Description aside
	}{
		{"KafkaBootstrapServers", "{Type: String, MinLength: 1}"},
		{"KafkaAuthMode", "{Type: String, AllowedValues: [none, tls, mtls, sasl-scram-sha-256, sasl-scram-sha-512, msk-iam]}"},
		{"KafkaSaslSecretArn", `{Type: String, Default: ""}`},
		{"KafkaTlsCaSecretArn", `{Type: String, Default: ""}`},
		{"KafkaTlsClientCertSecretArn", `{Type: String, Default: ""}`},
		{"KafkaSecretsKmsKeyArn", `{Type: String, Default: ""}`},
		{"MskClusterArn", `{Type: String, Default: ""}`},
		{"VpcSubnetIds", `{Type: CommaDelimitedList, Default: ""}`},
		{"VpcSecurityGroupIds", `{Type: CommaDelimitedList, Default: ""}`},
		{"BucketCount", "{Type: Number, Default: 8, MinValue: 1, MaxValue: 4096}"},
		// What lambda/setup accepts (dynamo.MinRetention is an hour).
		{"OutboxMode", "{Type: String, Default: delete, AllowedValues: [delete, watermark]}"},
		{"OutboxRetentionHours", "{Type: Number, Default: 24, MinValue: 1, MaxValue: 8760}"},
		// The stream event source's limit is 10000 records per batch.
		{"StreamBatchSize", "{Type: Number, Default: 1000, MinValue: 1, MaxValue: 10000}"},
		{"StreamBatchingWindowSeconds", "{Type: Number, Default: 0, MinValue: 0, MaxValue: 300}"},
		{"OutboxBatchSize", "{Type: Number, Default: 500, MinValue: 1, MaxValue: 10000}"},
		{"Topics", `{Type: String, Default: ""}`},
		// Up to 6 regions: the global tables' replica slots.
		{"Regions", `{Type: String, Default: "", AllowedPattern: "^$|^[a-z0-9-]{1,32}(,[a-z0-9-]{1,32}){0,5}$"}`},
		// Region mode's stacks: create by default (one region).
		{"Tables", `{Type: String, Default: create, AllowedValues: [create, global, attach]}`},
		// The setup's MaxMessageBytes property check (lambda/setup).
		{"MaxMessageBytes", "{Type: Number, Default: 1048576, MinValue: 1024, MaxValue: 104857596}"},
		{"MessagesTableName", `{Type: String, Default: "", AllowedPattern: "^$|^[a-zA-Z0-9_.-]{3,255}$"}`},
		{"ControlTableName", `{Type: String, Default: "", AllowedPattern: "^$|^[a-zA-Z0-9_.-]{3,255}$"}`},
		// lambda/config's ranges (TestParametersMatchConfigRanges).
		{"LeaseDurationSeconds", "{Type: Number, Default: 30, MinValue: 12, MaxValue: 900}"},
		{"GapTimeoutSeconds", "{Type: Number, Default: 10, MinValue: 1, MaxValue: 3600}"},
		{"SweepMinAgeSeconds", "{Type: Number, Default: 10, MinValue: 0, MaxValue: 600}"},
		{"ParkStuckAfterSeconds", "{Type: Number, Default: 0, MinValue: 0, MaxValue: 604800}"},
		{"RelayConcurrency", "{Type: Number, Default: 0, MinValue: 0, MaxValue: 256}"},
		{"RelayTimeout", "{Type: Number, Default: 120, MinValue: 30, MaxValue: 900}"},
		{"SweeperTimeout", "{Type: Number, Default: 50, MinValue: 15, MaxValue: 55}"},
		{"FunctionMemorySize", "{Type: Number, Default: 512, MinValue: 128, MaxValue: 10240}"},
		{"RelayReservedConcurrency", "{Type: Number, Default: -1, MinValue: -1, MaxValue: 10000}"},
		{"SweeperReservedConcurrency", "{Type: Number, Default: -1, AllowedValues: [-1, 1]}"},
		{"Architecture", "{Type: String, Default: arm64, AllowedValues: [arm64, x86_64]}"},
		{"LogLevel", "{Type: String, Default: INFO, AllowedValues: [TRACE, DEBUG, INFO, WARN, ERROR, FATAL]}"},
		{"LogRetentionInDays", "{Type: Number, Default: 30, AllowedValues: [1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653]}"},
		{"AlarmTopicArn", `{Type: String, Default: ""}`},
		{"IteratorAgeAlarmMilliseconds", "{Type: Number, Default: 60000, MinValue: 1000}"},
		{"OldestPendingAgeAlarmSeconds", "{Type: Number, Default: 300, MinValue: 60}"},
		// Off by default: the function is for callers that cannot link
		// store/dynamo.
		{"EnableEnqueueFunction", `{Type: String, Default: "false", AllowedValues: ["true", "false"]}`},
		{"EnqueueBusinessTableArns", `{Type: CommaDelimitedList, Default: ""}`},
		// Capped, so a backlog of its callers cannot take the relay's
		// concurrency (TestEnqueueAsync); -1 = none, for accounts whose
		// limit cannot spare a reservation (0 and 1 refused: TestRules).
		{"EnqueueReservedConcurrency", "{Type: Number, Default: 10, MinValue: -1, MaxValue: 10000}"},
		// Off by default: consumers must read read_committed, and MSK IAM
		// needs Kafka 3.8 or later.
		{"KafkaTransactional", `{Type: String, Default: "false", AllowedValues: ["true", "false"]}`},
	}
	params, _ := tmpl["Parameters"].(map[string]any)
	seen := map[string]bool{}
	for _, tc := range tests {
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			p, ok := params[tc.name].(map[string]any)
			if !ok {
				t.Fatalf("parameter %s missing", tc.name)
			}
			got := map[string]any{}
			for k, v := range p {
				if k != "Description" {
					got[k] = v
				}
			}
			if want := cfn(t, tc.want); !reflect.DeepEqual(got, want) {
				t.Errorf("%s = %s, want %s", tc.name, canon(got), canon(want))
			}
			if d, _ := p["Description"].(string); strings.TrimSpace(d) == "" {
				t.Errorf("%s has no Description", tc.name)
			}
		})
	}
	for name := range params {
		if !seen[name] {
			t.Errorf("parameter %s is not covered by this test", name)
		}
	}
}

// scenario is one way to deploy the stack, and what each function must then
// be allowed and configured with.
type scenario struct {
	name   string
	params map[string]string
	// extra grants beyond each function's base set, for both functions.
	extra []grant
	// env: extra or changed environment variables beyond the base.
	env map[string]any
	vpc bool
	// alarmTopic is the AlarmTopicArn every alarm must notify, "" for none.
	alarmTopic string
	// reserved: ReservedConcurrentExecutions per function; absent = none.
	reserved map[string]any
}

const (
	secretARN  = "arn:aws:secretsmanager:us-east-1:123456789012:secret:outbox/kafka-AbCdEf"
	kmsKeyARN  = "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
	clusterARN = "arn:aws:kafka:us-east-1:123456789012:cluster/orders/0b1c2d3e-1111-2222-3333-444455556666-7"
	topicARNs  = "arn:aws:kafka:us-east-1:123456789012:topic/orders/0b1c2d3e-1111-2222-3333-444455556666-7/*"
	// txnIDARNs: the outbox's transactional ids (<messages table>-bucket-<n>)
	// on that cluster.
	txnIDARNs = "arn:aws:kafka:us-east-1:123456789012:transactional-id/orders/0b1c2d3e-1111-2222-3333-444455556666-7/<MessagesTable>-bucket-*"
	alarmARN  = "arn:aws:sns:us-east-1:123456789012:outbox-alarms"
)

func grants(actions []string, resource, condition string) []grant {
	out := make([]grant, len(actions))
	for i, a := range actions {
		out[i] = grant{Action: a, Resource: resource, Condition: condition}
	}
	return out
}

func join(lists ...[]grant) []grant {
	var out []grant
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// baseGrants is what a function needs whatever the parameters: the two
// tables item by item, its own log group and, for the relay, the stream and
// the failure queue.
func baseGrants(fn string) []grant {
	tables := join(
		grants([]string{"dynamodb:Query", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:DescribeTable"}, "<MessagesTable.Arn>", ""),
		grants([]string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:DescribeTable"}, "<ControlTable.Arn>", ""),
	)
	switch fn {
	case "RelayFunction":
		return join(tables,
			grants([]string{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}, "<MessagesTable.StreamArn>", ""),
			// ListStreams takes no resource but "*" (a narrower ARN grants nothing).
			grants([]string{"dynamodb:ListStreams"}, "*", ""),
			grants([]string{"sqs:SendMessage"}, "<RelayFailureQueue.Arn>", ""),
			grants([]string{"logs:CreateLogStream", "logs:PutLogEvents"}, "<RelayLogGroup.Arn>", ""),
		)
	case "SweeperFunction":
		return join(tables, grants([]string{"logs:CreateLogStream", "logs:PutLogEvents"}, "<SweeperLogGroup.Arn>", ""))
	}
	panic(fn)
}

var vpcActions = []string{"ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets",
	"ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"}

// mskGrants is the MSK IAM policy for a cluster ARN pattern and its topics'
// (mskiam_test.go derives the actions from the publisher's requests).
func mskGrants(cluster, topics string) []grant {
	return join(
		grants([]string{"kafka-cluster:Connect", "kafka-cluster:WriteDataIdempotently", "kafka-cluster:DescribeClusterDynamicConfiguration"}, cluster, ""),
		grants([]string{"kafka-cluster:DescribeTopic", "kafka-cluster:WriteData", "kafka-cluster:DescribeTopicDynamicConfiguration"}, topics, ""),
	)
}

// mskTopicGrants is mskGrants on a Topics list: the topic actions on each
// listed topic only (any cluster segments: Connect on cluster limits them).
func mskTopicGrants(cluster string, topics ...string) []grant {
	out := grants([]string{"kafka-cluster:Connect", "kafka-cluster:WriteDataIdempotently", "kafka-cluster:DescribeClusterDynamicConfiguration"}, cluster, "")
	for _, t := range topics {
		out = append(out, grants([]string{"kafka-cluster:DescribeTopic", "kafka-cluster:WriteData", "kafka-cluster:DescribeTopicDynamicConfiguration"},
			"arn:*:kafka:*:*:topic/*/*/"+t, "")...)
	}
	return out
}

// mskTxnGrants is the MSK IAM policy of the transactional mode: no
// idempotent producer, and the outbox's transactional ids (txnIDs).
func mskTxnGrants(cluster, topics, txnIDs string) []grant {
	return join(
		grants([]string{"kafka-cluster:Connect", "kafka-cluster:DescribeClusterDynamicConfiguration"}, cluster, ""),
		grants([]string{"kafka-cluster:DescribeTopic", "kafka-cluster:WriteData", "kafka-cluster:DescribeTopicDynamicConfiguration"}, topics, ""),
		grants([]string{"kafka-cluster:DescribeTransactionalId", "kafka-cluster:AlterTransactionalId"}, txnIDs, ""),
	)
}

const (
	caARN   = "arn:aws:secretsmanager:us-east-1:123456789012:secret:outbox/kafka-ca-GhIjKl"
	certARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:outbox/kafka-client-MnOpQr"
)

func scenarios() []scenario {
	secret := func(arns ...string) []grant {
		var out []grant
		for _, a := range arns {
			out = append(out, grant{Action: "secretsmanager:GetSecretValue", Resource: a})
		}
		return out
	}
	kms := grants([]string{"kms:Decrypt"}, kmsKeyARN, `{"StringEquals":{"kms:ViaService":"secretsmanager.us-east-1.amazonaws.com"}}`)
	return []scenario{
		{name: "no auth", params: map[string]string{"KafkaAuthMode": "none"}},
		{name: "tls", params: map[string]string{"KafkaAuthMode": "tls"}, env: map[string]any{"KAFKA_AUTH": "tls"}},
		{
			name:   "tls with a CA bundle",
			params: map[string]string{"KafkaAuthMode": "tls", "KafkaTlsCaSecretArn": caARN},
			extra:  secret(caARN),
			env:    map[string]any{"KAFKA_AUTH": "tls", "KAFKA_TLS_CA_SECRET_ARN": caARN},
		},
		{
			name:   "mtls",
			params: map[string]string{"KafkaAuthMode": "mtls", "KafkaTlsClientCertSecretArn": certARN},
			extra:  secret(certARN),
			env:    map[string]any{"KAFKA_AUTH": "mtls", "KAFKA_TLS_CLIENT_CERT_SECRET_ARN": certARN},
		},
		{
			name:   "mtls with a CA bundle and a customer managed key",
			params: map[string]string{"KafkaAuthMode": "mtls", "KafkaTlsClientCertSecretArn": certARN, "KafkaTlsCaSecretArn": caARN, "KafkaSecretsKmsKeyArn": kmsKeyARN},
			extra:  join(secret(caARN, certARN), kms),
			env:    map[string]any{"KAFKA_AUTH": "mtls", "KAFKA_TLS_CLIENT_CERT_SECRET_ARN": certARN, "KAFKA_TLS_CA_SECRET_ARN": caARN},
		},
		{
			name:   "sasl-scram-sha-512",
			params: map[string]string{"KafkaAuthMode": "sasl-scram-sha-512", "KafkaSaslSecretArn": secretARN},
			extra:  secret(secretARN),
			env:    map[string]any{"KAFKA_AUTH": "sasl-scram-sha-512", "KAFKA_SASL_SECRET_ARN": secretARN},
		},
		{
			name:   "sasl-scram-sha-256 with a CA bundle and a customer managed key",
			params: map[string]string{"KafkaAuthMode": "sasl-scram-sha-256", "KafkaSaslSecretArn": secretARN, "KafkaTlsCaSecretArn": caARN, "KafkaSecretsKmsKeyArn": kmsKeyARN},
			extra:  join(secret(secretARN, caARN), kms),
			env:    map[string]any{"KAFKA_AUTH": "sasl-scram-sha-256", "KAFKA_SASL_SECRET_ARN": secretARN, "KAFKA_TLS_CA_SECRET_ARN": caARN},
		},
		{
			// A key without secrets to decrypt grants nothing.
			name:   "kms key without secrets",
			params: map[string]string{"KafkaAuthMode": "tls", "KafkaSecretsKmsKeyArn": kmsKeyARN},
			env:    map[string]any{"KAFKA_AUTH": "tls"},
		},
		{
			name:   "msk-iam on a named cluster",
			params: map[string]string{"KafkaAuthMode": "msk-iam", "MskClusterArn": clusterARN},
			extra:  mskGrants(clusterARN, topicARNs),
			env:    map[string]any{"KAFKA_AUTH": "msk-iam"},
		},
		{
			// The stack's Topics scope the topic actions to those topics
			// (spaces around the commas are no part of a name).
			name:   "msk-iam on a named cluster, with topics",
			params: map[string]string{"KafkaAuthMode": "msk-iam", "MskClusterArn": clusterARN, "Topics": "orders, payments"},
			extra:  mskTopicGrants(clusterARN, "orders", "payments"),
			env:    map[string]any{"KAFKA_AUTH": "msk-iam", "OUTBOX_TOPICS": "orders, payments"},
		},
		{
			name:   "msk-iam without a cluster, with a topic",
			params: map[string]string{"KafkaAuthMode": "msk-iam", "Topics": "orders"},
			extra:  mskTopicGrants("arn:aws:kafka:us-east-1:123456789012:cluster/*/*", "orders"),
			env:    map[string]any{"KAFKA_AUTH": "msk-iam", "OUTBOX_TOPICS": "orders"},
		},
		{
			name:   "msk-iam without a cluster",
			params: map[string]string{"KafkaAuthMode": "msk-iam"},
			extra:  mskGrants("arn:aws:kafka:us-east-1:123456789012:cluster/*/*", "arn:aws:kafka:us-east-1:123456789012:topic/*/*/*"),
			env:    map[string]any{"KAFKA_AUTH": "msk-iam"},
		},
		{
			name:   "msk-iam, transactional, on a named cluster",
			params: map[string]string{"KafkaAuthMode": "msk-iam", "MskClusterArn": clusterARN, "KafkaTransactional": "true"},
			extra:  mskTxnGrants(clusterARN, topicARNs, txnIDARNs),
			env:    map[string]any{"KAFKA_AUTH": "msk-iam", "OUTBOX_KAFKA_TRANSACTIONAL": "true"},
		},
		{
			// A Tables attach stack may produce to a cluster in another
			// region (or account): the topics and transactional ids are
			// the cluster's, not the stack's region's.
			name: "msk-iam, transactional, on a cluster in another region and account",
			params: map[string]string{"KafkaAuthMode": "msk-iam", "MskClusterArn": strings.NewReplacer("us-east-1", "eu-west-1", "123456789012", "210987654321").Replace(clusterARN),
				"KafkaTransactional": "true"},
			extra: mskTxnGrants("arn:aws:kafka:eu-west-1:210987654321:cluster/orders/0b1c2d3e-1111-2222-3333-444455556666-7",
				"arn:aws:kafka:eu-west-1:210987654321:topic/orders/0b1c2d3e-1111-2222-3333-444455556666-7/*",
				"arn:aws:kafka:eu-west-1:210987654321:transactional-id/orders/0b1c2d3e-1111-2222-3333-444455556666-7/<MessagesTable>-bucket-*"),
			env: map[string]any{"KAFKA_AUTH": "msk-iam", "OUTBOX_KAFKA_TRANSACTIONAL": "true"},
		},
		{
			name:   "msk-iam, transactional, without a cluster",
			params: map[string]string{"KafkaAuthMode": "msk-iam", "KafkaTransactional": "true"},
			extra: mskTxnGrants("arn:aws:kafka:us-east-1:123456789012:cluster/*/*", "arn:aws:kafka:us-east-1:123456789012:topic/*/*/*",
				"arn:aws:kafka:us-east-1:123456789012:transactional-id/*/*/<MessagesTable>-bucket-*"),
			env: map[string]any{"KAFKA_AUTH": "msk-iam", "OUTBOX_KAFKA_TRANSACTIONAL": "true"},
		},
		{
			// Transactions without msk-iam grant nothing more (ACLs are the
			// cluster's business).
			name:   "transactional, no auth",
			params: map[string]string{"KafkaAuthMode": "none", "KafkaTransactional": "true"},
			env:    map[string]any{"OUTBOX_KAFKA_TRANSACTIONAL": "true"},
		},
		{
			name:   "vpc",
			params: map[string]string{"KafkaAuthMode": "none", "VpcSubnetIds": "subnet-1,subnet-2", "VpcSecurityGroupIds": "sg-1"},
			extra:  grants(vpcActions, "*", ""),
			vpc:    true,
		},
		{
			name:   "watermark",
			params: map[string]string{"KafkaAuthMode": "none", "OutboxMode": "watermark", "OutboxRetentionHours": "72"},
		},
		{
			name:       "alarm topic",
			params:     map[string]string{"KafkaAuthMode": "none", "AlarmTopicArn": alarmARN},
			alarmTopic: alarmARN,
		},
		{
			name: "tuned",
			params: map[string]string{"KafkaAuthMode": "none", "BucketCount": "64", "OutboxBatchSize": "200", "Topics": "orders,payments",
				"LeaseDurationSeconds": "45", "GapTimeoutSeconds": "20", "MaxMessageBytes": "2097152", "RelayConcurrency": "16",
				"RelayReservedConcurrency": "20", "SweeperReservedConcurrency": "1"},
			env: map[string]any{"OUTBOX_BATCH_SIZE": "200", "OUTBOX_TOPICS": "orders,payments",
				"OUTBOX_LEASE_DURATION": "45s", "OUTBOX_GAP_TIMEOUT": "20s", "OUTBOX_CONCURRENCY": "16"},
			reserved: map[string]any{"RelayFunction": "20", "SweeperFunction": "1"},
		},
	}
}

// setupGrants is what dynamo.Configure calls (iamcalls_test.go records
// them) plus the function's own log group.
func setupGrants() []grant {
	return join(
		grants([]string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DescribeTable"}, "<ControlTable.Arn>", ""),
		grants([]string{"dynamodb:Query", "dynamodb:PutItem", "dynamodb:DescribeTable"}, "<MessagesTable.Arn>", ""), // PutItem: an online BucketCount change fences a trailing hole
		grants([]string{"logs:CreateLogStream", "logs:PutLogEvents"}, "<SetupLogGroup.Arn>", ""),
	)
}

func baseEnv() map[string]any {
	return map[string]any{
		"OUTBOX_MESSAGES_TABLE":      "<MessagesTable>",
		"OUTBOX_CONTROL_TABLE":       "<ControlTable>",
		"OUTBOX_BATCH_SIZE":          "500",
		"OUTBOX_TOPICS":              "",
		"OUTBOX_LEASE_DURATION":      "30s",
		"OUTBOX_GAP_TIMEOUT":         "10s",
		"OUTBOX_SWEEP_MIN_AGE":       "10s",
		"OUTBOX_PARK_STUCK_AFTER":    "0s",
		"OUTBOX_CONCURRENCY":         "0",
		"OUTBOX_KAFKA_TRANSACTIONAL": "false",
		"KAFKA_BOOTSTRAP_SERVERS":    "b-1.example:9092,b-2.example:9092",
		"KAFKA_AUTH":                 "none",
		"OUTBOX_CONFIG_DIGEST":       "<OutboxConfig.ConfigDigest>",
	}
}

// TestScenarios evaluates the template under each scenario's parameters and
// compares every permission each role ends up with, and each function's
// environment and network, with exactly what the scenario needs.
func TestScenarios(t *testing.T) {
	tmpl := loadTemplate(t)
	roles := map[string]string{"RelayFunction": "RelayRole", "SweeperFunction": "SweeperRole"}
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			params := map[string]string{"KafkaBootstrapServers": "b-1.example:9092,b-2.example:9092"}
			for k, v := range sc.params {
				params[k] = v
			}
			e, err := newEvaluator(tmpl, params)
			if err != nil {
				t.Fatal(err)
			}
			if broken, err := brokenRules(e); err != nil || len(broken) > 0 {
				t.Fatalf("the template's Rules refuse these parameters: %v %v", broken, err)
			}
			for _, fn := range []string{"RelayFunction", "SweeperFunction"} {
				t.Run(fn, func(t *testing.T) {
					got, err := roleGrants(e, roles[fn])
					if err != nil {
						t.Fatal(err)
					}
					diffGrants(t, got, join(baseGrants(fn), sc.extra))
					for _, g := range got {
						if strings.Contains(g.Action, "*") {
							t.Errorf("wildcard action: %s", g)
						}
						// ec2: the VPC network-interface actions; ListStreams
						// names no resource type, so only * grants it.
						if g.Resource == "*" && !strings.HasPrefix(g.Action, "ec2:") && g.Action != "dynamodb:ListStreams" {
							t.Errorf("resource * outside the actions that take no resource: %s", g)
						}
					}

					props, err := e.Eval(function(t, tmpl, fn))
					if err != nil {
						t.Fatal(err)
					}
					wantEnv := baseEnv()
					for k, v := range sc.env {
						wantEnv[k] = v
					}
					if got := at(props, "Environment", "Variables"); !reflect.DeepEqual(got, wantEnv) {
						t.Errorf("environment\n got %s\nwant %s", canon(got), canon(wantEnv))
					}
					vpc := at(props, "VpcConfig")
					switch {
					case sc.vpc && !reflect.DeepEqual(vpc, map[string]any{"SubnetIds": []any{"subnet-1", "subnet-2"}, "SecurityGroupIds": []any{"sg-1"}}):
						t.Errorf("VpcConfig = %s, want the given subnets and security groups", canon(vpc))
					case !sc.vpc && vpc != nil:
						t.Errorf("VpcConfig = %s, want none", canon(vpc))
					}
					if got, want := at(props, "ReservedConcurrentExecutions"), sc.reserved[fn]; !reflect.DeepEqual(got, want) {
						t.Errorf("ReservedConcurrentExecutions = %s, want %s", canon(got), canon(want))
					}
				})
			}
			// The custom resource's function is the same in every scenario:
			// no VPC, no environment, its own few permissions.
			t.Run("SetupFunction", func(t *testing.T) {
				got, err := roleGrants(e, "SetupRole")
				if err != nil {
					t.Fatal(err)
				}
				diffGrants(t, got, setupGrants())
				props, err := e.Eval(function(t, tmpl, "SetupFunction"))
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range []string{"VpcConfig", "Environment", "ReservedConcurrentExecutions", "Events"} {
					if v := at(props, k); v != nil {
						t.Errorf("%s = %s, want none", k, canon(v))
					}
				}
			})
			t.Run("alarm actions", func(t *testing.T) {
				for _, name := range resourcesOfType(tmpl, "AWS::CloudWatch::Alarm") {
					p, err := e.Eval(at(tmpl, "Resources", name, "Properties"))
					if err != nil {
						t.Fatal(err)
					}
					for _, k := range []string{"AlarmActions", "OKActions"} {
						got := at(p, k)
						if sc.alarmTopic == "" && got != nil {
							t.Errorf("%s.%s = %s, want none", name, k, canon(got))
						}
						if sc.alarmTopic != "" && !reflect.DeepEqual(got, []any{sc.alarmTopic}) {
							t.Errorf("%s.%s = %s, want [%s]", name, k, canon(got), sc.alarmTopic)
						}
					}
				}
			})
		})
	}
}

func diffGrants(t *testing.T, got, want []grant) {
	t.Helper()
	count := map[string]int{}
	for _, g := range got {
		count[g.String()]++
	}
	for _, w := range want {
		count[w.String()]--
	}
	var extra, missing []string
	for k, n := range count {
		for ; n > 0; n-- {
			extra = append(extra, k)
		}
		for ; n < 0; n++ {
			missing = append(missing, k)
		}
	}
	sort.Strings(extra)
	sort.Strings(missing)
	for _, g := range extra {
		t.Errorf("granted but not needed: %s", g)
	}
	for _, g := range missing {
		t.Errorf("needed but not granted: %s", g)
	}
}

func resourcesOfType(tmpl map[string]any, typ string) []string {
	var out []string
	for name, r := range tmpl["Resources"].(map[string]any) {
		if at(r, "Type") == typ {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// TestDocsCoverParameters: docs/deploy.md names every template parameter and
// what a relay in a VPC needs.
func TestDocsCoverParameters(t *testing.T) {
	tmpl := loadTemplate(t)
	b, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for name := range tmpl["Parameters"].(map[string]any) {
		if !strings.Contains(doc, "`"+name+"`") {
			t.Errorf("docs/deploy.md does not document parameter `%s`", name)
		}
	}
	lower := strings.ToLower(doc)
	for _, want := range []string{"gateway endpoint", "interface endpoint", "nat", "lease", "timeout", "streambatchsize", "outboxbatchsize"} {
		if !strings.Contains(lower, want) {
			t.Errorf("docs/deploy.md does not mention %q", want)
		}
	}
}
