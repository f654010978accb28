package main

import (
	"sort"
	"strings"
	"testing"
)

// writerGrants are the actions a writer needs on the outbox's tables,
// exactly: dynamo.NewWriter's GetItem of the config item and of a key that
// never exists on the messages table, UpdateItem of the sequence counters,
// PutItem of messages (in the transaction) and of fences.
var writerGrants = []string{
	"dynamodb:GetItem on <ControlTable.Arn>",
	"dynamodb:GetItem on <MessagesTable.Arn>",
	"dynamodb:PutItem on <MessagesTable.Arn>",
	"dynamodb:UpdateItem on <ControlTable.Arn>",
}

// TestGrantEnqueue: the example's writer, granted with GrantEnqueue, may do
// exactly what a writer needs on the outbox's tables and nothing else there.
func TestGrantEnqueue(t *testing.T) {
	s := results(t)
	e, err := newEvaluator(s.templates[exampleID], s.names[exampleID], nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.resources()
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
		if r["Type"] != "AWS::IAM::Policy" || !contains(at(r, "Properties", "Roles"), role) {
			continue
		}
		stmts, _ := at(r, "Properties", "PolicyDocument", "Statement").([]any)
		for _, st := range stmts {
			if at(st, "Effect") != "Allow" || at(st, "Condition") != nil || at(st, "NotAction") != nil || at(st, "NotResource") != nil {
				t.Errorf("unexpected statement %s", canon(st))
			}
			for _, a := range stringList(at(st, "Action")) {
				for _, r := range stringList(at(st, "Resource")) {
					got = append(got, a+" on "+r)
				}
			}
		}
	}
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(writerGrants, "\n") {
		t.Errorf("writer grants:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(writerGrants, "\n"))
	}
}

func contains(list any, s string) bool {
	l, _ := list.([]any)
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
