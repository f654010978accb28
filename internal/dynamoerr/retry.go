package dynamoerr

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// The packages that retry transactions (store/dynamo's Writer and the inbox)
// are each the one layer that retries their calls: each call is sent with
// the client's retryer switched off (WithoutClientRetries) and the package's
// loop sends it again after a full-jitter exponential backoff. Two layers
// would multiply the requests on the wire.
//
// Backoff ceilings, doubling from the base per failed attempt: a throttled
// call (a throttling error, or a transaction cancelled for throttling) waits
// up to ThrottleBase·2^n, at most ThrottleMax, so a table out of capacity
// gets time to recover; any other retried failure (server error, lost
// response, transaction conflict) up to RetryBase·2^n, at most RetryMax.
const (
	RetryBase    = 25 * time.Millisecond
	RetryMax     = 2 * time.Second
	ThrottleBase = 100 * time.Millisecond
	ThrottleMax  = 5 * time.Second
)

// WithoutClientRetries is the per-call option that switches the client's
// retryer off for one call. It replaces the retryer whatever the client was
// configured with (RetryMaxAttempts, RetryMode, a custom Retryer).
func WithoutClientRetries(o *dynamodb.Options) {
	o.Retryer = aws.NopRetryer{}
	o.RetryMaxAttempts = 0
}

// TxCeiling is the backoff ceiling after failed transaction attempt
// (0-based): ThrottleBase/ThrottleMax when it was throttled,
// RetryBase/RetryMax otherwise.
func TxCeiling(attempt int, throttled bool) time.Duration {
	if throttled {
		return Ceiling(attempt, ThrottleBase, ThrottleMax)
	}
	return Ceiling(attempt, RetryBase, RetryMax)
}

// Backoff returns a full-jitter exponential delay for retry attempt
// (0-based): uniform in [0, Ceiling(attempt, base, max)).
func Backoff(attempt int, base, max time.Duration) time.Duration {
	return FullJitter(Ceiling(attempt, base, max))
}

// Ceiling is the backoff ceiling of retry attempt (0-based): base·2^attempt,
// at most max.
func Ceiling(attempt int, base, max time.Duration) time.Duration {
	if attempt >= 30 {
		return max
	}
	return min(max, base<<max0(attempt))
}

func max0(n int) int { return max(n, 0) }

// FullJitter returns a delay uniform in [0, d).
func FullJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// Sleep waits d or until ctx is done, and then returns ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
