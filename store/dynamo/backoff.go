package dynamo

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff returns a full-jitter exponential delay for retry attempt (0-based):
// uniform in [0, min(max, base*2^attempt)).
func backoff(attempt int, base, max time.Duration) time.Duration {
	d := max
	if attempt < 30 {
		d = min(max, base<<attempt)
	}
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
