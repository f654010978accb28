package outboxcdk

import (
	"strconv"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Outbox is one deployed outbox: what template.yaml creates, as a construct.
// Its fields are what services and operators wire to.
type Outbox struct {
	constructs.Construct

	// MessagesTable (key b/s, KEYS_ONLY stream) and ControlTable (key
	// pk/sk) are retained when the stack is deleted or a change would
	// replace them.
	MessagesTable awsdynamodb.Table
	ControlTable  awsdynamodb.Table
	// FailureQueue receives the stream hints the event source gave up on.
	// Nothing is lost with them: the sweeper finds their buckets.
	FailureQueue awssqs.Queue
	// Relay drains the buckets the messages stream names; Sweeper runs
	// every minute and drains what the stream missed.
	Relay   awslambda.IFunction
	Sweeper awslambda.IFunction
	// RelayRole and SweeperRole are the functions' roles (explicit
	// statements only).
	RelayRole   awsiam.Role
	SweeperRole awsiam.Role
	// Alarms are the CloudWatch alarms template.yaml defines.
	Alarms Alarms

	cfg *config
}

// New validates props (a *PropError names the field that is wrong) and
// creates the outbox in scope: both tables, the relay on the messages
// stream, the sweeper on a one-minute schedule, their roles, log groups and
// alarms, and the stack outputs template.yaml has. It creates nothing when
// props are invalid.
func New(scope constructs.Construct, id string, props *Props) (*Outbox, error) {
	cfg, err := props.config()
	if err != nil {
		return nil, err
	}
	o := &Outbox{cfg: cfg}
	// Registers o itself as the construct, so that o (not only
	// o.Construct) can be passed wherever jsii expects a construct.
	constructs.NewConstruct_Override(o, scope, jsii.String(id))
	c := o.Construct
	o.MessagesTable = newTable(c, "MessagesTable", "b", "s", awsdynamodb.AttributeType_NUMBER, true)
	o.ControlTable = newTable(c, "ControlTable", "pk", "sk", awsdynamodb.AttributeType_STRING, false)
	o.FailureQueue = awssqs.NewQueue(c, jsii.String("RelayFailureQueue"), &awssqs.QueueProps{
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
	})
	o.newRoles()
	relay := o.newFunction("RelayFunction", "relay", "Drains the buckets named by messages-table stream hints into Kafka.", o.RelayRole)
	sweeper := o.newFunction("SweeperFunction", "sweeper", "Every minute, finds buckets with pending messages whose hints were lost and drains them.", o.SweeperRole)
	o.Relay = importFunction(c, "Relay", relay, o.RelayRole)
	o.Sweeper = importFunction(c, "Sweeper", sweeper, o.SweeperRole)
	o.newStreamSource(relay)
	o.newSchedule(sweeper)
	o.newLogs("Relay", relay, o.RelayRole)
	o.newLogs("Sweeper", sweeper, o.SweeperRole)
	o.newAlarms(relay, sweeper)
	o.newOutputs(relay, sweeper)
	return o, nil
}

// newTable: on-demand, point-in-time recovery, TTL on x (fence tombstones,
// heartbeats), retained, and a KEYS_ONLY stream when stream is set: the
// relay needs only the keys, a hint that bucket b has work.
func newTable(scope constructs.Construct, id, hash, sort string, typ awsdynamodb.AttributeType, stream bool) awsdynamodb.Table {
	props := &awsdynamodb.TableProps{
		PartitionKey:        &awsdynamodb.Attribute{Name: jsii.String(hash), Type: typ},
		SortKey:             &awsdynamodb.Attribute{Name: jsii.String(sort), Type: typ},
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		TimeToLiveAttribute: jsii.String("x"),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
	}
	if stream {
		props.Stream = awsdynamodb.StreamViewType_KEYS_ONLY
	}
	return awsdynamodb.NewTable(scope, jsii.String(id), props)
}

// environment is both functions' configuration, as template.yaml's Globals
// set it.
func (o *Outbox) environment() map[string]*string {
	c := o.cfg
	env := map[string]*string{
		"OUTBOX_MESSAGES_TABLE":    o.MessagesTable.TableName(),
		"OUTBOX_CONTROL_TABLE":     o.ControlTable.TableName(),
		"OUTBOX_BUCKET_COUNT":      num(c.n["BucketCount"]),
		"OUTBOX_BATCH_SIZE":        num(c.n["OutboxBatchSize"]),
		"OUTBOX_TOPICS":            jsii.String(c.topics),
		"OUTBOX_LEASE_DURATION":    jsii.String(strconv.Itoa(c.n["LeaseDurationSeconds"]) + "s"),
		"OUTBOX_GAP_TIMEOUT":       jsii.String(strconv.Itoa(c.n["GapTimeoutSeconds"]) + "s"),
		"OUTBOX_MAX_MESSAGE_BYTES": num(c.n["MaxMessageBytes"]),
		"OUTBOX_CONCURRENCY":       num(c.n["RelayConcurrency"]),
		"KAFKA_BOOTSTRAP_SERVERS":  jsii.String(c.bootstrap),
		"KAFKA_AUTH":               jsii.String(c.auth),
	}
	if c.useSASL() {
		env["KAFKA_SASL_SECRET_ARN"] = jsii.String(c.saslSecret)
	}
	return env
}

func num(n int) *string { return jsii.String(strconv.Itoa(n)) }

// newFunction creates a provided.al2023 function from BinDir's bootstrap.
// It is an L1 resource so that the template is exactly template.yaml's:
// the L2 Function adds dependencies and, under some feature flags, a log
// group of its own that would clash with RelayLogGroup/SweeperLogGroup.
func (o *Outbox) newFunction(id, name, description string, role awsiam.Role) awslambda.CfnFunction {
	c := o.cfg
	code := awslambda.Code_FromAsset(jsii.String(c.bootstrapDir(name)), nil)
	// Bind adds the asset as a child named Code, one per scope.
	bound := code.Bind(constructs.NewConstruct(o.Construct, jsii.String(id+"Code")))
	props := &awslambda.CfnFunctionProps{
		Description: jsii.String(description),
		Code: &awslambda.CfnFunction_CodeProperty{
			S3Bucket: bound.S3Location.BucketName,
			S3Key:    bound.S3Location.ObjectKey,
		},
		Handler:       jsii.String("bootstrap"),
		Runtime:       jsii.String("provided.al2023"),
		Architectures: jsii.Strings(c.arch),
		Timeout:       jsii.Number(float64(c.n["FunctionTimeout"])),
		MemorySize:    jsii.Number(float64(c.n["FunctionMemorySize"])),
		Role:          role.RoleArn(),
		Environment:   &awslambda.CfnFunction_EnvironmentProperty{Variables: o.environment()},
	}
	if c.useVPC() {
		props.VpcConfig = &awslambda.CfnFunction_VpcConfigProperty{
			SubnetIds:        jsii.Strings(c.subnets...),
			SecurityGroupIds: jsii.Strings(c.securityGroups...),
		}
	}
	fn := awslambda.NewCfnFunction(o.Construct, jsii.String(id), props)
	code.BindToResource(fn, nil)
	return fn
}

// importFunction gives users an IFunction (metrics, grants, permissions)
// for an L1 function; it creates no resource.
func importFunction(scope constructs.Construct, id string, fn awslambda.CfnFunction, role awsiam.Role) awslambda.IFunction {
	return awslambda.Function_FromFunctionAttributes(scope, jsii.String(id), &awslambda.FunctionAttributes{
		FunctionArn:     fn.AttrArn(),
		Role:            role,
		SameEnvironment: jsii.Bool(true),
	})
}

// newStreamSource wakes the relay with INSERT records of the messages
// stream. Only new messages are hints: the relay's own deletes and TTL
// expiries would wake it for nothing. Retries and record age are finite so
// one failing bucket cannot block its shard for the stream's 24 h; what is
// dropped goes to the failure queue and the sweeper recovers it. One poller
// per shard: leases serialise each bucket anyway.
func (o *Outbox) newStreamSource(relay awslambda.CfnFunction) {
	n := o.cfg.n
	awslambda.NewCfnEventSourceMapping(o.Construct, jsii.String("RelayFunctionMessagesStream"), &awslambda.CfnEventSourceMappingProps{
		FunctionName:     relay.Ref(),
		EventSourceArn:   o.MessagesTable.TableStreamArn(),
		StartingPosition: jsii.String("TRIM_HORIZON"),
		FilterCriteria: &awslambda.CfnEventSourceMapping_FilterCriteriaProperty{
			Filters: &[]interface{}{&awslambda.CfnEventSourceMapping_FilterProperty{
				Pattern: jsii.String(`{"eventName": ["INSERT"]}`),
			}},
		},
		BatchSize:                      jsii.Number(float64(n["StreamBatchSize"])),
		MaximumBatchingWindowInSeconds: jsii.Number(float64(n["StreamBatchingWindowSeconds"])),
		ParallelizationFactor:          jsii.Number(1),
		FunctionResponseTypes:          jsii.Strings("ReportBatchItemFailures"),
		BisectBatchOnFunctionError:     jsii.Bool(true),
		MaximumRetryAttempts:           jsii.Number(5),
		MaximumRecordAgeInSeconds:      jsii.Number(3600),
		DestinationConfig: &awslambda.CfnEventSourceMapping_DestinationConfigProperty{
			OnFailure: &awslambda.CfnEventSourceMapping_OnFailureProperty{
				Destination: o.FailureQueue.QueueArn(),
			},
		},
	})
}

// newSchedule runs the sweeper every minute, as SAM's Schedule event does
// (an EventBridge rule and the permission to invoke). A missed tick is
// retried by the next one, so asynchronous retries are off.
func (o *Outbox) newSchedule(sweeper awslambda.CfnFunction) {
	rule := awsevents.NewCfnRule(o.Construct, jsii.String("SweeperFunctionEveryMinute"), &awsevents.CfnRuleProps{
		ScheduleExpression: jsii.String("rate(1 minute)"),
		State:              jsii.String("ENABLED"),
		Targets: &[]interface{}{&awsevents.CfnRule_TargetProperty{
			Arn: sweeper.AttrArn(),
			Id:  jsii.String("SweeperFunctionEveryMinuteLambdaTarget"),
		}},
	})
	awslambda.NewCfnPermission(o.Construct, jsii.String("SweeperFunctionEveryMinutePermission"), &awslambda.CfnPermissionProps{
		Action:       jsii.String("lambda:InvokeFunction"),
		FunctionName: sweeper.Ref(),
		Principal:    jsii.String("events.amazonaws.com"),
		SourceArn:    rule.AttrArn(),
	})
	awslambda.NewCfnEventInvokeConfig(o.Construct, jsii.String("SweeperFunctionEventInvokeConfig"), &awslambda.CfnEventInvokeConfigProps{
		FunctionName:             sweeper.Ref(),
		Qualifier:                jsii.String("$LATEST"),
		MaximumRetryAttempts:     jsii.Number(0),
		MaximumEventAgeInSeconds: jsii.Number(60),
	})
}

// newLogs creates the function's log group, named as Lambda names it so
// that it has a retention, and lets the role write to it. The role may not
// create log groups, so the function can never create an unmanaged group of
// the same name first. The policy is separate from the role: the group is
// named after the function, which needs the role first.
func (o *Outbox) newLogs(prefix string, fn awslambda.CfnFunction, role awsiam.Role) {
	group := awslogs.NewCfnLogGroup(o.Construct, jsii.String(prefix+"LogGroup"), &awslogs.CfnLogGroupProps{
		LogGroupName:    awscdk.Fn_Join(jsii.String(""), jsii.Strings("/aws/lambda/", *fn.Ref())),
		RetentionInDays: jsii.Number(float64(o.cfg.n["LogRetentionInDays"])),
	})
	awsiam.NewPolicy(o.Construct, jsii.String(prefix+"LogsPolicy"), &awsiam.PolicyProps{
		PolicyName: jsii.String("logs"),
		Roles:      &[]awsiam.IRole{role},
		Statements: &[]awsiam.PolicyStatement{statement("WriteOwnLogs", []string{"logs:CreateLogStream", "logs:PutLogEvents"}, group.AttrArn())},
	})
}

// newOutputs adds template.yaml's stack outputs.
func (o *Outbox) newOutputs(relay, sweeper awslambda.CfnFunction) {
	outputs := []struct{ id, value, description string }{
		{"MessagesTableName", *o.MessagesTable.TableName(), "OUTBOX_MESSAGES_TABLE for writers."},
		{"ControlTableName", *o.ControlTable.TableName(), "OUTBOX_CONTROL_TABLE for writers."},
		{"MessagesTableStreamArn", *o.MessagesTable.TableStreamArn(), "The KEYS_ONLY stream that wakes the relay."},
		{"RelayFunctionName", *relay.Ref(), ""},
		{"SweeperFunctionName", *sweeper.Ref(), ""},
		{"RelayFailureQueueUrl", *o.FailureQueue.QueueUrl(), "Hints the stream event source gave up on."},
		{"RelayFailureQueueArn", *o.FailureQueue.QueueArn(), ""},
	}
	for _, out := range outputs {
		props := &awscdk.CfnOutputProps{Value: jsii.String(out.value)}
		if out.description != "" {
			props.Description = jsii.String(out.description)
		}
		awscdk.NewCfnOutput(o.Construct, jsii.String(out.id), props)
	}
}
