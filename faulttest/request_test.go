package faulttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// redisErrors returns rate_limit_redis_errors_total: the failed calls to
// Redis (ObservePrimary).
func (r *rig) redisErrors() float64 {
	r.t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "rate_limit_redis_errors_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	r.t.Fatal("no rate_limit_redis_errors_total")
	return 0
}

// TestRequestSharesTheBudgetWhenRedisStalls: the decisions of one request
// (fallback.NewRequestContext: a batch of checks, an Envoy request's
// descriptors decided one by one) wait for a stalled Redis (SIGSTOP) once.
// The first call times out after its budget and is counted as one Redis
// failure; the other decisions are taken by the failure mode at once,
// reason timeout, without calling Redis, and so is a Store.Call of the
// request (a tier lookup). Each used to wait a budget of its own and
// count a failure of its own: 8 for 8 decisions. Decisions of separate
// requests still each ask Redis, and on a healthy Redis every decision of
// a request is Redis's.
func TestRequestSharesTheBudgetWhenRedisStalls(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t)
	// A breaker that does not open here: only the request's own sharing
	// keeps decisions from Redis.
	r := newRig(t, newClient(t, srv.Addr), fallback.Options{
		Breaker: fallback.BreakerOptions{FailureThreshold: 1000, FailureRate: -1},
	})
	p := policy(t, "batch", 100)
	r.waitCentral(p)
	const n = 8

	// Healthy: every decision of a request is Redis's.
	ctx, o := fallback.NewRequestContext(context.Background())
	for i := range n {
		if _, err := r.lim.Allow(ctx, p, fmt.Sprint("healthy-", i)); err != nil || o.Degraded {
			t.Fatalf("healthy decision %d of a request: outcome %+v, error %v; want Redis's", i, *o, err)
		}
	}

	resume := stopRedis(t, srv)
	before := r.redisErrors()
	ctx, o = fallback.NewRequestContext(context.Background())
	start := time.Now()
	reasons := make([]fallback.Reason, n)
	for i := range n {
		res, err := r.lim.Allow(ctx, p, fmt.Sprint("stalled-", i))
		if err != nil || !o.Degraded || o.Mode != fallback.ModeLocal || !res.Allowed {
			t.Fatalf("decision %d with Redis stalled: %+v, outcome %+v, error %v; want allowed by the local fallback", i, res, *o, err)
		}
		reasons[i] = o.Reason
		if i > 0 && (o.Reason != fallback.ReasonTimeout || !errors.Is(o.Err, fallback.ErrBudgetSpent)) {
			t.Errorf("decision %d: reason %v, error %v; want timeout, %v", i, o.Reason, o.Err, fallback.ErrBudgetSpent)
		}
	}
	failed := r.redisErrors() - before
	t.Logf("%d decisions of one request with Redis stalled: %v, reasons %v, %v Redis calls failed", n, time.Since(start), reasons, failed)
	if failed != 1 {
		t.Fatalf("%v Redis calls failed for the %d decisions of one request; want 1", failed, n)
	}
	called := false
	err := r.store.Call(ctx, "", func(context.Context) error { called = true; return nil })
	if called || !errors.Is(err, fallback.ErrBudgetSpent) {
		t.Fatalf("Call after the request's budget was spent: called %v, error %v; want %v without a call", called, err, fallback.ErrBudgetSpent)
	}

	// Separate requests are not one: each asks Redis.
	before = r.redisErrors()
	for i := range 2 {
		var o fallback.Outcome
		if _, err := r.lim.Allow(fallback.NewContext(context.Background(), &o), p, fmt.Sprint("alone-", i)); err != nil || !o.Degraded {
			t.Fatalf("lone decision %d with Redis stalled: outcome %+v, error %v", i, o, err)
		}
	}
	if failed := r.redisErrors() - before; failed != 2 {
		t.Fatalf("%v Redis calls failed for 2 separate decisions; want 2", failed)
	}
	resume()
	r.waitCentral(p)
}

// TestRequestRetriesFastFailures: a request's calls that fail at once
// (Redis killed: connection refused) take only the time they took from
// its budget, so each of its decisions still asks Redis, as a decision
// alone would: a failure that costs no wait does not give up on Redis for
// the rest of the request (a transient error, a connection reset, would
// otherwise degrade a whole batch).
func TestRequestRetriesFastFailures(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t)
	// One dial attempt: a refused connection fails at once (go-redis's
	// default retries the dial, 100 ms apart).
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	r := newRig(t, c, fallback.Options{
		Budget:  5 * time.Second, // far more than 8 refused dials take
		Breaker: fallback.BreakerOptions{FailureThreshold: 1000, FailureRate: -1},
	})
	p := policy(t, "fast", 100)
	r.waitCentral(p)
	srv.Kill()
	before := r.redisErrors()
	ctx, o := fallback.NewRequestContext(context.Background())
	const n = 8
	start := time.Now()
	for i := range n {
		if _, err := r.lim.Allow(ctx, p, fmt.Sprint("refused-", i)); err != nil || !o.Degraded || o.Reason != fallback.ReasonUnavailable {
			t.Fatalf("decision %d with Redis down: outcome %+v, error %v; want degraded, unavailable", i, *o, err)
		}
	}
	failed := r.redisErrors() - before
	t.Logf("%d decisions of one request with Redis refusing connections: %v, %v Redis calls failed", n, time.Since(start), failed)
	if failed != n {
		t.Fatalf("%v Redis calls failed for %d decisions of one request on a Redis refusing connections; want %d (each asks)", failed, n, n)
	}
}

// TestRequestCountsFailedCalls: a request's Store.Call call (a tier
// lookup) that fails without timing out is paid for by the request's
// budget, as a failed decision is. Here the lookup fails after 200 ms
// (Redis's BLPOP timeout: never sooner) with a budget of 100 ms: the
// request's later lookups and decisions are then taken at once
// (ErrBudgetSpent) without calling Redis. Before, only the decision the
// lookup served paid for it (SpendBudget) and every later check of the
// request looked its tier up again, so a batch on a Redis whose lookups
// failed slowly (go-redis redialling a refused connection) could wait one
// lookup per check: in one run of serve with --fallback-budget 300ms and
// Redis killed, a batch of 8 tiered checks took 0.47 s (4 unavailable,
// then the breaker opened). A new request asks Redis again.
func TestRequestCountsFailedCalls(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr)
	r := newRig(t, c, fallback.Options{
		Budget:  100 * time.Millisecond,
		Breaker: fallback.BreakerOptions{FailureThreshold: 1000, FailureRate: -1},
	})
	p := policy(t, "lookups", 100)
	r.waitCentral(p)
	errNoTier := errors.New("lookup failed")
	calls := 0
	lookup := func(ctx context.Context) error {
		calls++
		if err := c.BLPop(ctx, 200*time.Millisecond, t.Name()+":empty").Err(); !errors.Is(err, redis.Nil) {
			return err
		}
		return errNoTier
	}
	// What serve's tierFor does: the lookup, through the breaker, then
	// its time spent for the decision it serves.
	ctx, o := fallback.NewRequestContext(context.Background())
	lookupThenDecide := func(user string) error {
		t.Helper()
		start := time.Now()
		err := r.store.Call(ctx, "", lookup)
		fallback.SpendBudget(ctx, time.Since(start))
		if _, derr := r.lim.Allow(ctx, p, user); derr != nil {
			t.Fatalf("decision for %s: %v", user, derr)
		}
		return err
	}
	if err := lookupThenDecide("a"); !errors.Is(err, errNoTier) || !o.Degraded || o.Reason != fallback.ReasonTimeout {
		t.Fatalf("first check: lookup %v, outcome %+v; want the lookup's error and a degraded decision (timeout)", err, *o)
	}
	if err := lookupThenDecide("b"); !errors.Is(err, fallback.ErrBudgetSpent) || !o.Degraded || !errors.Is(o.Err, fallback.ErrBudgetSpent) {
		t.Fatalf("second check of the request: lookup %v, outcome %+v; want ErrBudgetSpent for both, without calling Redis", err, *o)
	}
	if calls != 1 {
		t.Fatalf("%d lookups made for one request; want 1", calls)
	}

	ctx, o = fallback.NewRequestContext(context.Background())
	if _, err := r.lim.Allow(ctx, p, "c"); err != nil || o.Degraded {
		t.Fatalf("a new request: outcome %+v, error %v; want Redis's decision", *o, err)
	}
	r.waitCentral(p)
}
