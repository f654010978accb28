package deploy

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/dynakafka/outbox/internal/harness/cfneval"
)

// This file turns a CloudFormation template into plain Go values and
// evaluates its intrinsic functions for a given set of parameter values, so
// the tests can ask what a stack deployed with those parameters would really
// contain (which statements, which environment), not only how it is spelled.

// decodeCFN converts a yaml.v3 node into map[string]any / []any / scalars,
// turning CloudFormation's short-form tags into their long form:
// !Ref X -> {"Ref": X}, !GetAtt A.B -> {"Fn::GetAtt": [A, B]},
// !Condition C -> {"Condition": C}, !Sub ... -> {"Fn::Sub": ...}, and so on.
func decodeCFN(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return nil, fmt.Errorf("line %d: want one document, got %d nodes", n.Line, len(n.Content))
		}
		return decodeCFN(n.Content[0])
	case yaml.AliasNode:
		return decodeCFN(n.Alias)
	}
	var v any
	switch n.Kind {
	case yaml.ScalarNode:
		if isShortForm(n.Tag) {
			v = n.Value
		} else if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			x, err := decodeCFN(c)
			if err != nil {
				return nil, err
			}
			list = append(list, x)
		}
		v = list
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: non-scalar mapping key", k.Line)
			}
			if _, dup := m[k.Value]; dup {
				return nil, fmt.Errorf("line %d: duplicate key %q", k.Line, k.Value)
			}
			x, err := decodeCFN(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[k.Value] = x
		}
		v = m
	default:
		return nil, fmt.Errorf("line %d: unexpected YAML node kind %v", n.Line, n.Kind)
	}
	if !isShortForm(n.Tag) {
		return v, nil
	}
	name := strings.TrimPrefix(n.Tag, "!")
	switch name {
	case "Ref", "Condition":
	case "GetAtt":
		if s, ok := v.(string); ok {
			res, attr, found := strings.Cut(s, ".")
			if !found {
				return nil, fmt.Errorf("line %d: !GetAtt %q has no attribute", n.Line, s)
			}
			v = []any{res, attr}
		}
		name = "Fn::GetAtt"
	default:
		name = "Fn::" + name
	}
	return map[string]any{name: v}, nil
}

// isShortForm reports whether a node tag is a CloudFormation short form
// (!Ref, !Sub, ...) rather than a YAML core tag (!!str, !!int, ...).
func isShortForm(tag string) bool {
	return strings.HasPrefix(tag, "!") && !strings.HasPrefix(tag, "!!")
}

func parseCFN(src []byte) (map[string]any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	v, err := decodeCFN(&doc)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("template is a %T, not a mapping", v)
	}
	return m, nil
}

// loadTemplate reads ../template.yaml.
func loadTemplate(t *testing.T) map[string]any {
	t.Helper()
	src, err := os.ReadFile("../template.yaml")
	if err != nil {
		t.Fatalf("read template: %v", err)
	}
	tmpl, err := parseCFN(src)
	if err != nil {
		t.Fatalf("parse template.yaml: %v", err)
	}
	return tmpl
}

// cfn decodes a YAML snippet the way the template is decoded, so expected
// values can be written the way the template writes them.
func cfn(t *testing.T, src string) any {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatalf("snippet %q: %v", src, err)
	}
	v, err := decodeCFN(&doc)
	if err != nil {
		t.Fatalf("snippet %q: %v", src, err)
	}
	return v
}

// The evaluator is internal/harness/cfneval's, shared with cdk/example's tests;
// these names keep the tests short.
type evaluator = cfneval.Evaluator

var (
	at           = cfneval.At
	canon        = cfneval.Canon
	scalarString = cfneval.Scalar
	stringList   = cfneval.StringList
)

// newEvaluator takes the parameters' defaults, overridden by overrides, and
// fails when a parameter without a default is not given.
func newEvaluator(tmpl map[string]any, overrides map[string]string) (*evaluator, error) {
	return cfneval.New(tmpl, nil, overrides)
}

// brokenRules returns the AssertDescription of every Rules assertion that
// fails under e's parameters (CloudFormation then refuses the stack before
// creating anything), sorted.
func brokenRules(e *evaluator) ([]string, error) {
	refusals, err := e.Refusals()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range refusals {
		out = append(out, r.Description)
	}
	sort.Strings(out)
	return out, nil
}

// grant is one (action, resource) pair a role is allowed, with the
// statement's IAM Condition block in canonical JSON ("" for none).
type grant struct {
	Action, Resource, Condition string
}

func (g grant) String() string {
	s := g.Action + " on " + g.Resource
	if g.Condition != "" {
		s += " if " + g.Condition
	}
	return s
}

// roleGrants evaluates everything that grants role permissions: its inline
// Policies, the customer managed policies it attaches, and AWS::IAM::Policy
// resources naming it. An attached policy that is not a managed policy of
// this template (an AWS managed policy, say) is an error: the brief asks for
// explicit statements only.
func roleGrants(e *evaluator, role string) ([]grant, error) {
	props, err := e.Eval(at(e.Template(), "Resources", role, "Properties"))
	if err != nil {
		return nil, err
	}
	var docs []any
	policies, _ := at(props, "Policies").([]any)
	for _, p := range policies {
		docs = append(docs, at(p, "PolicyDocument"))
	}
	managed, _ := at(props, "ManagedPolicyArns").([]any)
	for _, m := range managed {
		s, _ := m.(string)
		name := strings.TrimSuffix(strings.TrimPrefix(s, "<"), ">")
		if !strings.HasPrefix(s, "<") || at(e.Template(), "Resources", name, "Type") != "AWS::IAM::ManagedPolicy" {
			return nil, fmt.Errorf("%s attaches %s, which is not a managed policy of this template", role, canon(m))
		}
		ok, err := e.Included(name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%s attaches %s, whose Condition is false: the stack would not deploy", role, name)
		}
		doc, err := e.Eval(at(e.Template(), "Resources", name, "Properties", "PolicyDocument"))
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
	resources, _ := e.Template()["Resources"].(map[string]any)
	for name, r := range resources {
		if at(r, "Type") != "AWS::IAM::Policy" {
			continue
		}
		if ok, err := e.Included(name); err != nil || !ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		p, err := e.Eval(at(r, "Properties"))
		if err != nil {
			return nil, err
		}
		roles, _ := at(p, "Roles").([]any)
		for _, r := range roles {
			if r == "<"+role+">" {
				docs = append(docs, at(p, "PolicyDocument"))
			}
		}
	}
	var out []grant
	for _, doc := range docs {
		stmts, ok := at(doc, "Statement").([]any)
		if !ok {
			return nil, fmt.Errorf("%s: policy document without a Statement list: %s", role, canon(doc))
		}
		for _, s := range stmts {
			if at(s, "Effect") != "Allow" {
				return nil, fmt.Errorf("%s: statement is not Effect Allow: %s", role, canon(s))
			}
			if at(s, "NotAction") != nil || at(s, "NotResource") != nil {
				return nil, fmt.Errorf("%s: NotAction/NotResource grant more than they name: %s", role, canon(s))
			}
			cond := ""
			if c := at(s, "Condition"); c != nil {
				cond = canon(c)
			}
			for _, a := range stringList(at(s, "Action")) {
				for _, r := range stringList(at(s, "Resource")) {
					out = append(out, grant{Action: a, Resource: r, Condition: cond})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}
