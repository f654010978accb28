package dynamo

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff returns a full-jitter exponential delay for retry attempt (0-based):
// uniform in [0, ceiling(attempt, base, max)).
func backoff(attempt int, base, max time.Duration) time.Duration {
	return fullJitter(ceiling(attempt, base, max))
}

// ceiling is the backoff ceiling of retry attempt (0-based): base*2^attempt,
// at most max.
func ceiling(attempt int, base, max time.Duration) time.Duration {
	if attempt >= 30 {
		return max
	}
	return min(max, base<<attempt)
}

// fullJitter returns a delay uniform in [0, d).
func fullJitter(d time.Duration) time.Duration {
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
