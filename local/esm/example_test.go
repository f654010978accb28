package esm_test

import (
	"context"
	"fmt"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/dynakafka/outbox/local/esm"
)

// A relay handler, run in this process, fed by the messages table's stream
// the way the deployed event-source mapping feeds the relay function.
func ExampleNew() {
	var (
		streams   *dynamodbstreams.Client // e.g. dynamolocal.NewStreamsClient(cfg, endpoint)
		streamARN string                  // the table's LatestStreamArn
	)
	handler := func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		for _, r := range ev.Records {
			fmt.Println(r.EventName, r.Change.Keys["b"].Number(), r.Change.Keys["s"].Number())
		}
		return events.DynamoDBEventResponse{}, nil
	}
	m, err := esm.New(streams, streamARN, esm.InProcess(handler, esm.Timeout(30*time.Second)),
		esm.BisectBatchOnFunctionError(true),
		esm.MaximumRetryAttempts(5),
		esm.OnFailure(func(_ context.Context, fr esm.FailureRecord) {
			log.Printf("dropped %d records from %s", fr.BatchInfo.BatchSize, fr.BatchInfo.StartSequenceNumber)
		}))
	if err != nil {
		log.Fatal(err) // a misconfigured option, named with its fix
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := m.Run(ctx); err != nil {
		log.Fatal(err)
	}
	log.Printf("%+v", m.Stats())
}

// The real relay binary, built for provided.al2023, run under the Lambda
// Runtime Interface Emulator and fed by the stream.
func ExampleStartRIE() {
	var (
		streams   *dynamodbstreams.Client
		streamARN string
	)
	ctx := context.Background()
	fn, err := esm.StartRIE(ctx, esm.RIEOptions{
		RIEPath:       ".cache/bin/aws-lambda-rie", // scripts/install-rie.sh
		BootstrapPath: "bin/relay/amd64/bootstrap", // make build
		Env:           map[string]string{"OUTBOX_MESSAGES_TABLE": "messages", "OUTBOX_CONTROL_TABLE": "control"},
		Timeout:       60 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer fn.Close()
	m, err := esm.New(streams, streamARN, fn)
	if err != nil {
		log.Fatal(err)
	}
	if err := m.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
