package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// The three stack shapes of Tables, evaluated: create (one region, or
// replicas by hand), global (region mode's first stack: both tables as
// global tables with a replica in every region) and attach (region mode's
// stack in every other region, on its replicas, with the stream ARN from
// the setup function). Each shape refers only to its own tables.
func TestStackShapes(t *testing.T) {
	tmpl := loadTemplate(t)
	const (
		msgs = "outbox-MessagesGlobalTable-1A2B3C"
		ctl  = "outbox-ControlGlobalTable-4D5E6F"
	)
	arn := func(name string) string { return "arn:aws:dynamodb:us-east-1:123456789012:table/" + name }
	shapes := []struct {
		name   string
		params map[string]string
		tables []string // the DynamoDB resources the stack creates
		// What every reference resolves to.
		msgName, msgArn, stream, ctlName, ctlArn string
		foreign                                  []string // references that must not occur
		replicas                                 []string // global: the replicas' regions
	}{
		{name: "create", tables: []string{"ControlTable", "MessagesTable"},
			msgName: "<MessagesTable>", msgArn: "<MessagesTable.Arn>", stream: "<MessagesTable.StreamArn>", ctlName: "<ControlTable>", ctlArn: "<ControlTable.Arn>",
			foreign: []string{"<MessagesGlobalTable", "<ControlGlobalTable", "<OutboxConfig.MessagesStreamArn>"}},
		{name: "create in region mode (replicas by hand)", params: map[string]string{"Regions": "us-east-1,eu-west-1", "BucketCount": "8"},
			tables:  []string{"ControlTable", "MessagesTable"},
			msgName: "<MessagesTable>", msgArn: "<MessagesTable.Arn>", stream: "<MessagesTable.StreamArn>", ctlName: "<ControlTable>", ctlArn: "<ControlTable.Arn>",
			foreign: []string{"<MessagesGlobalTable", "<ControlGlobalTable", "<OutboxConfig.MessagesStreamArn>"}},
		{name: "global", params: map[string]string{"Tables": "global", "Regions": "us-east-1,eu-west-1,ap-southeast-2", "BucketCount": "12"},
			tables:  []string{"ControlGlobalTable", "MessagesGlobalTable"},
			msgName: "<MessagesGlobalTable>", msgArn: "<MessagesGlobalTable.Arn>", stream: "<MessagesGlobalTable.StreamArn>",
			ctlName: "<ControlGlobalTable>", ctlArn: "<ControlGlobalTable.Arn>",
			foreign:  []string{"<MessagesTable", "<ControlTable", "<OutboxConfig.MessagesStreamArn>"},
			replicas: []string{"us-east-1", "eu-west-1", "ap-southeast-2"}},
		{name: "global with six regions", params: map[string]string{"Tables": "global", "Regions": "us-east-1,eu-west-1,ap-southeast-2,us-west-2,eu-central-1,sa-east-1", "BucketCount": "12"},
			tables:  []string{"ControlGlobalTable", "MessagesGlobalTable"},
			msgName: "<MessagesGlobalTable>", msgArn: "<MessagesGlobalTable.Arn>", stream: "<MessagesGlobalTable.StreamArn>",
			ctlName: "<ControlGlobalTable>", ctlArn: "<ControlGlobalTable.Arn>",
			foreign:  []string{"<MessagesTable", "<ControlTable"},
			replicas: []string{"us-east-1", "eu-west-1", "ap-southeast-2", "us-west-2", "eu-central-1", "sa-east-1"}},
		{name: "attach", params: map[string]string{"Tables": "attach", "Regions": "eu-west-1,us-east-1", "MessagesTableName": msgs, "ControlTableName": ctl,
			"KafkaAuthMode": "msk-iam", "KafkaTransactional": "true"},
			msgName: msgs, msgArn: arn(msgs), stream: "<OutboxConfig.MessagesStreamArn>", ctlName: ctl, ctlArn: arn(ctl),
			foreign: []string{"<MessagesTable", "<ControlTable", "<MessagesGlobalTable", "<ControlGlobalTable"}},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			params := map[string]string{"KafkaBootstrapServers": "b:9092", "KafkaAuthMode": "none"}
			for k, v := range sh.params {
				params[k] = v
			}
			e, err := newEvaluator(tmpl, params)
			if err != nil {
				t.Fatal(err)
			}
			if broken, err := brokenRules(e); err != nil || len(broken) > 0 {
				t.Fatalf("the Rules refuse it: %v %v", broken, err)
			}
			resources, _ := tmpl["Resources"].(map[string]any)
			var tables []string
			var all strings.Builder
			for name, r := range resources {
				ok, err := e.Included(name)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					continue
				}
				if typ, _ := at(r, "Type").(string); strings.HasPrefix(typ, "AWS::DynamoDB::") {
					tables = append(tables, name)
				}
				v, err := e.Eval(r)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				all.WriteString(canon(v))
			}
			outs, err := e.Eval(tmpl["Outputs"])
			if err != nil {
				t.Fatal(err)
			}
			all.WriteString(canon(outs))
			sort.Strings(tables)
			if !reflect.DeepEqual(tables, sh.tables) {
				t.Errorf("tables %v, want %v", tables, sh.tables)
			}
			for _, f := range sh.foreign {
				if strings.Contains(all.String(), f) {
					t.Errorf("the stack refers to %s…, a table of another shape", f)
				}
			}
			eval := func(path ...any) any {
				v, err := e.Eval(at(tmpl, path...))
				if err != nil {
					t.Fatalf("%v: %v", path, err)
				}
				return v
			}
			for _, c := range []struct {
				what string
				got  any
				want string
			}{
				{"the relay's event source", eval("Resources", "RelayFunction", "Properties", "Events", "MessagesStream", "Properties", "Stream"), sh.stream},
				{"OUTBOX_MESSAGES_TABLE", eval("Globals", "Function", "Environment", "Variables", "OUTBOX_MESSAGES_TABLE"), sh.msgName},
				{"OUTBOX_CONTROL_TABLE", eval("Globals", "Function", "Environment", "Variables", "OUTBOX_CONTROL_TABLE"), sh.ctlName},
				{"the config's MessagesTable", eval("Resources", "OutboxConfig", "Properties", "MessagesTable"), sh.msgName},
				{"the config's ControlTable", eval("Resources", "OutboxConfig", "Properties", "ControlTable"), sh.ctlName},
				{"the config's Tables", eval("Resources", "OutboxConfig", "Properties", "Tables"), cmpOr(params["Tables"], "create")},
				{"the config's Region", eval("Resources", "OutboxConfig", "Properties", "Region"), "us-east-1"},
				{"output MessagesTableName", eval("Outputs", "MessagesTableName", "Value"), sh.msgName},
				{"output MessagesTableStreamArn", eval("Outputs", "MessagesTableStreamArn", "Value"), sh.stream},
			} {
				if c.got != c.want {
					t.Errorf("%s = %s, want %s", c.what, canon(c.got), c.want)
				}
			}
			// The functions' grants are on this shape's tables and stream.
			relay, err := roleGrants(e, "RelayRole")
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []grant{{Action: "dynamodb:GetRecords", Resource: sh.stream}, {Action: "dynamodb:Query", Resource: sh.msgArn},
				{Action: "dynamodb:UpdateItem", Resource: sh.ctlArn}} {
				if !hasGrant(relay, want) {
					t.Errorf("the relay's role lacks %s: %v", want, relay)
				}
			}
			if params["KafkaTransactional"] == "true" {
				want := "arn:aws:kafka:us-east-1:123456789012:transactional-id/*/*/" + sh.msgName + "-bucket-*"
				if !hasGrant(relay, grant{Action: "kafka-cluster:AlterTransactionalId", Resource: want}) {
					t.Errorf("the relay's role lacks AlterTransactionalId on %s: %v", want, relay)
				}
			}
			for _, g := range relay {
				if strings.Contains(g.Resource, "dynamodb") && g.Resource != sh.msgArn && g.Resource != sh.ctlArn && g.Resource != sh.stream && g.Resource != "*" {
					t.Errorf("the relay's role grants %s, on no table of this stack", g)
				}
			}
			if sh.replicas != nil {
				for _, table := range sh.tables {
					p := eval("Resources", table, "Properties")
					var regions []string
					replicas, _ := at(p, "Replicas").([]any)
					for _, r := range replicas {
						regions = append(regions, fmt.Sprint(at(r, "Region")))
						if at(r, "PointInTimeRecoverySpecification", "PointInTimeRecoveryEnabled") != true {
							t.Errorf("%s replica %s without point-in-time recovery", table, canon(r))
						}
					}
					if !reflect.DeepEqual(regions, sh.replicas) {
						t.Errorf("%s replicas in %v, want %v (Regions, in order)", table, regions, sh.replicas)
					}
					if got := canon(at(p, "StreamSpecification")); got != `{"StreamViewType":"KEYS_ONLY"}` {
						t.Errorf("%s stream %s, want KEYS_ONLY (a global table of several replicas needs one; the relay needs only keys)", table, got)
					}
					if got := canon(at(p, "TimeToLiveSpecification")); got != `{"AttributeName":"x","Enabled":true}` {
						t.Errorf("%s TTL %s, want x", table, got)
					}
					// A failed first deploy deletes the replicas it made
					// (RetainExceptOnCreate), else a retry fails on the
					// names left in every region; after that they are kept.
					for k, want := range map[string]string{"DeletionPolicy": "RetainExceptOnCreate", "UpdateReplacePolicy": "Retain"} {
						if got := at(resources[table], k); got != want {
							t.Errorf("%s %s = %s, want %s", table, k, canon(got), want)
						}
					}
				}
			}
		})
	}
}

// TestAttachSetupPolicy: with Tables attach the setup function writes
// nothing (the config item has one writing region, the Tables global
// stack's): its role reads the config item and describes the messages
// table, which is exactly what lambda/setup's TestAttach records it
// calling.
func TestAttachSetupPolicy(t *testing.T) {
	e, err := newEvaluator(loadTemplate(t), map[string]string{"KafkaBootstrapServers": "b:9092", "KafkaAuthMode": "none",
		"Tables": "attach", "Regions": "us-east-1,eu-west-1", "MessagesTableName": "m-table", "ControlTableName": "c-table"})
	if err != nil {
		t.Fatal(err)
	}
	granted, err := roleGrants(e, "SetupRole")
	if err != nil {
		t.Fatal(err)
	}
	var got []grant
	for _, g := range granted {
		if g.Resource != "<SetupLogGroup.Arn>" {
			got = append(got, g)
		}
	}
	want := []grant{
		{Action: "dynamodb:DescribeTable", Resource: "arn:aws:dynamodb:us-east-1:123456789012:table/m-table"},
		{Action: "dynamodb:GetItem", Resource: "arn:aws:dynamodb:us-east-1:123456789012:table/c-table"},
	}
	diffGrants(t, got, want)
}

func hasGrant(gs []grant, want grant) bool {
	for _, g := range gs {
		if g.Action == want.Action && g.Resource == want.Resource {
			return true
		}
	}
	return false
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestGlobalStackPolicy: the stack policy docs/deploy.md tells a global
// stack to be deployed with denies every update of exactly the template's
// global tables (a changed Regions would drop a replica, with whatever it
// has not replicated, before the setup function's empty-outbox check runs)
// and allows everything else; the docs' deploy command names the file.
func TestGlobalStackPolicy(t *testing.T) {
	raw, err := os.ReadFile("global-stack-policy.json")
	if err != nil {
		t.Fatal(err)
	}
	var policy struct {
		Statement []struct {
			Effect, Principal string
			Action            any
			Resource          any
		}
	}
	if err := json.Unmarshal(raw, &policy); err != nil {
		t.Fatalf("global-stack-policy.json: %v", err)
	}
	var denied []string
	allowAll := false
	for _, s := range policy.Statement {
		if fmt.Sprint(s.Action) != "Update:*" || s.Principal != "*" {
			t.Errorf("statement %+v: want Action Update:* for Principal *", s)
		}
		switch s.Effect {
		case "Allow":
			allowAll = allowAll || s.Resource == "*"
		case "Deny":
			rs, _ := s.Resource.([]any)
			for _, r := range rs {
				denied = append(denied, strings.TrimPrefix(fmt.Sprint(r), "LogicalResourceId/"))
			}
		}
	}
	if !allowAll {
		t.Error("the policy does not allow the other resources' updates (a stack policy denies what it does not allow)")
	}
	want := resourcesOfType(loadTemplate(t), "AWS::DynamoDB::GlobalTable")
	sort.Strings(want)
	sort.Strings(denied)
	if !reflect.DeepEqual(denied, want) || len(want) != 2 {
		t.Errorf("policy denies updates of %v, want the template's global tables %v", denied, want)
	}
	doc, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "--stack-policy-body file://deploy/global-stack-policy.json") {
		t.Error("docs/deploy.md's global deploy does not set deploy/global-stack-policy.json")
	}
}
