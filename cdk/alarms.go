package outboxcdk

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Alarms are the outbox's CloudWatch alarms. With Props.AlarmTopicArn each
// notifies that topic on ALARM and OK; add actions of your own with
// AddAlarmAction / AddOkAction.
type Alarms struct {
	// RelayErrors: the relay failed in 3 of the last 5 minutes.
	RelayErrors awscloudwatch.Alarm
	// RelayIteratorAge: hints wait on the stream longer than
	// IteratorAgeAlarmMilliseconds for 3 minutes; the relay falls behind.
	RelayIteratorAge awscloudwatch.Alarm
	// FailureQueue: the stream event source gave up on hints; the sweeper
	// is now the only path for them.
	FailureQueue awscloudwatch.Alarm
	// SweeperErrors: the sweeper failed in 3 of the last 5 minutes.
	SweeperErrors awscloudwatch.Alarm
}

// All returns every alarm.
func (a Alarms) All() []awscloudwatch.Alarm {
	return []awscloudwatch.Alarm{a.RelayErrors, a.RelayIteratorAge, a.FailureQueue, a.SweeperErrors}
}

// alarm is one alarm's definition, as template.yaml writes it.
type alarm struct {
	id, description   string
	namespace, metric string
	dimension         string
	value             *string
	statistic         string
	period            float64 // seconds
	evaluationPeriods float64
	datapoints        float64 // 0 = EvaluationPeriods
	threshold         float64
	comparison        awscloudwatch.ComparisonOperator
}

func (o *Outbox) newAlarms(relay, sweeper awslambda.CfnFunction) {
	errors := func(id, description string, fn awslambda.CfnFunction) alarm {
		return alarm{id: id, description: description, namespace: "AWS/Lambda", metric: "Errors", dimension: "FunctionName", value: fn.Ref(),
			statistic: "Sum", period: 60, evaluationPeriods: 5, datapoints: 3, threshold: 1,
			comparison: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD}
	}
	o.Alarms = Alarms{
		RelayErrors: o.newAlarm(errors("RelayErrorsAlarm", "The relay function failed in 3 of the last 5 minutes (Kafka, DynamoDB or configuration).", relay)),
		RelayIteratorAge: o.newAlarm(alarm{id: "RelayIteratorAgeAlarm",
			description: "Hints wait on the messages stream longer than IteratorAgeAlarmMilliseconds; the relay is falling behind.",
			namespace:   "AWS/Lambda", metric: "IteratorAge", dimension: "FunctionName", value: relay.Ref(),
			statistic: "Maximum", period: 60, evaluationPeriods: 3, threshold: float64(o.cfg.n["IteratorAgeAlarmMilliseconds"]),
			comparison: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD}),
		FailureQueue: o.newAlarm(alarm{id: "RelayFailureQueueAlarm",
			description: "The stream event source gave up on hints (see the failure queue); the sweeper is now the only path for them.",
			namespace:   "AWS/SQS", metric: "ApproximateNumberOfMessagesVisible", dimension: "QueueName", value: o.FailureQueue.QueueName(),
			statistic: "Maximum", period: 300, evaluationPeriods: 1, threshold: 1,
			comparison: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD}),
		SweeperErrors: o.newAlarm(errors("SweeperErrorsAlarm", "The sweeper failed in 3 of the last 5 minutes; lost hints are not being recovered.", sweeper)),
	}
}

func (o *Outbox) newAlarm(a alarm) awscloudwatch.Alarm {
	props := &awscloudwatch.AlarmProps{
		AlarmDescription: jsii.String(a.description),
		Metric: awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace:     jsii.String(a.namespace),
			MetricName:    jsii.String(a.metric),
			DimensionsMap: &map[string]*string{a.dimension: a.value},
			Statistic:     jsii.String(a.statistic),
			Period:        awscdk.Duration_Seconds(jsii.Number(a.period)),
		}),
		EvaluationPeriods:  jsii.Number(a.evaluationPeriods),
		Threshold:          jsii.Number(a.threshold),
		ComparisonOperator: a.comparison,
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	}
	if a.datapoints != 0 {
		props.DatapointsToAlarm = jsii.Number(a.datapoints)
	}
	al := awscloudwatch.NewAlarm(o.Construct, jsii.String(a.id), props)
	if o.cfg.alarmTopic != "" {
		action := &topicAction{arn: jsii.String(o.cfg.alarmTopic)}
		al.AddAlarmAction(action)
		al.AddOkAction(action)
	}
	return al
}

// topicAction notifies an SNS topic given by ARN, without importing the
// topic (awscloudwatchactions.SnsAction needs an ITopic).
type topicAction struct{ arn *string }

func (t *topicAction) Bind(constructs.Construct, awscloudwatch.IAlarm) *awscloudwatch.AlarmActionConfig {
	return &awscloudwatch.AlarmActionConfig{AlarmActionArn: t.arn}
}
