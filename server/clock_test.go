package server_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/server"
)

// TestQuotasAndLeasesFollowTheLimitersClock: a Server given no Clock
// stamps quotas and leases with its limiter's clock (the one its checks
// are stamped with, disciplined to Redis in serve), not with time.Now.
// The limiter's clock here is in 2030: a lease acquired expires 30 s
// after it, and a reservation falls in its day. Before, the Server
// defaulted to time.Now: the lease expired 30 s after this machine's
// time and the reservation fell in today's period, while the checks of
// the same server were stamped in 2030.
func TestQuotasAndLeasesFollowTheLimitersClock(t *testing.T) {
	const yaml = `
policies:
  - name: p
    layers:
      - {name: minute, algorithm: fixed_window, limit: 10, window: 1m, dimension: user}
quotas:
  - {name: tokens, limit: 1000, period: day, timezone: UTC, dimension: user, hold: 10m}
concurrency:
  - {name: jobs, limit: 2, lease_ttl: 30s, dimension: user}
`
	at := time.Date(2030, 1, 2, 3, 4, 5, 500_000_000, time.UTC)
	clock := func() time.Time { return at }
	holder, err := config.NewHolder(parse(t, yaml))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(memStore(t), floodgate.Options{Prefix: uniquePrefix(t), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(lim, holder, server.Options{DecisionTimeout: 5 * time.Second}) // no Clock
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	e := &env{t: t, url: hs.URL, holder: holder, srv: srv, lim: lim}

	if got, want := e.check("p", id("user", "u"), 1).ResetAt, "2030-01-02T03:05:00Z"; got != want {
		t.Fatalf("check: reset_at %s, want %s (the limiter's clock)", got, want)
	}

	r := e.post("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "jobs", Identity: id("user", "u")})
	var acq server.AcquireResponse
	if err := json.Unmarshal(r.body, &acq); err != nil || r.status != 200 || !acq.Acquired {
		t.Fatalf("acquire: %d %s %v", r.status, r.body, err)
	}
	if want := "2030-01-02T03:04:35.500Z"; acq.ExpiresAt != want {
		t.Errorf("acquire: expires_at %s, want %s (the limiter's clock plus lease_ttl)", acq.ExpiresAt, want)
	}
	r = e.post("/v1/concurrency/renew", server.LeaseRequest{Limiter: "jobs", Identity: id("user", "u"), LeaseID: acq.LeaseID})
	var renew server.RenewResponse
	if err := json.Unmarshal(r.body, &renew); err != nil || r.status != 200 {
		t.Fatalf("renew: %d %s %v", r.status, r.body, err)
	}
	if want := "2030-01-02T03:04:35.500Z"; renew.ExpiresAt != want {
		t.Errorf("renew: expires_at %s, want %s", renew.ExpiresAt, want)
	}

	estimate := int64(5)
	status, q := e.quotaCall("/v1/quota/reserve", server.QuotaReserveRequest{Quota: "tokens", Identity: id("user", "u"), RequestID: "r1", Estimate: &estimate})
	if status != 200 || !q.Allowed {
		t.Fatalf("reserve: %d %+v", status, q)
	}
	if q.Period.Start != "2030-01-02T00:00:00Z" || q.Period.End != "2030-01-03T00:00:00Z" {
		t.Errorf("reserve: period %+v, want the limiter's day, 2030-01-02", q.Period)
	}
}
