package dynamo

import "github.com/dynakafka/outbox/internal/dynamoerr"

// The backoff, the sleep and the per-call switch of the client's retryer are
// the inbox's too: they are written once, in internal/dynamoerr (see there
// for the ceilings and why the client's retryer is off).
var (
	backoff              = dynamoerr.Backoff
	ceiling              = dynamoerr.Ceiling
	fullJitter           = dynamoerr.FullJitter
	sleep                = dynamoerr.Sleep
	withoutClientRetries = dynamoerr.WithoutClientRetries
)

const (
	retryBase    = dynamoerr.RetryBase
	retryMax     = dynamoerr.RetryMax
	throttleBase = dynamoerr.ThrottleBase
	throttleMax  = dynamoerr.ThrottleMax
)
