package outboxcdk

import (
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
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
	// pk/sk) are the outbox's tables in the stack's region: with Tables
	// create an awsdynamodb.Table, with global and attach a reference to
	// this region's replica. Tables the stack creates are retained when it
	// is deleted or a change would replace them.
	MessagesTable awsdynamodb.ITable
	ControlTable  awsdynamodb.ITable
	// MessagesGlobalTable and ControlGlobalTable are the global tables of
	// Tables global (a replica in every region of Regions); nil otherwise.
	MessagesGlobalTable awsdynamodb.CfnGlobalTable
	ControlGlobalTable  awsdynamodb.CfnGlobalTable
	// Config is the custom resource (Custom::OutboxConfig) that writes the
	// config item with BucketCount, the mode and its retention before the
	// relay and the sweeper start.
	Config awscdk.CfnResource
	// FailureQueue receives the stream hints the event source gave up on.
	// Nothing is lost with them: the sweeper finds their buckets.
	FailureQueue awssqs.Queue
	// Relay drains the buckets the messages stream names; Sweeper runs
	// every minute and drains what the stream missed; Setup backs Config.
	Relay   awslambda.IFunction
	Sweeper awslambda.IFunction
	Setup   awslambda.IFunction
	// RelayRole, SweeperRole and SetupRole are the functions' roles
	// (explicit statements only).
	RelayRole   awsiam.Role
	SweeperRole awsiam.Role
	SetupRole   awsiam.Role
	// WriterPolicy is what a service that enqueues needs on the outbox's
	// tables, as a managed policy (GrantEnqueue grants the same).
	WriterPolicy awsiam.ManagedPolicy
	// Enqueue is the enqueue function, EnqueueRole its role and
	// EnqueueInvokePolicy the managed policy to invoke it (GrantInvoke on
	// Enqueue grants the same); all nil unless Props.EnableEnqueueFunction.
	Enqueue             awslambda.IFunction
	EnqueueRole         awsiam.Role
	EnqueueInvokePolicy awsiam.ManagedPolicy
	// EnqueueFailureQueue is where the enqueue function's asynchronous
	// invocations go when they fail their retries (nil without it).
	EnqueueFailureQueue awssqs.Queue
	// Alarms are the CloudWatch alarms template.yaml defines.
	Alarms Alarms
	// Dashboard shows backlog, age, throughput, failures, durations, the
	// stream's iterator age, leases and the alarms. Its name is
	// <stack name>-<region>-outbox, as template.yaml names it, so a stack
	// holds one outbox.
	Dashboard awscloudwatch.CfnDashboard

	cfg *config
	// The tables as the construct's resources refer to them, in every
	// Tables mode (template.yaml's Fn::If chains).
	messagesName, messagesArn, streamArn, controlName, controlArn *string
	// streamPolicy is the relay's messages-stream policy, filled once
	// the stream ARN is known (with Tables attach, from Config).
	streamPolicy awsiam.PolicyDocument
}

// New validates props (a *PropError names the field that is wrong) and
// creates the outbox in scope: both tables and their config item, the relay
// on the messages stream, the sweeper on a one-minute schedule, their roles,
// log groups, alarms and dashboard, and the stack outputs template.yaml has.
// It creates nothing when props are invalid.
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
	o.newTables()
	// Retained: its records are evidence after the stack is gone.
	o.FailureQueue = awssqs.NewQueue(c, jsii.String("RelayFailureQueue"), &awssqs.QueueProps{
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		RemovalPolicy:   awscdk.RemovalPolicy_RETAIN,
	})
	o.newRoles()
	n := cfg.n
	setup := o.newFunction(function{id: "SetupFunction", dir: "setup", role: o.SetupRole, timeout: 300, memory: 256,
		description: "Custom::OutboxConfig - writes the outbox's config item with the stack's BucketCount and mode (lambda/setup)."})
	relay := o.newFunction(function{id: "RelayFunction", dir: "relay", role: o.RelayRole, timeout: n["RelayTimeout"],
		memory: n["FunctionMemorySize"], reserved: n["RelayReservedConcurrency"], drains: true,
		description: "Drains the buckets named by messages-table stream hints into Kafka."})
	sweeper := o.newFunction(function{id: "SweeperFunction", dir: "sweeper", role: o.SweeperRole, timeout: n["SweeperTimeout"],
		memory: n["FunctionMemorySize"], reserved: n["SweeperReservedConcurrency"], drains: true,
		description: "Every minute, finds buckets with pending messages whose hints were lost and drains them."})
	o.Setup = importFunction(c, "Setup", setup, o.SetupRole)
	o.Relay = importFunction(c, "Relay", relay, o.RelayRole)
	o.Sweeper = importFunction(c, "Sweeper", sweeper, o.SweeperRole)
	setupLogs := o.newLogs("Setup", setup, o.SetupRole)
	o.newLogs("Relay", relay, o.RelayRole)
	o.newLogs("Sweeper", sweeper, o.SweeperRole)
	o.newConfig(setup, setupLogs)
	if cfg.tables == TablesAttach {
		// CloudFormation cannot read an existing table's stream ARN (it
		// carries the stream's creation time): the setup function answers it.
		o.streamArn = o.Config.GetAtt(jsii.String("MessagesStreamArn"), awscdk.ResolutionTypeHint_STRING).ToString()
		o.MessagesTable = awsdynamodb.Table_FromTableAttributes(c, jsii.String("MessagesReplica"), &awsdynamodb.TableAttributes{
			TableName: o.messagesName, TableStreamArn: o.streamArn})
	}
	o.fillStreamPolicy()
	// The functions wait for a ready outbox (the digest's GetAtt).
	o.restartOnConfigChange(relay, sweeper)
	o.newStreamSource(relay)
	o.newSchedule(sweeper)
	var enqueue awslambda.CfnFunction // nil without the enqueue function
	if cfg.enqueue {
		enqueue = o.newEnqueue()
	}
	o.newAlarms(relay, sweeper, enqueue)
	o.newDashboard(relay, sweeper, enqueue)
	o.newOutputs(relay, sweeper)
	return o, nil
}

// newEnqueue is the enqueue function, invoked by the callers (Step
// Functions, EventBridge, SQS, Pipes, any service): a writer
// (WriterPolicy) that also puts an idempotency record in the control table
// in each transaction, and writes the callers' items to the business tables
// named, nowhere else. It writes to DynamoDB only, so it stays outside the
// VPC; it reads OUTBOX_MESSAGES_TABLE, OUTBOX_CONTROL_TABLE and
// OUTBOX_REGION of the shared environment. Its reserved
// concurrency caps it; its asynchronous invocations that fail their retries
// go to EnqueueFailureQueue (its role sends them).
func (o *Outbox) newEnqueue() awslambda.CfnFunction {
	c := o.cfg
	// Retained: what it holds was never committed.
	o.EnqueueFailureQueue = awssqs.NewQueue(o.Construct, jsii.String("EnqueueFailureQueue"), &awssqs.QueueProps{
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		RemovalPolicy:   awscdk.RemovalPolicy_RETAIN,
	})
	statements := []awsiam.PolicyStatement{statement("IdempotencyRecords", []string{"dynamodb:PutItem"}, o.controlArn)}
	if len(c.businessTables) > 0 {
		statements = append(statements, statement("BusinessTables",
			[]string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"}, *jsii.Strings(c.businessTables...)...))
	}
	statements = append(statements, statement("FailureDestination", []string{"sqs:SendMessage"}, o.EnqueueFailureQueue.QueueArn()))
	o.EnqueueRole = awsiam.NewRole(o.Construct, jsii.String("EnqueueRole"), &awsiam.RoleProps{
		AssumedBy:       awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		ManagedPolicies: &[]awsiam.IManagedPolicy{o.WriterPolicy},
		InlinePolicies:  &map[string]awsiam.PolicyDocument{"enqueue": awsiam.NewPolicyDocument(&awsiam.PolicyDocumentProps{Statements: &statements})},
	})
	fn := o.newFunction(function{id: "EnqueueFunction", dir: "enqueue", role: o.EnqueueRole, timeout: 30, memory: 256,
		reserved: c.n["EnqueueReservedConcurrency"], env: true,
		description: "Commits callers' DynamoDB items and outbox messages in one transaction, once per idempotency key (lambda/enqueue)."})
	o.restartOnConfigChange(fn)
	awslambda.NewCfnEventInvokeConfig(o.Construct, jsii.String("EnqueueFunctionEventInvokeConfig"), &awslambda.CfnEventInvokeConfigProps{
		FunctionName:             fn.Ref(),
		Qualifier:                jsii.String("$LATEST"),
		MaximumRetryAttempts:     jsii.Number(2),
		MaximumEventAgeInSeconds: jsii.Number(21600),
		DestinationConfig: &awslambda.CfnEventInvokeConfig_DestinationConfigProperty{
			OnFailure: &awslambda.CfnEventInvokeConfig_OnFailureProperty{Destination: o.EnqueueFailureQueue.QueueArn()},
		},
	})
	o.Enqueue = importFunction(o.Construct, "Enqueue", fn, o.EnqueueRole)
	o.newLogs("Enqueue", fn, o.EnqueueRole)
	o.EnqueueInvokePolicy = managedPolicy(o, "EnqueueInvokePolicy", "Invoke this outbox's enqueue function.",
		statement("InvokeEnqueue", []string{"lambda:InvokeFunction"}, fn.AttrArn()))
	for _, out := range []struct {
		id, description string
		value           *string
	}{
		{"EnqueueFunctionArn", "The enqueue function, for Step Functions, EventBridge, SQS and Pipes (docs/deploy.md).", fn.AttrArn()},
		{"EnqueueInvokePolicyArn", "Managed policy to attach to whatever invokes the enqueue function.", o.EnqueueInvokePolicy.ManagedPolicyArn()},
		{"EnqueueRoleName", "The enqueue function's role, to which an SQS event source adds its queue's permissions.", o.EnqueueRole.RoleName()},
		{"EnqueueFailureQueueUrl", "The enqueue function's asynchronous invocations that failed their retries.", o.EnqueueFailureQueue.QueueUrl()},
	} {
		awscdk.NewCfnOutput(o.Construct, jsii.String(out.id), &awscdk.CfnOutputProps{Value: out.value, Description: jsii.String(out.description)})
	}
	return fn
}

// newTables creates or refers to the tables as Props.Tables says:
// single-region tables (create), global tables with a replica in every
// region of Regions (global), or this region's replicas of another stack's
// (attach, where the messages stream is known once Config exists).
func (o *Outbox) newTables() {
	c := o.Construct
	switch o.cfg.tables {
	case TablesGlobal:
		m := newGlobalTable(c, "MessagesGlobalTable", "b", "s", "N", o.cfg.regions)
		ctl := newGlobalTable(c, "ControlGlobalTable", "pk", "sk", "S", o.cfg.regions)
		o.MessagesGlobalTable, o.ControlGlobalTable = m, ctl
		o.messagesName, o.messagesArn, o.streamArn = m.Ref(), m.AttrArn(), m.AttrStreamArn()
		o.controlName, o.controlArn = ctl.Ref(), ctl.AttrArn()
		o.MessagesTable = awsdynamodb.Table_FromTableAttributes(c, jsii.String("MessagesReplica"), &awsdynamodb.TableAttributes{
			TableName: o.messagesName, TableStreamArn: o.streamArn})
		o.ControlTable = awsdynamodb.Table_FromTableAttributes(c, jsii.String("ControlReplica"), &awsdynamodb.TableAttributes{TableName: o.controlName})
	case TablesAttach:
		arn := func(name string) *string {
			return awscdk.Fn_Sub(jsii.String("arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/"+name), nil)
		}
		o.messagesName, o.messagesArn = jsii.String(o.cfg.messagesName), arn(o.cfg.messagesName)
		o.controlName, o.controlArn = jsii.String(o.cfg.controlName), arn(o.cfg.controlName)
		o.ControlTable = awsdynamodb.Table_FromTableAttributes(c, jsii.String("ControlReplica"), &awsdynamodb.TableAttributes{TableName: o.controlName})
	default:
		m := newTable(c, "MessagesTable", "b", "s", awsdynamodb.AttributeType_NUMBER, true)
		ctl := newTable(c, "ControlTable", "pk", "sk", awsdynamodb.AttributeType_STRING, false)
		o.MessagesTable, o.ControlTable = m, ctl
		o.messagesName, o.messagesArn, o.streamArn = m.TableName(), m.TableArn(), m.TableStreamArn()
		o.controlName, o.controlArn = ctl.TableName(), ctl.TableArn()
	}
}

// newGlobalTable is newTable as a DynamoDB global table (version
// 2019.11.21) with a replica, point-in-time recovery on, in every region of
// regions, in their order. Both tables get a KEYS_ONLY stream: a global
// table of more than one replica needs one; only the messages table's is
// read.
func newGlobalTable(scope constructs.Construct, id, hash, sort, typ, regions string) awsdynamodb.CfnGlobalTable {
	var replicas []interface{}
	for _, r := range strings.Split(regions, ",") {
		replicas = append(replicas, &awsdynamodb.CfnGlobalTable_ReplicaSpecificationProperty{
			Region: jsii.String(r),
			PointInTimeRecoverySpecification: &awsdynamodb.CfnGlobalTable_PointInTimeRecoverySpecificationProperty{
				PointInTimeRecoveryEnabled: jsii.Bool(true),
			},
		})
	}
	t := awsdynamodb.NewCfnGlobalTable(scope, jsii.String(id), &awsdynamodb.CfnGlobalTableProps{
		BillingMode: jsii.String("PAY_PER_REQUEST"),
		AttributeDefinitions: &[]interface{}{
			&awsdynamodb.CfnGlobalTable_AttributeDefinitionProperty{AttributeName: jsii.String(hash), AttributeType: jsii.String(typ)},
			&awsdynamodb.CfnGlobalTable_AttributeDefinitionProperty{AttributeName: jsii.String(sort), AttributeType: jsii.String(typ)},
		},
		KeySchema: &[]interface{}{
			&awsdynamodb.CfnGlobalTable_KeySchemaProperty{AttributeName: jsii.String(hash), KeyType: jsii.String("HASH")},
			&awsdynamodb.CfnGlobalTable_KeySchemaProperty{AttributeName: jsii.String(sort), KeyType: jsii.String("RANGE")},
		},
		StreamSpecification:     &awsdynamodb.CfnGlobalTable_StreamSpecificationProperty{StreamViewType: jsii.String("KEYS_ONLY")},
		TimeToLiveSpecification: &awsdynamodb.CfnGlobalTable_TimeToLiveSpecificationProperty{AttributeName: jsii.String("x"), Enabled: jsii.Bool(true)},
		Replicas:                &replicas,
	})
	// Retained, except that a first deploy which fails and rolls back takes
	// the replicas it made with it (template.yaml: RetainExceptOnCreate).
	t.ApplyRemovalPolicy(awscdk.RemovalPolicy_RETAIN_ON_UPDATE_OR_DELETE, nil)
	return t
}

// newTable: on-demand, point-in-time recovery, TTL on x (fences,
// tombstones, heartbeats, watermark-mode messages), retained, and a KEYS_ONLY stream when stream is set: the
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

// environment is the relay's and the sweeper's configuration, as
// template.yaml's Globals set it.
func (o *Outbox) environment() map[string]*string {
	c := o.cfg
	env := map[string]*string{
		"OUTBOX_MESSAGES_TABLE":      o.messagesName,
		"OUTBOX_CONTROL_TABLE":       o.controlName,
		"OUTBOX_BATCH_SIZE":          num(c.n["OutboxBatchSize"]),
		"OUTBOX_TOPICS":              jsii.String(c.topics),
		"OUTBOX_LEASE_DURATION":      jsii.String(strconv.Itoa(c.n["LeaseDurationSeconds"]) + "s"),
		"OUTBOX_GAP_TIMEOUT":         jsii.String(strconv.Itoa(c.n["GapTimeoutSeconds"]) + "s"),
		"OUTBOX_SWEEP_MIN_AGE":       jsii.String(strconv.Itoa(c.n["SweepMinAgeSeconds"]) + "s"),
		"OUTBOX_PARK_STUCK_AFTER":    jsii.String(strconv.Itoa(c.n["ParkStuckAfterSeconds"]) + "s"),
		"OUTBOX_CONCURRENCY":         num(c.n["RelayConcurrency"]),
		"OUTBOX_KAFKA_TRANSACTIONAL": jsii.String(strconv.FormatBool(c.transactional)),
		"KAFKA_BOOTSTRAP_SERVERS":    jsii.String(c.bootstrap),
		"KAFKA_AUTH":                 jsii.String(c.auth),
	}
	for name, v := range map[string]string{
		"KAFKA_SASL_SECRET_ARN":            c.saslSecret,
		"KAFKA_TLS_CA_SECRET_ARN":          c.caSecret,
		"KAFKA_TLS_CLIENT_CERT_SECRET_ARN": c.certSecret,
	} {
		if v != "" {
			env[name] = jsii.String(v)
		}
	}
	if c.regions != "" {
		env["OUTBOX_REGION"] = awscdk.Aws_REGION()
	}
	return env
}

// restartOnConfigChange gives fns OUTBOX_CONFIG_DIGEST, the setup's digest
// of what the functions read from the config item only when they start
// (template.yaml's Globals): not a setting, and nothing reads it, but when
// the setup changes one of those settings the digest changes, and the
// update replaces the functions' warm containers. Its GetAtt also makes
// the functions wait for a ready outbox.
func (o *Outbox) restartOnConfigChange(fns ...awslambda.CfnFunction) {
	for _, fn := range fns {
		fn.AddPropertyOverride(jsii.String("Environment.Variables.OUTBOX_CONFIG_DIGEST"), o.Config.GetAtt(jsii.String("ConfigDigest"), awscdk.ResolutionTypeHint_STRING))
	}
}

// alarmName is the alarms' Outbox dimension: the messages table, with
// Tables attach as the setup function checked it (template.yaml: a
// parameter may be empty there, which an alarm dimension may not).
func (o *Outbox) alarmName() *string {
	if o.cfg.tables == TablesAttach {
		return o.Config.GetAtt(jsii.String("MessagesTable"), awscdk.ResolutionTypeHint_STRING).ToString()
	}
	return o.messagesName
}

func num(n int) *string { return jsii.String(strconv.Itoa(n)) }

// function is one Lambda function's settings.
type function struct {
	id, dir, description string
	role                 awsiam.Role
	timeout, memory      int
	reserved             int  // reserved concurrency, -1 = none (relay, sweeper, enqueue)
	drains               bool // the relay or the sweeper: the outbox's environment and VPC
	env                  bool // the outbox's environment without the VPC (enqueue)
}

// newFunction creates a provided.al2023 function from BinDir's bootstrap,
// logging JSON at LogLevel. It is an L1 resource so that the template is
// exactly template.yaml's: the L2 Function adds dependencies and, under some
// feature flags, a log group of its own that would clash with the stack's.
func (o *Outbox) newFunction(f function) awslambda.CfnFunction {
	c := o.cfg
	code := awslambda.Code_FromAsset(jsii.String(c.bootstrapDir(f.dir)), nil)
	// Bind adds the asset as a child named Code, one per scope.
	bound := code.Bind(constructs.NewConstruct(o.Construct, jsii.String(f.id+"Code")))
	props := &awslambda.CfnFunctionProps{
		Description: jsii.String(f.description),
		Code: &awslambda.CfnFunction_CodeProperty{
			S3Bucket: bound.S3Location.BucketName,
			S3Key:    bound.S3Location.ObjectKey,
		},
		Handler:       jsii.String("bootstrap"),
		Runtime:       jsii.String("provided.al2023"),
		Architectures: jsii.Strings(c.arch),
		Timeout:       jsii.Number(float64(f.timeout)),
		MemorySize:    jsii.Number(float64(f.memory)),
		Role:          f.role.RoleArn(),
		// Lambda passes the level as AWS_LAMBDA_LOG_LEVEL, which the
		// functions' logger honours.
		LoggingConfig: &awslambda.CfnFunction_LoggingConfigProperty{
			LogFormat:           jsii.String("JSON"),
			ApplicationLogLevel: jsii.String(c.level),
			SystemLogLevel:      jsii.String("INFO"),
		},
	}
	if f.drains || f.env {
		props.Environment = &awslambda.CfnFunction_EnvironmentProperty{Variables: o.environment()}
		if f.reserved >= 0 {
			props.ReservedConcurrentExecutions = jsii.Number(float64(f.reserved))
		}
	}
	if f.drains {
		if c.useVPC() {
			props.VpcConfig = &awslambda.CfnFunction_VpcConfigProperty{
				SubnetIds:        jsii.Strings(c.subnets...),
				SecurityGroupIds: jsii.Strings(c.securityGroups...),
			}
		}
	}
	fn := awslambda.NewCfnFunction(o.Construct, jsii.String(f.id), props)
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

// newConfig is the outbox's config item (pk=config, sk=config: BucketCount
// and format version), written by the setup function when the stack is
// created, so the functions find a ready outbox. A BucketCount change is
// refused unless the outbox is empty, which rolls the update back; deleting
// the stack leaves the item with the retained tables. It waits for the
// setup function's log group and permission to write to it.
func (o *Outbox) newConfig(setup awslambda.CfnFunction, logs []constructs.IConstruct) {
	o.Config = awscdk.NewCfnResource(o.Construct, jsii.String("OutboxConfig"), &awscdk.CfnResourceProps{
		Type: jsii.String("Custom::OutboxConfig"),
		Properties: &map[string]interface{}{
			"ServiceToken": setup.AttrArn(),
			// Fail after 10 minutes without an answer rather than
			// CloudFormation's default hour.
			"ServiceTimeout": 600,
			"MessagesTable":  o.messagesName,
			"ControlTable":   o.controlName,
			"BucketCount":    o.cfg.n["BucketCount"],
			"Mode":           o.cfg.mode,
			"RetentionHours": o.cfg.n["OutboxRetentionHours"],
			"Topics":         jsii.String(o.cfg.topics),
			// A shared setting: every component reads it from the
			// config item.
			"MaxMessageBytes": o.cfg.n["MaxMessageBytes"],
			"Regions":         jsii.String(o.cfg.regions),
			// attach: check the replicated config item instead of writing
			// it, and answer the replica's stream ARN (MessagesStreamArn).
			"Tables": jsii.String(o.cfg.tables),
			"Region": awscdk.Aws_REGION(),
		},
	})
	for _, l := range logs {
		o.Config.Node().AddDependency(l)
	}
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
		EventSourceArn:   o.streamArn,
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
// that it has a retention, and lets the role write to it; it returns both.
// The role may not create log groups, so the function can never create an
// unmanaged group of the same name first. The policy is separate from the
// role: the group is named after the function, which needs the role first.
// Retained: the logs outlive the stack, for whoever investigates.
func (o *Outbox) newLogs(prefix string, fn awslambda.CfnFunction, role awsiam.Role) []constructs.IConstruct {
	group := awslogs.NewCfnLogGroup(o.Construct, jsii.String(prefix+"LogGroup"), &awslogs.CfnLogGroupProps{
		LogGroupName:    awscdk.Fn_Join(jsii.String(""), jsii.Strings("/aws/lambda/", *fn.Ref())),
		RetentionInDays: jsii.Number(float64(o.cfg.n["LogRetentionInDays"])),
	})
	group.ApplyRemovalPolicy(awscdk.RemovalPolicy_RETAIN, nil)
	policy := awsiam.NewPolicy(o.Construct, jsii.String(prefix+"LogsPolicy"), &awsiam.PolicyProps{
		PolicyName: jsii.String("logs"),
		Roles:      &[]awsiam.IRole{role},
		Statements: &[]awsiam.PolicyStatement{statement("WriteOwnLogs", []string{"logs:CreateLogStream", "logs:PutLogEvents"}, group.AttrArn())},
	})
	return []constructs.IConstruct{group, policy}
}

// newOutputs adds template.yaml's stack outputs.
func (o *Outbox) newOutputs(relay, sweeper awslambda.CfnFunction) {
	outputs := []struct{ id, description string }{
		{"MessagesTableName", "OUTBOX_MESSAGES_TABLE for writers."},
		{"ControlTableName", "OUTBOX_CONTROL_TABLE for writers."},
		{"MessagesTableStreamArn", "The KEYS_ONLY stream that wakes the relay."},
		{"BucketCount", "The BucketCount the stack wrote to the outbox's config item."},
		{"WriterPolicyArn", "Managed policy to attach to a service that enqueues into this outbox (its own tables aside)."},
		{"RelayFunctionName", ""},
		{"SweeperFunctionName", ""},
		{"RelayFailureQueueUrl", "Hints the stream event source gave up on."},
		{"RelayFailureQueueArn", ""},
		{"DashboardName", "The CloudWatch dashboard of this outbox."},
	}
	values := map[string]*string{
		"MessagesTableName":      o.messagesName,
		"ControlTableName":       o.controlName,
		"MessagesTableStreamArn": o.streamArn,
		"BucketCount":            o.Config.GetAtt(jsii.String("BucketCount"), awscdk.ResolutionTypeHint_STRING).ToString(),
		"WriterPolicyArn":        o.WriterPolicy.ManagedPolicyArn(),
		"RelayFunctionName":      relay.Ref(),
		"SweeperFunctionName":    sweeper.Ref(),
		"RelayFailureQueueUrl":   o.FailureQueue.QueueUrl(),
		"RelayFailureQueueArn":   o.FailureQueue.QueueArn(),
		"DashboardName":          o.Dashboard.Ref(),
	}
	for _, out := range outputs {
		props := &awscdk.CfnOutputProps{Value: values[out.id]}
		if out.description != "" {
			props.Description = jsii.String(out.description)
		}
		awscdk.NewCfnOutput(o.Construct, jsii.String(out.id), props)
	}
}
