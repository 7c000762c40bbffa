package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/metrics"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/server"
)

const stallConfig = `
version: "1"
policies:
  - name: api
    layers:
      - {name: per-user, algorithm: fixed_window, limit: 100, window: 1h, dimension: user}
  - name: shadowed
    layers:
      - {name: per-user, algorithm: fixed_window, limit: 100, window: 1h, dimension: user}
      - {name: trial, algorithm: fixed_window, limit: 1, window: 1h, dimension: user, shadow: true}
`

// counterValue returns the value of the counter named name in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestBatchWaitsForAStalledRedisOnce: a batch of 8 checks with Redis
// stalled (SIGSTOP: connections open, nothing answers) waits for Redis
// once: the first check's call times out after the fallback budget and
// counts one Redis failure, and the other checks are decided by their
// failure mode at once (reason timeout). Each check used to wait a budget
// of its own and count a failure of its own (8 for the batch, toward
// opening the breaker). Likewise a check whose shadow layer denied is
// decided again without Redis. Both HTTP engines; the breaker is kept
// from opening so that only the request's sharing keeps checks from
// Redis.
func TestBatchWaitsForAStalledRedisOnce(t *testing.T) {
	rs := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr, ContextTimeoutEnabled: true})
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
	failures := func() float64 { return counterValue(t, reg, "rate_limit_redis_errors_total") }
	engines := []*engineEnv{
		serveEngine(t, server.NetHTTP, stallConfig, fb, nil),
		serveEngine(t, server.FastHTTP, stallConfig, fb, nil),
	}
	const n = 8
	batch := func(e *engineEnv, user string) server.BatchResponse {
		t.Helper()
		items := make([]string, n)
		for i := range items {
			items[i] = fmt.Sprintf(`{"policy":"api","identity":{"user":"%s-%d"}}`, user, i)
		}
		a := send(t, http.DefaultClient, e.url, exchange{method: "POST", path: "/v1/check/batch",
			body: `{"requests":[` + strings.Join(items, ",") + `]}`})
		var out server.BatchResponse
		if err := json.Unmarshal([]byte(a.body), &out); err != nil || a.status != 200 || len(out.Results) != n {
			t.Fatalf("batch: %d %s (%v)", a.status, a.body, err)
		}
		return out
	}
	for i, e := range engines {
		for j, r := range batch(e, fmt.Sprint("healthy", i)).Results {
			if r.CheckResponse == nil || r.Degraded || !r.Allowed {
				t.Fatalf("engine %d, healthy batch item %d: %+v %+v; want allowed by Redis", i, j, r.CheckResponse, r.Error)
			}
		}
	}
	if f := failures(); f != 0 {
		t.Fatalf("%v Redis failures on a healthy Redis", f)
	}

	if err := posix.Kill(rs.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = posix.Kill(rs.Pid, posix.SIGCONT) })
	for i, e := range engines {
		before := failures()
		start := time.Now()
		out := batch(e, fmt.Sprint("stalled", i))
		took := time.Since(start)
		failed := failures() - before
		reasons := make([]string, n)
		for j, r := range out.Results {
			if r.CheckResponse == nil || !r.Degraded || r.FailureMode != "local" || !r.Allowed {
				t.Fatalf("engine %d, batch item %d with Redis stalled: %+v %+v; want allowed by the local fallback", i, j, r.CheckResponse, r.Error)
			}
			reasons[j] = r.DegradedReason
			if j > 0 && r.DegradedReason != "timeout" {
				t.Errorf("engine %d, batch item %d: degraded reason %q, want timeout (the first item's call used the budget)", i, j, r.DegradedReason)
			}
		}
		t.Logf("engine %d: a batch of %d checks with Redis stalled took %v (budget %v), reasons %v, %v Redis calls failed", i, n, took, budget, reasons, failed)
		if failed != 1 {
			t.Fatalf("engine %d: %v Redis calls failed for a batch of %d checks with Redis stalled; want 1", i, failed, n)
		}

		// A check whose shadow layer denies (cost 2 over its limit of 1)
		// is decided again without that layer: not on Redis again.
		before = failures()
		a := send(t, http.DefaultClient, e.url, exchange{method: "POST", path: "/v1/check",
			body: fmt.Sprintf(`{"policy":"shadowed","identity":{"user":"shadow%d"},"cost":2}`, i)})
		var resp server.CheckResponse
		if err := json.Unmarshal([]byte(a.body), &resp); err != nil || a.status != 200 || !resp.Degraded || !resp.Allowed {
			t.Fatalf("engine %d, shadowed check with Redis stalled: %d %s (%v); want allowed by the local fallback", i, a.status, a.body, err)
		}
		if failed := failures() - before; failed != 1 {
			t.Fatalf("engine %d: %v Redis calls failed for a check decided again without its shadow layer; want 1", i, failed)
		}
	}
}
