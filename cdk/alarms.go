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
// AddAlarmAction / AddOkAction. The outbox's own metrics (namespace Outbox,
// dimension Outbox = the messages table's name) are CloudWatch Embedded
// Metric Format lines in the functions' logs; a value that could not be
// sampled is absent. Missing data does not breach, except for the backlog
// alarms (OldestPendingAge, StuckBuckets): the sweeper writes them on every
// invocation that sampled every bucket, so their absence means a sweeper
// that failed its init (Kafka unreachable), could not sample the backlog, or
// does not run — the backlog is not watched, which is an alarm.
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
	// OldestPendingAge: the oldest pending message is older than
	// OldestPendingAgeAlarmSeconds in 3 of the last 5 sweeps.
	OldestPendingAge awscloudwatch.Alarm
	// StuckBuckets: buckets hold pending messages while their head has not
	// moved for several sweeps.
	StuckBuckets awscloudwatch.Alarm
	// ParkedMessages: messages Kafka would never take were parked.
	ParkedMessages awscloudwatch.Alarm
	// PublishFailuresFatal: Kafka refused publishes for a whole topic or
	// cluster; the affected buckets stop until it is fixed.
	PublishFailuresFatal awscloudwatch.Alarm
	// EnqueueErrors: the enqueue function answered errors in 3 of the last
	// 5 minutes (nil without the function).
	EnqueueErrors awscloudwatch.Alarm
	// EnqueueFailureQueue: asynchronous invocations of the enqueue
	// function failed their retries (nil without the function).
	EnqueueFailureQueue awscloudwatch.Alarm
	// BucketCountChangeOverdue: an online BucketCount change is in
	// progress past its deadline and the sweeper could not abort it; every
	// writer is paused.
	BucketCountChangeOverdue awscloudwatch.Alarm
}

// All returns every alarm, in the order the dashboard shows them.
func (a Alarms) All() []awscloudwatch.Alarm {
	all := []awscloudwatch.Alarm{a.OldestPendingAge, a.StuckBuckets, a.ParkedMessages, a.PublishFailuresFatal,
		a.RelayErrors, a.SweeperErrors, a.RelayIteratorAge, a.FailureQueue, a.BucketCountChangeOverdue}
	if a.EnqueueErrors != nil {
		all = append(all, a.EnqueueErrors, a.EnqueueFailureQueue)
	}
	return all
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
	missingBreaches   bool // TreatMissingData breaching, not notBreaching
}

// newAlarms creates template.yaml's alarms; enqueue is the enqueue
// function, nil without it.
func (o *Outbox) newAlarms(relay, sweeper, enqueue awslambda.CfnFunction) {
	n := o.cfg.n
	gte := awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD
	gt := awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD
	errors := func(id, description string, fn awslambda.CfnFunction) alarm {
		return alarm{id: id, description: description, namespace: "AWS/Lambda", metric: "Errors", dimension: "FunctionName", value: fn.Ref(),
			statistic: "Sum", period: 60, evaluationPeriods: 5, datapoints: 3, threshold: 1, comparison: gte}
	}
	outbox := func(a alarm) alarm {
		a.namespace, a.dimension, a.value = "Outbox", "Outbox", o.alarmName()
		return a
	}
	o.Alarms = Alarms{
		RelayErrors: o.newAlarm(errors("RelayErrorsAlarm", "The relay function failed in 3 of the last 5 minutes (Kafka, DynamoDB, configuration, or buckets it could not drain).", relay)),
		RelayIteratorAge: o.newAlarm(alarm{id: "RelayIteratorAgeAlarm",
			description: "Hints wait on the messages stream longer than IteratorAgeAlarmMilliseconds; the relay is falling behind.",
			namespace:   "AWS/Lambda", metric: "IteratorAge", dimension: "FunctionName", value: relay.Ref(),
			statistic: "Maximum", period: 60, evaluationPeriods: 3, threshold: float64(n["IteratorAgeAlarmMilliseconds"]), comparison: gt}),
		FailureQueue: o.newAlarm(alarm{id: "RelayFailureQueueAlarm",
			description: "The stream event source gave up on hints (see the failure queue); the sweeper is now the only path for them.",
			namespace:   "AWS/SQS", metric: "ApproximateNumberOfMessagesVisible", dimension: "QueueName", value: o.FailureQueue.QueueName(),
			statistic: "Maximum", period: 300, evaluationPeriods: 1, threshold: 1, comparison: gte}),
		SweeperErrors: o.newAlarm(errors("SweeperErrorsAlarm", "The sweeper failed in 3 of the last 5 minutes; lost hints are not being recovered.", sweeper)),
		OldestPendingAge: o.newAlarm(outbox(alarm{id: "OldestPendingAgeAlarm",
			description: "The oldest pending message is older than OldestPendingAgeAlarmSeconds in 3 of the last 5 sweeps; messages are not reaching Kafka.",
			metric:      "OldestPendingAge", statistic: "Maximum", period: 60, evaluationPeriods: 5, datapoints: 3,
			threshold: float64(n["OldestPendingAgeAlarmSeconds"]), comparison: gt, missingBreaches: true})),
		StuckBuckets: o.newAlarm(outbox(alarm{id: "StuckBucketsAlarm",
			description: "Buckets hold pending messages while their head has not moved for several sweeps (a fatal Kafka error, a blocked record, an unfenced gap).",
			metric:      "StuckBuckets", statistic: "Maximum", period: 60, evaluationPeriods: 3, datapoints: 2, threshold: 1, comparison: gte, missingBreaches: true})),
		ParkedMessages: o.newAlarm(outbox(alarm{id: "ParkedMessagesAlarm",
			description: "Messages Kafka would never take were parked as dead letters; replay or drop them (outbox parked).",
			metric:      "ParkedMessages", statistic: "Maximum", period: 300, evaluationPeriods: 1, threshold: 0, comparison: gt})),
		PublishFailuresFatal: o.newAlarm(outbox(alarm{id: "PublishFailuresFatalAlarm",
			description: "Kafka refused publishes for a whole topic or cluster (authorization, missing topic, configuration); the affected buckets stop until it is fixed.",
			metric:      "PublishFailuresFatal", statistic: "Sum", period: 300, evaluationPeriods: 1, threshold: 1, comparison: gte})),
		BucketCountChangeOverdue: o.newAlarm(outbox(alarm{id: "RebucketOverdueAlarm",
			description: "An online BucketCount change is in progress past its deadline and the sweeper could not abort it; every writer is paused (outbox status; the sweeper's log says why).",
			metric:      "BucketCountChangeOverdue", statistic: "Maximum", period: 60, evaluationPeriods: 1, threshold: 0, comparison: gt})),
	}
	if enqueue != nil {
		o.Alarms.EnqueueErrors = o.newAlarm(errors("EnqueueErrorsAlarm",
			"The enqueue function answered errors in 3 of the last 5 minutes (requests it refused, transactions that failed or were throttled); its log names each.", enqueue))
		o.Alarms.EnqueueFailureQueue = o.newAlarm(alarm{id: "EnqueueFailureQueueAlarm",
			description: "Asynchronous invocations of the enqueue function failed their retries (see its failure queue); their requests were not committed.",
			namespace:   "AWS/SQS", metric: "ApproximateNumberOfMessagesVisible", dimension: "QueueName", value: o.EnqueueFailureQueue.QueueName(),
			statistic: "Maximum", period: 300, evaluationPeriods: 1, threshold: 1, comparison: gte})
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
	if a.missingBreaches {
		props.TreatMissingData = awscloudwatch.TreatMissingData_BREACHING
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
