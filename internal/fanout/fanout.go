// Package fanout runs one function over 0..n-1 with a bound on how many
// calls run at once: the one bounded fan-out of the engine's sweep and of
// store/dynamo (bucket probes, tombstone batches, online BucketCount
// changes).
//
// It is here rather than golang.org/x/sync/errgroup (SetLimit) for two
// reasons: the library module does not require golang.org/x/sync, and every
// module that requires the library would have to add it; and errgroup's Go
// keeps starting the remaining calls after the first error or after ctx
// ends, where Each stops starting them.
package fanout

import (
	"context"
	"sync"
)

// Each calls f(ctx, i) for i = 0, 1, ..., n-1, in that order of starting,
// with at most limit calls running at once (limit < 1 counts as 1), and
// waits for every call it started.
//
// The first call to return an error cancels the context the others were
// given; Each then starts no further call and returns that error. When ctx
// ends first, Each starts no further call either and returns ctx.Err()
// (also when ctx ended after the last call was started). A caller that
// needs every call made whatever happens (each recording its own failure)
// passes a context that does not end (context.WithoutCancel) and an f that
// returns nil.
func Each(ctx context.Context, n, limit int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		slots = make(chan struct{}, max(limit, 1))
	)
	for i := range n {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := f(ctx, i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
