// Command sweeper is the scheduled sweeper Lambda (provided.al2023, handler
// "bootstrap", EventBridge schedule rate(1 minute)): lease-guarded polling
// recovery of whatever the stream path missed, backlog sampling, and loud
// detection of misconfiguration and of buckets that cannot be drained. Each
// invocation writes one CloudWatch Embedded Metric Format line to stdout. It
// shares the relay's configuration.
package main

import (
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/dynakafka/outbox/lambda/wiring"
)

func main() {
	h, ok := wiring.SetupSweeper(os.Getenv, wiring.Stdout())
	if !ok {
		os.Exit(2)
	}
	lambda.Start(h.Handle)
}
