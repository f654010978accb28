// Command relay is the stream-triggered relay Lambda (provided.al2023,
// handler "bootstrap"). It reads the messages table's KEYS_ONLY stream,
// treats each INSERT as a hint naming a bucket, and drains the named buckets
// under their leases. Configuration: environment variables (docs/deploy.md),
// validated at init; clients are built once per container. Each invocation
// writes one CloudWatch Embedded Metric Format line to stdout.
package main

import (
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/dynakafka/outbox/lambda/wiring"
)

func main() {
	h, ok := wiring.SetupRelay(os.Getenv, wiring.Stdout())
	if !ok {
		os.Exit(2)
	}
	lambda.Start(h.Handle)
}
