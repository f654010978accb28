package outboxcdk

import (
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"
)

// dashboardBody is template.yaml's dashboard, one screen per outbox:
// backlog, age, throughput, failures, durations, the stream's iterator age,
// leases, and the alarms' states. It is an Fn::Sub body: ${AWS::Region} and
// the variables newDashboard passes.
const dashboardBody = `{
  "start": "-PT3H",
  "periodOverride": "inherit",
  "widgets": [
    {"type": "alarm", "x": 0, "y": 0, "width": 24, "height": 3, "properties": {
      "title": "Alarms", "alarms": [
        "${OldestPendingAgeAlarm}", "${StuckBucketsAlarm}", "${ParkedMessagesAlarm}",
        "${PublishFailuresFatalAlarm}", "${RelayErrorsAlarm}", "${SweeperErrorsAlarm}",
        "${RelayIteratorAgeAlarm}", "${RelayFailureQueueAlarm}",
        "${RebucketOverdueAlarm}"${EnqueueAlarms}]}},
    {"type": "metric", "x": 0, "y": 3, "width": 8, "height": 6, "properties": {
      "title": "Backlog (messages)", "region": "${AWS::Region}", "view": "timeSeries", "stat": "Maximum", "period": 60,
      "metrics": [
        ["Outbox", "PendingMessages", "Outbox", "${Outbox}", {"label": "pending (fences included)"}],
        [".", "StuckBuckets", ".", ".", {"label": "stuck buckets", "yAxis": "right"}],
        [".", "ParkedMessages", ".", ".", {"label": "parked", "yAxis": "right"}]]}},
    {"type": "metric", "x": 8, "y": 3, "width": 8, "height": 6, "properties": {
      "title": "Oldest pending message (seconds)", "region": "${AWS::Region}", "view": "timeSeries", "stat": "Maximum", "period": 60,
      "metrics": [["Outbox", "OldestPendingAge", "Outbox", "${Outbox}", {"label": "oldest pending age"}]],
      "annotations": {"horizontal": [{"label": "alarm", "value": ${AgeThreshold}}]}}},
    {"type": "metric", "x": 16, "y": 3, "width": 8, "height": 6, "properties": {
      "title": "Throughput (per minute)", "region": "${AWS::Region}", "view": "timeSeries", "period": 60,
      "metrics": [
        ["Outbox", "MessagesPublished", "Outbox", "${Outbox}", {"stat": "Sum", "label": "published"}],
        [".", "BatchSize", ".", ".", {"stat": "Average", "label": "batch size", "yAxis": "right"}],
        [".", "FencesWritten", ".", ".", {"stat": "Sum", "label": "fences written"}]]}},
    {"type": "metric", "x": 0, "y": 9, "width": 8, "height": 6, "properties": {
      "title": "Failures", "region": "${AWS::Region}", "view": "timeSeries", "stat": "Sum", "period": 60,
      "metrics": [
        ["Outbox", "PublishFailuresFatal", "Outbox", "${Outbox}", {"label": "publish fatal"}],
        [".", "PublishFailuresRetriable", ".", ".", {"label": "publish retriable"}],
        [".", "PublishFailuresRecord", ".", ".", {"label": "publish record"}],
        [".", "MessagesParked", ".", ".", {"label": "parked"}],
        [".", "BucketsFailed", ".", ".", {"label": "buckets failed"}],
        ["AWS/Lambda", "Errors", "FunctionName", "${RelayFunction}", {"label": "relay errors"}],
        ["...", "${SweeperFunction}", {"label": "sweeper errors"}],
        ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "${RelayFailureQueueName}", {"stat": "Maximum", "label": "failure queue"}]]}},
    {"type": "metric", "x": 8, "y": 9, "width": 8, "height": 6, "properties": {
      "title": "Durations (ms)", "region": "${AWS::Region}", "view": "timeSeries", "period": 60,
      "metrics": [
        ["Outbox", "PublishDuration", "Outbox", "${Outbox}", {"stat": "p99", "label": "publish p99"}],
        ["...", {"stat": "p50", "label": "publish p50"}],
        [".", "InvocationDuration", ".", ".", {"stat": "p99", "label": "relay invocation p99"}],
        [".", "GapWaitTime", ".", ".", {"stat": "Maximum", "label": "gap wait max"}],
        ["AWS/Lambda", "Duration", "FunctionName", "${SweeperFunction}", {"stat": "Maximum", "label": "sweeper duration max"}]]}},
    {"type": "metric", "x": 16, "y": 9, "width": 8, "height": 6, "properties": {
      "title": "Stream iterator age (ms)", "region": "${AWS::Region}", "view": "timeSeries", "stat": "Maximum", "period": 60,
      "metrics": [["AWS/Lambda", "IteratorAge", "FunctionName", "${RelayFunction}", {"label": "relay iterator age"}]],
      "annotations": {"horizontal": [{"label": "alarm", "value": ${IteratorThreshold}}]}}},
    {"type": "metric", "x": 0, "y": 15, "width": 24, "height": 6, "properties": {
      "title": "Leases and relays", "region": "${AWS::Region}", "view": "timeSeries", "stat": "Sum", "period": 60,
      "metrics": [
        ["Outbox", "LeasesAcquired", "Outbox", "${Outbox}", {"label": "acquired"}],
        [".", "LeasesLost", ".", ".", {"label": "lost"}],
        [".", "LeasesTakenOver", ".", ".", {"label": "taken over"}],
        [".", "LiveRelays", ".", ".", {"stat": "Maximum", "label": "live relays", "yAxis": "right"}]]}}${EnqueueWidget}
  ]
}`

// enqueueAlarms and enqueueWidget replace ${EnqueueAlarms} and
// ${EnqueueWidget} in dashboardBody with the enqueue function (empty
// without it), before the Fn::Sub.
const (
	enqueueAlarms = `, "${EnqueueErrorsAlarm}", "${EnqueueFailureQueueAlarm}"`
	enqueueWidget = `,
    {"type": "metric", "x": 0, "y": 21, "width": 24, "height": 6, "properties": {
      "title": "Enqueue function", "region": "${AWS::Region}", "view": "timeSeries", "stat": "Sum", "period": 60,
      "metrics": [
        ["AWS/Lambda", "Invocations", "FunctionName", "${EnqueueFunction}", {"label": "invocations"}],
        [".", "Errors", ".", ".", {"label": "errors"}],
        [".", "Throttles", ".", ".", {"label": "throttles"}],
        [".", "ConcurrentExecutions", ".", ".", {"stat": "Maximum", "label": "concurrent (reserved ${EnqueueReservedConcurrency})", "yAxis": "right"}],
        [".", "AsyncEventsDropped", ".", ".", {"label": "async events dropped"}],
        ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "${EnqueueFailureQueueName}", {"stat": "Maximum", "label": "failure queue"}]]}}`
)

// newDashboard creates the dashboard, named <stack>-<region>-outbox as
// template.yaml names it; enqueue is the enqueue function, nil without it.
func (o *Outbox) newDashboard(relay, sweeper, enqueue awslambda.CfnFunction) {
	a, n := o.Alarms, o.cfg.n
	vars := map[string]*string{
		"Outbox":                    o.messagesName,
		"AgeThreshold":              jsii.String(strconv.Itoa(n["OldestPendingAgeAlarmSeconds"])),
		"IteratorThreshold":         jsii.String(strconv.Itoa(n["IteratorAgeAlarmMilliseconds"])),
		"RelayFunction":             relay.Ref(),
		"SweeperFunction":           sweeper.Ref(),
		"RelayFailureQueueName":     o.FailureQueue.QueueName(),
		"OldestPendingAgeAlarm":     a.OldestPendingAge.AlarmArn(),
		"StuckBucketsAlarm":         a.StuckBuckets.AlarmArn(),
		"ParkedMessagesAlarm":       a.ParkedMessages.AlarmArn(),
		"PublishFailuresFatalAlarm": a.PublishFailuresFatal.AlarmArn(),
		"RelayErrorsAlarm":          a.RelayErrors.AlarmArn(),
		"SweeperErrorsAlarm":        a.SweeperErrors.AlarmArn(),
		"RelayIteratorAgeAlarm":     a.RelayIteratorAge.AlarmArn(),
		"RelayFailureQueueAlarm":    a.FailureQueue.AlarmArn(),
		"RebucketOverdueAlarm":      a.BucketCountChangeOverdue.AlarmArn(),
	}
	body := strings.NewReplacer("${EnqueueAlarms}", "", "${EnqueueWidget}", "").Replace(dashboardBody)
	if enqueue != nil {
		body = strings.NewReplacer("${EnqueueAlarms}", enqueueAlarms, "${EnqueueWidget}", enqueueWidget).Replace(dashboardBody)
		vars["EnqueueErrorsAlarm"] = a.EnqueueErrors.AlarmArn()
		vars["EnqueueFailureQueueAlarm"] = a.EnqueueFailureQueue.AlarmArn()
		vars["EnqueueFunction"] = enqueue.Ref()
		vars["EnqueueFailureQueueName"] = o.EnqueueFailureQueue.QueueName()
		vars["EnqueueReservedConcurrency"] = jsii.String(strconv.Itoa(n["EnqueueReservedConcurrency"]))
	}
	o.Dashboard = awscloudwatch.NewCfnDashboard(o.Construct, jsii.String("Dashboard"), &awscloudwatch.CfnDashboardProps{
		DashboardName: awscdk.Fn_Sub(jsii.String("${AWS::StackName}-${AWS::Region}-outbox"), nil),
		DashboardBody: awscdk.Fn_Sub(jsii.String(body), &vars),
	})
}
