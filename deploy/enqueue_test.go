package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
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
	src, err := os.ReadFile("../docs/enqueue-recipes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	recipes, err := parseCFN(src)
	if err != nil {
		t.Fatal(err)
	}
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
// WriterPolicy's control-table statement), and the callers' four item
// actions on the business tables named, only when some are.
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
