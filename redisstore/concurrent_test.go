package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/vectors"
)

// race fires n concurrent requests of cost 1 on key under p at one instant
// (released together by a barrier) and returns how many were allowed.
func race(t *testing.T, e *env, p floodgate.Policy, key string, now int64, n int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			<-start
			r, err := e.one(ctx, now, p, key, 1)
			if err != nil {
				errs <- err
				return
			}
			if r.Allowed {
				allowed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return int(allowed.Load())
}

// testConcurrent is the lesson's proof, for every algorithm: an identity at
// 990 of 1000 per hour, 200 concurrent requests, exactly 10 allowed, 20
// times over with fresh identities; then 1000 concurrent requests against
// 100 per hour, exactly 100 allowed. One fixed timestamp per round, so no
// bucket refills during it.
func testConcurrent(t *testing.T, e *env, rounds int) {
	for _, p := range allAlgorithms(t, 1000, time.Hour) {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			for round := range rounds {
				now := vectors.T0.UnixMicro() + int64(round)*1000
				key := e.key(p, fmt.Sprintf("user-%d", round))
				r, err := e.one(context.Background(), now, p, key, 990)
				if err != nil || !r.Allowed || r.Remaining != 10 {
					t.Fatalf("round %d: preset to 990: %+v, %v", round, r, err)
				}
				if got := race(t, e, p, key, now, 200); got != 10 {
					t.Fatalf("round %d: %d of 200 concurrent requests allowed at 990/1000, want exactly 10", round, got)
				}
			}
			e.noImmortalKeys(t)
		})
	}
	for _, p := range allAlgorithms(t, 100, time.Hour) {
		t.Run(p.Algorithm.String()+"-1000-callers", func(t *testing.T) {
			if got := race(t, e, p, e.key(p, "crowd"), vectors.T0.UnixMicro(), 1000); got != 100 {
				t.Fatalf("%d of 1000 concurrent requests allowed at limit 100, want exactly 100", got)
			}
			e.noImmortalKeys(t)
		})
	}
}

// TestConcurrent runs the concurrency proof on a standalone Redis, with a
// Store of each state format.
func TestConcurrent(t *testing.T) {
	forEachFormat(t, func(t *testing.T, e *env) { testConcurrent(t, e, 20) })
}
