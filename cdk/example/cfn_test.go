package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// This file evaluates CloudFormation templates (JSON, as the CDK and the SAM
// translator write them) for given parameter values, so that two templates
// can be compared by what a stack would contain rather than by how they
// spell it: Fn::Sub and Fn::Join that build the same ARN are equal,
// resources whose Condition is false are absent, and references to
// resources become "<Name>" or "<Name.Attribute>" with each template's
// logical ids replaced by a shared name.

// pseudo are the pseudo parameters' values in every evaluation.
var pseudo = map[string]any{
	"AWS::Region":    "us-east-1",
	"AWS::AccountId": "123456789012",
	"AWS::Partition": "aws",
	"AWS::URLSuffix": "amazonaws.com",
	"AWS::StackName": "outbox",
}

// noValue is AWS::NoValue; it disappears from the maps and lists holding it.
type noValue struct{}

// evaluator resolves one template's intrinsic functions.
type evaluator struct {
	tmpl   map[string]any
	names  map[string]string // logical id -> shared name; ids not in it keep their name
	params map[string]any    // string, or []any for list parameters
	conds  map[string]bool
}

// newEvaluator takes the parameters' defaults overridden by values; a
// parameter without either is an error, and so is a value for a parameter
// the template does not have.
func newEvaluator(tmpl map[string]any, names map[string]string, values map[string]string) (*evaluator, error) {
	e := &evaluator{tmpl: tmpl, names: names, params: map[string]any{}, conds: map[string]bool{}}
	params, _ := tmpl["Parameters"].(map[string]any)
	for name := range values {
		if _, ok := params[name]; !ok {
			return nil, fmt.Errorf("value for unknown parameter %s", name)
		}
	}
	for name, p := range params {
		val, ok := values[name]
		if !ok {
			def := at(p, "Default")
			if def == nil {
				return nil, fmt.Errorf("parameter %s has no default and no value", name)
			}
			val = scalar(def)
		}
		if typ, _ := at(p, "Type").(string); typ == "CommaDelimitedList" || strings.HasPrefix(typ, "List<") {
			// As CloudFormation splits it: "" is [""], not [].
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

// name is the shared name of a logical id.
func (e *evaluator) name(id string) string {
	if n, ok := e.names[id]; ok {
		return n
	}
	return id
}

func (e *evaluator) cond(name string, stack []string) (bool, error) {
	if v, ok := e.conds[name]; ok {
		return v, nil
	}
	if slicesContains(stack, name) {
		return false, fmt.Errorf("condition cycle through %s", name)
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
		return false, fmt.Errorf("condition %s is %s, not a bool", name, canon(v))
	}
	e.conds[name] = b
	return b, nil
}

func slicesContains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
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
	case float64:
		// Numbers compare as the text CloudFormation would pass on:
		// a template's 60 and a parameter's "60" are the same value.
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case bool:
		return x, nil
	}
	return v, nil
}

func isString(v any) bool { _, ok := v.(string); return ok }

// ref resolves Ref: a parameter's value, a pseudo parameter, or "<Name>".
func (e *evaluator) ref(name string) (any, error) {
	switch {
	case name == "AWS::NoValue":
		return noValue{}, nil
	case pseudo[name] != nil:
		return pseudo[name], nil
	case e.params[name] != nil:
		return e.params[name], nil
	case at(e.tmpl, "Resources", name) != nil:
		return "<" + e.name(name) + ">", nil
	}
	return nil, fmt.Errorf("Ref to unknown %s", name)
}

var subVar = regexp.MustCompile(`\$\{([^}!][^}]*)\}`)

func (e *evaluator) intrinsic(fn string, arg any, stack []string) (any, error) {
	switch fn {
	case "Ref":
		s, ok := arg.(string)
		if !ok {
			return nil, fmt.Errorf("Ref of %s", canon(arg))
		}
		return e.ref(s)
	case "Condition":
		return e.cond(arg.(string), stack)
	case "Fn::GetAtt":
		var res, attr string
		switch a := arg.(type) {
		case []any:
			if len(a) == 2 {
				res, attr = scalar(a[0]), scalar(a[1])
			}
		case string:
			res, attr, _ = strings.Cut(a, ".")
		}
		if at(e.tmpl, "Resources", res) == nil || attr == "" {
			return nil, fmt.Errorf("Fn::GetAtt %s", canon(arg))
		}
		return "<" + e.name(res) + "." + attr + ">", nil
	case "Fn::Sub":
		body, vars := arg, map[string]any{}
		if list, ok := arg.([]any); ok {
			if len(list) != 2 {
				return nil, fmt.Errorf("Fn::Sub %s", canon(arg))
			}
			body = list[0]
			m, _ := list[1].(map[string]any)
			for k, v := range m {
				r, err := e.evalIn(v, stack)
				if err != nil {
					return nil, err
				}
				vars[k] = r
			}
		}
		s, ok := body.(string)
		if !ok {
			return nil, fmt.Errorf("Fn::Sub body %s", canon(body))
		}
		var subErr error
		out := subVar.ReplaceAllStringFunc(s, func(m string) string {
			name := m[2 : len(m)-1]
			var r any
			var err error
			switch v, ok := vars[name]; {
			case ok:
				r = v
			case strings.Contains(name, ".") && !strings.HasPrefix(name, "AWS::"):
				res, attr, _ := strings.Cut(name, ".")
				r, err = e.intrinsic("Fn::GetAtt", []any{res, attr}, stack)
			default:
				r, err = e.ref(name)
			}
			if err != nil && subErr == nil {
				subErr = err
			}
			return scalar(r)
		})
		return strings.ReplaceAll(out, "${!", "${"), subErr
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
			parts[i] = scalar(p)
		}
		return strings.Join(parts, scalar(a[0])), nil
	case "Fn::Split":
		a, err := e.args(fn, arg, 2, stack)
		if err != nil {
			return nil, err
		}
		var out []any
		for _, s := range strings.Split(scalar(a[1]), scalar(a[0])) {
			out = append(out, s)
		}
		return out, nil
	case "Fn::Select":
		a, err := e.args(fn, arg, 2, stack)
		if err != nil {
			return nil, err
		}
		i, err := strconv.Atoi(scalar(a[0]))
		list, ok := a[1].([]any)
		if err != nil || !ok || i < 0 || i >= len(list) {
			return nil, fmt.Errorf("Fn::Select %s from %s", canon(a[0]), canon(a[1]))
		}
		return list[i], nil
	case "Fn::If":
		list, ok := arg.([]any)
		if !ok || len(list) != 3 {
			return nil, fmt.Errorf("Fn::If %s", canon(arg))
		}
		c, err := e.cond(scalar(list[0]), stack)
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
	case "Fn::Contains":
		a, err := e.args(fn, arg, 2, stack)
		if err != nil {
			return nil, err
		}
		list, ok := a[0].([]any)
		if !ok {
			return nil, fmt.Errorf("Fn::Contains in %s", canon(a[0]))
		}
		for _, x := range list {
			if canon(x) == canon(a[1]) {
				return true, nil
			}
		}
		return false, nil
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
	case "Fn::And", "Fn::Or":
		list, _ := arg.([]any)
		a, err := e.args(fn, arg, len(list), stack)
		if err != nil {
			return nil, err
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

// resources evaluates every resource that exists under the parameters,
// keyed by shared name: its Type, Properties, DependsOn (shared names,
// sorted), Metadata and deletion policies. Conditions are evaluated away.
func (e *evaluator) resources() (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	all, _ := e.tmpl["Resources"].(map[string]any)
	for id, r := range all {
		res, _ := r.(map[string]any)
		if c, ok := res["Condition"].(string); ok {
			holds, err := e.cond(c, nil)
			if err != nil {
				return nil, err
			}
			if !holds {
				continue
			}
		}
		ev := map[string]any{}
		for k, v := range res {
			switch k {
			case "Condition":
				continue
			case "DependsOn":
				var deps []string
				for _, d := range stringList(v) {
					deps = append(deps, e.name(d))
				}
				sort.Strings(deps)
				ev[k] = toAny(deps)
				continue
			}
			x, err := e.eval(v)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", id, k, err)
			}
			ev[k] = x
		}
		name := e.name(id)
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("two resources are named %s", name)
		}
		out[name] = ev
	}
	return out, nil
}

// refusals evaluates the template's Rules and returns the assertions that
// fail (CloudFormation would refuse the parameters), each with the
// parameters it refers to.
func (e *evaluator) refusals() ([]refusal, error) {
	var out []refusal
	rules, _ := e.tmpl["Rules"].(map[string]any)
	for name, r := range rules {
		if c := at(r, "RuleCondition"); c != nil {
			holds, err := e.eval(c)
			if err != nil {
				return nil, fmt.Errorf("rule %s: %w", name, err)
			}
			if holds != true {
				continue
			}
		}
		asserts, _ := at(r, "Assertions").([]any)
		for i, a := range asserts {
			holds, err := e.eval(at(a, "Assert"))
			if err != nil {
				return nil, fmt.Errorf("rule %s assertion %d: %w", name, i, err)
			}
			if holds != true {
				out = append(out, refusal{rule: name, description: scalar(at(a, "AssertDescription")), params: refs(at(a, "Assert"))})
			}
		}
	}
	return out, nil
}

// refusal is a failed Rules assertion.
type refusal struct {
	rule, description string
	params            []string // parameters the assertion refers to
}

// refs lists the names v refers to with Ref.
func refs(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, el := range x {
			if s, ok := el.(string); ok && k == "Ref" {
				out = append(out, s)
			} else {
				out = append(out, refs(el)...)
			}
		}
	case []any:
		for _, el := range x {
			out = append(out, refs(el)...)
		}
	}
	return out
}

// outputs evaluates the outputs' values and descriptions, by shared name.
func (e *evaluator) outputs() (map[string]any, error) {
	out := map[string]any{}
	all, _ := e.tmpl["Outputs"].(map[string]any)
	for id, o := range all {
		if c, ok := at(o, "Condition").(string); ok {
			holds, err := e.cond(c, nil)
			if err != nil {
				return nil, err
			}
			if !holds {
				continue
			}
		}
		v, err := e.eval(o)
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", id, err)
		}
		delete(v.(map[string]any), "Condition")
		out[e.name(id)] = v
	}
	return out, nil
}

func toAny(l []string) []any {
	out := make([]any, len(l))
	for i, s := range l {
		out[i] = s
	}
	return out
}

func stringList(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		out := make([]string, 0, len(x))
		for _, el := range x {
			out = append(out, scalar(el))
		}
		return out
	}
	return nil
}

func scalar(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case nil:
		return ""
	}
	return canon(v)
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
		}
	}
	return v
}

// canon renders a value as JSON with sorted keys.
func canon(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

// diff lists where a and b differ, one line per leaf, with JSON-like paths.
func diff(path string, a, b any) []string {
	if reflect.DeepEqual(a, b) {
		return nil
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		var sorted []string
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		var out []string
		for _, k := range sorted {
			out = append(out, diff(path+"."+k, am[k], bm[k])...)
		}
		return out
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		var out []string
		for i := range al {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i])...)
		}
		return out
	}
	return []string{fmt.Sprintf("%s: template.yaml %s, CDK %s", path, show(a), show(b))}
}

func show(v any) string {
	if v == nil {
		return "(absent)"
	}
	return canon(v)
}
