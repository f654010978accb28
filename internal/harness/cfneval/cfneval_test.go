package cfneval

import (
	"strings"
	"testing"
)

func TestEval(t *testing.T) {
	tmpl := map[string]any{
		"Parameters": map[string]any{
			"Mode":   map[string]any{"Type": "String", "Default": "delete"},
			"Topics": map[string]any{"Type": "CommaDelimitedList", "Default": "a, b"},
			"Count":  map[string]any{"Type": "Number", "Default": 8.0},
		},
		"Conditions": map[string]any{
			"IsDelete": map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "Mode"}, "delete"}},
			"Both":     map[string]any{"Fn::And": []any{map[string]any{"Condition": "IsDelete"}, true}},
		},
		"Resources": map[string]any{"Table": map[string]any{"Type": "AWS::DynamoDB::Table"}},
	}
	e, err := New(tmpl, map[string]string{"Table": "Messages"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ok := []struct {
		name string
		in   any
		want string
	}{
		{"ref resource, shared name", map[string]any{"Ref": "Table"}, `"<Messages>"`},
		{"getatt string form", map[string]any{"Fn::GetAtt": "Table.Arn"}, `"<Messages.Arn>"`},
		{"number is text", map[string]any{"N": 60, "F": 0.5}, `{"F":"0.5","N":"60"}`},
		{"number parameter", map[string]any{"Ref": "Count"}, `"8"`},
		{"list parameter", map[string]any{"Ref": "Topics"}, `["a","b"]`},
		{"sub", map[string]any{"Fn::Sub": "arn:${AWS::Partition}:x:${AWS::Region}:${Table.Arn}/${Mode}/${!Literal}"},
			`"arn:aws:x:us-east-1:<Messages.Arn>/delete/${Literal}"`},
		{"sub variables", map[string]any{"Fn::Sub": []any{"${X}-${Count}", map[string]any{"X": map[string]any{"Ref": "Mode"}}}}, `"delete-8"`},
		{"join select split", map[string]any{"Fn::Join": []any{"/", []any{
			map[string]any{"Fn::Select": []any{1, map[string]any{"Fn::Split": []any{",", "x,y"}}}}, "z"}}}, `"y/z"`},
		{"if and novalue", []any{map[string]any{"Fn::If": []any{"Both", "yes", "no"}},
			map[string]any{"Fn::If": []any{"IsDelete", map[string]any{"Ref": "AWS::NoValue"}, "kept"}}}, `["yes"]`},
		{"contains", map[string]any{"Fn::Contains": []any{map[string]any{"Ref": "Topics"}, "b"}}, `true`},
	}
	for _, c := range ok {
		t.Run(c.name, func(t *testing.T) {
			got, err := e.Eval(c.in)
			if err != nil || Canon(got) != c.want {
				t.Fatalf("Eval = %s, %v; want %s", Canon(got), err, c.want)
			}
		})
	}
	bad := []struct {
		name string
		in   any
		want string
	}{
		{"unknown ref", map[string]any{"Ref": "Nope"}, "unknown"},
		{"getatt of unknown resource", map[string]any{"Fn::GetAtt": []any{"Nope", "Arn"}}, "Fn::GetAtt"},
		{"sub of a list", map[string]any{"Fn::Sub": "${Topics}"}, "is a list"},
		{"or of one", map[string]any{"Fn::Or": []any{true}}, "at least two"},
		{"unsupported", map[string]any{"Fn::Base64": "x"}, "unsupported"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			if got, err := e.Eval(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Eval = %s, %v; want an error with %q", Canon(got), err, c.want)
			}
		})
	}
}

func TestNewAndRefusals(t *testing.T) {
	tmpl := map[string]any{
		"Parameters": map[string]any{"Mode": map[string]any{"Type": "String"}},
		"Rules": map[string]any{"ModeKnown": map[string]any{"Assertions": []any{map[string]any{
			"Assert":            map[string]any{"Fn::Contains": []any{[]any{"delete", "watermark"}, map[string]any{"Ref": "Mode"}}},
			"AssertDescription": "Mode is delete or watermark",
		}}}},
	}
	if _, err := New(tmpl, nil, nil); err == nil || !strings.Contains(err.Error(), "no default") {
		t.Fatalf("New without Mode = %v, want a missing-parameter error", err)
	}
	if _, err := New(tmpl, nil, map[string]string{"Mode": "delete", "Other": "x"}); err == nil {
		t.Fatal("New with an unknown parameter succeeded")
	}
	for mode, want := range map[string]int{"delete": 0, "sideways": 1} {
		e, err := New(tmpl, nil, map[string]string{"Mode": mode})
		if err != nil {
			t.Fatal(err)
		}
		r, err := e.Refusals()
		if err != nil || len(r) != want {
			t.Fatalf("Mode %s: Refusals = %+v, %v; want %d", mode, r, err, want)
		}
		if want == 1 && (r[0].Rule != "ModeKnown" || len(r[0].Params) != 1 || r[0].Params[0] != "Mode") {
			t.Fatalf("refusal = %+v", r[0])
		}
	}
}
