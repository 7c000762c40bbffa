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
	"github.com/floodgate-rl/floodgate/memstore"
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

// cancelThenStall is a primary that stands for a stalled Redis while the
// caller gives up: it cancels the caller's context once the call is
// sent, then answers nothing until the call's own bound.
type cancelThenStall struct{ cancel context.CancelFunc }

func (c cancelThenStall) Decide(ctx context.Context, _ int64, _ []floodgate.Layer, _ []floodgate.Result) error {
	c.cancel()
	<-ctx.Done()
	return fmt.Errorf("%w: waiting for reply: %w", floodgate.ErrIndeterminate, ctx.Err())
}

// TestStalledRedisWithCancellingCallersOpensBreaker: gRPC callers with a
// deadline of their own (longer than the budget: the call is bounded by
// the budget, not by the caller's context) cancel while their call waits
// on a stalled Redis, as Envoy does when the downstream request is reset.
// The calls were sent and failed by their own bound: the breaker
// (threshold 1) opens. With a cancelled caller context read as the
// caller's doing, it stayed closed (hangupwalk: 1,200 calls with 20 ms
// deadlines cancelled at 10 ms, none answered by the open breaker).
func TestStalledRedisWithCancellingCallersOpensBreaker(t *testing.T) {
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := fallback.New(cancelThenStall{cancel}, local, fallback.Options{Breaker: fallback.BreakerOptions{FailureThreshold: 1}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(store, floodgate.Options{Prefix: "fb"})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 10, time.Hour))
	_, _ = lim.Allow(req, p, "u1")
	if req.Err() == nil {
		t.Fatal("the caller's context was not cancelled: the test no longer shows the case")
	}
	if st := store.BreakerState(); st != fallback.BreakerOpen {
		t.Errorf("breaker %v after a call a stalled Redis never answered, its caller gone meanwhile (threshold 1), want open", st)
	}
}

// TestShortBoundCancellingCallerOpensBreaker: as
// TestStalledRedisWithCancellingCallersOpensBreaker, with the caller's
// deadline so close (Envoy's 20 ms) that the call's bound, four fifths
// of it, is below the 16 ms a shared deadline needs. The call had a
// timer of its own made from the caller's context, so the caller's
// cancellation ended it: the primary's error wrapped context.Canceled,
// and the breaker (threshold 1) stayed closed (lonecancel). The call now
// ends by its own bound, which the breaker counts.
func TestShortBoundCancellingCallerOpensBreaker(t *testing.T) {
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req, cancel := context.WithTimeout(context.Background(), 18*time.Millisecond)
	defer cancel()
	store, err := fallback.New(cancelThenStall{cancel}, local, fallback.Options{Breaker: fallback.BreakerOptions{FailureThreshold: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var o fallback.Outcome
	lim, err := floodgate.New(store, floodgate.Options{Prefix: "fb"})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t)(floodgate.NewFixedWindow("api", 10, time.Hour))
	_, err = lim.Allow(fallback.NewContext(req, &o), p, "u1")
	if !errors.Is(req.Err(), context.Canceled) {
		t.Fatalf("the caller's context ended with %v, want Canceled: the test no longer shows the case", req.Err())
	}
	if st := store.BreakerState(); st != fallback.BreakerOpen {
		t.Errorf("breaker %v after a call a stalled Redis never answered, its caller gone meanwhile (threshold 1), want open; Allow: %v, outcome %+v", st, err, o)
	}
}
