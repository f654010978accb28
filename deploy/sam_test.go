package deploy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// samTransform is what CloudFormation does with the template's Transform,
// run with AWS's own translator (the Python package samtranslator, which
// the SAM CLI and cfn-lint use), after replacing each CodeUri by an S3
// location as `sam package` / `aws cloudformation package` do.
const samTransform = `
import json, sys
from cfnlint.decode import decode
from samtranslator.translator.transform import transform
tmpl, matches = decode(sys.argv[1])
if matches:
    sys.exit("decode: %s" % matches)
for name, r in tmpl.get("Resources", {}).items():
    if r.get("Type") == "AWS::Serverless::Function":
        r["Properties"]["CodeUri"] = "s3://artifacts/%s.zip" % name
class NoManagedPolicies:
    def load(self):
        return {}
out = transform(tmpl, {"KafkaBootstrapServers": "b:9092", "KafkaAuthMode": "none"}, NoManagedPolicies())
json.dump(out, sys.stdout, default=str)
`

// TestSAMTransform transforms the template and checks what SAM generates
// from it: one Lambda function per SAM function and no more roles than the
// template's own, the functions' dependencies on the config item, the
// logging settings, and the setup function outside the VPC without the
// shared environment.
func TestSAMTransform(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed, so the SAM transform was not run")
	}
	if exec.Command(py, "-c", "import samtranslator, cfnlint").Run() != nil {
		t.Skip("the Python packages samtranslator and cfn-lint are not installed, so the SAM transform was not run (pip install cfn-lint)")
	}
	script := filepath.Join(t.TempDir(), "transform.py")
	if err := os.WriteFile(script, []byte(samTransform), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script, "../template.yaml")
	cmd.Env = append(os.Environ(), "AWS_DEFAULT_REGION=us-east-1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("SAM transform: %v\n%s", err, stderr.String())
	}
	var tmpl map[string]any
	if err := json.Unmarshal(out, &tmpl); err != nil {
		t.Fatalf("transform output: %v", err)
	}
	byType := map[string][]string{}
	for name, r := range tmpl["Resources"].(map[string]any) {
		typ, _ := at(r, "Type").(string)
		if strings.HasPrefix(typ, "AWS::Serverless::") {
			t.Errorf("%s is still %s after the transform", name, typ)
		}
		byType[typ] = append(byType[typ], name)
	}
	for _, names := range byType {
		sort.Strings(names)
	}
	want := map[string][]string{
		"AWS::Lambda::Function":           {"EnqueueFunction", "RelayFunction", "SetupFunction", "SweeperFunction"},
		"AWS::IAM::Role":                  {"EnqueueRole", "RelayRole", "SetupRole", "SweeperRole"},
		"AWS::Lambda::EventSourceMapping": {"RelayFunctionMessagesStream"},
		"AWS::Events::Rule":               {"SweeperFunctionEveryMinute"},
		"Custom::OutboxConfig":            {"OutboxConfig"},
		"AWS::CloudWatch::Dashboard":      {"Dashboard"},
	}
	for typ, names := range want {
		if !reflect.DeepEqual(byType[typ], names) {
			t.Errorf("%s resources %v, want %v", typ, byType[typ], names)
		}
	}
	// Each function waits for its config item, and is replaced when a
	// setting it reads only at start changes: its environment takes the
	// setup's digest (a GetAtt, which orders it after OutboxConfig).
	for _, fn := range []string{"RelayFunction", "SweeperFunction", "EnqueueFunction"} {
		got := at(tmpl, "Resources", fn, "Properties", "Environment", "Variables", "OUTBOX_CONFIG_DIGEST")
		if want := map[string]any{"Fn::GetAtt": []any{"OutboxConfig", "ConfigDigest"}}; !reflect.DeepEqual(got, want) {
			t.Errorf("%s OUTBOX_CONFIG_DIGEST = %s, want %s: it could start before its config item exists, or outlive a change of it", fn, canon(got), canon(want))
		}
	}
	for _, fn := range byType["AWS::Lambda::Function"] {
		p := at(tmpl, "Resources", fn, "Properties")
		if got := at(p, "LoggingConfig", "LogFormat"); got != "JSON" {
			t.Errorf("%s LoggingConfig.LogFormat = %s", fn, canon(got))
		}
		if got := at(p, "LoggingConfig", "ApplicationLogLevel"); !reflect.DeepEqual(got, map[string]any{"Ref": "LogLevel"}) {
			t.Errorf("%s LoggingConfig.ApplicationLogLevel = %s", fn, canon(got))
		}
	}
	setup := at(tmpl, "Resources", "SetupFunction", "Properties")
	for _, k := range []string{"VpcConfig", "Environment"} {
		if got := at(setup, k); !reflect.DeepEqual(got, map[string]any{"Ref": "AWS::NoValue"}) {
			t.Errorf("SetupFunction %s = %s, want AWS::NoValue", k, canon(got))
		}
	}
	if at(tmpl, "Rules") == nil {
		t.Error("the transform dropped the Rules")
	}
}
