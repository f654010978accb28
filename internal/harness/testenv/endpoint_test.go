package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// TestUseEndpoint exercises the OUTBOX_TEST_DYNAMODB_ENDPOINT path against
// this binary's own DynamoDB Local, and its errors against bad settings.
func TestUseEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	local := DynamoDB(t)

	d, err := useEndpoint(ctx, local.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		t.Errorf("ListTables: %v", err)
	}
	if _, err := d.Streams.ListStreams(ctx, nil); err != nil {
		t.Errorf("ListStreams: %v", err)
	}

	for _, bad := range []string{"not a url", "http://127.0.0.1:1"} {
		_, err := useEndpoint(ctx, bad)
		if err == nil || !strings.Contains(err.Error(), DynamoDBEndpointEnv) {
			t.Errorf("useEndpoint(%q): err = %v, want an error naming %s", bad, err, DynamoDBEndpointEnv)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		host string
		want bool
	}{
		{"localhost", true},
		{"127.0.0.1", true},
		{"::1", true},
		{"localstack", false},
		{"dynamodb.us-east-1.amazonaws.com", false},
		{"10.0.0.1", false},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			if got := isLoopback(tt.host); got != tt.want {
				t.Errorf("isLoopback(%q) = %v, want %v", tt.host, got, tt.want)
			}
		})
	}
}
