package outboxcdk

import (
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"
)

// statement is an Allow statement; sid may be empty.
func statement(sid string, actions []string, resources ...*string) awsiam.PolicyStatement {
	props := &awsiam.PolicyStatementProps{
		Effect:    awsiam.Effect_ALLOW,
		Actions:   jsii.Strings(actions...),
		Resources: &resources,
	}
	if sid != "" {
		props.Sid = jsii.String(sid)
	}
	return awsiam.NewPolicyStatement(props)
}

func managedPolicy(o *Outbox, id, description string, statements ...awsiam.PolicyStatement) awsiam.ManagedPolicy {
	return awsiam.NewManagedPolicy(o.Construct, jsii.String(id), &awsiam.ManagedPolicyProps{
		Description: jsii.String(description),
		Statements:  &statements,
	})
}

// newRoles creates one role per function. Every permission is an explicit
// statement (no AWSLambdaBasicExecutionRole, no AWSLambdaDynamoDBExecutionRole,
// which covers every stream in the account); what the relay and the sweeper
// both need is one customer managed policy each, attached to both roles.
func (o *Outbox) newRoles() {
	shared := []awsiam.IManagedPolicy{o.tablesPolicy()}
	o.WriterPolicy = managedPolicy(o, "WriterPolicy", "Enqueue into this outbox with dynamo.NewWriter and Writer.Write (the service's own tables are granted separately).",
		o.writerStatements()...)
	if p := o.secretsPolicy(); p != nil {
		shared = append(shared, p)
	}
	if p := o.mskIAMPolicy(); p != nil {
		shared = append(shared, p)
	}
	if p := o.vpcPolicy(); p != nil {
		shared = append(shared, p)
	}
	// Filled by fillStreamPolicy once the stream's ARN is known.
	o.streamPolicy = awsiam.NewPolicyDocument(nil)
	stream := o.streamPolicy
	// The custom resource's function: the config item (read, create,
	// change), the counters (an online BucketCount change cuts them) and
	// the buckets (lease items, read with BatchGetItem, a Query of the bucket, and a fence
	// for a number reserved last in its bucket and never written).
	// dynamo.Configure makes exactly these calls.
	setupStatements := []awsiam.PolicyStatement{
		statement("ConfigItemAndLeases", []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DescribeTable"}, o.controlArn),
		statement("ProbeBuckets", []string{"dynamodb:Query", "dynamodb:PutItem", "dynamodb:DescribeTable"}, o.messagesArn),
	}
	if o.cfg.tables == TablesAttach {
		// Tables attach writes nothing: it reads the replicated config
		// item and describes the messages table for its stream ARN.
		setupStatements = []awsiam.PolicyStatement{
			statement("ReadConfigItem", []string{"dynamodb:GetItem"}, o.controlArn),
			statement("FindMessagesStream", []string{"dynamodb:DescribeTable"}, o.messagesArn),
		}
	}
	setup := awsiam.NewPolicyDocument(&awsiam.PolicyDocumentProps{Statements: &setupStatements})
	lambda := awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil)
	o.RelayRole = awsiam.NewRole(o.Construct, jsii.String("RelayRole"), &awsiam.RoleProps{
		AssumedBy:       lambda,
		ManagedPolicies: &shared,
		InlinePolicies:  &map[string]awsiam.PolicyDocument{"messages-stream": stream},
	})
	o.SweeperRole = awsiam.NewRole(o.Construct, jsii.String("SweeperRole"), &awsiam.RoleProps{
		AssumedBy:       lambda,
		ManagedPolicies: &shared,
	})
	o.SetupRole = awsiam.NewRole(o.Construct, jsii.String("SetupRole"), &awsiam.RoleProps{
		AssumedBy:      lambda,
		InlinePolicies: &map[string]awsiam.PolicyDocument{"outbox-config": setup},
	})
}

// fillStreamPolicy adds the relay's messages-stream statements.
func (o *Outbox) fillStreamPolicy() {
	o.streamPolicy.AddStatements(
		// What the event source mapping polls with, on this stream only.
		statement("ReadMessagesStream", []string{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}, o.streamArn),
		// ListStreams names no resource: only "*" grants it.
		statement("ListMessagesStreams", []string{"dynamodb:ListStreams"}, jsii.String("*")),
		// The event source mapping sends discarded hints with this role.
		statement("FailureDestination", []string{"sqs:SendMessage"}, o.FailureQueue.QueueArn()),
	)
}

// tablesPolicy: both functions drain buckets, item by item, on the two
// tables only. store/dynamo.StoreAPI is the list: Pending and Peek (Query),
// Delete (BatchWriteItem), Fence (conditional PutItem), Park (GetItem, then a
// transaction that deletes the message and writes the dead letter); config,
// leases (read with BatchGetItem: concurrent reads share one call),
// heartbeats, dead letters and live relays on the control table.
func (o *Outbox) tablesPolicy() awsiam.ManagedPolicy {
	return managedPolicy(o, "TablesPolicy", "Outbox item access to the messages and control tables of this stack.",
		statement("MessagesTable", []string{"dynamodb:Query", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:DescribeTable"}, o.messagesArn),
		statement("ControlTable", []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:DescribeTable"}, o.controlArn),
	)
}

// secretsPolicy reads the Kafka secrets the mode uses (and decrypts them
// with their customer managed key, through Secrets Manager only); nil when
// the mode uses none.
func (o *Outbox) secretsPolicy() awsiam.ManagedPolicy {
	c := o.cfg
	secrets := c.secrets()
	if len(secrets) == 0 {
		return nil
	}
	statements := []awsiam.PolicyStatement{statement("ReadKafkaSecrets", []string{"secretsmanager:GetSecretValue"}, *jsii.Strings(secrets...)...)}
	if c.kmsKey != "" {
		decrypt := statement("DecryptKafkaSecrets", []string{"kms:Decrypt"}, jsii.String(c.kmsKey))
		decrypt.AddCondition(jsii.String("StringEquals"), map[string]any{
			"kms:ViaService": awscdk.Fn_Sub(jsii.String("secretsmanager.${AWS::Region}.amazonaws.com"), nil),
		})
		statements = append(statements, decrypt)
	}
	return managedPolicy(o, "KafkaSecretsPolicy", "Read the Kafka credentials and certificates.", statements...)
}

// mskIAMPolicy is exactly the MSK IAM actions of the Kafka requests the
// publisher makes: connect; produce idempotently (InitProducerId, Produce);
// topic metadata; the topics' max.message.bytes and, when a topic inherits
// it, the brokers' message.max.bytes (DescribeConfigs). With
// KafkaTransactional the producers are transactional instead of idempotent:
// no WriteDataIdempotently, and the outbox's own transactional ids
// (<messages table>-bucket-<n>: FindCoordinator, InitProducerId,
// AddPartitionsToTxn, Produce, EndTxn). No ReadData, no consumer groups,
// nothing that creates or deletes. Topic ARNs are topic/<cluster
// name>/<cluster uuid>/<topic>, transactional-id ARNs
// transactional-id/<cluster name>/<cluster uuid>/<id>; with Topics the
// topic actions are granted on the listed topics only (mskTopicARNs).
// nil unless msk-iam.
func (o *Outbox) mskIAMPolicy() awsiam.ManagedPolicy {
	c := o.cfg
	if !c.useMSKIAM() {
		return nil
	}
	cluster := awscdk.Fn_Sub(jsii.String("arn:${AWS::Partition}:kafka:${AWS::Region}:${AWS::AccountId}:cluster/*/*"), nil)
	topics := awscdk.Fn_Sub(jsii.String("arn:${AWS::Partition}:kafka:${AWS::Region}:${AWS::AccountId}:topic/*/*/*"), nil)
	txnIDs := awscdk.Fn_Sub(jsii.String("arn:${AWS::Partition}:kafka:${AWS::Region}:${AWS::AccountId}:transactional-id/*/*/${MessagesTable}-bucket-*"),
		&map[string]*string{"MessagesTable": o.messagesName})
	if c.msk != "" {
		// The topics and transactional ids are in the cluster's region and
		// account, from its ARN: a Tables attach stack may produce to a
		// cluster in another region.
		parts := awscdk.Fn_Split(jsii.String("/"), jsii.String(c.msk), nil)
		fields := awscdk.Fn_Split(jsii.String(":"), jsii.String(c.msk), nil)
		cluster = jsii.String(c.msk)
		topics = awscdk.Fn_Sub(jsii.String("arn:${AWS::Partition}:kafka:${ClusterRegion}:${ClusterAccount}:topic/${ClusterName}/${ClusterUuid}/*"), &map[string]*string{
			"ClusterName":    awscdk.Fn_Select(jsii.Number(1), parts),
			"ClusterUuid":    awscdk.Fn_Select(jsii.Number(2), parts),
			"ClusterRegion":  awscdk.Fn_Select(jsii.Number(3), fields),
			"ClusterAccount": awscdk.Fn_Select(jsii.Number(4), fields),
		})
		txnIDs = awscdk.Fn_Sub(jsii.String("arn:${AWS::Partition}:kafka:${ClusterRegion}:${ClusterAccount}:transactional-id/${ClusterName}/${ClusterUuid}/${MessagesTable}-bucket-*"), &map[string]*string{
			"ClusterName":    awscdk.Fn_Select(jsii.Number(1), parts),
			"ClusterUuid":    awscdk.Fn_Select(jsii.Number(2), parts),
			"ClusterRegion":  awscdk.Fn_Select(jsii.Number(3), fields),
			"ClusterAccount": awscdk.Fn_Select(jsii.Number(4), fields),
			"MessagesTable":  o.messagesName,
		})
	}
	clusterActions := []string{"kafka-cluster:Connect", "kafka-cluster:WriteDataIdempotently", "kafka-cluster:DescribeClusterDynamicConfiguration"}
	if c.transactional {
		clusterActions = []string{"kafka-cluster:Connect", "kafka-cluster:DescribeClusterDynamicConfiguration"}
	}
	topicResources := []*string{topics}
	if listed := mskTopicARNs(c.topics); listed != nil {
		topicResources = listed
	}
	statements := []awsiam.PolicyStatement{
		statement("MskCluster", clusterActions, cluster),
		statement("MskTopics", []string{"kafka-cluster:DescribeTopic", "kafka-cluster:WriteData", "kafka-cluster:DescribeTopicDynamicConfiguration"}, topicResources...),
	}
	if c.transactional {
		statements = append(statements, statement("MskTransactionalIds", []string{"kafka-cluster:DescribeTransactionalId", "kafka-cluster:AlterTransactionalId"}, txnIDs))
	}
	return managedPolicy(o, "KafkaMskIamPolicy", "Produce to MSK with IAM access control.", statements...)
}

// mskTopicARNs are the topic ARNs of the Topics list (spaces dropped:
// topic names have none), nil when it lists none. Each names the topic and
// leaves partition, region, account and cluster to the Connect statement,
// which every topic action needs: the template, which this mirrors, cannot
// put a computed prefix before each topic of a list.
func mskTopicARNs(topics string) []*string {
	topics = strings.ReplaceAll(topics, " ", "")
	if topics == "" {
		return nil
	}
	var out []*string
	for _, t := range strings.Split(topics, ",") {
		out = append(out, jsii.String("arn:*:kafka:*:*:topic/*/*/"+t))
	}
	return out
}

// vpcPolicy is what Lambda needs to attach a function to the VPC; these EC2
// actions take no narrower resource than "*". nil without a VPC.
func (o *Outbox) vpcPolicy() awsiam.ManagedPolicy {
	if !o.cfg.useVPC() {
		return nil
	}
	return managedPolicy(o, "VpcNetworkInterfacesPolicy", "Let Lambda manage the functions' network interfaces in the VPC.",
		statement("VpcNetworkInterfaces", []string{
			"ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets",
			"ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses",
		}, jsii.String("*")))
}

// writerStatements are exactly what dynamo.Writer calls on the outbox's
// tables: NewWriter's existence check (GetItem of a key that never exists)
// and the messages in the transaction and fences (PutItem) on the messages
// table; the config item (GetItem) and the sequence counters (UpdateItem)
// on the control table; DescribeTable on both (a global table is refused
// at init, by the Go and the Python writer alike). The writer's own items
// in the same transaction need the service's grants on its own tables.
func (o *Outbox) writerStatements() []awsiam.PolicyStatement {
	return []awsiam.PolicyStatement{
		statement("EnqueueMessages", []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DescribeTable"}, o.messagesArn),
		statement("ReserveSequences", []string{"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DescribeTable"}, o.controlArn),
	}
}

// GrantEnqueue lets grantee (a writer service's function or role) enqueue
// messages with dynamo.Writer: exactly WriterPolicy's statements, added to
// the grantee's policy, nothing else.
func (o *Outbox) GrantEnqueue(grantee awsiam.IGrantable) awsiam.Grant {
	var grant awsiam.Grant
	for _, st := range o.writerStatements() {
		g := awsiam.Grant_AddToPrincipal(&awsiam.GrantOnPrincipalOptions{
			Grantee:      grantee,
			Actions:      st.Actions(),
			ResourceArns: st.Resources(),
		})
		if grant == nil {
			grant = g
		} else {
			grant = grant.Combine(g)
		}
	}
	return grant
}
