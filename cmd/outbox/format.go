package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// age renders a duration for a table: whole seconds, two units at most
// ("45s", "3m05s", "2h07m", "3d04h"); negative is "0s".
func age(d time.Duration) string {
	s := int64(max(d, 0) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// seconds is a duration in whole seconds for JSON (floor; negative is 0).
func seconds(d time.Duration) int64 { return int64(max(d, 0) / time.Second) }

// clip shortens s to n runes for a table cell; keepTail keeps the end
// (relay ids differ at their end), otherwise the start.
func clip(s string, n int, keepTail bool) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if keepTail {
		return "…" + string(r[len(r)-n+1:])
	}
	return string(r[:n-1]) + "…"
}

// timePtr is t in UTC, or nil when t is zero (JSON null: unknown).
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// bucketConcurrency bounds the reads in flight when a command looks at
// every bucket (the sweeper uses the same).
const bucketConcurrency = 16

// eachBucket calls fn(i, buckets[i]) for every bucket, at most
// bucketConcurrency at once; the first failure cancels the rest and is
// returned.
func eachBucket(ctx context.Context, buckets []int, fn func(ctx context.Context, i, bucket int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, bucketConcurrency)
	for i, b := range buckets {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, i, b); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
