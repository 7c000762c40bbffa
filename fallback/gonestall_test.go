package fallback_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/deadline"
)

// TestStalledRedisWithGoneClientsOpensBreaker: Redis stalled (the primary
// answers nothing until the call's deadline: a real failure) while every
// client has already gone, under serve's --decision-timeout, a shared
// deadline made from the request's context that does not end with it.
// The calls were sent and failed: the breaker (threshold 1) opens. With
// the client's departure read as the caller's doing, HTTP clients that
// all gave up before --fallback-budget kept the breaker closed on a
// stalled Redis, every decision waiting out the budget (review11: 0 of
// about 780 short-timeout requests answered in 3 s, against 13,600 and
// more before).
func TestStalledRedisWithGoneClientsOpensBreaker(t *testing.T) {
	f := newFixture(t, fallback.Options{Breaker: fallback.BreakerOptions{FailureThreshold: 1}})
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 10, time.Hour))
	f.primary.set(nil, false, true) // hangs until the call's deadline
	ticks := deadline.New()
	req, cancel := context.WithCancel(context.Background())
	ctx, stop := ticks.WithTimeout(req, time.Now(), time.Minute)
	defer stop()
	cancel() // the client has gone; the shared deadline goes on
	for i := range 3 {
		_, _ = f.lim.Allow(ctx, p, fmt.Sprint("u", i))
	}
	if st := f.store.BreakerState(); st != fallback.BreakerOpen {
		t.Errorf("breaker %v after calls that a stalled Redis never answered (threshold 1), want open", st)
	}
	if n := f.primary.calls.Load(); n != 1 {
		t.Errorf("%d calls reached the stalled primary, want 1 (then the open breaker)", n)
	}
}
