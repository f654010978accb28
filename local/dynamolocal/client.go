package dynamolocal

import (
	"context"
	"fmt"
	"net/url"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
)

// Static credentials for local engines. DynamoDB Local accepts only letters
// and digits in them, and keeps each access key's tables apart.
const (
	AccessKeyID     = "outboxlocal"
	SecretAccessKey = "outboxlocalsecret"
)

// DefaultRegion is the region NewConfig uses when given none.
const DefaultRegion = "us-east-1"

// NewConfig returns an aws.Config for a local engine (DynamoDB Local or
// LocalStack) at endpoint: static credentials AccessKeyID/SecretAccessKey,
// the region (default DefaultRegion when empty) and BaseEndpoint. It reads no
// environment variables or shared config files, so AWS_PROFILE and friends
// cannot point tests at a real account. ctx is unused today; it is there so
// that callers need not change if loading ever does I/O.
func NewConfig(ctx context.Context, endpoint, region string) (aws.Config, error) {
	if err := checkEndpoint(endpoint); err != nil {
		return aws.Config{}, err
	}
	if region == "" {
		region = DefaultRegion
	}
	return aws.Config{
		Region:       region,
		Credentials:  aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(AccessKeyID, SecretAccessKey, "")),
		BaseEndpoint: aws.String(endpoint),
	}, nil
}

func checkEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &OptionError{Field: "endpoint", Reason: fmt.Sprintf("%q is not an http(s) URL; use for example http://127.0.0.1:8000 (Instance.Endpoint)", endpoint)}
	}
	return nil
}

// NewClient returns a DynamoDB client for cfg with BaseEndpoint set to
// endpoint (unless empty) and response CRC32 validation off: DynamoDB Local's
// error responses carry no X-Amz-Crc32 header, and the SDK then checks them
// against 0 and logs a spurious checksum warning for every expected error
// (a failed condition, a cancelled transaction). optFns are applied last.
func NewClient(cfg aws.Config, endpoint string, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.NewFromConfig(cfg, append([]func(*dynamodb.Options){func(o *dynamodb.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.DisableValidateResponseChecksum = true
	}}, optFns...)...)
}

// NewStreamsClient returns a DynamoDB Streams client for cfg with
// BaseEndpoint set to endpoint (unless empty; local engines serve streams on
// the same endpoint as tables). optFns are applied last.
func NewStreamsClient(cfg aws.Config, endpoint string, optFns ...func(*dynamodbstreams.Options)) *dynamodbstreams.Client {
	return dynamodbstreams.NewFromConfig(cfg, append([]func(*dynamodbstreams.Options){func(o *dynamodbstreams.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	}}, optFns...)...)
}
