package kafka_test

import (
	"context"
	"fmt"
	"log"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/dynakafka/outbox"
	"github.com/dynakafka/outbox/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

func ExampleNewPublisher() {
	ctx := context.Background()
	p, err := kafka.NewPublisher(ctx, []string{"localhost:9092"}, // the relay's brokers
		kafka.Topics("orders"),              // checked now: exists, admits MaxMessageBytes
		kafka.LeaseDuration(30*time.Second), // the relay's lease
		kafka.ClientOptions(kgo.ClientID("outbox-relay")),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	created := time.Now()
	acked, err := p.Publish(ctx, []outbox.Message{
		{ID: outbox.NewID(), Bucket: 1, Sequence: 1, Topic: "orders", Key: []byte("order-7"), Value: []byte(`{"status":"paid"}`), CreatedAt: created},
		{ID: outbox.NewID(), Bucket: 1, Sequence: 2, Topic: "orders", Key: []byte("order-7"), Value: []byte(`{"status":"shipped"}`), CreatedAt: created},
	})
	fmt.Println(acked, err, kafka.IsRetriable(err))
	// (Compiled, not run: it needs a broker. The publisher's suite, here and
	// in internal/harness/kafka/kfakeenv/brokertest, publishes on kfake and Apache Kafka.)
}

// SCRAM-SHA-512 over TLS, as Amazon MSK offers it (the user name and password
// would come from Secrets Manager).
func ExampleSASL_scram() {
	ctx := context.Background()
	p, err := kafka.NewPublisher(ctx, []string{"b-1.example.kafka.eu-west-1.amazonaws.com:9096"},
		kafka.TLS(nil), // the system's roots
		kafka.SASL(scram.Auth{User: "relay", Pass: "from-secrets-manager"}.AsSha512Mechanism()),
		kafka.Topics("orders"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
}

// MSK IAM: sign with the Lambda's role credentials, fetched (and refreshed)
// through the AWS SDK on every new connection.
func ExampleSASL_mskIAM() {
	ctx := context.Background()
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	iam := aws.ManagedStreamingIAM(func(ctx context.Context) (aws.Auth, error) {
		creds, err := cfg.Credentials.Retrieve(ctx)
		if err != nil {
			return aws.Auth{}, err
		}
		return aws.Auth{AccessKey: creds.AccessKeyID, SecretKey: creds.SecretAccessKey, SessionToken: creds.SessionToken}, nil
	})
	p, err := kafka.NewPublisher(ctx, []string{"b-1.example.kafka.eu-west-1.amazonaws.com:9098"},
		kafka.TLS(nil),
		kafka.SASL(iam),
		kafka.Topics("orders"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
}
