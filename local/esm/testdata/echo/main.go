// Command echo is a tiny DynamoDB Streams function for the RIE tests. It
// appends what it saw to the file named by ECHO_LOG (one JSON line per
// invocation) and reports as a batch item failure every record whose keys
// include "fail". A record keyed "error" makes it return an error, one keyed
// "sleep" makes it outlive its deadline.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Seen is one invocation as the function saw it.
type Seen struct {
	RequestID  string   `json:"requestId"`
	Sequences  []string `json:"sequences"`
	Mark       string   `json:"mark"`       // ECHO_MARK, set through RIEOptions.Env
	HostOnly   string   `json:"hostOnly"`   // ESM_TEST_HOST_ONLY, which must not leak in
	DeadlineMs int64    `json:"deadlineMs"` // time left at the start
}

func handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	var resp events.DynamoDBEventResponse
	seen := Seen{Mark: os.Getenv("ECHO_MARK"), HostOnly: os.Getenv("ESM_TEST_HOST_ONLY")}
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		seen.RequestID = lc.AwsRequestID
	}
	if d, ok := ctx.Deadline(); ok {
		seen.DeadlineMs = time.Until(d).Milliseconds()
	}
	var fail error
	for _, r := range ev.Records {
		seen.Sequences = append(seen.Sequences, r.Change.SequenceNumber)
		if _, ok := r.Change.Keys["fail"]; ok {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: r.Change.SequenceNumber})
		}
		if _, ok := r.Change.Keys["error"]; ok {
			fail = errors.New("asked to fail")
		}
		if _, ok := r.Change.Keys["sleep"]; ok {
			<-ctx.Done()
			time.Sleep(time.Second)
		}
	}
	if err := appendLine(seen); err != nil {
		return resp, err
	}
	return resp, fail
}

func appendLine(seen Seen) error {
	f, err := os.OpenFile(os.Getenv("ECHO_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	return json.NewEncoder(f).Encode(seen)
}

func main() { lambda.Start(handle) }
