package envoyrls

import (
	"fmt"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/metrics"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// TestStalledRedisIsWaitedForOncePerRequest: with Redis stalled (SIGSTOP:
// connections open, nothing answers), a request whose descriptors are
// decided one by one (CountEachDescriptor) waits for Redis once: the
// first descriptor's call times out after the fallback budget and counts
// one Redis failure, the others are decided by the failure mode at once
// (reason timeout). Each used to wait a budget of its own and count a
// failure of its own: 8 for 8 descriptors. Likewise, all-or-nothing, a
// decision repeated without the shadow descriptor that denied does not
// go to Redis again. The breaker is kept from opening so that only the
// request's sharing keeps decisions from Redis.
func TestStalledRedisIsWaitedForOncePerRequest(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	primary, err := redisstore.New(c, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	obs, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const budget = 100 * time.Millisecond
	fb, err := fallback.New(primary, local, fallback.Options{Budget: budget, Observer: obs,
		Breaker: fallback.BreakerOptions{FailureThreshold: 1000, FailureRate: -1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fb.Close)
	failures := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "rate_limit_redis_errors_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatal("no rate_limit_redis_errors_total")
		return 0
	}
	each := newRig(t, fb, apiConfig, Options{CountEachDescriptor: true, Clock: time.Now})
	together := newRig(t, fb, apiConfig, Options{Clock: time.Now})
	const n = 8
	users := func(prefix string) []*ratelimitv3.RateLimitDescriptor {
		ds := make([]*ratelimitv3.RateLimitDescriptor, n)
		for i := range ds {
			ds[i] = desc(fmt.Sprintf("user=%s-%d", prefix, i))
		}
		return ds
	}
	if resp := each.call(t, request("api", users("healthy")...)); resp.GetOverallCode() != ok {
		t.Fatalf("healthy: %v", resp)
	} else {
		wantNotDegraded(t, "healthy", resp)
	}
	if f := failures(); f != 0 {
		t.Fatalf("%v Redis failures on a healthy Redis", f)
	}

	if err := posix.Kill(srv.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = posix.Kill(srv.Pid, posix.SIGCONT) })
	start := time.Now()
	resp := each.call(t, request("api", users("stalled")...))
	took := time.Since(start)
	failed := failures()
	t.Logf("%d descriptors decided one by one with Redis stalled: %v (budget %v), degraded %q, %v Redis calls failed",
		n, took, budget, headers(resp)["X-Floodgate-Degraded"], failed)
	if resp.GetOverallCode() != ok || headers(resp)["X-Floodgate-Degraded"] == "" {
		t.Fatalf("with Redis stalled: %v; want OK, degraded", resp)
	}
	if failed != 1 {
		t.Fatalf("%v Redis calls failed for %d descriptors decided one by one with Redis stalled; want 1", failed, n)
	}

	// The shadow descriptor (1 per minute) denies 2 hits: the user's is
	// decided again without it, not on Redis again.
	req := request("api", desc("user=shadowed"), desc("shadow=x"))
	req.HitsAddend = 2
	resp = together.call(t, req)
	if resp.GetOverallCode() != ok || headers(resp)["X-Floodgate-Degraded"] == "" {
		t.Fatalf("shadowed request with Redis stalled: %v; want OK, degraded", resp)
	}
	if f := failures() - failed; f != 1 {
		t.Fatalf("%v Redis calls failed for a decision repeated without its shadow descriptor; want 1", f)
	}
}
