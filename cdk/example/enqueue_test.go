package main

import (
	"strings"
	"testing"
)

// TestEnqueueAsync: the construct's enqueue function (scenario
// EnqueueOnly) sends its failed asynchronous invocations to a queue of the
// stack, has a reserved concurrency of its own (none with
// EnqueueReservedConcurrency -1, scenario EnqueueUncapped), and has its alarms on the
// dashboard; without the function (scenario Plaintext) none of them exist.
// TestEquivalence checks they are template.yaml's; this checks they are
// there at all (deploy's TestEnqueueAsync does the same for template.yaml).
func TestEnqueueAsync(t *testing.T) {
	s := results(t)
	stack := func(name string) map[string]map[string]any {
		e, err := newEvaluator(s.templates[name], s.names[name], nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := resources(e)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := stack("EnqueueOnly")
	eic := res["EnqueueFunctionEventInvokeConfig"]
	dest, _ := at(eic, "Properties", "DestinationConfig", "OnFailure", "Destination").(string)
	queue := strings.TrimSuffix(strings.TrimPrefix(dest, "<"), ".Arn>")
	if at(eic, "Type") != "AWS::Lambda::EventInvokeConfig" || at(eic, "Properties", "FunctionName") != "<EnqueueFunction>" ||
		at(res[queue], "Type") != "AWS::SQS::Queue" {
		t.Errorf("the enqueue function's EventInvokeConfig %s, on-failure destination %q: want a queue of the stack", show(eic), dest)
	}
	if got := at(res["EnqueueFunction"], "Properties", "ReservedConcurrentExecutions"); scalar(got) != "10" {
		t.Errorf("EnqueueFunction ReservedConcurrentExecutions %s, want 10", show(got))
	}
	if got := at(stack("EnqueueUncapped")["EnqueueFunction"], "Properties", "ReservedConcurrentExecutions"); got != nil {
		t.Errorf("EnqueueReservedConcurrency -1: EnqueueFunction ReservedConcurrentExecutions %s, want none", show(got))
	}
	body, _ := at(res["Dashboard"], "Properties", "DashboardBody").(string)
	for alarm, watched := range map[string]string{"EnqueueErrorsAlarm": "<EnqueueFunction>", "EnqueueFailureQueueAlarm": "<" + queue + ".QueueName>"} {
		if v := at(res[alarm], "Properties", "Dimensions", 0, "Value"); v != watched || !strings.Contains(body, "<"+alarm+".Arn>") {
			t.Errorf("%s watches %s (want %s); on the dashboard: %v", alarm, show(v), watched, strings.Contains(body, "<"+alarm+".Arn>"))
		}
	}
	for name := range stack("Plaintext") {
		if strings.HasPrefix(name, "Enqueue") {
			t.Errorf("without the enqueue function the stack has %s", name)
		}
	}
}
