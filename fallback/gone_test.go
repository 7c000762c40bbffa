package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/deadline"
)

// TestGoneCallerDoesNotTripBreaker: a decision whose client went away
// while its call waited in the Redis store's queue comes back with the
// queue's error (store unavailable, wrapping context.Canceled) under a
// context that has not ended: serve's --decision-timeout is a shared
// deadline, which does not end with the request's context. That is the
// caller's doing, not the primary's: the breaker (threshold 1) stays
// closed, nothing is decided by the fallback, and the caller gets the
// error. Before, each such call counted as a Redis failure, so clients
// hanging up could open a healthy Redis's breaker.
func TestGoneCallerDoesNotTripBreaker(t *testing.T) {
	f := newFixture(t, fallback.Options{Breaker: fallback.BreakerOptions{FailureThreshold: 1}})
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 10, time.Hour))
	f.primary.set(fmt.Errorf("%w: %w (while waiting to be sent)", floodgate.ErrStoreUnavailable, context.Canceled), false, false)
	ticks := deadline.New()
	for i := range 3 {
		req, cancel := context.WithCancel(context.Background())
		ctx, stop := ticks.WithTimeout(req, time.Now(), time.Second)
		cancel() // the client hangs up; ctx, a shared deadline, goes on
		if ctx.Err() != nil {
			t.Fatalf("the shared deadline ended with its parent (%v): the test no longer shows the case", ctx.Err())
		}
		_, err := f.lim.Allow(ctx, p, fmt.Sprint("u", i))
		stop()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("decision %d of a gone caller: err %v, want the queue's error wrapping context.Canceled", i, err)
		}
	}
	if st := f.store.BreakerState(); st != fallback.BreakerClosed {
		t.Errorf("breaker %v after three gone callers, want closed: their calls were counted against the primary", st)
	}
	f.rec.mu.Lock()
	n, observed := len(f.rec.fallbacks), f.rec.primary
	f.rec.mu.Unlock()
	if n != 0 {
		t.Errorf("gone callers were decided by the fallback: %v", f.rec.fallbacks)
	}
	if observed != 0 {
		// rate_limit_redis_errors_total and the latency histogram
		// (hangupwalk).
		t.Errorf("%d dropped calls observed as primary calls, want 0: Redis never saw them", observed)
	}
	// A real primary failure still counts.
	f.primary.set(fmt.Errorf("%w: connection refused", floodgate.ErrStoreUnavailable), false, false)
	if _, err := f.lim.Allow(context.Background(), p, "u9"); err != nil {
		t.Fatalf("a primary failure: %v, want a fallback decision", err)
	}
	if st := f.store.BreakerState(); st != fallback.BreakerOpen {
		t.Errorf("breaker %v after a primary failure at threshold 1, want open", st)
	}
}
