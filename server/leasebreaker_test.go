package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/server"
)

const leaseLimits = `
version: "1"
tiers: [free, pro]
policies:
  - name: api
    layers:
      - {name: per-user, algorithm: fixed_window, limit: 5, window: 1h, dimension: user}
concurrency:
  - {name: jobs, limit: 1000, lease_ttl: 30s, dimension: user, tiers: {pro: {limit: 2000}}}
`

// leaseRig serves leaseLimits with decisions, quotas and leases on one
// private redis-server, through one fallback.Store, which is the
// server's Breaker, and tier assignments in Redis looked up through that
// breaker (as serve wires them).
type leaseRig struct {
	*env
	rs     *redistest.Server
	client *redis.Client
	fb     *fallback.Store
	tiers  string
}

func startLeaseRig(t *testing.T, decisionTimeout time.Duration) *leaseRig {
	t.Helper()
	st, rs := redisStore(t)
	client := rs.Client(t)
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := fallback.New(st, local, fallback.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fb.Close)
	tiers := uniquePrefix(t) + ":tiers"
	a, err := config.NewRedisAssignments(client, tiers, config.RedisAssignmentsOptions{Guard: fb.Call})
	if err != nil {
		t.Fatal(err)
	}
	qs, cs := redisQuotaLeases(t, client)
	e := start(t, leaseLimits, fb, func(o *server.Options) {
		o.QuotaStore, o.ConcurrencyStore = qs, cs
		o.Breaker, o.Breakers = fb, fb.BreakerStates
		o.Assignments = a
		o.DecisionTimeout = decisionTimeout
	})
	return &leaseRig{env: e, rs: rs, client: client, fb: fb, tiers: tiers}
}

// TestLeaseWorkloadKeepsTheBreakerClosed: a workload of lease calls only
// (no decisions), whose calls fail now and then (Redis stopped for one
// call at a time) with many successful acquires in between, keeps the
// breaker closed: a lease taken vouches for Redis as a decision does.
// Successes used to be neutral, so any ten failures, however far apart,
// opened the breaker, and every acquire and release then failed with 503
// store-unavailable on a healthy Redis.
func TestLeaseWorkloadKeepsTheBreakerClosed(t *testing.T) {
	rig := startLeaseRig(t, 200*time.Millisecond)
	u := id("user", "u1")
	acquire := func() reply {
		return rig.post("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "jobs", Identity: u})
	}
	const failures = 15 // more than the breaker's threshold of 10
	for i := range failures {
		for j := range 3 {
			r := acquire()
			var resp server.AcquireResponse
			if r.status != 200 || json.Unmarshal(r.body, &resp) != nil || !resp.Acquired {
				t.Fatalf("round %d, acquire %d on a healthy Redis: %d %s (breaker %v)", i, j, r.status, r.body, rig.fb.BreakerState())
			}
			if rel := rig.release("jobs", u, resp.LeaseID); !rel.Released {
				t.Fatalf("round %d: release %+v", i, rel)
			}
		}
		// One acquire with Redis stopped: it times out and counts one
		// failure toward opening the breaker.
		if err := posix.Kill(rig.rs.Pid, posix.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		r := acquire()
		if err := posix.Kill(rig.rs.Pid, posix.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusServiceUnavailable {
			t.Fatalf("round %d: acquire with Redis stopped: %d %s, want 503", i, r.status, r.body)
		}
	}
	if got := rig.fb.BreakerState(); got != fallback.BreakerClosed {
		t.Fatalf("breaker %v after %d scattered failures among %d successful acquires, want closed", got, failures, 3*failures)
	}
	if r := acquire(); r.status != 200 {
		t.Fatalf("acquire after the scattered failures: %d %s", r.status, r.body)
	}
}

// TestLeaseTierLookupWaitsForTheOperation: an acquire's tier lookup is
// bounded by the operation's decision timeout, not by the fallback's 50ms
// lookup budget: with Redis answering every command a few hundred
// milliseconds late (CLIENT PAUSE), the acquire waits and gets the
// identity's assigned tier, and no tier lookup fails. The lookup used to
// be cut at 50ms: the acquire got the default tier, and each such cut
// counted a failure toward opening the breaker.
func TestLeaseTierLookupWaitsForTheOperation(t *testing.T) {
	rig := startLeaseRig(t, 5*time.Second)
	if err := rig.client.HSet(ctxT(t), rig.tiers, "user=u1", "pro").Err(); err != nil {
		t.Fatal(err)
	}
	pauser := rig.rs.Client(t)
	// The pause outlasts the 50ms lookup budget many times over, and
	// the request's first Redis command (the tier lookup, not cached
	// yet) is sent after it began.
	if err := pauser.Do(ctxT(t), "CLIENT", "PAUSE", 400, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	_, resp := rig.acquire("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "jobs", Identity: id("user", "u1")})
	if !resp.Acquired || resp.Tier != "pro" || resp.Limit != 2000 {
		t.Fatalf("acquire with Redis slow: %+v, want acquired in tier pro (limit 2000)", resp)
	}
	if got := counterValue(t, rig.reg, "floodgate_tier_lookup_errors_total"); got != 0 {
		t.Fatalf("floodgate_tier_lookup_errors_total = %v with Redis slow but answering, want 0", got)
	}
	if got := rig.fb.BreakerState(); got != fallback.BreakerClosed {
		t.Fatalf("breaker %v, want closed", got)
	}
}

// TestLeaseReleaseAndRenewMetrics: releases and renewals are counted
// over HTTP by limiter and result.
func TestLeaseReleaseAndRenewMetrics(t *testing.T) {
	backends(t, limits, func(t *testing.T, e *env) {
		u := id("user", "u1")
		_, a := e.acquire("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "five", Identity: u})
		renew := func() int {
			return e.post("/v1/concurrency/renew", server.LeaseRequest{Limiter: "five", Identity: u, LeaseID: a.LeaseID}).status
		}
		if s := renew(); s != 200 {
			t.Fatalf("renew of a held lease: %d", s)
		}
		if rel := e.release("five", u, a.LeaseID); !rel.Released {
			t.Fatalf("release %+v", rel)
		}
		if rel := e.release("five", u, a.LeaseID); rel.Released {
			t.Fatalf("second release %+v", rel)
		}
		if s := renew(); s != http.StatusConflict {
			t.Fatalf("renew of a released lease: %d, want 409", s)
		}
		for _, c := range []struct{ name, result string }{
			{"floodgate_lease_releases_total", "released"},
			{"floodgate_lease_releases_total", "not_held"},
			{"floodgate_lease_renewals_total", "renewed"},
			{"floodgate_lease_renewals_total", "lost"},
		} {
			series := fmt.Sprintf(`%s{policy="five",result="%s"}`, c.name, c.result)
			if got, want := e.scrapeLine(series), series+" 1"; got != want {
				t.Errorf("/metrics: %q, want %q", got, want)
			}
		}
	})
}

// scrapeLine returns the line of GET /metrics that starts with series
// (name and labels, as Prometheus prints them), "" when there is none.
func (e *env) scrapeLine(series string) string {
	e.t.Helper()
	r := e.do("GET", "/metrics", "", nil)
	if r.status != 200 {
		e.t.Fatalf("GET /metrics: %d", r.status)
	}
	for line := range strings.Lines(string(r.body)) {
		if strings.HasPrefix(line, series+" ") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// TestLeaseReleasesWithBreakerOpenAreBounded: with Redis stopped and the
// breaker open, at most server.MaxOpenReleases lease releases are
// attempted at once; the others are answered 503 store-unavailable (the
// lease still held) at once. Every release was attempted: an outside
// walk saw 300 concurrent releases each wait out the decision timeout
// (1.0-1.65 s), every pooled connection busy, and the goroutines grow
// from 17 to 279.
func TestLeaseReleasesWithBreakerOpenAreBounded(t *testing.T) {
	rig := startLeaseRig(t, 300*time.Millisecond)
	if err := posix.Kill(rig.rs.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = posix.Kill(rig.rs.Pid, posix.SIGCONT) })
	for i := range 12 {
		rig.post("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "jobs", Identity: id("user", fmt.Sprint("o", i))})
	}
	if got := rig.fb.BreakerState(); got != fallback.BreakerOpen {
		t.Fatalf("breaker %v after 12 acquires with Redis stopped, want open", got)
	}

	const releases = 20
	var wg sync.WaitGroup
	type answer struct {
		status int
		kind   string
		took   time.Duration
	}
	answers := make([]answer, releases)
	for i := range releases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			r := rig.post("/v1/concurrency/release", server.LeaseRequest{Limiter: "jobs", Identity: id("user", fmt.Sprint("r", i)), LeaseID: fmt.Sprint("MADEUP", i)})
			answers[i] = answer{r.status, problemOf(t, r).Type, time.Since(start)}
		}()
	}
	wg.Wait()
	// Counted by kind, not by time: a release refused by the bound is
	// answered store-unavailable (the breaker's refusal), one attempted
	// waits out the decision timeout against the stopped Redis and is
	// answered store-timeout or store-indeterminate. A release started
	// late, once an attempt ended, may be attempted too: the bound is
	// on releases in flight, so at most twice it here.
	refused, attempted := 0, 0
	for _, a := range answers {
		switch {
		case a.status != http.StatusServiceUnavailable:
			t.Fatalf("release with Redis stopped: %+v, want a 503", a)
		case a.kind == server.ProblemTypePrefix+"store-unavailable":
			refused++
		case a.kind == server.ProblemTypePrefix+"store-timeout", a.kind == server.ProblemTypePrefix+"store-indeterminate":
			attempted++
		default:
			t.Fatalf("release with Redis stopped: %+v, want 503 store-unavailable, store-timeout or store-indeterminate", a)
		}
	}
	if attempted == 0 || attempted > 2*server.MaxOpenReleases {
		t.Fatalf("%d of %d concurrent releases with the breaker open were attempted on Redis (%d refused at once), want 1..%d (server.MaxOpenReleases in flight): %+v", attempted, releases, refused, 2*server.MaxOpenReleases, answers)
	}
}
