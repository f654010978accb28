package deploy

import (
	"context"
	"errors"
	"fmt"
	"github.com/dynakafka/outbox/internal/harness/kafka/kfakeenv"
	"io"
	"log/slog"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/harness/testenv"
	"github.com/dynakafka/outbox/kafka"
	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/lambda/wiring"
)

// mskAction is an MSK IAM action and the kind of resource it is granted on.
type mskAction struct {
	Action   string // kafka-cluster:...
	Resource string // "cluster", "topic" or "transactional-id"
}

func (a mskAction) String() string { return a.Action + " on " + a.Resource }

var (
	connect             = mskAction{"kafka-cluster:Connect", "cluster"}
	describeCluster     = mskAction{"kafka-cluster:DescribeCluster", "cluster"}
	clusterConfigs      = mskAction{"kafka-cluster:DescribeClusterDynamicConfiguration", "cluster"}
	writeIdempotently   = mskAction{"kafka-cluster:WriteDataIdempotently", "cluster"}
	describeTopic       = mskAction{"kafka-cluster:DescribeTopic", "topic"}
	writeData           = mskAction{"kafka-cluster:WriteData", "topic"}
	topicConfigs        = mskAction{"kafka-cluster:DescribeTopicDynamicConfiguration", "topic"}
	createTopic         = mskAction{"kafka-cluster:CreateTopic", "topic"}
	describeTransaction = mskAction{"kafka-cluster:DescribeTransactionalId", "transactional-id"}
	alterTransaction    = mskAction{"kafka-cluster:AlterTransactionalId", "transactional-id"}
)

// mskRequired is the "Required actions" column of AWS's table: granting an
// action is useless without these.
// https://docs.aws.amazon.com/msk/latest/developerguide/kafka-actions.html
// (AlterTransactionalId's "Dependent actions" in the Service Authorization
// Reference, list_apachekafkaapisforamazonmskclusters: Connect,
// DescribeTransactionalId, WriteData.)
var mskRequired = map[mskAction][]mskAction{
	describeCluster:     {connect},
	clusterConfigs:      {connect},
	writeIdempotently:   {connect, writeData},
	describeTopic:       {connect},
	writeData:           {connect, describeTopic},
	topicConfigs:        {connect},
	createTopic:         {connect},
	describeTransaction: {connect},
	alterTransaction:    {connect, describeTransaction, writeData},
}

// mskActionsFor maps one Kafka request to the MSK IAM actions it needs.
// Kafka's authorizer checks one ACL operation per request and resource
// (Kafka's documentation, "Operations and Resources on Protocols"); AWS's
// table names, for each kafka-cluster action, the Kafka ACL it is
// "equivalent to" (DESCRIBE CLUSTER, DESCRIBE_CONFIGS CLUSTER,
// IDEMPOTENT_WRITE CLUSTER, DESCRIBE TOPIC, WRITE TOPIC, DESCRIBE_CONFIGS
// TOPIC, CREATE TOPIC, DESCRIBE and WRITE TRANSACTIONAL_ID...). Every
// connection also needs Connect. A request
// without a mapping here is an error, so a new call in the publisher cannot
// go unnoticed.
func mskActionsFor(req kmsg.Request) ([]mskAction, error) {
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest, *kmsg.SASLHandshakeRequest, *kmsg.SASLAuthenticateRequest:
		return nil, nil // before or during authentication: Connect alone
	case *kmsg.GetTelemetrySubscriptionsRequest, *kmsg.PushTelemetryRequest:
		// KIP-714 client metrics: Kafka checks no ACL (nor does kfake,
		// which mirrors it); any client that may connect may send them.
		return nil, nil
	case *kmsg.MetadataRequest:
		var out []mskAction
		if r.Topics == nil || len(r.Topics) > 0 {
			out = append(out, describeTopic) // DESCRIBE TOPIC; nil lists every topic
		}
		if r.AllowAutoTopicCreation && len(r.Topics) > 0 {
			out = append(out, createTopic) // CREATE TOPIC (or CLUSTER)
		}
		if r.IncludeClusterAuthorizedOperations {
			out = append(out, describeCluster)
		}
		if r.IncludeTopicAuthorizedOperations {
			out = append(out, describeTopic)
		}
		return out, nil
	case *kmsg.InitProducerIDRequest:
		if r.TransactionalID != nil {
			return []mskAction{alterTransaction}, nil // a transactional producer: WRITE TRANSACTIONAL_ID
		}
		return []mskAction{writeIdempotently}, nil // IDEMPOTENT_WRITE CLUSTER
	case *kmsg.ProduceRequest:
		out := []mskAction{writeData} // WRITE TOPIC
		if r.TransactionID != nil {
			out = append(out, alterTransaction) // WRITE TRANSACTIONAL_ID
		}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(p.Records); err != nil {
					return nil, fmt.Errorf("produce to %s/%d: record batch: %w", t.Topic, p.Partition, err)
				}
				// An idempotent produce needs IDEMPOTENT_WRITE CLUSTER; a
				// transactional one (attribute bit 4) is authorised by its
				// transactional id instead: AWS's "Produce data
				// transactionally" use case lists no WriteDataIdempotently.
				if b.ProducerID >= 0 && b.Attributes&0x10 == 0 {
					out = append(out, writeIdempotently)
				}
			}
		}
		return out, nil
	case *kmsg.FindCoordinatorRequest:
		if r.CoordinatorType != 1 {
			return nil, fmt.Errorf("FindCoordinator of coordinator type %d (a group?) has no mapping here", r.CoordinatorType)
		}
		return []mskAction{describeTransaction}, nil // the transaction coordinator: DESCRIBE TRANSACTIONAL_ID
	case *kmsg.AddPartitionsToTxnRequest:
		// Before KIP-890's transaction version 2 the client adds each
		// partition: WRITE TRANSACTIONAL_ID and WRITE TOPIC.
		return []mskAction{alterTransaction, writeData}, nil
	case *kmsg.EndTxnRequest:
		return []mskAction{alterTransaction}, nil // commit or abort: WRITE TRANSACTIONAL_ID
	case *kmsg.DescribeConfigsRequest:
		var out []mskAction
		for _, res := range r.Resources {
			switch res.ResourceType {
			case kmsg.ConfigResourceTypeTopic:
				out = append(out, topicConfigs) // DESCRIBE_CONFIGS TOPIC
			case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
				out = append(out, clusterConfigs) // DESCRIBE_CONFIGS CLUSTER
			default:
				return nil, fmt.Errorf("DescribeConfigs of resource type %v has no mapping here", res.ResourceType)
			}
		}
		return out, nil
	case *kmsg.DescribeClusterRequest:
		return []mskAction{describeCluster}, nil // DESCRIBE CLUSTER
	}
	return nil, fmt.Errorf("request key %d (%s) has no MSK IAM mapping here: look it up and add it", req.Key(), kmsg.NameForKey(req.Key()))
}

// recorder records every request a kfake cluster receives.
type recorder struct {
	mu   sync.Mutex
	reqs []kmsg.Request
}

func record(c *kfake.Cluster) *recorder {
	r := &recorder{}
	c.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r.mu.Lock()
		r.reqs = append(r.reqs, req)
		r.mu.Unlock()
		return nil, nil, false // observe only: kfake answers
	})
	return r
}

// TestMskIamPolicyMatchesThePublisher runs the Kafka publisher as the
// functions build it (wiring.NewPublisher, or wiring.NewTxnPublisher with
// KafkaTransactional: its start-up checks, with and without OUTBOX_TOPICS)
// and publishes with it, against kfake, recording every request; maps the
// requests to MSK IAM actions; and checks that the template's
// KafkaMskIamPolicy grants exactly those, each on the right kind of
// resource, and, in the transactional mode, that every transactional id the
// publisher used is within the granted transactional-id ARN.
func TestMskIamPolicyMatchesThePublisher(t *testing.T) {
	for _, txn := range []bool{false, true} {
		t.Run(fmt.Sprintf("transactional=%v", txn), func(t *testing.T) {
			k := kfakeenv.Kafka(t, kfake.NumBrokers(3))
			kfakeenv.RequireKfake(t, k)
			rec := record(k.Cluster)
			listed, unlisted := testenv.Name(t, "listed"), testenv.Name(t, "unlisted")
			testenv.CreateTopic(t, k.KafkaCluster, listed, 3)
			testenv.CreateTopic(t, k.KafkaCluster, unlisted, 3)
			rec.mu.Lock()
			rec.reqs = nil // CreateTopic's own requests are not the publisher's
			rec.mu.Unlock()

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			publish := publishLikeTheFunctions
			if txn {
				publish = publishTransactionallyLikeTheFunctions
			}
			if err := publish(ctx, k.Brokers, listed, unlisted); err != nil {
				t.Fatal(err)
			}

			needed := map[mskAction]bool{connect: true}
			keys := map[string]bool{}
			txnIDs := map[string]bool{}
			rec.mu.Lock()
			for _, req := range rec.reqs {
				keys[kmsg.NameForKey(req.Key())] = true
				acts, err := mskActionsFor(req)
				if err != nil {
					t.Error(err)
				}
				for _, a := range acts {
					needed[a] = true
				}
				if id := transactionalIDOf(req); id != "" {
					txnIDs[id] = true
				}
			}
			rec.mu.Unlock()
			t.Logf("requests the publisher made: %v", sortedKeys(keys))
			must := []string{"Metadata", "DescribeConfigs", "InitProducerID", "Produce"}
			if txn {
				must = append(must, "FindCoordinator", "EndTxn")
			}
			for _, m := range must {
				if !keys[m] {
					t.Errorf("the publisher sent no %s request; the recording is incomplete", m)
				}
			}
			if txn != (len(txnIDs) > 0) {
				t.Errorf("transactional=%v, but the publisher used transactional ids %v", txn, sortedKeys(txnIDs))
			}
			// Granting an action is useless without the actions it requires.
			for changed := true; changed; {
				changed = false
				for a := range needed {
					for _, r := range mskRequired[a] {
						if !needed[r] {
							needed[r], changed = true, true
						}
					}
				}
			}

			tmpl := loadTemplate(t)
			e, err := newEvaluator(tmpl, map[string]string{"KafkaBootstrapServers": "b:9098", "KafkaAuthMode": "msk-iam", "MskClusterArn": clusterARN,
				"KafkaTransactional": fmt.Sprint(txn)})
			if err != nil {
				t.Fatal(err)
			}
			doc, err := e.Eval(at(tmpl, "Resources", "KafkaMskIamPolicy", "Properties", "PolicyDocument"))
			if err != nil {
				t.Fatal(err)
			}
			granted := map[mskAction]bool{}
			for _, s := range at(doc, "Statement").([]any) {
				res := fmt.Sprint(at(s, "Resource"))
				kind := map[string]string{clusterARN: "cluster", topicARNs: "topic", txnIDARNs: "transactional-id"}[res]
				if kind == "" {
					t.Errorf("statement %s: resource is neither the cluster, its topics nor the outbox's transactional ids", canon(s))
				}
				if kind == "transactional-id" {
					// The template's messages table is <MessagesTable> here;
					// the publisher's prefix is the table's name.
					pattern := strings.TrimPrefix(res, "arn:aws:kafka:us-east-1:123456789012:transactional-id/orders/0b1c2d3e-1111-2222-3333-444455556666-7/")
					pattern = strings.ReplaceAll(pattern, "<MessagesTable>", txnMessagesTable)
					for id := range txnIDs {
						if ok, _ := path.Match(pattern, id); !ok {
							t.Errorf("the publisher used transactional id %q; the policy grants %s", id, res)
						}
					}
				}
				for _, a := range stringList(at(s, "Action")) {
					granted[mskAction{a, kind}] = true
				}
			}
			var missing, extra []string
			for a := range needed {
				if !granted[a] {
					missing = append(missing, a.String())
				}
			}
			for a := range granted {
				if !needed[a] {
					extra = append(extra, a.String())
				}
			}
			sort.Strings(missing)
			sort.Strings(extra)
			for _, a := range missing {
				t.Errorf("the publisher needs %s; KafkaMskIamPolicy does not grant it", a)
			}
			for _, a := range extra {
				t.Errorf("KafkaMskIamPolicy grants %s; nothing the publisher sends needs it", a)
			}
		})
	}
}

// transactionalIDOf is the transactional id a request names, if any.
func transactionalIDOf(req kmsg.Request) string {
	switch r := req.(type) {
	case *kmsg.InitProducerIDRequest:
		if r.TransactionalID != nil {
			return *r.TransactionalID
		}
	case *kmsg.ProduceRequest:
		if r.TransactionID != nil {
			return *r.TransactionID
		}
	case *kmsg.FindCoordinatorRequest:
		if r.CoordinatorType == 1 {
			if len(r.CoordinatorKeys) > 0 {
				return r.CoordinatorKeys[0]
			}
			return r.CoordinatorKey
		}
	case *kmsg.AddPartitionsToTxnRequest:
		return r.TransactionalID
	case *kmsg.EndTxnRequest:
		return r.TransactionalID
	}
	return ""
}

// txnMessagesTable is the messages table the transactional publisher is
// built for: its transactional ids are <table>-bucket-<n>.
const txnMessagesTable = "orders-outbox"

// publishLikeTheFunctions builds the publisher as the functions do
// (wiring.NewPublisher), once without OUTBOX_TOPICS (init asks a broker) and
// once with listed (init checks it), and publishes keyed messages to listed
// and to unlisted (checked on first use), as the relay does. extra options
// come last (SASL for the ACL test).
func publishLikeTheFunctions(ctx context.Context, brokers []string, listed, unlisted string, extra ...kafka.Option) error {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := config.Config{Brokers: brokers, Auth: config.AuthNone, LeaseDuration: 30 * time.Second}
	p, err := wiring.NewPublisher(ctx, cfg, aws.Config{}, log, extra...)
	if err != nil {
		return fmt.Errorf("init without topics: %w", err)
	}
	p.Close()
	cfg.Topics = []string{listed}
	if p, err = wiring.NewPublisher(ctx, cfg, aws.Config{}, log, extra...); err != nil {
		return fmt.Errorf("init with OUTBOX_TOPICS=%s: %w", listed, err)
	}
	defer p.Close()
	return publishRounds(ctx, p, 1, listed, unlisted)
}

// publishRounds publishes 20 keyed messages of bucket to listed, unlisted
// and listed again.
func publishRounds(ctx context.Context, p outbox.Publisher, bucket int, listed, unlisted string) error {
	for i, topic := range []string{listed, unlisted, listed} {
		msgs := make([]outbox.Message, 20)
		for j := range msgs {
			msgs[j] = outbox.Message{ID: outbox.NewID(), Bucket: bucket, Sequence: int64(i*20 + j + 1), Topic: topic,
				Key: []byte("key-" + strconv.Itoa(j)), Value: []byte("v"), CreatedAt: time.Now()}
		}
		if n, err := p.Publish(ctx, msgs); err != nil || n != len(msgs) {
			return fmt.Errorf("publish to %s: %d of %d acknowledged: %w", topic, n, len(msgs), err)
		}
	}
	return nil
}

// publishTransactionallyLikeTheFunctions is publishLikeTheFunctions with
// OUTBOX_KAFKA_TRANSACTIONAL=true (wiring.NewTxnPublisher): it also
// publishes a record alone (PublishAlone, a transaction of its own), and a
// second holder of the bucket fences the first, whose next publish fails
// fenced, whose one after that publishes nothing (ErrFenceRequired) and
// which fences again to publish (what a relay does after losing and
// regaining a bucket).
func publishTransactionallyLikeTheFunctions(ctx context.Context, brokers []string, listed, unlisted string, extra ...kafka.Option) error {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := config.Config{Brokers: brokers, Auth: config.AuthNone, LeaseDuration: 30 * time.Second,
		MessagesTable: txnMessagesTable, Transactional: true}
	p, err := wiring.NewTxnPublisher(ctx, cfg, aws.Config{}, log, extra...)
	if err != nil {
		return fmt.Errorf("init without topics: %w", err)
	}
	p.Close()
	cfg.Topics = []string{listed}
	if p, err = wiring.NewTxnPublisher(ctx, cfg, aws.Config{}, log, extra...); err != nil {
		return fmt.Errorf("init with OUTBOX_TOPICS=%s: %w", listed, err)
	}
	defer p.Close()
	// The relay fences a bucket's earlier holders after it acquires the
	// bucket, before it publishes (outbox.HolderFencer).
	if err := p.FenceHolders(ctx, 1); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	if err := publishRounds(ctx, p, 1, listed, unlisted); err != nil {
		return err
	}
	alone := outbox.Message{ID: outbox.NewID(), Bucket: 2, Sequence: 1, Topic: listed, Key: []byte("k"), Value: []byte("v"), CreatedAt: time.Now()}
	if err := p.FenceHolders(ctx, 2); err != nil {
		return fmt.Errorf("fence bucket 2: %w", err)
	}
	if err := p.PublishAlone(ctx, alone); err != nil {
		return fmt.Errorf("publish alone: %w", err)
	}
	newer, err := wiring.NewTxnPublisher(ctx, cfg, aws.Config{}, log, extra...)
	if err != nil {
		return fmt.Errorf("second holder's init: %w", err)
	}
	defer newer.Close()
	if err := newer.FenceHolders(ctx, 1); err != nil {
		return fmt.Errorf("second holder's fence: %w", err)
	}
	if err := publishRounds(ctx, newer, 1, listed, unlisted); err != nil {
		return fmt.Errorf("second holder: %w", err)
	}
	var fe *kafka.FencedError
	if err := publishRounds(ctx, p, 1, listed, unlisted); !errors.As(err, &fe) {
		return fmt.Errorf("the first holder after the second one's init: %v, want a *kafka.FencedError", err)
	}
	// The first holder takes the bucket back: a new fence, a new producer.
	if err := publishRounds(ctx, p, 1, listed, unlisted); !errors.Is(err, outbox.ErrFenceRequired) {
		return fmt.Errorf("the fenced holder publishing again without a fence: %v, want ErrFenceRequired", err)
	}
	if err := p.FenceHolders(ctx, 1); err != nil {
		return fmt.Errorf("the first holder's fence after it took the bucket back: %w", err)
	}
	return publishRounds(ctx, p, 1, listed, unlisted)
}

// kafkaACL is the Kafka ACL each MSK IAM action is "equivalent to" in AWS's
// table (Connect is authentication itself).
var kafkaACL = map[mskAction]struct {
	resource  kmsg.ACLResourceType
	operation kmsg.ACLOperation
}{
	writeIdempotently:   {kmsg.ACLResourceTypeCluster, kmsg.ACLOperationIdempotentWrite},
	clusterConfigs:      {kmsg.ACLResourceTypeCluster, kmsg.ACLOperationDescribeConfigs},
	describeCluster:     {kmsg.ACLResourceTypeCluster, kmsg.ACLOperationDescribe},
	describeTopic:       {kmsg.ACLResourceTypeTopic, kmsg.ACLOperationDescribe},
	writeData:           {kmsg.ACLResourceTypeTopic, kmsg.ACLOperationWrite},
	topicConfigs:        {kmsg.ACLResourceTypeTopic, kmsg.ACLOperationDescribeConfigs},
	createTopic:         {kmsg.ACLResourceTypeTopic, kmsg.ACLOperationCreate},
	describeTransaction: {kmsg.ACLResourceTypeTransactionalId, kmsg.ACLOperationDescribe},
	alterTransaction:    {kmsg.ACLResourceTypeTransactionalId, kmsg.ACLOperationWrite},
}

// TestMskIamActionsAsKafkaACLs checks the same policy from the other side:
// kfake enforces Kafka's own authorizer rules, so a user holding exactly the
// Kafka ACLs equivalent to the policy's actions must be able to do what the
// functions do, and each ACL must be needed (dropping it makes them fail).
// Two ACLs are implied in Kafka but not in IAM, so dropping them alone
// changes nothing in kfake: WRITE on a topic implies DESCRIBE on it (Kafka's
// ACL implication rules), and since Kafka 2.8 (KIP-679) WRITE on any topic
// implies IDEMPOTENT_WRITE. MSK IAM implies nothing: AWS's table lists
// DescribeTopic as required for WriteData, and its "produce data
// idempotently" use case needs WriteDataIdempotently.
func TestMskIamActionsAsKafkaACLs(t *testing.T) {
	for _, txn := range []bool{false, true} {
		t.Run(fmt.Sprintf("transactional=%v", txn), func(t *testing.T) { testMskIamActionsAsKafkaACLs(t, txn) })
	}
}

// testMskIamActionsAsKafkaACLs is TestMskIamActionsAsKafkaACLs for one mode.
// In the transactional mode WRITE on a transactional id implies DESCRIBE on
// it (Kafka's ACL implication rules), so dropping DescribeTransactionalId
// alone changes nothing in kfake either; AWS's table lists it as required
// for AlterTransactionalId.
func testMskIamActionsAsKafkaACLs(t *testing.T, txn bool) {
	tmpl := loadTemplate(t)
	e, err := newEvaluator(tmpl, map[string]string{"KafkaBootstrapServers": "b:9098", "KafkaAuthMode": "msk-iam", "MskClusterArn": clusterARN,
		"KafkaTransactional": fmt.Sprint(txn)})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := e.Eval(at(tmpl, "Resources", "KafkaMskIamPolicy", "Properties", "PolicyDocument"))
	if err != nil {
		t.Fatal(err)
	}
	var granted []mskAction
	for _, s := range at(doc, "Statement").([]any) {
		kind := map[string]string{clusterARN: "cluster", topicARNs: "topic", txnIDARNs: "transactional-id"}[fmt.Sprint(at(s, "Resource"))]
		for _, a := range stringList(at(s, "Action")) {
			if a != connect.Action {
				granted = append(granted, mskAction{a, kind})
			}
		}
	}
	acls := func(without mskAction) []kfake.ACL {
		var out []kfake.ACL
		for _, a := range granted {
			if a == without {
				continue
			}
			acl, ok := kafkaACL[a]
			if !ok {
				t.Fatalf("no Kafka ACL for %s", a)
			}
			name, pattern := "*", kmsg.ACLResourcePatternTypeLiteral // every topic of the cluster, as topic/<cluster>/<uuid>/*
			switch acl.resource {
			case kmsg.ACLResourceTypeCluster:
				name = "kafka-cluster"
			case kmsg.ACLResourceTypeTransactionalId:
				// transactional-id/<cluster>/<uuid>/<messages table>-bucket-*
				name, pattern = txnMessagesTable+"-bucket-", kmsg.ACLResourcePatternTypePrefixed
			}
			out = append(out, kfake.ACL{Resource: acl.resource, Name: name, Pattern: pattern, Operation: acl.operation, Allow: true})
		}
		return out
	}
	publish := publishLikeTheFunctions
	if txn {
		publish = publishTransactionallyLikeTheFunctions
	}
	run := func(t *testing.T, without mskAction) error {
		k := kfakeenv.Kafka(t, kfake.EnableSASL(), kfake.EnableACLs(),
			kfake.Superuser("SCRAM-SHA-256", "admin", "admin"),
			kfake.User("SCRAM-SHA-256", "relay", "relay", acls(without)...))
		kfakeenv.RequireKfake(t, k)
		admin, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.SASL(scram.Auth{User: "admin", Pass: "admin"}.AsSha256Mechanism()))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := kadm.NewClient(admin).CreateTopics(ctx, 3, -1, nil, "listed", "unlisted"); err != nil {
			t.Fatal(err)
		}
		// A failure ends quickly (an authorization error is final); the
		// deadline only turns a hang into a failure of the test.
		return publish(ctx, k.Brokers, "listed", "unlisted",
			kafka.SASL(scram.Auth{User: "relay", Pass: "relay"}.AsSha256Mechanism()))
	}
	t.Run("with every ACL", func(t *testing.T) {
		if err := run(t, mskAction{}); err != nil {
			t.Fatalf("the policy's ACLs do not let the functions work: %v", err)
		}
	})
	for _, a := range granted {
		if a == writeIdempotently || a == describeTopic || a == describeTransaction {
			continue
		}
		t.Run("without "+a.String(), func(t *testing.T) {
			err := run(t, a)
			if err == nil {
				t.Fatalf("the functions work without %s: the policy grants more than needed", a)
			}
			t.Logf("fails as it should: %v", err)
		})
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestMskActionMapping pins the mapping on hand-built requests, so a wrong
// entry cannot hide behind what the publisher happens to send.
func TestMskActionMapping(t *testing.T) {
	meta := func(topics []kmsg.MetadataRequestTopic, auto bool) kmsg.Request {
		r := kmsg.NewPtrMetadataRequest()
		r.Topics, r.AllowAutoTopicCreation = topics, auto
		return r
	}
	describe := func(types ...kmsg.ConfigResourceType) kmsg.Request {
		r := kmsg.NewPtrDescribeConfigsRequest()
		for _, typ := range types {
			res := kmsg.NewDescribeConfigsRequestResource()
			res.ResourceType = typ
			r.Resources = append(r.Resources, res)
		}
		return r
	}
	findTxn := kmsg.NewPtrFindCoordinatorRequest()
	findTxn.CoordinatorType = 1
	findGroup := kmsg.NewPtrFindCoordinatorRequest()
	init := kmsg.NewPtrInitProducerIDRequest()
	txn := kmsg.NewPtrInitProducerIDRequest()
	txn.TransactionalID = kmsg.StringPtr("tx")
	produce := func(transactional bool) kmsg.Request {
		b := kmsg.NewRecordBatch()
		b.Magic, b.ProducerID = 2, 7
		if transactional {
			b.Attributes = 0x10
		}
		tp := kmsg.NewProduceRequestTopicPartition()
		b.Length = int32(len(b.AppendTo(nil)) - 12) // the bytes after BaseOffset and Length
		tp.Records = b.AppendTo(nil)
		top := kmsg.NewProduceRequestTopic()
		top.Partitions = append(top.Partitions, tp)
		r := kmsg.NewPtrProduceRequest()
		r.Topics = append(r.Topics, top)
		if transactional {
			r.TransactionID = kmsg.StringPtr("tx")
		}
		return r
	}
	txnProduce, idemProduce := produce(true), produce(false)
	cases := []struct {
		name string
		req  kmsg.Request
		want []mskAction
	}{
		{"api versions", kmsg.NewPtrApiVersionsRequest(), nil},
		{"metadata, no topic (a ping)", meta([]kmsg.MetadataRequestTopic{}, false), nil},
		{"metadata of a topic", meta([]kmsg.MetadataRequestTopic{kmsg.NewMetadataRequestTopic()}, false), []mskAction{describeTopic}},
		{"metadata of every topic", meta(nil, false), []mskAction{describeTopic}},
		{"metadata that creates topics", meta([]kmsg.MetadataRequestTopic{kmsg.NewMetadataRequestTopic()}, true), []mskAction{describeTopic, createTopic}},
		{"topic configs", describe(kmsg.ConfigResourceTypeTopic), []mskAction{topicConfigs}},
		{"broker configs", describe(kmsg.ConfigResourceTypeBroker), []mskAction{clusterConfigs}},
		{"idempotent producer id", init, []mskAction{writeIdempotently}},
		{"transactional producer id", txn, []mskAction{alterTransaction}},
		{"transaction coordinator", findTxn, []mskAction{describeTransaction}},
		{"add partitions to a transaction", kmsg.NewPtrAddPartitionsToTxnRequest(), []mskAction{alterTransaction, writeData}},
		{"end a transaction", kmsg.NewPtrEndTxnRequest(), []mskAction{alterTransaction}},
		{"transactional produce", txnProduce, []mskAction{writeData, alterTransaction}},
		{"idempotent produce", idemProduce, []mskAction{writeData, writeIdempotently}},
		{"describe cluster", kmsg.NewPtrDescribeClusterRequest(), []mskAction{describeCluster}},
	}
	for _, c := range cases {
		got, err := mskActionsFor(c.req)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v %v, want %v", c.name, got, err, c.want)
		}
	}
	if _, err := mskActionsFor(kmsg.NewPtrFetchRequest()); err == nil {
		t.Error("Fetch mapped without an entry")
	}
	if _, err := mskActionsFor(findGroup); err == nil {
		t.Error("FindCoordinator of a group mapped without an entry")
	}
}

// iamMatch reports whether an IAM Resource pattern matches arn: * is any
// run of characters (slashes and colons too), ? any one character.
func iamMatch(pattern, arn string) bool {
	re := "^" + strings.NewReplacer(`\*`, ".*", `\?`, ".").Replace(regexp.QuoteMeta(pattern)) + "$"
	return regexp.MustCompile(re).MatchString(arn)
}

// TestMskIamTopicsScopedToTheAllowlist: with the stack's Topics, the
// relay's policy lets it describe and write the listed topics of the
// cluster and no other; with the default empty Topics, every topic of the
// cluster (docs/deploy.md, Permissions).
func TestMskIamTopicsScopedToTheAllowlist(t *testing.T) {
	const topicOf = "arn:aws:kafka:us-east-1:123456789012:topic/orders/0b1c2d3e-1111-2222-3333-444455556666-7/"
	cases := []struct {
		name    string
		params  map[string]string
		allowed []string // topics the topic actions may reach
		denied  []string
	}{
		{"named cluster, topics", map[string]string{"MskClusterArn": clusterARN, "Topics": " orders,payments , audit.v2"},
			[]string{"orders", "payments", "audit.v2"}, []string{"audit", "orders-dlq", "payments2", "other", "audit-v2"}},
		{"any cluster, transactional, one topic", map[string]string{"Topics": "orders", "KafkaTransactional": "true"},
			[]string{"orders"}, []string{"payments", "orders.x", "xorders"}},
		{"named cluster, no topics: any topic", map[string]string{"MskClusterArn": clusterARN},
			[]string{"orders", "payments", "anything"}, nil},
	}
	topicActions := []string{writeData.Action, describeTopic.Action, topicConfigs.Action}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			params := map[string]string{"KafkaBootstrapServers": "b:9098", "KafkaAuthMode": "msk-iam"}
			for k, v := range c.params {
				params[k] = v
			}
			tmpl := loadTemplate(t)
			e, err := newEvaluator(tmpl, params)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := e.Eval(at(tmpl, "Resources", "KafkaMskIamPolicy", "Properties", "PolicyDocument"))
			if err != nil {
				t.Fatal(err)
			}
			granted := func(action, arn string) bool {
				for _, s := range at(doc, "Statement").([]any) {
					for _, a := range stringList(at(s, "Action")) {
						for _, r := range stringList(at(s, "Resource")) {
							if a == action && iamMatch(r, arn) {
								return true
							}
						}
					}
				}
				return false
			}
			for _, a := range topicActions {
				for _, topic := range c.allowed {
					if !granted(a, topicOf+topic) {
						t.Errorf("%s on topic %s: not granted, want granted", a, topic)
					}
				}
				for _, topic := range c.denied {
					if granted(a, topicOf+topic) {
						t.Errorf("%s on topic %s: granted, want refused (not in Topics %q)", a, topic, c.params["Topics"])
					}
				}
			}
			// The cluster is still the one Connect names.
			if other := "arn:aws:kafka:us-east-1:123456789012:cluster/other/1111"; c.params["MskClusterArn"] != "" && granted(connect.Action, other) {
				t.Errorf("Connect granted on %s", other)
			}
		})
	}
}
