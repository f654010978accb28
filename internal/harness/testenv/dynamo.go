package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/dynakafka/outbox/local/dynamolocal"
)

// Environment variables that point the tests at shared endpoints.
const (
	DynamoDBEndpointEnv = "OUTBOX_TEST_DYNAMODB_ENDPOINT"
	KafkaBrokersEnv     = "OUTBOX_TEST_KAFKA_BROKERS"
)

const (
	// startTimeout bounds a first start, which may include installing.
	startTimeout = 3 * time.Minute
	probeTimeout = 15 * time.Second
)

// Dynamo is a DynamoDB endpoint with clients for it. All tests of a binary
// share it: name tables with Name.
type Dynamo struct {
	Endpoint string
	// Config carries the region and credentials; DynamoDB Local keeps the
	// tables of each access key and region apart, so build further clients
	// from this Config (dynamolocal.NewClient(d.Config, d.Endpoint)).
	Config  aws.Config
	Client  *dynamodb.Client
	Streams *dynamodbstreams.Client
}

var (
	mainEntered atomic.Bool

	dynamoOnce sync.Once
	dynamo     *Dynamo
	dynamoErr  error

	instanceMu sync.Mutex
	instance   *dynamolocal.Instance
)

// Main runs the tests, stops the DynamoDB Local that DynamoDB started (if
// any) and exits with the tests' code. Call it from TestMain.
func Main(m *testing.M) {
	mainEntered.Store(true)
	code := m.Run()
	stopRealKafka()
	removeKfakeServer()
	instanceMu.Lock()
	inst := instance
	instance = nil
	instanceMu.Unlock()
	if inst != nil {
		if err := inst.Stop(); err != nil {
			// The engine died under the tests: say so even if they passed.
			fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// DynamoDB returns the test binary's DynamoDB endpoint: the one named by
// OUTBOX_TEST_DYNAMODB_ENDPOINT, or else a DynamoDB Local started on the
// first call and stopped by Main. It fails the test if the engine cannot be
// reached or started, with the reason (for example which tool to install).
func DynamoDB(t testing.TB) *Dynamo {
	t.Helper()
	if os.Getenv(DynamoDBEndpointEnv) == "" && !mainEntered.Load() {
		t.Fatal("testenv.DynamoDB: this test binary's TestMain does not call testenv.Main, " +
			"which stops DynamoDB Local when the tests end; add\n\n\tfunc TestMain(m *testing.M) { testenv.Main(m) }")
	}
	dynamoOnce.Do(func() { dynamo, dynamoErr = setupDynamo() })
	if dynamoErr != nil {
		t.Fatalf("testenv.DynamoDB: %v", dynamoErr)
	}
	d := *dynamo
	return &d
}

func setupDynamo() (*Dynamo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if endpoint := os.Getenv(DynamoDBEndpointEnv); endpoint != "" {
		return useEndpoint(ctx, endpoint)
	}
	// A hang guard, not a speed bound: on a busy two-core machine (four
	// suites at load 20+) the JVM took longer than dynamolocal's default
	// 30 s to answer, and every test of the binary failed on it.
	inst, err := dynamolocal.Start(ctx, dynamolocal.Options{StartTimeout: startTimeout - 10*time.Second, LeanJVM: true})
	if err != nil {
		return nil, err
	}
	instanceMu.Lock()
	instance = inst
	instanceMu.Unlock()
	cfg, err := dynamolocal.NewConfig(ctx, inst.Endpoint, dynamolocal.DefaultRegion)
	if err != nil {
		return nil, err
	}
	return &Dynamo{
		Endpoint: inst.Endpoint,
		Config:   cfg,
		Client:   dynamolocal.NewClient(cfg, inst.Endpoint),
		Streams:  dynamolocal.NewStreamsClient(cfg, inst.Endpoint),
	}, nil
}

// useEndpoint connects to an endpoint given by the environment and checks
// that it answers, so a wrong setting fails with its name in the message.
func useEndpoint(ctx context.Context, endpoint string) (*Dynamo, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%s=%q is not a URL; use for example http://localhost:4566", DynamoDBEndpointEnv, endpoint)
	}
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = dynamolocal.DefaultRegion
	}
	var cfg aws.Config
	if isLoopback(u.Hostname()) {
		cfg, err = dynamolocal.NewConfig(ctx, endpoint, region)
	} else {
		cfg, err = config.LoadDefaultConfig(ctx, config.WithRegion(region))
	}
	if err != nil {
		return nil, fmt.Errorf("%s=%s: load AWS config: %w", DynamoDBEndpointEnv, endpoint, err)
	}
	// AWS serves streams on a host of their own; local engines on the same.
	streamsEndpoint := endpoint
	if strings.HasSuffix(u.Hostname(), ".amazonaws.com") {
		streamsEndpoint = ""
	}
	d := &Dynamo{
		Endpoint: endpoint,
		Config:   cfg,
		Client:   dynamolocal.NewClient(cfg, endpoint),
		Streams:  dynamolocal.NewStreamsClient(cfg, streamsEndpoint),
	}
	probe, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if _, err := d.Client.ListTables(probe, &dynamodb.ListTablesInput{Limit: aws.Int32(1)}); err != nil {
		return nil, fmt.Errorf("%s=%s does not answer ListTables: %w", DynamoDBEndpointEnv, endpoint, err)
	}
	return d, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
