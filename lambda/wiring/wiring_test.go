package wiring

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/internal/testenv"
	"github.com/dynakafka/outbox/lambda/config"
	"github.com/dynakafka/outbox/store/dynamo"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestBuildOnRealParts(t *testing.T) {
	d := testenv.DynamoDB(t)
	k := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tables := dynamo.Tables{Messages: testenv.Name(t, "m"), Control: testenv.Name(t, "c")}
	if err := dynamo.CreateTables(ctx, d.Client, tables, dynamo.BucketCount(4)); err != nil {
		t.Fatal(err)
	}
	topic := testenv.Name(t, "t")
	testenv.CreateTopic(t, k, topic, 4)
	getenv := func(extra map[string]string) func(string) string {
		m := map[string]string{
			"OUTBOX_MESSAGES_TABLE": tables.Messages, "OUTBOX_CONTROL_TABLE": tables.Control,
			"OUTBOX_TOPICS": topic, "KAFKA_BOOTSTRAP_SERVERS": strings.Join(k.Brokers, ","),
			"OUTBOX_DYNAMODB_ENDPOINT": d.Endpoint, "AWS_REGION": d.Config.Region,
		}
		for a, b := range extra {
			m[a] = b
		}
		return func(s string) string { return m[s] }
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	cfg, err := config.Load(getenv(nil))
	if err != nil {
		t.Fatal(err)
	}
	p, err := BuildWith(ctx, cfg, d.Config, log, "relay/test")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Relay.BucketCount() != 4 || p.Relay.ID() != "relay/test" {
		t.Fatalf("relay bucket count %d id %q", p.Relay.BucketCount(), p.Relay.ID())
	}
	// The parts work together: a written message is drained to Kafka.
	w, err := dynamo.NewWriter(ctx, d.Client, tables)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Write(ctx, nil, outbox.Message{Topic: topic, Key: []byte("k"), Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Relay.DrainBucket(ctx, res.Messages[0].Bucket)
	if err != nil || st.Published != 1 {
		t.Fatalf("drain: %+v %v", st, err)
	}

	// Misconfigurations fail the init, naming what to fix.
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"bucket count differs", map[string]string{"OUTBOX_BUCKET_COUNT": "8"}, "BucketCount"},
		{"missing table", map[string]string{"OUTBOX_CONTROL_TABLE": "no-such-table"}, "OUTBOX_CONTROL_TABLE=no-such-table"},
		{"missing topic", map[string]string{"OUTBOX_TOPICS": "no-such-topic"}, "no-such-topic"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Load(getenv(c.env))
			if err != nil {
				t.Fatal(err)
			}
			p, err := BuildWith(ctx, cfg, d.Config, log, "relay/test")
			if err == nil {
				p.Close()
				t.Fatal("built despite the misconfiguration")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not name %q", err, c.want)
			}
		})
	}
}

type fakeSecrets struct {
	value *string
	err   error
}

func (f fakeSecrets) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, o ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	return &secretsmanager.GetSecretValueOutput{SecretString: f.value}, f.err
}

func TestSCRAMSecret(t *testing.T) {
	ok, err := scramFromSecret(context.Background(), fakeSecrets{value: aws.String(`{"username":"relay","password":"s3cret"}`)}, "arn:secret")
	if err != nil || ok.Name() != "SCRAM-SHA-512" {
		t.Fatalf("mechanism %v, %v", ok, err)
	}
	for _, bad := range []*string{nil, aws.String("not json"), aws.String(`{"username":"relay"}`)} {
		var ce *config.Error
		if _, err := scramFromSecret(context.Background(), fakeSecrets{value: bad}, "arn:secret"); !errors.As(err, &ce) || ce.Variable != "KAFKA_SASL_SECRET_ARN" {
			t.Fatalf("secret %v: err = %v, want an error naming KAFKA_SASL_SECRET_ARN", bad, err)
		}
	}
	if _, err := scramFromSecret(context.Background(), fakeSecrets{err: errors.New("AccessDenied")}, "arn:secret"); err == nil || !strings.Contains(err.Error(), "arn:secret") {
		t.Fatalf("err = %v", err)
	}
}

func TestMSKIAMUsesTheFunctionCredentials(t *testing.T) {
	mech := mskIAM(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "secret", SessionToken: "token"}, nil
	}))
	if mech.Name() != "AWS_MSK_IAM" {
		t.Fatalf("mechanism %s", mech.Name())
	}
	_, first, err := mech.Authenticate(context.Background(), "b-1.orders.abc123.c2.kafka.eu-west-1.amazonaws.com:9098")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(first), `"x-amz-security-token":"token"`) || !strings.Contains(string(first), "AKID") {
		t.Fatalf("the signed handshake does not carry the function's credentials: %s", first)
	}
}
