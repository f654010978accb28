// Package cfneval evaluates CloudFormation templates (as plain Go values:
// map[string]any, []any, strings, numbers, bools, with intrinsic functions in
// their long form) for given parameter values, so that tests can ask what a
// stack would contain rather than how the template spells it: Fn::Sub and
// Fn::Join that build the same ARN are equal, resources whose Condition is
// false are absent, and references to resources stay symbolic, "<Name>" or
// "<Name.Attribute>".
//
// It serves the tests of deploy/ (template.yaml) and of cdk/example (the
// CDK's template beside template.yaml after the SAM transform); it is not
// a CloudFormation implementation: it knows the intrinsics those templates
// use and refuses the others.
package cfneval

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Pseudo are the pseudo parameters' values in every evaluation.
var Pseudo = map[string]any{
	"AWS::Region":    "us-east-1",
	"AWS::AccountId": "123456789012",
	"AWS::Partition": "aws",
	"AWS::URLSuffix": "amazonaws.com",
	"AWS::StackName": "outbox",
}

// NoValue is what Ref AWS::NoValue evaluates to; Eval drops it from the maps
// and lists holding it.
type NoValue struct{}

// Evaluator resolves one template's intrinsic functions for one set of
// parameter values.
type Evaluator struct {
	tmpl   map[string]any
	names  map[string]string // logical id -> shared name; ids not in it keep their name
	params map[string]any    // string, or []any for list parameters
	conds  map[string]bool
}

// New takes the parameters' defaults overridden by values; a parameter
// without either is an error, and so is a value for a parameter the
// template does not have. names maps logical ids to the names references to
// them evaluate to (nil: every id keeps its own), so that two templates
// with different logical ids compare equal. Every condition is evaluated.
func New(tmpl map[string]any, names map[string]string, values map[string]string) (*Evaluator, error) {
	e := &Evaluator{tmpl: tmpl, names: names, params: map[string]any{}, conds: map[string]bool{}}
	params, _ := tmpl["Parameters"].(map[string]any)
	for name := range values {
		if _, ok := params[name]; !ok {
			return nil, fmt.Errorf("value for unknown parameter %s", name)
		}
	}
	for name, p := range params {
		val, ok := values[name]
		if !ok {
			def := At(p, "Default")
			if def == nil {
				return nil, fmt.Errorf("parameter %s has no default and no value", name)
			}
			val = Scalar(def)
		}
		if typ, _ := At(p, "Type").(string); typ == "CommaDelimitedList" || strings.HasPrefix(typ, "List<") {
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

// Template is the template evaluated.
func (e *Evaluator) Template() map[string]any { return e.tmpl }

// Name is the shared name of a logical id.
func (e *Evaluator) Name(id string) string {
	if n, ok := e.names[id]; ok {
		return n
	}
	return id
}

// Cond is the value of the template's condition name.
func (e *Evaluator) Cond(name string) (bool, error) { return e.cond(name, nil) }

func (e *Evaluator) cond(name string, stack []string) (bool, error) {
	if v, ok := e.conds[name]; ok {
		return v, nil
	}
	if slices.Contains(stack, name) {
		return false, fmt.Errorf("condition cycle through %s", name)
	}
	def := At(e.tmpl, "Conditions", name)
	if def == nil {
		return false, fmt.Errorf("unknown condition %s", name)
	}
	v, err := e.eval(def, append(stack, name))
	if err != nil {
		return false, fmt.Errorf("condition %s: %w", name, err)
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("condition %s is %s, not a bool", name, Canon(v))
	}
	e.conds[name] = b
	return b, nil
}

// Eval resolves every intrinsic function in v. Numbers become the text
// CloudFormation would pass on: a template's 60 and a parameter's "60" are
// the same value.
func (e *Evaluator) Eval(v any) (any, error) { return e.eval(v, nil) }

// eval is Eval inside the conditions on stack (to refuse a cycle).
func (e *Evaluator) eval(v any, stack []string) (any, error) {
	switch x := v.(type) {
	case []any:
		out := make([]any, 0, len(x))
		for _, el := range x {
			r, err := e.eval(el, stack)
			if err != nil {
				return nil, err
			}
			if _, drop := r.(NoValue); !drop {
				out = append(out, r)
			}
		}
		return out, nil
	case map[string]any:
		if len(x) == 1 {
			for k, arg := range x {
				if _, isName := arg.(string); k == "Ref" || strings.HasPrefix(k, "Fn::") || (k == "Condition" && isName) {
					return e.intrinsic(k, arg, stack)
				}
			}
		}
		out := make(map[string]any, len(x))
		for k, el := range x {
			r, err := e.eval(el, stack)
			if err != nil {
				return nil, err
			}
			if _, drop := r.(NoValue); !drop {
				out[k] = r
			}
		}
		return out, nil
	case float64, int:
		return Scalar(x), nil
	}
	return v, nil
}

// ref resolves Ref: a parameter's value, a pseudo parameter, or "<Name>".
func (e *Evaluator) ref(name string) (any, error) {
	switch {
	case name == "AWS::NoValue":
		return NoValue{}, nil
	case Pseudo[name] != nil:
		return Pseudo[name], nil
	case e.params[name] != nil:
		return e.params[name], nil
	case At(e.tmpl, "Resources", name) != nil:
		return "<" + e.Name(name) + ">", nil
	}
	return nil, fmt.Errorf("Ref to unknown %q", name)
}

// getAtt resolves Fn::GetAtt to "<Name.Attribute>".
func (e *Evaluator) getAtt(arg any) (any, error) {
	var res, attr string
	switch a := arg.(type) {
	case []any:
		if len(a) == 2 {
			res, attr = Scalar(a[0]), Scalar(a[1])
		}
	case string:
		res, attr, _ = strings.Cut(a, ".")
	}
	if At(e.tmpl, "Resources", res) == nil || attr == "" {
		return nil, fmt.Errorf("Fn::GetAtt wants [resource of this template, attribute], got %s", Canon(arg))
	}
	return "<" + e.Name(res) + "." + attr + ">", nil
}

var subVar = regexp.MustCompile(`\$\{([^}]*)\}`)

// sub resolves Fn::Sub: "${Name}" is a variable of its map, a parameter, a
// pseudo parameter or a resource, "${Res.Attr}" an attribute, "${!Text}"
// the literal "${Text}".
func (e *Evaluator) sub(arg any, stack []string) (any, error) {
	body, vars := arg, map[string]any{}
	if list, ok := arg.([]any); ok {
		if len(list) != 2 {
			return nil, fmt.Errorf("Fn::Sub wants [template, variables], got %s", Canon(arg))
		}
		body = list[0]
		m, _ := list[1].(map[string]any)
		for k, v := range m {
			r, err := e.eval(v, stack)
			if err != nil {
				return nil, err
			}
			vars[k] = r
		}
	}
	s, ok := body.(string)
	if !ok {
		return nil, fmt.Errorf("Fn::Sub wants a string or [string, variables], got %s", Canon(arg))
	}
	var subErr error
	out := subVar.ReplaceAllStringFunc(s, func(m string) string {
		name := m[2 : len(m)-1]
		if strings.HasPrefix(name, "!") {
			return "${" + name[1:] + "}"
		}
		var r any
		var err error
		switch v, ok := vars[name]; {
		case ok:
			r = v
		case strings.Contains(name, ".") && !strings.HasPrefix(name, "AWS::"):
			r, err = e.getAtt(name)
		default:
			r, err = e.ref(name)
		}
		if _, list := r.([]any); list && err == nil {
			err = fmt.Errorf("Fn::Sub variable %s is a list, not a string", name)
		}
		if err != nil && subErr == nil {
			subErr = err
		}
		return Scalar(r)
	})
	return out, subErr
}

func (e *Evaluator) intrinsic(fn string, arg any, stack []string) (any, error) {
	switch fn {
	case "Ref":
		s, ok := arg.(string)
		if !ok {
			return nil, fmt.Errorf("Ref of %s", Canon(arg))
		}
		return e.ref(s)
	case "Condition":
		return e.cond(arg.(string), stack)
	case "Fn::GetAtt":
		return e.getAtt(arg)
	case "Fn::Sub":
		return e.sub(arg, stack)
	case "Fn::Join":
		a, err := e.args(fn, arg, 2, stack)
		if err != nil {
			return nil, err
		}
		list, ok := a[1].([]any)
		if !ok {
			return nil, fmt.Errorf("Fn::Join of %s", Canon(a[1]))
		}
		parts := make([]string, len(list))
		for i, p := range list {
			parts[i] = Scalar(p)
		}
		return strings.Join(parts, Scalar(a[0])), nil
	case "Fn::Split":
		a, err := e.args(fn, arg, 2, stack)
		if err != nil {
			return nil, err
		}
		var out []any
		for _, s := range strings.Split(Scalar(a[1]), Scalar(a[0])) {
			out = append(out, s)
		}
		return out, nil
	case "Fn::Select":
		a, err := e.args(fn, arg, 2, stack)
		if err != nil {
			return nil, err
		}
		i, err := strconv.Atoi(Scalar(a[0]))
		list, ok := a[1].([]any)
		if err != nil || !ok || i < 0 || i >= len(list) {
			return nil, fmt.Errorf("Fn::Select %s from %s", Canon(a[0]), Canon(a[1]))
		}
		return list[i], nil
	case "Fn::If":
		list, ok := arg.([]any)
		if !ok || len(list) != 3 {
			return nil, fmt.Errorf("Fn::If wants [condition, then, else], got %s", Canon(arg))
		}
		c, err := e.cond(Scalar(list[0]), stack)
		if err != nil {
			return nil, err
		}
		if c {
			return e.eval(list[1], stack)
		}
		return e.eval(list[2], stack)
	case "Fn::Equals":
		a, err := e.args(fn, arg, 2, stack)
		if err != nil {
			return nil, err
		}
		return Canon(a[0]) == Canon(a[1]), nil
	case "Fn::Contains":
		// Rules only: [list of strings, string].
		a, err := e.args(fn, arg, 2, stack)
		if err != nil {
			return nil, err
		}
		list, ok := a[0].([]any)
		if !ok {
			return nil, fmt.Errorf("Fn::Contains in %s, not a list", Canon(a[0]))
		}
		for _, x := range list {
			if Canon(x) == Canon(a[1]) {
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
			return nil, fmt.Errorf("Fn::Not of %s", Canon(a[0]))
		}
		return !b, nil
	case "Fn::And", "Fn::Or":
		list, _ := arg.([]any)
		if len(list) < 2 {
			return nil, fmt.Errorf("%s wants at least two conditions, got %s", fn, Canon(arg))
		}
		a, err := e.args(fn, arg, len(list), stack)
		if err != nil {
			return nil, err
		}
		and := fn == "Fn::And"
		for _, x := range a {
			b, ok := x.(bool)
			if !ok {
				return nil, fmt.Errorf("%s of %s", fn, Canon(x))
			}
			if b != and {
				return !and, nil
			}
		}
		return and, nil
	}
	return nil, fmt.Errorf("unsupported intrinsic %s", fn)
}

// args evaluates the n arguments of fn.
func (e *Evaluator) args(fn string, arg any, n int, stack []string) ([]any, error) {
	list, ok := arg.([]any)
	if !ok || len(list) != n {
		return nil, fmt.Errorf("%s wants a list of %d, got %s", fn, n, Canon(arg))
	}
	out := make([]any, n)
	for i, a := range list {
		r, err := e.eval(a, stack)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// Included reports whether the resource with logical id exists under the
// parameters: it is in the template and its Condition, if any, holds.
func (e *Evaluator) Included(id string) (bool, error) {
	if At(e.tmpl, "Resources", id) == nil {
		return false, nil
	}
	c, _ := At(e.tmpl, "Resources", id, "Condition").(string)
	if c == "" {
		return true, nil
	}
	return e.cond(c, nil)
}

// Refusal is a Rules assertion that fails: CloudFormation refuses the
// parameters before creating anything.
type Refusal struct {
	Rule, Description string
	// Params are the names the assertion refers to with Ref.
	Params []string
}

// Refusals evaluates the template's Rules and returns the assertions that
// fail, sorted by rule and description. A rule without assertions, an
// assertion without a description or one that is not a bool is an error.
func (e *Evaluator) Refusals() ([]Refusal, error) {
	var out []Refusal
	rules, _ := e.tmpl["Rules"].(map[string]any)
	for name, r := range rules {
		if c := At(r, "RuleCondition"); c != nil {
			holds, err := e.Eval(c)
			if err != nil {
				return nil, fmt.Errorf("rule %s: RuleCondition: %w", name, err)
			}
			if holds != true {
				continue
			}
		}
		asserts, ok := At(r, "Assertions").([]any)
		if !ok || len(asserts) == 0 {
			return nil, fmt.Errorf("rule %s has no Assertions", name)
		}
		for i, a := range asserts {
			v, err := e.Eval(At(a, "Assert"))
			if err != nil {
				return nil, fmt.Errorf("rule %s assertion %d: %w", name, i, err)
			}
			holds, ok := v.(bool)
			if !ok {
				return nil, fmt.Errorf("rule %s assertion %d evaluates to %s, not a bool", name, i, Canon(v))
			}
			if holds {
				continue
			}
			desc, _ := At(a, "AssertDescription").(string)
			if desc == "" {
				return nil, fmt.Errorf("rule %s assertion %d has no AssertDescription", name, i)
			}
			out = append(out, Refusal{Rule: name, Description: desc, Params: Refs(At(a, "Assert"))})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Rule != out[j].Rule {
			return out[i].Rule < out[j].Rule
		}
		return out[i].Description < out[j].Description
	})
	return out, nil
}

// Refs lists the names v refers to with Ref.
func Refs(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, el := range x {
			if s, ok := el.(string); ok && k == "Ref" {
				out = append(out, s)
			} else {
				out = append(out, Refs(el)...)
			}
		}
	case []any:
		for _, el := range x {
			out = append(out, Refs(el)...)
		}
	}
	return out
}

// StringList is a string or a list of scalars, as strings (nil otherwise).
func StringList(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		out := make([]string, 0, len(x))
		for _, el := range x {
			out = append(out, Scalar(el))
		}
		return out
	}
	return nil
}

// Scalar is the text of a scalar ("" for nil); other values are their
// Canon JSON.
func Scalar(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case nil:
		return ""
	}
	return Canon(v)
}

// At walks maps by string keys and lists by int indexes; nil when absent.
func At(v any, path ...any) any {
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

// Canon renders a value as JSON with sorted keys (and "<", ">" as they are).
func Canon(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
