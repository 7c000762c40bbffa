package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestRedisDownAtStartup starts the limiter while Redis is down: every
// decision is taken locally within its budget, the breaker opens and
// stops the calls, and once Redis starts, counting is central again
// without any action.
func TestRedisDownAtStartup(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t)
	srv.Kill()
	r := newRig(t, newClient(t, srv.Addr), fallback.Options{
		Modes: map[string]fallback.Mode{"login": fallback.ModeClosed, "bulk": fallback.ModeOpen},
	})
	p := policy(t, "api", 10)

	// Per-policy modes: login fails closed, bulk fails open.
	login, bulk := policy(t, "login", 5), policy(t, "bulk", 1)
	res, o, err := r.decide(context.Background(), login, "alice")
	if err != nil || res.Allowed || res.RetryAfter <= 0 || o.Mode != fallback.ModeClosed {
		t.Fatalf("login with Redis down: %+v, outcome %+v, error %v; want denied with a retry hint", res, o, err)
	}
	for range 3 {
		res, o, err = r.decide(context.Background(), bulk, "bob")
		if err != nil || !res.Allowed || o.Mode != fallback.ModeOpen {
			t.Fatalf("bulk with Redis down: %+v, outcome %+v, error %v; want admitted", res, o, err)
		}
	}

	admitted, degraded := 0, int64(4)
	for i := range 40 {
		res, o, err := r.decide(context.Background(), p, "u1")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if !o.Degraded || o.Mode != fallback.ModeLocal {
			t.Fatalf("request %d with Redis down: outcome %+v, want a local decision", i, o)
		}
		degraded++
		if res.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("local mode admitted %d of 40 under a limit of 10", admitted)
	}
	if !r.watch.opened(fallback.DefaultPartition) {
		t.Fatal("the breaker never opened with Redis down")
	}
	// Before the breaker opens, calls fail on refused connections (which
	// go-redis keeps redialling until the budget ends: "timeout"); then
	// the breaker keeps them from Redis.
	f := r.fallbacks()
	if f["unavailable"]+f["timeout"] == 0 || f["breaker_open"] == 0 {
		t.Fatalf("fallbacks by reason %v: want unavailable or timeout (before the breaker opened), then breaker_open", f)
	}
	r.checkCounted(degraded)

	srv.Restart(t)
	took := r.waitCentral(p)
	t.Logf("MEASURE down at start-up: %d decisions all degraded (%d admitted for a limit of 10); central again %v after restart", degraded, admitted, took.Round(time.Millisecond))
	r.checkExact()
}

// TestKillUnderLoad kills Redis with SIGKILL under concurrent load and
// restarts it on the same port. Redis loses its counters (it persists
// nothing), and the identities were counted locally meanwhile: the
// measured over-admission is what the documentation quotes.
func TestKillUnderLoad(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t)
	r := newRig(t, newClient(t, srv.Addr), fallback.Options{})
	const limit = 50
	p := policy(t, "api", limit)
	l := r.startLoad(p, 8, ids("user-", 4))

	time.Sleep(300 * time.Millisecond)
	srv.Kill()
	killedAt := time.Now()
	time.Sleep(time.Second)
	srv.Restart(t)
	down := time.Since(killedAt)
	took := r.waitCentral(p)
	time.Sleep(300 * time.Millisecond)
	l.stop()

	if l.degraded.Load() == 0 || !r.watch.opened(fallback.DefaultPartition) {
		t.Fatalf("%d degraded decisions, breaker opened %v: the kill went unnoticed", l.degraded.Load(), r.watch.opened(fallback.DefaultPartition))
	}
	worst := l.report(fmt.Sprintf("kill -9 under load (down %v, central again %v after restart)", down.Round(time.Millisecond), took.Round(time.Millisecond)), limit)
	// Bound: the primary before the kill, the local store while down, and
	// the restarted (empty) primary can each admit the limit once.
	if worst > 3*limit {
		t.Fatalf("an identity was admitted %d times, above the 3×%d bound", worst, limit)
	}
	r.checkCounted(l.degraded.Load() + r.probesDegraded())
	r.checkExact()
}

// TestLongOutageRecoversWithProbes: with the breaker's own defaults (open
// period doubling from 1 s up to 30 s) an 8 s outage used to leave the
// breaker open several seconds after Redis was back. With background
// probes (fallback.RedisProbe) central counting returns about a second
// after Redis does, however long it was down, and while it is down no
// request reaches it.
func TestLongOutageRecoversWithProbes(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	r := newRig(t, client, fallback.Options{Probe: fallback.RedisProbe(client, fmt.Sprintf("ft%d:probe", time.Now().UnixNano())),
		Breaker: fallback.BreakerOptions{OpenFor: time.Second, MaxOpenFor: 30 * time.Second}})
	t.Cleanup(r.store.Close)
	const limit = 50
	p := policy(t, "api", limit)
	l := r.startLoad(p, 4, ids("user-", 4))
	time.Sleep(300 * time.Millisecond)
	srv.Kill()
	time.Sleep(8 * time.Second)
	srv.Restart(t)
	took := r.waitCentral(p)
	l.stop()
	t.Logf("MEASURE kill -9, 8 s outage, background probes: central again %v after restart", took.Round(time.Millisecond))
	if h := r.watch.history()[fallback.DefaultPartition]; len(h) != 3 || h[1] != fallback.BreakerOpen || h[2] != fallback.BreakerClosed {
		t.Fatalf("breaker history %v, want closed, open, closed (no half-open trial by requests)", h)
	}
	if took > 5*time.Second {
		t.Fatalf("central counting %v after Redis came back, want about 1 s (bound 5 s)", took)
	}
	r.checkExact()
}
