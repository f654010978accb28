package main

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// The equivalence test compares, for every scenario, the CDK stack's
// template with template.yaml after the SAM transform, both evaluated for
// the scenario's settings: every resource (same shared name, same type,
// same properties, deletion policies and dependencies, intrinsic functions
// resolved) and every output. Logical ids differ by design: the CDK derives
// them from construct paths (OutboxMessagesTable57E4C8C9); the construct
// gives its children the template's logical ids as construct ids, so the
// path below the outbox (without an L2's trailing /Resource) is the shared
// name. Only the differences listed in accepted are ignored.

// any matches any value in an acceptedDiff; absent matches a missing key.
var (
	anyValue = &struct{ any }{}
	absent   = &struct{ absent bool }{}
)

// acceptedDiff is one inherent difference: on resources of Type (or "*"),
// the value at Path may be SAM on the template.yaml side and CDK on the
// CDK side.
type acceptedDiff struct {
	Type     string
	Path     []string
	SAM, CDK any
	Why      string
}

// accepted is every difference the test ignores. Each must occur in some
// scenario, so a stale entry is noticed.
var accepted = []acceptedDiff{
	{Type: "*", Path: []string{"Metadata"}, SAM: anyValue, CDK: anyValue,
		Why: "SAM copies a function's Metadata (BuildMethod: go1.x, for `sam build`) onto the resources it generates for it; the CDK writes aws:cdk:path and, on functions, aws:asset:* (for `cdk deploy`)"},
	{Type: "AWS::Lambda::Function", Path: []string{"Properties", "Code"}, SAM: anyValue, CDK: anyValue,
		Why: "the code: SAM builds CodeUri (lambda/relay, lambda/sweeper) from source and uploads it; the CDK uploads Props.BinDir's bootstrap as an asset. The test synthesizes with a placeholder bootstrap (only the asset hash in S3Key depends on it)"},
	{Type: "AWS::Lambda::Function", Path: []string{"Properties", "Tags"}, SAM: []any{map[string]any{"Key": "lambda:createdBy", "Value": "SAM"}}, CDK: absent,
		Why: "SAM tags every function it creates with lambda:createdBy=SAM"},
	{Type: "AWS::Lambda::EventInvokeConfig", Path: []string{"Properties", "DestinationConfig"}, SAM: map[string]any{}, CDK: absent,
		Why: "SAM writes an empty DestinationConfig"},
	{Type: "AWS::IAM::ManagedPolicy", Path: []string{"Properties", "Path"}, SAM: absent, CDK: "/",
		Why: "the CDK writes IAM's default path"},
}

// normalization rewrites both sides of a resource the same way before they
// are compared, for a spelling difference that means the same.
type normalization struct {
	Why   string
	Apply func(resource map[string]any) bool // reports whether it changed anything
}

// normalizations are every rewrite the test makes; each must apply in some
// scenario.
var normalizations = []normalization{
	{Why: "an IAM statement's one-element Action or Resource list is written as the element by the CDK (PolicyStatement renders a single value as a scalar); IAM reads both the same",
		Apply: scalarStatementLists},
}

// scalarStatementLists replaces one-element Action, NotAction, Resource and
// NotResource lists in every policy statement of the resource by their
// element.
func scalarStatementLists(v map[string]any) bool {
	changed := false
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if stmts, ok := x["Statement"].([]any); ok {
				for _, st := range stmts {
					m, _ := st.(map[string]any)
					for _, k := range []string{"Action", "NotAction", "Resource", "NotResource"} {
						if l, ok := m[k].([]any); ok && len(l) == 1 {
							m[k] = l[0]
							changed = true
						}
					}
				}
			}
			for _, el := range x {
				walk(el)
			}
		case []any:
			for _, el := range x {
				walk(el)
			}
		}
	}
	walk(v)
	return changed
}

// Resources and template sections only one side has, by design.
const (
	cdkMetadataType = "AWS::CDK::Metadata" // the CDK's version reporting (aws:cdk:version-reporting)
	writerPath      = exampleID + "/Writer/"
)

// acceptedSections are the top-level template keys that differ, and why.
// The test checks the CDK template has no other key with other content.
var acceptedSections = map[string]string{
	"AWSTemplateFormatVersion": "the SAM template declares it; the CDK omits it (the same, only version)",
	"Description":              "the SAM template's own; a CDK stack's is the app's (StackProps.Description)",
	"Parameters":               "template.yaml's parameters are Props (resolved at synthesis); the CDK adds BootstrapVersion (the `cdk bootstrap` version check)",
	"Conditions":               "template.yaml's conditions are Go branches in the construct; the CDK adds CDKMetadataAvailable (for AWS::CDK::Metadata)",
	"Rules":                    "template.yaml's Rules are Props.Validate (TestPropsMirrorRules); the CDK adds CheckBootstrapVersion",
	"Resources":                "compared resource by resource",
	"Outputs":                  "compared output by output",
}

// used and normalized count how often each accepted entry and each
// normalization applied, across scenarios.
var (
	used       = make([]int, len(accepted))
	normalized = make([]int, len(normalizations))
)

func TestEquivalence(t *testing.T) {
	s := results(t)
	for _, stack := range s.stacks {
		t.Run(stack, func(t *testing.T) {
			sam, err := newEvaluator(s.sam, nil, s.params[stack])
			if err != nil {
				t.Fatal(err)
			}
			cdk, err := newEvaluator(s.templates[stack], s.names[stack], nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Run("resources", func(t *testing.T) {
				want, err := resources(sam)
				if err != nil {
					t.Fatal(err)
				}
				got, err := resources(cdk)
				if err != nil {
					t.Fatal(err)
				}
				compareResources(t, stack, want, got)
			})
			t.Run("outputs", func(t *testing.T) {
				want, err := outputs(sam)
				if err != nil {
					t.Fatal(err)
				}
				got, err := outputs(cdk)
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range diff("Outputs", want, got) {
					t.Error(d)
				}
			})
			t.Run("sections", func(t *testing.T) {
				for k := range s.templates[stack] {
					if _, ok := acceptedSections[k]; !ok {
						t.Errorf("the CDK template has a %s section, which the test does not compare", k)
					}
				}
				for k := range s.sam {
					if _, ok := acceptedSections[k]; !ok {
						t.Errorf("template.yaml has a %s section, which the CDK template does not mirror", k)
					}
				}
				cdkOnly := map[string][]string{"Parameters": {"BootstrapVersion"}, "Rules": {"CheckBootstrapVersion"}, "Conditions": {"CDKMetadataAvailable"}}
				for section, want := range cdkOnly {
					var got []string
					m, _ := s.templates[stack][section].(map[string]any)
					for k := range m {
						got = append(got, k)
					}
					sort.Strings(got)
					if !reflect.DeepEqual(got, want) {
						t.Errorf("CDK %s = %v, want only %v", section, got, want)
					}
				}
			})
		})
	}
	// After every scenario: an accepted difference that none needed is
	// stale (template.yaml or the construct changed) and must go.
	t.Run("accepted differences", func(t *testing.T) {
		for i, a := range accepted {
			if used[i] == 0 {
				t.Errorf("accepted difference %s %s never applied: remove it (%s)", a.Type, strings.Join(a.Path, "."), a.Why)
			}
		}
		for i, nz := range normalizations {
			if normalized[i] == 0 {
				t.Errorf("normalization never applied: remove it (%s)", nz.Why)
			}
		}
	})
}

// compareResources fails for every resource one side lacks and every
// difference between the two sides not in accepted.
func compareResources(t *testing.T, stack string, want, got map[string]map[string]any) {
	t.Helper()
	names := map[string]bool{}
	for n := range want {
		names[n] = true
	}
	for n, r := range got {
		switch path, _ := at(r, "Metadata", "aws:cdk:path").(string); {
		case r["Type"] == cdkMetadataType:
			continue
		case stack == exampleID && strings.HasPrefix(path, writerPath):
			continue // the example's writer, TestGrantEnqueue checks it
		}
		names[n] = true
	}
	var sorted []string
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		w, g := want[n], got[n]
		switch {
		case g == nil:
			t.Errorf("%s (%s) is in template.yaml but not in the CDK stack", n, w["Type"])
			continue
		case w == nil:
			t.Errorf("%s (%s) is in the CDK stack but not in template.yaml", n, g["Type"])
			continue
		case w["Type"] != g["Type"]:
			t.Errorf("%s is a %s in template.yaml, a %s in the CDK stack", n, w["Type"], g["Type"])
			continue
		}
		w, g = clone(w).(map[string]any), clone(g).(map[string]any)
		for i, nz := range normalizations {
			if a, b := nz.Apply(w), nz.Apply(g); a || b {
				normalized[i]++
			}
		}
		for i, a := range accepted {
			if a.Type != "*" && a.Type != w["Type"] {
				continue
			}
			ws, wok := lookup(w, a.Path)
			gs, gok := lookup(g, a.Path)
			if matches(a.SAM, ws, wok) && matches(a.CDK, gs, gok) && (wok || gok) {
				remove(w, a.Path)
				remove(g, a.Path)
				used[i]++
			}
		}
		for _, d := range diff(n, w, g) {
			t.Error(d)
		}
	}
}

func matches(want, got any, present bool) bool {
	switch want {
	case anyValue:
		return true
	case absent:
		return !present
	}
	return present && reflect.DeepEqual(want, got)
}

func lookup(m map[string]any, path []string) (any, bool) {
	var v any = m
	for _, k := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = mm[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

func remove(m map[string]any, path []string) {
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			return
		}
		m = next
	}
	delete(m, path[len(path)-1])
}

func clone(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, el := range x {
			out[k] = clone(el)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, el := range x {
			out[i] = clone(el)
		}
		return out
	}
	return v
}

// TestScenariosCoverParameters: Props and the template's parameters are
// the same set of names, and the scenarios set every parameter to a value
// other than its default, so a setting the construct ignored would show.
func TestScenariosCoverParameters(t *testing.T) {
	s := results(t)
	params, _ := s.sam["Parameters"].(map[string]any)
	fields := propsFields()
	for name, p := range params {
		if !fields[name] {
			t.Errorf("template parameter %s has no Props field of that name", name)
		}
		def := fmt.Sprint(scalar(at(p, "Default")))
		changed := false
		for _, stack := range s.stacks {
			if v, ok := s.params[stack][name]; ok && v != def {
				changed = true
			}
		}
		if !changed {
			t.Errorf("no scenario sets %s to other than its default %q", name, def)
		}
	}
	for name := range fields {
		if params[name] == nil && !cdkOnlyProps[name] {
			t.Errorf("Props.%s is not a template parameter (nor listed in cdkOnlyProps)", name)
		}
	}
}
