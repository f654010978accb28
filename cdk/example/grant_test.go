package main

import (
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestGrantEnqueue: the example's writer, granted with GrantEnqueue, may do
// exactly what template.yaml's WriterPolicy allows, and nothing else.
func TestGrantEnqueue(t *testing.T) {
	s := results(t)
	sam, err := newEvaluator(s.sam, nil, s.params[exampleID])
	if err != nil {
		t.Fatal(err)
	}
	want, err := resources(sam)
	if err != nil {
		t.Fatal(err)
	}
	writerPolicy := want["WriterPolicy"]
	if writerPolicy == nil {
		t.Fatal("template.yaml has no WriterPolicy")
	}
	writerGrants := grants(t, at(writerPolicy, "Properties", "PolicyDocument"))
	e, err := newEvaluator(s.templates[exampleID], s.names[exampleID], nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := resources(e)
	if err != nil {
		t.Fatal(err)
	}
	var role string
	for id, r := range res {
		if at(r, "Metadata", "aws:cdk:path") == writerPath+"ServiceRole/Resource" {
			role = "<" + id + ">"
		}
	}
	if role == "" {
		t.Fatal("no writer role in the example stack")
	}
	var got []string
	for _, r := range res {
		if r["Type"] == "AWS::IAM::Policy" && contains(at(r, "Properties", "Roles"), role) {
			got = append(got, grants(t, at(r, "Properties", "PolicyDocument"))...)
		}
	}
	sort.Strings(got)
	if len(writerGrants) == 0 || strings.Join(got, "\n") != strings.Join(writerGrants, "\n") {
		t.Errorf("writer grants:\n%s\nWriterPolicy's:\n%s", strings.Join(got, "\n"), strings.Join(writerGrants, "\n"))
	}
}

// grants lists a policy document's (action, resource) pairs, sorted; a
// statement other than a plain Allow fails the test.
func grants(t *testing.T, doc any) []string {
	t.Helper()
	var out []string
	stmts, _ := at(doc, "Statement").([]any)
	for _, st := range stmts {
		if at(st, "Effect") != "Allow" || at(st, "Condition") != nil || at(st, "NotAction") != nil || at(st, "NotResource") != nil {
			t.Errorf("unexpected statement %s", canon(st))
		}
		for _, a := range stringList(at(st, "Action")) {
			for _, r := range stringList(at(st, "Resource")) {
				out = append(out, a+" on "+r)
			}
		}
	}
	sort.Strings(out)
	return out
}

// contains reports whether list, a JSON array, holds the string s.
func contains(list any, s string) bool {
	l, _ := list.([]any)
	return slices.Contains(l, any(s))
}
