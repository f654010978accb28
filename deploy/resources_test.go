package deploy

import (
	"encoding/json"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dynakafka/outbox/lambda/config"
)

// TestRetainPolicies: what holds data or evidence survives a stack
// deletion and a replacement: the tables (the outbox itself), the failure
// queue and the log groups.
func TestRetainPolicies(t *testing.T) {
	tmpl := loadTemplate(t)
	var names []string
	for _, typ := range []string{"AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::Logs::LogGroup"} {
		names = append(names, resourcesOfType(tmpl, typ)...)
	}
	if len(names) != 2+2+4 {
		t.Errorf("resources with data: %v, want 2 tables, 2 queues (relay, enqueue), 4 log groups (relay, sweeper, setup, enqueue)", names)
	}
	for _, name := range names {
		for _, k := range []string{"DeletionPolicy", "UpdateReplacePolicy"} {
			if got := at(tmpl, "Resources", name, k); got != "Retain" {
				t.Errorf("%s.%s = %s, want Retain", name, k, canon(got))
			}
		}
	}
}

func TestLogGroups(t *testing.T) {
	tmpl := loadTemplate(t)
	for _, fn := range []string{"RelayFunction", "SweeperFunction", "SetupFunction", "EnqueueFunction"} {
		t.Run(fn, func(t *testing.T) {
			want := map[string]any{
				"LogGroupName":    cfn(t, `!Sub "/aws/lambda/${`+fn+`}"`),
				"RetentionInDays": cfn(t, "!Ref LogRetentionInDays"),
			}
			found := 0
			for _, name := range resourcesOfType(tmpl, "AWS::Logs::LogGroup") {
				if reflect.DeepEqual(at(tmpl, "Resources", name, "Properties"), want) {
					found++
				}
			}
			if found != 1 {
				t.Errorf("%d log groups %s, want 1", found, canon(want))
			}
		})
	}
}

func TestOutputs(t *testing.T) {
	tmpl := loadTemplate(t)
	// The tables and stream of the stack's Tables shape (TestStackShapes
	// evaluates each).
	want := map[string]string{
		"MessagesTableName":      "!If [AttachTables, !Ref MessagesTableName, !If [GlobalTables, !Ref MessagesGlobalTable, !Ref MessagesTable]]",
		"ControlTableName":       "!If [AttachTables, !Ref ControlTableName, !If [GlobalTables, !Ref ControlGlobalTable, !Ref ControlTable]]",
		"MessagesTableStreamArn": "!If [AttachTables, !GetAtt OutboxConfig.MessagesStreamArn, !If [GlobalTables, !GetAtt MessagesGlobalTable.StreamArn, !GetAtt MessagesTable.StreamArn]]",
		"BucketCount":            "!GetAtt OutboxConfig.BucketCount",
		"WriterPolicyArn":        "!Ref WriterPolicy",
		"RelayFunctionName":      "!Ref RelayFunction",
		"SweeperFunctionName":    "!Ref SweeperFunction",
		"RelayFailureQueueUrl":   "!Ref RelayFailureQueue",
		"RelayFailureQueueArn":   "!GetAtt RelayFailureQueue.Arn",
		"DashboardName":          "!Ref Dashboard",
		"EnqueueFunctionArn":     "!GetAtt EnqueueFunction.Arn",
		"EnqueueInvokePolicyArn": "!Ref EnqueueInvokePolicy",
		"EnqueueRoleName":        "!Ref EnqueueRole",
		"EnqueueFailureQueueUrl": "!Ref EnqueueFailureQueue",
	}
	outputs, _ := tmpl["Outputs"].(map[string]any)
	for name, src := range want {
		t.Run(name, func(t *testing.T) {
			if got, w := at(outputs, name, "Value"), cfn(t, src); !reflect.DeepEqual(got, w) {
				t.Errorf("Outputs.%s.Value = %s, want %s", name, canon(got), canon(w))
			}
		})
	}
	if len(outputs) != len(want) {
		t.Errorf("%d outputs, want %d", len(outputs), len(want))
	}
}

// TestCustomResourceInTemplate: the stack writes the config item through
// lambda/setup with exactly the properties its handler reads (those of the
// CloudFormation event fixtures its tests use), before the functions that
// need the item exist.
func TestCustomResourceInTemplate(t *testing.T) {
	tmpl := loadTemplate(t)
	r := at(tmpl, "Resources", "OutboxConfig")
	if got := at(r, "Type"); got != "Custom::OutboxConfig" {
		t.Fatalf("OutboxConfig is %s, want Custom::OutboxConfig", canon(got))
	}
	want := cfn(t, `
ServiceToken: !GetAtt SetupFunction.Arn
ServiceTimeout: 600
MessagesTable: !If [AttachTables, !Ref MessagesTableName, !If [GlobalTables, !Ref MessagesGlobalTable, !Ref MessagesTable]]
ControlTable: !If [AttachTables, !Ref ControlTableName, !If [GlobalTables, !Ref ControlGlobalTable, !Ref ControlTable]]
BucketCount: !Ref BucketCount
Mode: !Ref OutboxMode
RetentionHours: !Ref OutboxRetentionHours
MaxMessageBytes: !Ref MaxMessageBytes
Topics: !Ref Topics
Regions: !Ref Regions
Tables: !Ref Tables
Region: !Ref AWS::Region`)
	if got := at(r, "Properties"); !reflect.DeepEqual(got, want) {
		t.Errorf("OutboxConfig.Properties = %s, want %s", canon(got), canon(want))
	}
	// Its logs exist (and may be written) before it first runs.
	if got := at(r, "DependsOn"); !reflect.DeepEqual(got, cfn(t, "[SetupLogGroup, SetupLogsPolicy]")) {
		t.Errorf("OutboxConfig.DependsOn = %s", canon(got))
	}
	// Deleting the stack calls the handler (which never fails a delete).
	if p := at(r, "DeletionPolicy"); p != nil {
		t.Errorf("OutboxConfig.DeletionPolicy = %s, want the default", canon(p))
	}
	for _, fixture := range []string{"create", "update", "delete"} {
		b, err := os.ReadFile("../lambda/setup/testdata/" + fixture + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var ev struct {
			ResourceType       string
			ResourceProperties map[string]any
		}
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Fatalf("%s.json: %v", fixture, err)
		}
		if ev.ResourceType != "Custom::OutboxConfig" {
			t.Errorf("%s.json: ResourceType %s", fixture, ev.ResourceType)
		}
		var got, want []string
		for k := range ev.ResourceProperties {
			got = append(got, k)
		}
		for k := range at(r, "Properties").(map[string]any) {
			if k != "ServiceTimeout" { // CloudFormation's own; not passed on
				want = append(want, k)
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s.json has properties %v, the template sends %v", fixture, got, want)
		}
	}
}

// TestParametersMatchConfigRanges: the template refuses what the functions
// would refuse at init, and nothing they accept. (BucketCount and
// MaxMessageBytes are the setup's, not the functions': TestParameters pins
// them, lambda/setup's tests its checks.)
func TestParametersMatchConfigRanges(t *testing.T) {
	tmpl := loadTemplate(t)
	params := map[string]string{
		"OUTBOX_BATCH_SIZE":       "OutboxBatchSize",
		"OUTBOX_CONCURRENCY":      "RelayConcurrency",
		"OUTBOX_LEASE_DURATION":   "LeaseDurationSeconds",
		"OUTBOX_GAP_TIMEOUT":      "GapTimeoutSeconds",
		"OUTBOX_SWEEP_MIN_AGE":    "SweepMinAgeSeconds",
		"OUTBOX_PARK_STUCK_AFTER": "ParkStuckAfterSeconds",
	}
	for _, r := range config.Ranges {
		name, ok := params[r.Variable]
		if !ok {
			t.Errorf("no template parameter for %s", r.Variable)
			continue
		}
		if r.Unit != 0 && r.Unit != time.Second {
			t.Errorf("%s: unit %v; the template's parameters are in seconds", r.Variable, r.Unit)
		}
		p := at(tmpl, "Parameters", name)
		if lo, hi := num(t, at(p, "MinValue")), num(t, at(p, "MaxValue")); lo != float64(r.Min) || hi != float64(r.Max) {
			t.Errorf("%s allows %v..%v, %s allows %v", name, lo, hi, r.Variable, r)
		}
	}
	var modes []string
	for _, m := range at(tmpl, "Parameters", "KafkaAuthMode", "AllowedValues").([]any) {
		modes = append(modes, m.(string))
	}
	if !reflect.DeepEqual(modes, config.AuthModes) {
		t.Errorf("KafkaAuthMode allows %v, KAFKA_AUTH %v", modes, config.AuthModes)
	}
}

// TestRules: parameter sets the functions would refuse at init, or that
// would deploy a half-configured network, are refused by the template's
// Rules before anything is created.
func TestRules(t *testing.T) {
	tmpl := loadTemplate(t)
	const (
		vpc        = "Give VpcSubnetIds and VpcSecurityGroupIds together"
		saslOnly   = "KafkaSaslSecretArn is used only by"
		scram256   = "KafkaAuthMode sasl-scram-sha-256 needs KafkaSaslSecretArn."
		scram512   = "KafkaAuthMode sasl-scram-sha-512 needs KafkaSaslSecretArn."
		mtls       = "KafkaAuthMode mtls needs KafkaTlsClientCertSecretArn."
		certOnly   = "KafkaTlsClientCertSecretArn is used only by"
		caTLS      = "KafkaTlsCaSecretArn needs a TLS mode"
		zeroRelay  = "RelayReservedConcurrency 0"
		enqueueCap = "EnqueueReservedConcurrency 0 would throttle"
		tablesRM   = "Tables global and attach are region mode's"
		attachIn   = "Tables attach needs MessagesTableName"
		namesOnly  = "MessagesTableName and ControlTableName are used only by"
	)
	cases := []struct {
		name   string
		params map[string]string
		broken []string // prefixes of the failing assertions' descriptions
	}{
		{"defaults", nil, nil},
		{"vpc", map[string]string{"VpcSubnetIds": "subnet-1", "VpcSecurityGroupIds": "sg-1"}, nil},
		{"subnets without security groups", map[string]string{"VpcSubnetIds": "subnet-1,subnet-2"}, []string{vpc}},
		{"security groups without subnets", map[string]string{"VpcSecurityGroupIds": "sg-1"}, []string{vpc}},
		{"scram-256 without a secret", map[string]string{"KafkaAuthMode": "sasl-scram-sha-256"}, []string{scram256}},
		{"scram-512 without a secret", map[string]string{"KafkaAuthMode": "sasl-scram-sha-512"}, []string{scram512}},
		{"scram-512 with a secret", map[string]string{"KafkaAuthMode": "sasl-scram-sha-512", "KafkaSaslSecretArn": secretARN}, nil},
		{"a sasl secret with tls", map[string]string{"KafkaAuthMode": "tls", "KafkaSaslSecretArn": secretARN}, []string{saslOnly}},
		{"a sasl secret with msk-iam", map[string]string{"KafkaAuthMode": "msk-iam", "KafkaSaslSecretArn": secretARN}, []string{saslOnly}},
		{"mtls without a certificate", map[string]string{"KafkaAuthMode": "mtls"}, []string{mtls}},
		{"a certificate with tls", map[string]string{"KafkaAuthMode": "tls", "KafkaTlsClientCertSecretArn": certARN}, []string{certOnly}},
		{"a CA bundle in plaintext", map[string]string{"KafkaTlsCaSecretArn": caARN}, []string{caTLS}},
		{"a CA bundle with msk-iam", map[string]string{"KafkaAuthMode": "msk-iam", "KafkaTlsCaSecretArn": caARN}, nil},
		{"relay reserved 0", map[string]string{"RelayReservedConcurrency": "0"}, []string{zeroRelay}},
		{"relay reserved 5", map[string]string{"RelayReservedConcurrency": "5"}, nil},
		{"enqueue reserved 0", map[string]string{"EnableEnqueueFunction": "true", "EnqueueReservedConcurrency": "0"}, []string{enqueueCap}},
		{"enqueue reserved 1", map[string]string{"EnableEnqueueFunction": "true", "EnqueueReservedConcurrency": "1"}, []string{enqueueCap}},
		{"enqueue reserved 2", map[string]string{"EnableEnqueueFunction": "true", "EnqueueReservedConcurrency": "2"}, nil},
		{"enqueue reserved none", map[string]string{"EnableEnqueueFunction": "true", "EnqueueReservedConcurrency": "-1"}, nil},
		{"global tables", map[string]string{"Tables": "global", "Regions": "us-east-1,eu-west-1"}, nil},
		{"global tables without Regions", map[string]string{"Tables": "global"}, []string{tablesRM}},
		{"attach", map[string]string{"Tables": "attach", "Regions": "us-east-1,eu-west-1", "MessagesTableName": "m-t", "ControlTableName": "c-t"}, nil},
		{"attach without Regions", map[string]string{"Tables": "attach", "MessagesTableName": "m-t", "ControlTableName": "c-t"}, []string{tablesRM}},
		{"attach without the control table", map[string]string{"Tables": "attach", "Regions": "us-east-1,eu-west-1", "MessagesTableName": "m-t"}, []string{attachIn}},
		{"table names without attach", map[string]string{"Tables": "global", "Regions": "us-east-1,eu-west-1", "MessagesTableName": "m-t", "ControlTableName": "c-t"}, []string{namesOnly}},
		{"everything wrong at once", map[string]string{"KafkaAuthMode": "none", "KafkaSaslSecretArn": secretARN, "KafkaTlsClientCertSecretArn": certARN,
			"KafkaTlsCaSecretArn": caARN, "VpcSubnetIds": "subnet-1", "RelayReservedConcurrency": "0"},
			[]string{vpc, caTLS, certOnly, saslOnly, zeroRelay}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			params := map[string]string{"KafkaBootstrapServers": "b:9092", "KafkaAuthMode": "none"}
			for k, v := range c.params {
				params[k] = v
			}
			e, err := newEvaluator(tmpl, params)
			if err != nil {
				t.Fatal(err)
			}
			got, err := brokenRules(e)
			if err != nil {
				t.Fatal(err)
			}
			want := append([]string(nil), c.broken...)
			sort.Strings(want)
			ok := len(got) == len(want)
			for i := 0; ok && i < len(got); i++ {
				ok = strings.HasPrefix(got[i], want[i])
			}
			if !ok {
				t.Errorf("broken rules %q, want %q", got, want)
			}
		})
	}
}

// TestLoggingLevels: the levels the template offers are those Lambda's
// advanced logging controls accept and wiring.Logger understands
// (lambda/wiring's TestLoggerLevelFromLambda).
func TestLoggingLevels(t *testing.T) {
	tmpl := loadTemplate(t)
	got := at(tmpl, "Parameters", "LogLevel", "AllowedValues")
	if want := cfn(t, "[TRACE, DEBUG, INFO, WARN, ERROR, FATAL]"); !reflect.DeepEqual(got, want) {
		t.Errorf("LogLevel allows %s, want %s", canon(got), canon(want))
	}
}

// TestDocsRunbook: docs/deploy.md explains every alarm and the BucketCount
// procedure, and docs/failures.md says which alarm fires for each fault.
func TestDocsRunbook(t *testing.T) {
	tmpl := loadTemplate(t)
	deploy, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range resourcesOfType(tmpl, "AWS::CloudWatch::Alarm") {
		if !strings.Contains(string(deploy), "`"+name+"`") {
			t.Errorf("docs/deploy.md does not explain alarm `%s`", name)
		}
	}
	for _, want := range []string{"outbox status", "Changing BucketCount", "sam deploy", "WriterPolicyArn", "AWS_MSK_IAM",
		// The SAM path's upgrade and rollback, the stream trigger's state,
		// why not to build in a container, the one unlisted variable.
		"## Upgrading and rolling back (SAM)", "continue-update-rollback", "aws lambda get-event-source-mapping",
		"sam build --use-container", "go.mod file not found", "OUTBOX_DYNAMODB_ENDPOINT"} {
		if !strings.Contains(string(deploy), want) {
			t.Errorf("docs/deploy.md does not mention %q", want)
		}
	}
	if strings.Contains(string(deploy), "OAUTHBEARER") {
		t.Error("docs/deploy.md still calls MSK IAM OAUTHBEARER; franz-go's mechanism is AWS_MSK_IAM")
	}
	failures, err := os.ReadFile("../docs/failures.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(failures), "| alarm") && !strings.Contains(string(failures), "| Alarm") {
		t.Error("docs/failures.md has no alarm column")
	}
}

// TestSharedParametersReachOnlyTheSetup: the stack's parameters for the
// outbox's shared settings (BucketCount, the mode and its retention,
// MaxMessageBytes) are the setup's inputs and nothing else's: the config
// item is where every function reads them (docs/design.md §12). A !Ref or
// ${...} of one anywhere but the OutboxConfig resource's properties (a
// function's environment, say) fails.
func TestSharedParametersReachOnlyTheSetup(t *testing.T) {
	tmpl := loadTemplate(t)
	shared := []string{"BucketCount", "OutboxMode", "OutboxRetentionHours", "MaxMessageBytes"}
	found := map[string]int{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				var used []string
				switch c := c.(type) {
				case string:
					for _, p := range shared {
						if k == "Ref" && c == p || k == "Fn::Sub" && strings.Contains(c, "${"+p+"}") {
							used = append(used, p)
						}
					}
				case []any:
					if s, ok := firstString(c); ok && k == "Fn::Sub" {
						for _, p := range shared {
							if strings.Contains(s, "${"+p+"}") {
								used = append(used, p)
							}
						}
					}
				}
				for _, p := range used {
					found[p]++
					if !strings.HasPrefix(path, "Resources/OutboxConfig/Properties/") {
						t.Errorf("%s uses the parameter %s: it is the setup's input only; read the setting from the config item", path, p)
					}
				}
				walk(path+"/"+k, c)
			}
		case []any:
			for i, c := range x {
				walk(path+"/"+strconv.Itoa(i), c)
			}
		}
	}
	for _, section := range []string{"Resources", "Outputs", "Rules", "Conditions", "Globals"} {
		walk(section, tmpl[section])
	}
	for _, p := range shared {
		if found[p] == 0 {
			t.Errorf("the parameter %s reaches nothing; is the walk broken, or the setup no longer given it?", p)
		}
	}
}

func firstString(l []any) (string, bool) {
	if len(l) == 0 {
		return "", false
	}
	s, ok := l[0].(string)
	return s, ok
}
