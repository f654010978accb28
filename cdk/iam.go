package outboxcdk

import (
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
// which covers every stream in the account); what both functions need is one
// customer managed policy each, attached to both roles.
func (o *Outbox) newRoles() {
	shared := []awsiam.IManagedPolicy{o.tablesPolicy()}
	if p := o.saslPolicy(); p != nil {
		shared = append(shared, p)
	}
	if p := o.mskIAMPolicy(); p != nil {
		shared = append(shared, p)
	}
	if p := o.vpcPolicy(); p != nil {
		shared = append(shared, p)
	}
	stream := awsiam.NewPolicyDocument(&awsiam.PolicyDocumentProps{Statements: &[]awsiam.PolicyStatement{
		// What the event source mapping polls with, on this stream only.
		statement("ReadMessagesStream", []string{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}, o.MessagesTable.TableStreamArn()),
		statement("ListMessagesStreams", []string{"dynamodb:ListStreams"}, awscdk.Fn_Join(jsii.String(""), jsii.Strings(*o.MessagesTable.TableArn(), "/stream/*"))),
		// The event source mapping sends discarded hints with this role.
		statement("FailureDestination", []string{"sqs:SendMessage"}, o.FailureQueue.QueueArn()),
	}})
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
}

// tablesPolicy: both functions drain buckets, item by item, on the two
// tables only. store/dynamo.StoreAPI is the list: Pending and Peek (Query),
// Delete (BatchWriteItem), Fence (conditional PutItem), Park (GetItem, then a
// transaction that deletes the message and writes the dead letter); config,
// leases, heartbeats, dead letters and live relays on the control table.
func (o *Outbox) tablesPolicy() awsiam.ManagedPolicy {
	return managedPolicy(o, "TablesPolicy", "Outbox item access to the messages and control tables of this stack.",
		statement("MessagesTable", []string{"dynamodb:Query", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}, o.MessagesTable.TableArn()),
		statement("ControlTable", []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"}, o.ControlTable.TableArn()),
	)
}

// saslPolicy reads the SASL/SCRAM secret (and decrypts it with its customer
// managed key, through Secrets Manager only); nil unless the mode is SASL.
func (o *Outbox) saslPolicy() awsiam.ManagedPolicy {
	c := o.cfg
	if !c.useSASL() {
		return nil
	}
	statements := []awsiam.PolicyStatement{statement("ReadSaslSecret", []string{"secretsmanager:GetSecretValue"}, jsii.String(c.saslSecret))}
	if c.useSASLKey() {
		decrypt := statement("DecryptSaslSecret", []string{"kms:Decrypt"}, jsii.String(c.saslKey))
		decrypt.AddCondition(jsii.String("StringEquals"), map[string]any{
			"kms:ViaService": awscdk.Fn_Sub(jsii.String("secretsmanager.${AWS::Region}.amazonaws.com"), nil),
		})
		statements = append(statements, decrypt)
	}
	return managedPolicy(o, "KafkaSaslSecretPolicy", "Read the Kafka SASL/SCRAM credentials.", statements...)
}

// mskIAMPolicy is a producer's permissions: connect, read metadata, write
// idempotently; no reads, no consumer groups, no Create/Alter/Delete. Topic
// ARNs are topic/<cluster name>/<cluster uuid>/<topic>. nil unless msk-iam.
func (o *Outbox) mskIAMPolicy() awsiam.ManagedPolicy {
	c := o.cfg
	if !c.useMSKIAM() {
		return nil
	}
	cluster := awscdk.Fn_Sub(jsii.String("arn:${AWS::Partition}:kafka:${AWS::Region}:${AWS::AccountId}:cluster/*/*"), nil)
	topics := awscdk.Fn_Sub(jsii.String("arn:${AWS::Partition}:kafka:${AWS::Region}:${AWS::AccountId}:topic/*/*/*"), nil)
	if c.msk != "" {
		parts := awscdk.Fn_Split(jsii.String("/"), jsii.String(c.msk), nil)
		cluster = jsii.String(c.msk)
		topics = awscdk.Fn_Sub(jsii.String("arn:${AWS::Partition}:kafka:${AWS::Region}:${AWS::AccountId}:topic/${ClusterName}/${ClusterUuid}/*"), &map[string]*string{
			"ClusterName": awscdk.Fn_Select(jsii.Number(1), parts),
			"ClusterUuid": awscdk.Fn_Select(jsii.Number(2), parts),
		})
	}
	return managedPolicy(o, "KafkaMskIamPolicy", "Produce to MSK with IAM access control.",
		statement("MskCluster", []string{"kafka-cluster:Connect", "kafka-cluster:DescribeCluster", "kafka-cluster:WriteDataIdempotently"}, cluster),
		statement("MskTopics", []string{"kafka-cluster:DescribeTopic", "kafka-cluster:WriteData"}, topics),
	)
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

// Writer actions, exactly what dynamo.Writer calls: GetItem of the config
// item (control) and of a key that never exists (messages, the existence
// check in NewWriter); UpdateItem of the sequence counters (control); PutItem
// of the messages, inside the writer's TransactWriteItems, and of fences
// (messages). The writer's own items in the same transaction need the
// service's grants on its own tables.
var (
	writerMessagesActions = []string{"dynamodb:GetItem", "dynamodb:PutItem"}
	writerControlActions  = []string{"dynamodb:GetItem", "dynamodb:UpdateItem"}
)

// GrantEnqueue lets grantee (a writer service's function or role) enqueue
// messages with dynamo.Writer: exactly the writer's actions on the two
// tables, nothing else.
func (o *Outbox) GrantEnqueue(grantee awsiam.IGrantable) awsiam.Grant {
	messages := awsiam.Grant_AddToPrincipal(&awsiam.GrantOnPrincipalOptions{
		Grantee:      grantee,
		Actions:      jsii.Strings(writerMessagesActions...),
		ResourceArns: jsii.Strings(*o.MessagesTable.TableArn()),
	})
	control := awsiam.Grant_AddToPrincipal(&awsiam.GrantOnPrincipalOptions{
		Grantee:      grantee,
		Actions:      jsii.Strings(writerControlActions...),
		ResourceArns: jsii.Strings(*o.ControlTable.TableArn()),
	})
	return messages.Combine(control)
}
