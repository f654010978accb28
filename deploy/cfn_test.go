package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
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

// at walks maps by string keys and lists by int indexes; nil when absent.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k < 0 || k >= len(l) {
				return nil
			}
			v = l[k]
		default:
			panic(fmt.Sprintf("at: bad path element %T", p))
		}
	}
	return v
}

// canon renders a value as canonical JSON (sorted keys), for comparisons and
// messages.
func canon(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

// noValue is what AWS::NoValue evaluates to; eval drops it from maps and lists.
type noValue struct{}

// Pseudo parameter values used by every evaluation.
var pseudo = map[string]any{
	"AWS::Region":    "us-east-1",
	"AWS::AccountId": "123456789012",
	"AWS::Partition": "aws",
	"AWS::StackName": "outbox",
	"AWS::URLSuffix": "amazonaws.com",
}

// evaluator resolves intrinsic functions for one set of parameter values.
// References to resources stay symbolic: Ref X -> "<X>", GetAtt X.Y -> "<X.Y>".
type evaluator struct {
	tmpl   map[string]any
	params map[string]any // parameter name -> string, or []any for list types
	conds  map[string]bool
}

// newEvaluator takes the parameters' defaults, overridden by overrides, and
// fails when a parameter without a default is not given.
func newEvaluator(tmpl map[string]any, overrides map[string]string) (*evaluator, error) {
	e := &evaluator{tmpl: tmpl, params: map[string]any{}, conds: map[string]bool{}}
	params, _ := tmpl["Parameters"].(map[string]any)
	for name := range overrides {
		if _, ok := params[name]; !ok {
			return nil, fmt.Errorf("override for unknown parameter %s", name)
		}
	}
	for name, p := range params {
		val, ok := overrides[name]
		if !ok {
			def := at(p, "Default")
			if def == nil {
				return nil, fmt.Errorf("parameter %s has no default and was not given", name)
			}
			val = scalarString(def)
		}
		if typ, _ := at(p, "Type").(string); typ == "CommaDelimitedList" || strings.HasPrefix(typ, "List<") {
			var list []any
			for _, s := range strings.Split(val, ",") {
				list = append(list, strings.TrimSpace(s))
			}
			e.params[name] = list
		} else {
			e.params[name] = val
		}
	}
	conds, _ := tmpl["Conditions"].(map[string]any)
	for name := range conds {
		if _, err := e.cond(name, nil); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func scalarString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

func (e *evaluator) cond(name string, stack []string) (bool, error) {
	if v, ok := e.conds[name]; ok {
		return v, nil
	}
	for _, s := range stack {
		if s == name {
			return false, fmt.Errorf("condition cycle through %s", name)
		}
	}
	def := at(e.tmpl, "Conditions", name)
	if def == nil {
		return false, fmt.Errorf("unknown condition %s", name)
	}
	v, err := e.evalIn(def, append(stack, name))
	if err != nil {
		return false, fmt.Errorf("condition %s: %w", name, err)
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("condition %s evaluates to %T, not bool", name, v)
	}
	e.conds[name] = b
	return b, nil
}

func (e *evaluator) eval(v any) (any, error) { return e.evalIn(v, nil) }

func (e *evaluator) evalIn(v any, stack []string) (any, error) {
	switch x := v.(type) {
	case []any:
		out := make([]any, 0, len(x))
		for _, el := range x {
			r, err := e.evalIn(el, stack)
			if err != nil {
				return nil, err
			}
			if _, drop := r.(noValue); !drop {
				out = append(out, r)
			}
		}
		return out, nil
	case map[string]any:
		if len(x) == 1 {
			for k, arg := range x {
				if k == "Ref" || strings.HasPrefix(k, "Fn::") || (k == "Condition" && isString(arg)) {
					return e.intrinsic(k, arg, stack)
				}
			}
		}
		out := make(map[string]any, len(x))
		for k, el := range x {
			r, err := e.evalIn(el, stack)
			if err != nil {
				return nil, err
			}
			if _, drop := r.(noValue); !drop {
				out[k] = r
			}
		}
		return out, nil
	}
	return v, nil
}

func isString(v any) bool { _, ok := v.(string); return ok }

func (e *evaluator) args(fn string, arg any, n int, stack []string) ([]any, error) {
	list, ok := arg.([]any)
	if !ok || len(list) != n {
		return nil, fmt.Errorf("%s wants a list of %d, got %s", fn, n, canon(arg))
	}
	out := make([]any, n)
	for i, a := range list {
		r, err := e.evalIn(a, stack)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

var subVar = regexp.MustCompile(`\$\{([^}]*)\}`)

func (e *evaluator) intrinsic(fn string, arg any, stack []string) (any, error) {
	switch fn {
	case "Ref":
		name, _ := arg.(string)
		if name == "AWS::NoValue" {
			return noValue{}, nil
		}
		if v, ok := pseudo[name]; ok {
			return v, nil
		}
		if v, ok := e.params[name]; ok {
			return v, nil
		}
		if at(e.tmpl, "Resources", name) != nil {
			return "<" + name + ">", nil
		}
		return nil, fmt.Errorf("Ref to unknown name %q", name)
	case "Condition":
		return e.cond(arg.(string), stack)
	case "Fn::GetAtt":
		list, ok := arg.([]any)
		if !ok || len(list) != 2 {
			return nil, fmt.Errorf("Fn::GetAtt wants [resource, attribute], got %s", canon(arg))
		}
		res, attr := scalarString(list[0]), scalarString(list[1])
		if at(e.tmpl, "Resources", res) == nil {
			return nil, fmt.Errorf("Fn::GetAtt of unknown resource %q", res)
		}
		return "<" + res + "." + attr + ">", nil
	case "Fn::Sub":
		var tpl string
		vars := map[string]any{}
		switch a := arg.(type) {
		case string:
			tpl = a
		case []any:
			if len(a) != 2 {
				return nil, fmt.Errorf("Fn::Sub wants [template, variables], got %s", canon(arg))
			}
			tpl, _ = a[0].(string)
			m, _ := a[1].(map[string]any)
			for k, raw := range m {
				r, err := e.evalIn(raw, stack)
				if err != nil {
					return nil, err
				}
				vars[k] = r
			}
		default:
			return nil, fmt.Errorf("Fn::Sub wants a string or a list, got %s", canon(arg))
		}
		var subErr error
		out := subVar.ReplaceAllStringFunc(tpl, func(m string) string {
			name := m[2 : len(m)-1]
			if strings.HasPrefix(name, "!") {
				return "${" + name[1:] + "}"
			}
			var r any
			var err error
			if v, ok := vars[name]; ok {
				r = v
			} else if res, attr, dotted := strings.Cut(name, "."); dotted && !strings.HasPrefix(name, "AWS::") {
				r, err = e.intrinsic("Fn::GetAtt", []any{res, attr}, stack)
			} else {
				r, err = e.intrinsic("Ref", name, stack)
			}
			if err != nil && subErr == nil {
				subErr = err
			}
			s, ok := r.(string)
			if !ok && err == nil && subErr == nil {
				subErr = fmt.Errorf("Fn::Sub variable %s is a %T", name, r)
			}
			return s
		})
		return out, subErr
	case "Fn::Join":
		a, err := e.args(fn, arg, 2, stack)
		if err != nil {
			return nil, err
		}
		list, ok := a[1].([]any)
		if !ok {
			return nil, fmt.Errorf("Fn::Join of %s", canon(a[1]))
		}
		parts := make([]string, len(list))
		for i, p := range list {
			parts[i] = scalarString(p)
		}
		return strings.Join(parts, scalarString(a[0])), nil
	case "Fn::Split":
		a, err := e.args(fn, arg, 2, stack)
		if err != nil {
			return nil, err
		}
		var out []any
		for _, s := range strings.Split(scalarString(a[1]), scalarString(a[0])) {
			out = append(out, s)
		}
		return out, nil
	case "Fn::Select":
		a, err := e.args(fn, arg, 2, stack)
		if err != nil {
			return nil, err
		}
		i, err := strconv.Atoi(scalarString(a[0]))
		list, ok := a[1].([]any)
		if err != nil || !ok || i < 0 || i >= len(list) {
			return nil, fmt.Errorf("Fn::Select %s from %s", canon(a[0]), canon(a[1]))
		}
		return list[i], nil
	case "Fn::If":
		list, ok := arg.([]any)
		if !ok || len(list) != 3 {
			return nil, fmt.Errorf("Fn::If wants [condition, then, else], got %s", canon(arg))
		}
		c, err := e.cond(scalarString(list[0]), stack)
		if err != nil {
			return nil, err
		}
		if c {
			return e.evalIn(list[1], stack)
		}
		return e.evalIn(list[2], stack)
	case "Fn::Equals":
		a, err := e.args(fn, arg, 2, stack)
		if err != nil {
			return nil, err
		}
		return canon(a[0]) == canon(a[1]), nil
	case "Fn::Not":
		a, err := e.args(fn, arg, 1, stack)
		if err != nil {
			return nil, err
		}
		b, ok := a[0].(bool)
		if !ok {
			return nil, fmt.Errorf("Fn::Not of %s", canon(a[0]))
		}
		return !b, nil
	case "Fn::Contains":
		// Rules only: [list of strings, string].
		a, err := e.args(fn, arg, 2, stack)
		if err != nil {
			return nil, err
		}
		list, ok := a[0].([]any)
		if !ok {
			return nil, fmt.Errorf("Fn::Contains of %s, not a list", canon(a[0]))
		}
		for _, el := range list {
			if scalarString(el) == scalarString(a[1]) {
				return true, nil
			}
		}
		return false, nil
	case "Fn::And", "Fn::Or":
		list, _ := arg.([]any)
		a, err := e.args(fn, arg, len(list), stack)
		if err != nil {
			return nil, err
		}
		if len(a) < 2 {
			return nil, fmt.Errorf("%s wants at least two conditions", fn)
		}
		and := fn == "Fn::And"
		for _, x := range a {
			b, ok := x.(bool)
			if !ok {
				return nil, fmt.Errorf("%s of %s", fn, canon(x))
			}
			if b != and {
				return !and, nil
			}
		}
		return and, nil
	}
	return nil, fmt.Errorf("unsupported intrinsic %s", fn)
}

// brokenRules evaluates the template's Rules and returns the
// AssertDescription of every assertion that fails (CloudFormation then
// refuses the stack before creating anything), sorted.
func (e *evaluator) brokenRules() ([]string, error) {
	rules, _ := e.tmpl["Rules"].(map[string]any)
	var out []string
	for name, r := range rules {
		if c := at(r, "RuleCondition"); c != nil {
			v, err := e.eval(c)
			if err != nil {
				return nil, fmt.Errorf("rule %s: RuleCondition: %w", name, err)
			}
			if v != true {
				continue
			}
		}
		asserts, ok := at(r, "Assertions").([]any)
		if !ok || len(asserts) == 0 {
			return nil, fmt.Errorf("rule %s has no Assertions", name)
		}
		for i, a := range asserts {
			v, err := e.eval(at(a, "Assert"))
			if err != nil {
				return nil, fmt.Errorf("rule %s assertion %d: %w", name, i, err)
			}
			b, ok := v.(bool)
			if !ok {
				return nil, fmt.Errorf("rule %s assertion %d evaluates to %s, not a boolean", name, i, canon(v))
			}
			if !b {
				desc, _ := at(a, "AssertDescription").(string)
				if desc == "" {
					return nil, fmt.Errorf("rule %s assertion %d has no AssertDescription", name, i)
				}
				out = append(out, desc)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// resourceIncluded reports whether a resource exists under the evaluator's
// parameters (its Condition, if any, holds).
func (e *evaluator) resourceIncluded(name string) (bool, error) {
	c, _ := at(e.tmpl, "Resources", name, "Condition").(string)
	if c == "" {
		return at(e.tmpl, "Resources", name) != nil, nil
	}
	return e.cond(c, nil)
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
func (e *evaluator) roleGrants(role string) ([]grant, error) {
	props, err := e.eval(at(e.tmpl, "Resources", role, "Properties"))
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
		if !strings.HasPrefix(s, "<") || at(e.tmpl, "Resources", name, "Type") != "AWS::IAM::ManagedPolicy" {
			return nil, fmt.Errorf("%s attaches %s, which is not a managed policy of this template", role, canon(m))
		}
		ok, err := e.resourceIncluded(name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%s attaches %s, whose Condition is false: the stack would not deploy", role, name)
		}
		doc, err := e.eval(at(e.tmpl, "Resources", name, "Properties", "PolicyDocument"))
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
	resources, _ := e.tmpl["Resources"].(map[string]any)
	for name, r := range resources {
		if at(r, "Type") != "AWS::IAM::Policy" {
			continue
		}
		if ok, err := e.resourceIncluded(name); err != nil || !ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		p, err := e.eval(at(r, "Properties"))
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

func stringList(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		out := make([]string, 0, len(x))
		for _, el := range x {
			out = append(out, scalarString(el))
		}
		return out
	}
	return nil
}
