package main

import (
	"fmt"
	"reflect"
	"sort"

	"github.com/dynakafka/outbox/internal/harness/cfneval"
)

// The tests evaluate CloudFormation templates (JSON, as the CDK and the SAM
// translator write them) for given parameter values with internal/harness/cfneval
// (shared with deploy/'s tests), so that two templates can be compared by
// what a stack would contain rather than by how they spell it: Fn::Sub and
// Fn::Join that build the same ARN are equal, resources whose Condition is
// false are absent, and references to resources become "<Name>" or
// "<Name.Attribute>" with each template's logical ids replaced by a shared
// name.

type evaluator = cfneval.Evaluator

var (
	at         = cfneval.At
	canon      = cfneval.Canon
	scalar     = cfneval.Scalar
	stringList = cfneval.StringList
)

// newEvaluator takes the parameters' defaults overridden by values; names
// maps logical ids to shared names (see cfneval.New).
func newEvaluator(tmpl map[string]any, names map[string]string, values map[string]string) (*evaluator, error) {
	return cfneval.New(tmpl, names, values)
}

// resources evaluates every resource that exists under the parameters,
// keyed by shared name: its Type, Properties, DependsOn (shared names,
// sorted), Metadata and deletion policies. Conditions are evaluated away.
func resources(e *evaluator) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	all, _ := e.Template()["Resources"].(map[string]any)
	for id, r := range all {
		res, _ := r.(map[string]any)
		if c, ok := res["Condition"].(string); ok {
			holds, err := e.Cond(c)
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
					deps = append(deps, e.Name(d))
				}
				sort.Strings(deps)
				ev[k] = toAny(deps)
				continue
			}
			x, err := e.Eval(v)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", id, k, err)
			}
			ev[k] = x
		}
		name := e.Name(id)
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("two resources are named %s", name)
		}
		out[name] = ev
	}
	return out, nil
}

// outputs evaluates the outputs' values and descriptions, by shared name.
func outputs(e *evaluator) (map[string]any, error) {
	out := map[string]any{}
	all, _ := e.Template()["Outputs"].(map[string]any)
	for id, o := range all {
		if c, ok := at(o, "Condition").(string); ok {
			holds, err := e.Cond(c)
			if err != nil {
				return nil, err
			}
			if !holds {
				continue
			}
		}
		v, err := e.Eval(o)
		if err != nil {
			return nil, fmt.Errorf("output %s: %w", id, err)
		}
		delete(v.(map[string]any), "Condition")
		out[e.Name(id)] = v
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
