package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// proxied starts a Redis and a Proxy in front of it, and returns a rig
// whose client goes through the proxy, plus a direct client's limiter for
// reading the central counters.
func proxied(t *testing.T, opts fallback.Options) (*rig, *Proxy, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	px, err := NewProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	return newRig(t, newClient(t, px.Addr()), opts), px, srv
}

// central returns a limiter deciding on srv directly (no proxy, no
// fallback) with r's key prefix, to peek at the central counters.
func (r *rig) central(srv *redistest.Server) *floodgate.Limiter {
	r.t.Helper()
	st, err := redisstore.New(newClient(r.t, srv.Addr), redisstore.Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	l, err := floodgate.New(st, floodgate.Options{Prefix: r.lim.Prefix()})
	if err != nil {
		r.t.Fatal(err)
	}
	return l
}

// TestLatencyAboveBudget slows every byte to and from Redis beyond the
// budget: each decision returns on its deadline and is taken locally; the
// breaker opens and probes; when the latency goes, counting is central
// again.
func TestLatencyAboveBudget(t *testing.T) {
	leakCheck(t)
	r, px, _ := proxied(t, fallback.Options{})
	const limit = 50
	p := policy(t, "api", limit)
	l := r.startLoad(p, 8, ids("user-", 4))
	time.Sleep(200 * time.Millisecond)
	px.SetDelay(4 * budget)
	time.Sleep(1500 * time.Millisecond)
	px.SetDelay(0)
	took := r.waitCentral(p)
	time.Sleep(200 * time.Millisecond)
	l.stop()

	if !r.watch.opened(fallback.DefaultPartition) || l.degraded.Load() == 0 {
		t.Fatal("latency above the budget neither opened the breaker nor degraded decisions")
	}
	// Commands sent before the deadline still ran on Redis after the
	// client gave up: Redis counted requests that were also counted
	// locally. That over-counts (denies early); it never over-admits.
	worst := l.report(fmt.Sprintf("latency %v above a %v budget for 1.5s (central again %v after it ended)", 4*budget, budget, took.Round(time.Millisecond)), limit)
	if worst > 2*limit {
		t.Fatalf("an identity was admitted %d times, above the 2×%d bound (central + local)", worst, limit)
	}
	r.checkCounted(l.degraded.Load() + r.probesDegraded())
	r.checkExact()
}

// TestBlackhole swallows every byte: connections stay open and nothing
// comes back, the worst case for a client without deadlines.
func TestBlackhole(t *testing.T) {
	leakCheck(t)
	r, px, _ := proxied(t, fallback.Options{})
	const limit = 50
	p := policy(t, "api", limit)
	l := r.startLoad(p, 8, ids("user-", 4))
	time.Sleep(200 * time.Millisecond)
	px.SetBlackhole(true)
	time.Sleep(1500 * time.Millisecond)
	px.SetBlackhole(false)
	took := r.waitCentral(p)
	time.Sleep(200 * time.Millisecond)
	l.stop()

	if !r.watch.opened(fallback.DefaultPartition) || l.degraded.Load() == 0 {
		t.Fatal("the black hole neither opened the breaker nor degraded decisions")
	}
	f := r.fallbacks()
	if f["indeterminate"]+f["timeout"] == 0 {
		t.Fatalf("fallbacks by reason %v: want timeouts or indeterminate calls", f)
	}
	worst := l.report(fmt.Sprintf("black hole for 1.5s (central again %v after it ended)", took.Round(time.Millisecond)), limit)
	if worst > 2*limit {
		t.Fatalf("an identity was admitted %d times, above the 2×%d bound", worst, limit)
	}
	r.checkCounted(l.degraded.Load() + r.probesDegraded())
	r.checkExact()
}

// TestResetAfterWriteIsNotRetried lets each command reach Redis and run,
// then resets the client's connection instead of delivering the reply:
// the outcome is indeterminate, decided locally, and never sent again
// (Redis's counter shows each request exactly once).
func TestResetAfterWriteIsNotRetried(t *testing.T) {
	leakCheck(t)
	r, px, srv := proxied(t, fallback.Options{Breaker: fallback.BreakerOptions{FailureThreshold: 1000, FailureRate: -1}})
	p := policy(t, "api", 10)
	// Make a connection and load the script first, so that the cut hits
	// the decision itself.
	if _, o, err := r.decide(context.Background(), p, "warm"); err != nil || o.Degraded {
		t.Fatalf("warm-up: %v %+v", err, o)
	}
	px.SetCutReplies("evalsha")
	for i := range 3 {
		res, o, err := r.decide(context.Background(), p, "u1")
		if err != nil || !res.Allowed || o.Reason != fallback.ReasonIndeterminate {
			t.Fatalf("request %d: %+v, outcome %+v, error %v; want admitted locally as indeterminate", i, res, o, err)
		}
	}
	px.SetCutReplies("")
	peek, err := r.central(srv).Peek(context.Background(), p, "u1")
	if err != nil {
		t.Fatal(err)
	}
	if peek.Remaining != 7 {
		t.Fatalf("Redis shows %d of 10 remaining after 3 cut requests, want 7: each ran once, none was retried", peek.Remaining)
	}
	if f := r.fallbacks(); f["indeterminate"] != 3 {
		t.Fatalf("fallbacks by reason %v, want indeterminate=3", f)
	}
	r.checkCounted(3)
	r.waitCentral(p)
	r.checkExact()
}
