package server_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/server"
)

func (e *env) acquire(path string, req server.AcquireRequest) (int, server.AcquireResponse) {
	e.t.Helper()
	r := e.post(path, req)
	var resp server.AcquireResponse
	if (r.status != 200 && r.status != 429) || json.Unmarshal(r.body, &resp) != nil {
		e.t.Fatalf("acquire: %d %s", r.status, r.body)
	}
	return r.status, resp
}

func (e *env) release(limiter string, ident map[string]string, lease string) server.ReleaseResponse {
	e.t.Helper()
	r := e.post("/v1/concurrency/release", server.LeaseRequest{Limiter: limiter, Identity: ident, LeaseID: lease})
	var resp server.ReleaseResponse
	if r.status != 200 || json.Unmarshal(r.body, &resp) != nil {
		e.t.Fatalf("release: %d %s", r.status, r.body)
	}
	return resp
}

// TestConcurrencyAcquireExactLimit: 50 concurrent acquires at a limit of 5
// take exactly 5 distinct leases; releasing one frees exactly one slot;
// renewing keeps a lease, and a released lease cannot be renewed.
func TestConcurrencyAcquireExactLimit(t *testing.T) {
	backends(t, limits, func(t *testing.T, e *env) {
		u := id("user", "u1")
		var mu sync.Mutex
		var leases []server.AcquireResponse
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for range 50 {
			wg.Go(func() {
				<-gate
				r := e.post("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "five", Identity: u})
				var resp server.AcquireResponse
				if r.status != 200 || json.Unmarshal(r.body, &resp) != nil {
					t.Errorf("acquire: %d %s", r.status, r.body)
					return
				}
				if resp.Acquired {
					mu.Lock()
					leases = append(leases, resp)
					mu.Unlock()
				} else if resp.LeaseID != "" || resp.RetryAfterMS <= 0 || resp.InFlight != 5 || resp.Remaining != 0 {
					t.Errorf("denied acquire: %+v", resp)
				}
			})
		}
		close(gate)
		wg.Wait()
		if len(leases) != 5 {
			t.Fatalf("%d of 50 concurrent acquires at limit 5 got a lease, want exactly 5", len(leases))
		}
		seen := map[string]bool{}
		for _, l := range leases {
			exp, err := time.Parse(time.RFC3339, l.ExpiresAt)
			if seen[l.LeaseID] || l.LeaseID == "" || err != nil || time.Until(exp) > 31*time.Second || l.Limit != 5 || l.Tier != "free" {
				t.Fatalf("lease %+v (%v)", l, err)
			}
			seen[l.LeaseID] = true
		}
		// Full: ?enforce=1 answers 429 with Retry-After.
		r := e.post("/v1/concurrency/acquire?enforce=1", server.AcquireRequest{Limiter: "five", Identity: u})
		if r.status != 429 || r.header.Get("Retry-After") == "" || r.header.Get("X-RateLimit-Remaining") != "0" || r.header.Get("X-RateLimit-Limit") != "5" {
			t.Fatalf("enforced acquire when full: %d %v", r.status, r.header)
		}
		// Release one: exactly one slot frees up.
		if rel := e.release("five", u, leases[0].LeaseID); !rel.Released {
			t.Fatalf("release: %+v", rel)
		}
		if rel := e.release("five", u, leases[0].LeaseID); rel.Released {
			t.Fatal("a second release of the same lease reported freeing a slot")
		}
		_, a := e.acquire("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "five", Identity: u})
		if !a.Acquired || a.InFlight != 5 {
			t.Fatalf("acquire after a release: %+v", a)
		}
		if _, b := e.acquire("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "five", Identity: u}); b.Acquired {
			t.Fatalf("a release freed more than one slot: %+v", b)
		}
		// Another identity has its own slots.
		if _, o := e.acquire("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "five", Identity: id("user", "u2")}); !o.Acquired || o.InFlight != 1 {
			t.Fatalf("other user: %+v", o)
		}
		// Renew a live lease; a released one is lost.
		rn := e.post("/v1/concurrency/renew", server.LeaseRequest{Limiter: "five", Identity: u, LeaseID: a.LeaseID})
		var renewed server.RenewResponse
		if rn.status != 200 || json.Unmarshal(rn.body, &renewed) != nil || !renewed.Renewed || renewed.ExpiresAt < a.ExpiresAt {
			t.Fatalf("renew: %d %s (acquired until %s)", rn.status, rn.body, a.ExpiresAt)
		}
		lost := e.post("/v1/concurrency/renew", server.LeaseRequest{Limiter: "five", Identity: u, LeaseID: leases[0].LeaseID})
		if p := problemOf(t, lost); lost.status != 409 || p.Type != server.ProblemTypePrefix+"lease-lost" {
			t.Fatalf("renew of a released lease: %d %+v", lost.status, p)
		}
		m := string(e.do("GET", "/metrics", "", nil).body)
		for _, want := range []string{
			`rate_limit_allowed_total{policy="five",route="/v1/concurrency/acquire",tier="free"} 7`,
			`rate_limit_denied_total{policy="five",route="/v1/concurrency/acquire",tier="free"} 47`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

func TestConcurrencyTier(t *testing.T) {
	e := start(t, limits, memStore(t), nil)
	var info server.ConfigInfo
	if r := e.do("GET", "/admin/v1/config", testToken, nil); r.status != 200 || json.Unmarshal(r.body, &info) != nil ||
		strings.Join(info.Quotas, ",") != "hundred,tokens,pair" || strings.Join(info.ConcurrencyLimits, ",") != "five" {
		t.Fatalf("admin config: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/admin/v1/tier", testToken, server.TierRequest{Dimension: "user", Value: "vip", Tier: "pro"}); r.status != 200 {
		t.Fatalf("set tier: %d %s", r.status, r.body)
	}
	for i := range 8 {
		_, r := e.acquire("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "five", Identity: id("user", "vip")})
		if r.Acquired != (i < 7) || r.Limit != 7 || r.Tier != "pro" {
			t.Fatalf("pro acquire %d: %+v", i+1, r)
		}
	}
}

// TestConcurrencyBadInput: malformed concurrency requests get specific 4xx
// problems and take no slot.
func TestConcurrencyBadInput(t *testing.T) {
	e := start(t, limits, memStore(t), nil)
	u := `"identity":{"user":"victim"}`
	tests := []struct {
		name, path, body string
		kind, detail     string
	}{
		{"missing limiter", "/v1/concurrency/acquire", `{` + u + `}`, "missing-limiter", `"limiter" is required`},
		{"unknown limiter", "/v1/concurrency/acquire", `{"limiter":"six",` + u + `}`, "unknown-limiter", `unknown concurrency limiter "six"`},
		{"quota name", "/v1/concurrency/acquire", `{"limiter":"hundred",` + u + `}`, "unknown-limiter", `unknown concurrency limiter "hundred"`},
		{"missing identity", "/v1/concurrency/acquire", `{"limiter":"five","identity":{"ip":"1.2.3.4"}}`, "missing-identity", `concurrency limiter "five" needs identity value "user"`},
		{"bad dimension", "/v1/concurrency/acquire", `{"limiter":"five","identity":{"user":"v","User":"x"}}`, "invalid-identity", `not in [a-z0-9_-]`},
		{"lease id on acquire", "/v1/concurrency/acquire", `{"limiter":"five",` + u + `,"lease_id":"x"}`, "unknown-field", `unknown field "lease_id" (known fields: limiter, identity)`},
		{"bad enforce", "/v1/concurrency/acquire?enforce=yes", `{"limiter":"five",` + u + `}`, "invalid-parameter", `enforce="yes"`},
		{"missing lease id", "/v1/concurrency/release", `{"limiter":"five",` + u + `}`, "missing-lease-id", `"lease_id" is required`},
		{"oversized lease id", "/v1/concurrency/release", `{"limiter":"five",` + u + `,"lease_id":"` + strings.Repeat("L", 65) + `"}`, "invalid-lease-id", "lease_id is 65 bytes (max 64)"},
		{"lease id with newline", "/v1/concurrency/renew", `{"limiter":"five",` + u + `,"lease_id":"a\nb"}`, "invalid-lease-id", "not printable ASCII"},
		{"numeric lease id", "/v1/concurrency/renew", `{"limiter":"five",` + u + `,"lease_id":12}`, "malformed-json", `"lease_id" must be a string`},
		{"empty body", "/v1/concurrency/release", ``, "malformed-json", "empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.post(tc.path, tc.body)
			p := problemOf(t, r)
			if r.status != 400 || p.Type != server.ProblemTypePrefix+tc.kind || !strings.Contains(p.Detail, tc.detail) {
				t.Fatalf("got %d %s %q\nwant 400 %s containing %q", r.status, p.Type, p.Detail, tc.kind, tc.detail)
			}
		})
	}
	if _, r := e.acquire("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "five", Identity: id("user", "victim")}); !r.Acquired || r.InFlight != 1 {
		t.Fatalf("bad requests took slots: %+v", r)
	}
}
