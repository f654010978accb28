package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/dynakafka/outbox/cdk"
)

// The tests share one synthesis, made in TestMain before any test runs: one
// CDK app with the example stack (as cdk.json configures it) and a stack
// per scenario below, each with one outbox. Starting jsii and synthesizing
// are the slow part (seconds); everything after reads the templates.

// scenario is one way to configure the outbox, as template.yaml parameter
// values (those not given keep their defaults). The same values become
// Props (same names) for the CDK stack.
type scenario struct {
	stack  string
	params map[string]string
}

const (
	secretARN  = "arn:aws:secretsmanager:us-east-1:123456789012:secret:outbox/kafka-AbCdEf"
	caARN      = "arn:aws:secretsmanager:us-east-1:123456789012:secret:outbox/kafka-ca-AbCdEf"
	certARN    = "arn:aws:secretsmanager:us-east-1:123456789012:secret:outbox/kafka-client-AbCdEf"
	kmsKeyARN  = "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
	clusterARN = "arn:aws:kafka:us-east-1:123456789012:cluster/orders/0b1c2d3e-1111-2222-3333-444455556666-7"
	alarmARN   = "arn:aws:sns:us-east-1:123456789012:outbox-alarms"
	exampleID  = "OutboxExample"
	outboxID   = "Outbox"
)

// scenarios: together they set every parameter to something other than its
// default (TestScenariosCoverParameters checks), and take every branch of
// the template's conditions.
var scenarios = []scenario{
	{stack: exampleID}, // params from cdk.json, see synthesize
	{stack: "Tuned", params: map[string]string{
		"KafkaBootstrapServers": "b-1.example:9096,b-2.example:9096", "KafkaAuthMode": "sasl-scram-sha-512",
		"KafkaSaslSecretArn": secretARN, "KafkaTlsCaSecretArn": caARN, "KafkaSecretsKmsKeyArn": kmsKeyARN,
		"VpcSubnetIds": "subnet-0123456789abcdef0,subnet-0fedcba9876543210", "VpcSecurityGroupIds": "sg-0123456789abcdef0",
		"BucketCount": "64", "StreamBatchSize": "100", "StreamBatchingWindowSeconds": "5", "OutboxBatchSize": "200",
		"Topics": "orders,payments", "Regions": "us-east-1,eu-west-1", "LeaseDurationSeconds": "45", "GapTimeoutSeconds": "20", "SweepMinAgeSeconds": "30", "ParkStuckAfterSeconds": "3600", "MaxMessageBytes": "2097152",
		"OutboxMode": "watermark", "OutboxRetentionHours": "72",
		"RelayConcurrency": "16", "RelayTimeout": "300", "SweeperTimeout": "30", "FunctionMemorySize": "1024",
		"RelayReservedConcurrency": "20", "SweeperReservedConcurrency": "1", "Architecture": "x86_64", "LogLevel": "DEBUG",
		"LogRetentionInDays": "90", "AlarmTopicArn": alarmARN, "IteratorAgeAlarmMilliseconds": "120000",
		"OldestPendingAgeAlarmSeconds": "600",
		"EnableEnqueueFunction":        "true", "EnqueueBusinessTableArns": "arn:aws:dynamodb:us-east-1:123456789012:table/orders,arn:aws:dynamodb:us-east-1:123456789012:table/payments",
		"EnqueueReservedConcurrency": "25",
	}},
	{stack: "Scram256", params: map[string]string{"KafkaBootstrapServers": "b-1.example:9096", "KafkaAuthMode": "sasl-scram-sha-256", "KafkaSaslSecretArn": secretARN}},
	{stack: "Mtls", params: map[string]string{"KafkaBootstrapServers": "kafka.example:9093", "KafkaAuthMode": "mtls",
		"KafkaTlsClientCertSecretArn": certARN, "KafkaTlsCaSecretArn": caARN, "KafkaSecretsKmsKeyArn": kmsKeyARN}},
	{stack: "MskIamCluster", params: map[string]string{"KafkaBootstrapServers": "b-1.example:9098", "KafkaAuthMode": "msk-iam", "MskClusterArn": clusterARN}},
	{stack: "MskIamAnyCluster", params: map[string]string{"KafkaBootstrapServers": "b-1.example:9098", "KafkaAuthMode": "msk-iam"}},
	// Topics scope the topic actions to the listed topics.
	{stack: "MskIamClusterTopics", params: map[string]string{"KafkaBootstrapServers": "b-1.example:9098", "KafkaAuthMode": "msk-iam", "MskClusterArn": clusterARN,
		"Topics": "orders, payments"}},
	// Transactional producers: the transactional-id statement, no
	// WriteDataIdempotently, on one cluster and on any.
	{stack: "MskIamTxnCluster", params: map[string]string{"KafkaBootstrapServers": "b-1.example:9098", "KafkaAuthMode": "msk-iam", "MskClusterArn": clusterARN,
		"KafkaTransactional": "true"}},
	// A cluster in another region and account (a Tables attach stack's
	// cluster may be elsewhere): its topics and transactional ids are there.
	{stack: "MskIamTxnClusterElsewhere", params: map[string]string{"KafkaBootstrapServers": "b-1.example:9098", "KafkaAuthMode": "msk-iam",
		"MskClusterArn": "arn:aws:kafka:eu-west-1:210987654321:cluster/orders/0b1c2d3e-1111-2222-3333-444455556666-7", "KafkaTransactional": "true"}},
	{stack: "MskIamTxnAnyCluster", params: map[string]string{"KafkaBootstrapServers": "b-1.example:9098", "KafkaAuthMode": "msk-iam", "KafkaTransactional": "true"}},
	// Settings that only apply to other modes, and that the template's
	// Rules do not refuse, are ignored, as the template ignores them.
	{stack: "Plaintext", params: map[string]string{"KafkaBootstrapServers": "localhost:9092", "KafkaAuthMode": "none",
		"KafkaSecretsKmsKeyArn": kmsKeyARN, "MskClusterArn": clusterARN}},
	// Region mode, one stack per region: the first creates the global
	// tables with their replicas, every other attaches to its region's
	// replicas (the stream ARN from the setup function), here with
	// transactional MSK producers, whose ids name the attached table.
	{stack: "RegionGlobal", params: map[string]string{"KafkaBootstrapServers": "localhost:9092", "KafkaAuthMode": "none",
		"Regions": "us-east-1,eu-west-1,ap-southeast-2", "BucketCount": "12", "Tables": "global"}},
	{stack: "RegionAttach", params: map[string]string{"KafkaBootstrapServers": "b-1.example:9098", "KafkaAuthMode": "msk-iam", "KafkaTransactional": "true",
		"Regions": "eu-west-1,us-east-1", "Tables": "attach", "MessagesTableName": "outbox-MessagesGlobalTable-1A2B3C", "ControlTableName": "outbox-ControlGlobalTable-4D5E6F"}},
	// The enqueue function without business tables: outbox messages only.
	{stack: "EnqueueOnly", params: map[string]string{"KafkaBootstrapServers": "localhost:9092", "KafkaAuthMode": "none",
		"EnableEnqueueFunction": "true"}},
	// Without its reservation, for an account whose limit cannot spare one.
	{stack: "EnqueueUncapped", params: map[string]string{"KafkaBootstrapServers": "localhost:9092", "KafkaAuthMode": "none",
		"EnableEnqueueFunction": "true", "EnqueueReservedConcurrency": "-1"}},
}

// synthesized is what TestMain's synthesis produced.
type synthesized struct {
	err       error
	dir       string
	sam       map[string]any               // template.yaml after the SAM transform
	templates map[string]map[string]any    // by stack name
	names     map[string]map[string]string // by stack: logical id -> path below the outbox
	paths     map[string]map[string]string // by stack: logical id -> construct path
	params    map[string]map[string]string // by stack: the scenario's parameter values
	stacks    []string                     // in scenario order
	timing    string                       // how long the phases took, for the log
}

var synth synthesized

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outboxcdk-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	synth = synthesize(dir)
	if synth.err == nil {
		// A measurement for the log, not an assertion.
		fmt.Println("cdk:", synth.timing)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// results returns the synthesis, or fails the test with why there is none.
func results(t *testing.T) *synthesized {
	t.Helper()
	if synth.err != nil {
		t.Fatalf("synthesis failed: %v", synth.err)
	}
	return &synth
}

// placeholderBootstrap stands in for `make build`'s binaries: the templates
// do not depend on the code (only the asset hash in the S3 key does), and
// building it for linux/arm64 would put minutes of compiling into the test.
const placeholderBootstrap = "#!/bin/sh\n# placeholder for the bootstrap `make build` writes\nexit 1\n"

// functions are the folders under lambda/ that the construct deploys.
var functions = []string{"relay", "sweeper", "setup", "enqueue"}

func synthesize(dir string) (s synthesized) {
	s = synthesized{dir: dir, templates: map[string]map[string]any{}, names: map[string]map[string]string{},
		paths: map[string]map[string]string{}, params: map[string]map[string]string{}}
	defer func() {
		if r := recover(); r != nil {
			s.err = fmt.Errorf("panic: %v", r)
		}
	}()
	if s.sam, s.err = samTransform("../../template.yaml"); s.err != nil {
		return s
	}
	bin := filepath.Join(dir, "bin")
	for _, fn := range functions {
		for _, arch := range []string{"arm64", "amd64"} {
			p := filepath.Join(bin, fn, arch, "bootstrap")
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				s.err = err
				return s
			}
			if err := os.WriteFile(p, []byte(placeholderBootstrap), 0o755); err != nil {
				s.err = err
				return s
			}
		}
	}
	ctx, err := exampleContext()
	if err != nil {
		s.err = err
		return s
	}
	ctx["binDir"] = bin
	// What the cdk CLI turns on for `cdk synth`, so the templates are the
	// ones users deploy.
	ctx["aws:cdk:enable-path-metadata"] = true
	ctx["aws:cdk:enable-asset-metadata"] = true
	ctx["aws:cdk:version-reporting"] = true
	out := filepath.Join(dir, "cdk.out")
	defer jsii.Close()
	start := time.Now()
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(out), Context: &ctx})
	loaded := time.Now()
	outboxes := map[string]*outboxcdk.Outbox{}
	for _, sc := range scenarios {
		var ob *outboxcdk.Outbox
		if sc.stack == exampleID {
			sc.params = map[string]string{"KafkaBootstrapServers": ctx["kafkaBootstrapServers"].(string), "KafkaAuthMode": ctx["kafkaAuthMode"].(string)}
			_, ob, err = NewStack(app, exampleID, propsFromContext(app))
		} else {
			var props *outboxcdk.Props
			if props, err = propsFor(sc.params); err == nil {
				props.BinDir = jsii.String(bin)
				ob, err = outboxcdk.New(awscdk.NewStack(app, jsii.String(sc.stack), nil), outboxID, props)
			}
		}
		if err != nil {
			s.err = fmt.Errorf("stack %s: %w", sc.stack, err)
			return s
		}
		s.stacks = append(s.stacks, sc.stack)
		s.params[sc.stack] = sc.params
		outboxes[sc.stack] = ob
	}
	for stack, ob := range outboxes {
		s.names[stack], s.paths[stack] = logicalIDs(ob)
	}
	built := time.Now()
	app.Synth(nil)
	done := time.Now()
	s.timing = fmt.Sprintf("%d stacks: jsii loads aws-cdk-lib %.1fs, construction %.1fs, synthesis %.1fs",
		len(s.stacks), loaded.Sub(start).Seconds(), built.Sub(loaded).Seconds(), done.Sub(built).Seconds())
	for _, stack := range s.stacks {
		b, err := os.ReadFile(filepath.Join(out, stack+".template.json"))
		if err == nil {
			var tmpl map[string]any
			err = json.Unmarshal(b, &tmpl)
			s.templates[stack] = tmpl
		}
		if err != nil {
			s.err = fmt.Errorf("stack %s: %w", stack, err)
			return s
		}
	}
	return s
}

// logicalIDs maps the logical id of every CloudFormation element below the
// outbox to its construct path below the outbox, without a trailing
// /Resource (an L2 construct's resource): "MessagesTable", "RelayFunction".
// These paths are the template.yaml logical ids by design.
func logicalIDs(ob *outboxcdk.Outbox) (names, paths map[string]string) {
	names, paths = map[string]string{}, map[string]string{}
	stack := awscdk.Stack_Of(ob)
	root := *ob.Node().Path() + "/"
	for _, c := range *ob.Node().FindAll(constructs.ConstructOrder_PREORDER) {
		if !*awscdk.CfnElement_IsCfnElement(c) {
			continue
		}
		var el awscdk.CfnElement
		jsii.UnsafeCast(c, &el)
		id := *stack.GetLogicalId(el)
		path := *c.Node().Path()
		names[id] = strings.TrimSuffix(strings.TrimPrefix(path, root), "/Resource")
		paths[id] = path
	}
	return names, paths
}

// exampleContext is the "context" object of cdk.json.
func exampleContext() (map[string]any, error) {
	b, err := os.ReadFile("cdk.json")
	if err != nil {
		return nil, err
	}
	var cfg struct {
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("cdk.json: %w", err)
	}
	return cfg.Context, nil
}

// propsFor turns template parameter values into Props: each parameter sets
// the field of the same name.
func propsFor(params map[string]string) (*outboxcdk.Props, error) {
	p := &outboxcdk.Props{}
	v := reflect.ValueOf(p).Elem()
	for name, val := range params {
		f := v.FieldByName(name)
		if !f.IsValid() {
			return nil, fmt.Errorf("Props has no field %s for the parameter of that name", name)
		}
		switch f.Interface().(type) {
		case *string:
			f.Set(reflect.ValueOf(jsii.String(val)))
		case *float64:
			n, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return nil, fmt.Errorf("%s=%q: %w", name, val, err)
			}
			f.Set(reflect.ValueOf(jsii.Number(n)))
		case *[]*string:
			f.Set(reflect.ValueOf(jsii.Strings(strings.Split(val, ",")...)))
		default:
			return nil, fmt.Errorf("Props.%s is a %s", name, f.Type())
		}
	}
	return p, nil
}

// samTransform runs the SAM translator (Python, as cfn-lint uses it) on the
// template.
func samTransform(path string) (map[string]any, error) {
	cmd := exec.Command("python3", "testdata/sam_transform.py", path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("SAM transform of %s (needs python3 with aws-sam-translator, which `pip install cfn-lint` brings): %v\n%s", path, err, stderr.String())
	}
	var tmpl map[string]any
	if err := json.Unmarshal(out, &tmpl); err != nil {
		return nil, fmt.Errorf("SAM transform output: %w", err)
	}
	return tmpl, nil
}
