package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/loginguard"
	"github.com/floodgate-rl/floodgate/server"
)

// layered is a policy with a global edge layer and a per-user layer, and
// a single-layer policy of limit 50 for the concurrency test.
const layered = `
version: "1"
tiers: [free, pro]
policies:
  - name: api
    tier_dimension: user
    layers:
      - {name: edge, algorithm: fixed_window, limit: 7, window: 1h, dimension: global}
      - name: per-user
        algorithm: sliding_window
        limit: 5
        window: 1h
        dimension: user
        tiers: {pro: {limit: 6}}
  - name: fifty
    layers:
      - {name: per-user, algorithm: sliding_log, limit: 50, window: 1h, dimension: user}
  - name: shadowed
    layers:
      - {name: enforced, algorithm: fixed_window, limit: 4, window: 1h, dimension: user}
      - {name: trial, algorithm: fixed_window, limit: 2, window: 1h, dimension: user, shadow: true}
`

// concurrentChecks sends n checks at once and returns how many were
// allowed.
func concurrentChecks(t *testing.T, e *env, n int, policy string, ident map[string]string) int {
	t.Helper()
	var allowed, failed atomic.Int64
	var wg sync.WaitGroup
	startGate := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGate
			r := e.post("/v1/check", server.CheckRequest{Policy: policy, Identity: ident})
			if r.status != 200 {
				failed.Add(1)
				t.Errorf("status %d: %s", r.status, r.body)
				return
			}
			var resp server.CheckResponse
			if err := json.Unmarshal(r.body, &resp); err != nil {
				t.Error(err)
				return
			}
			if resp.Allowed {
				allowed.Add(1)
			}
		}()
	}
	close(startGate)
	wg.Wait()
	return int(allowed.Load())
}

func TestConcurrentChecksExactLimit(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		e := start(t, layered, memStore(t), nil)
		if got := concurrentChecks(t, e, 200, "fifty", id("user", "u1")); got != 50 {
			t.Fatalf("allowed %d of 200 concurrent checks at limit 50, want exactly 50", got)
		}
	})
	t.Run("redis", func(t *testing.T) {
		st, _ := redisStore(t)
		e := start(t, layered, st, nil)
		if got := concurrentChecks(t, e, 200, "fifty", id("user", "u1")); got != 50 {
			t.Fatalf("allowed %d of 200 concurrent checks at limit 50, want exactly 50", got)
		}
		// Layered too: 40 users × 1 request against an edge of 7.
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := e.post("/v1/check", server.CheckRequest{Policy: "api", Identity: id("user", "c"+strconv.Itoa(i))})
				var resp server.CheckResponse
				if err := json.Unmarshal(r.body, &resp); err != nil || r.status != 200 {
					t.Errorf("status %d %s", r.status, r.body)
					return
				}
				if resp.Allowed {
					allowed.Add(1)
				}
			}()
		}
		wg.Wait()
		if got := allowed.Load(); got != 7 {
			t.Fatalf("edge of 7 admitted %d of 40 users", got)
		}
	})
}

// TestLayersAllOrNothing: a request denied by one layer consumes nothing
// in the others, and the binding layer is the one that denied.
func TestLayersAllOrNothing(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	alice, bob := id("user", "alice"), id("user", "bob")
	for i := range 5 {
		if r := e.check("api", alice, 0); !r.Allowed || r.Remaining != int64(4-i) || r.Binding != "per-user" {
			t.Fatalf("alice #%d: %+v", i+1, r)
		}
	}
	r := e.check("api", alice, 0)
	if r.Allowed || r.Binding != "per-user" || r.Reason != "limited" || r.RetryAfterMS <= 0 {
		t.Fatalf("alice #6 should be denied by per-user: %+v", r)
	}
	if r.Layers[0].Reason != "other_layer" || r.Layers[0].Allowed {
		t.Fatalf("edge layer of a denied request: %+v (want other_layer)", r.Layers[0])
	}
	// The edge still has exactly 2: alice's denied request took nothing.
	for i := range 2 {
		if r := e.check("api", bob, 0); !r.Allowed {
			t.Fatalf("bob #%d denied: %+v", i+1, r)
		}
	}
	r = e.check("api", bob, 0)
	if r.Allowed || r.Binding != "edge" {
		t.Fatalf("bob #3 should be denied by the edge: %+v", r)
	}
	// Bob's per-user layer was not charged for the denied request.
	if p := e.peek("api", bob); p.Layers[1].Remaining != 3 {
		t.Fatalf("bob per-user remaining %d after a denied request, want 3", p.Layers[1].Remaining)
	}
}

func TestResponseAndHeaders(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	cost := int64(3)
	r := e.post("/v1/check", server.CheckRequest{Policy: "fifty", Identity: id("user", "h"), Cost: &cost})
	if r.status != 200 {
		t.Fatalf("status %d %s", r.status, r.body)
	}
	var resp server.CheckResponse
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if !resp.Allowed || resp.Limit != 50 || resp.Remaining != 47 || resp.Policy != "fifty" || resp.Tier != "free" ||
		resp.Binding != "per-user" || resp.Reason != "none" || len(resp.Layers) != 1 || resp.Layers[0].Algorithm != "sliding_log" {
		t.Fatalf("response %+v", resp)
	}
	if resp.Reset < now.Unix() || resp.Reset > now.Add(time.Hour+time.Minute).Unix() {
		t.Fatalf("reset %d not within the hour", resp.Reset)
	}
	if at, err := time.Parse(time.RFC3339, resp.ResetAt); err != nil || at.Unix() != resp.Reset {
		t.Fatalf("reset_at %q does not match reset %d (%v)", resp.ResetAt, resp.Reset, err)
	}
	for h, want := range map[string]string{"X-RateLimit-Limit": "50", "X-RateLimit-Remaining": "47", "X-RateLimit-Reset": strconv.FormatInt(resp.Reset, 10)} {
		if got := r.header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if r.header.Get("Retry-After") != "" {
		t.Errorf("Retry-After on an allowed response")
	}

	cost = 48
	r = e.post("/v1/check", server.CheckRequest{Policy: "fifty", Identity: id("user", "h"), Cost: &cost})
	if r.status != 200 {
		t.Fatalf("denied without enforce: status %d, want 200", r.status)
	}
	json.Unmarshal(r.body, &resp)
	if resp.Allowed || resp.Reason != "limited" || resp.RetryAfterMS <= 0 {
		t.Fatalf("cost 48 of 47 left: %+v", resp)
	}
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || int64(ra)*1000 < resp.RetryAfterMS {
		t.Fatalf("Retry-After %q for retry_after_ms %d", r.header.Get("Retry-After"), resp.RetryAfterMS)
	}
	r = e.post("/v1/check?enforce=1", server.CheckRequest{Policy: "fifty", Identity: id("user", "h"), Cost: &cost})
	if r.status != 429 || r.header.Get("Retry-After") == "" || r.header.Get("X-RateLimit-Remaining") != "47" {
		t.Fatalf("enforce=1 denied: status %d headers %v", r.status, r.header)
	}
	// A cost above the limit can never pass: denied, no Retry-After.
	cost = 51
	r = e.post("/v1/check", server.CheckRequest{Policy: "fifty", Identity: id("user", "h"), Cost: &cost})
	json.Unmarshal(r.body, &resp)
	if resp.Allowed || resp.Reason != "cost_exceeds_limit" || r.header.Get("Retry-After") != "" {
		t.Fatalf("cost 51 at limit 50: %+v, Retry-After %q", resp, r.header.Get("Retry-After"))
	}
}

func TestPeekConsumesNothing(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	e.check("api", id("user", "p"), 0)
	for range 3 {
		if r := e.peek("api", id("user", "p")); !r.Allowed || r.Layers[1].Remaining != 4 || r.Layers[0].Remaining != 6 {
			t.Fatalf("peek: %+v", r)
		}
	}
}

func TestBatch(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	two := int64(2)
	req := server.BatchRequest{Requests: []server.CheckRequest{
		{Policy: "api", Identity: id("user", "b1"), Cost: &two},
		{Policy: "api", Identity: id("user", "b1"), Cost: &two},
		{Policy: "api", Identity: id("user", "b1"), Cost: &two},
		{Policy: "fifty", Identity: id("user", "b2")},
	}}
	r := e.post("/v1/check/batch", req)
	if r.status != 200 {
		t.Fatalf("status %d %s", r.status, r.body)
	}
	var resp server.BatchResponse
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range resp.Results {
		if it.Error != nil || it.CheckResponse == nil {
			t.Fatalf("item error: %+v", it.Error)
		}
		got = append(got, strconv.FormatBool(it.Allowed)+"/"+strconv.FormatInt(it.Remaining, 10))
	}
	// Items are decided in order: 5 per user → 2+2 pass, the third 2 does
	// not fit in the 1 left.
	if want := "true/3 true/1 false/1 true/49"; strings.Join(got, " ") != want {
		t.Fatalf("batch results %v, want %s", got, want)
	}
}

func TestShadowLayerCountsButNeverDenies(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	u := id("user", "s")
	for i := range 4 {
		r := e.check("shadowed", u, 0)
		if !r.Allowed || r.Binding != "enforced" || r.Remaining != int64(3-i) {
			t.Fatalf("request %d: %+v", i+1, r)
		}
		wouldDeny := i >= 2
		if sh := r.Layers[1]; !sh.Shadow || sh.Allowed == wouldDeny {
			t.Fatalf("request %d shadow layer %+v (would deny: %v)", i+1, sh, wouldDeny)
		}
	}
	if r := e.check("shadowed", u, 0); r.Allowed || r.Binding != "enforced" {
		t.Fatalf("5th request should be denied by the enforced layer: %+v", r)
	}
	m := e.do("GET", "/metrics", "", nil)
	if !strings.Contains(string(m.body), `rate_limit_shadow_denied_total{layer="trial",policy="shadowed"} 3`) {
		t.Fatalf("shadow metric missing:\n%s", m.body)
	}
	if !strings.Contains(string(m.body), `rate_limit_allowed_total{policy="shadowed",route="/v1/check",tier="free"} 4`) ||
		!strings.Contains(string(m.body), `rate_limit_denied_total{policy="shadowed",route="/v1/check",tier="free"} 1`) {
		t.Fatalf("allowed/denied metrics missing:\n%s", m.body)
	}
}

func TestTierAssignment(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	if r := e.do("POST", "/admin/v1/tier", testToken, server.TierRequest{Dimension: "user", Value: "vip", Tier: "pro"}); r.status != 200 {
		t.Fatalf("set tier: %d %s", r.status, r.body)
	}
	r := e.check("api", id("user", "vip"), 0)
	if r.Tier != "pro" || r.Layers[1].Limit != 6 || r.Layers[1].Remaining != 5 {
		t.Fatalf("pro user: %+v", r)
	}
	if r := e.check("api", id("user", "plain"), 0); r.Tier != "free" || r.Layers[1].Limit != 5 {
		t.Fatalf("free user: %+v", r)
	}
	g := e.do("GET", "/admin/v1/tier?dimension=user&value=vip", testToken, nil)
	var tr server.TierRequest
	if err := json.Unmarshal(g.body, &tr); err != nil || tr.Tier != "pro" {
		t.Fatalf("get tier: %s", g.body)
	}
	bad := e.do("POST", "/admin/v1/tier", testToken, server.TierRequest{Dimension: "user", Value: "vip", Tier: "platinum"})
	if p := problemOf(t, bad); bad.status != 400 || !strings.Contains(p.Detail, `unknown tier "platinum"`) {
		t.Fatalf("unknown tier: %d %+v", bad.status, p)
	}
	if r := e.check("api", id("user", "vip"), 0); r.Tier != "pro" {
		t.Fatalf("a rejected assignment changed the tier: %+v", r)
	}
}

// TestUnknownAssignedTierIsCounted: an identity assigned a tier the
// configuration no longer defines (here "pro", removed by a reload; in
// Redis, any value written by hand, such as "PRO" for "pro") gets the
// default tier, counted in floodgate_tier_unknown_total. It used to fall
// back without a trace, quietly downgrading a customer.
func TestUnknownAssignedTierIsCounted(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	if r := e.do("POST", "/admin/v1/tier", testToken, server.TierRequest{Dimension: "user", Value: "vip", Tier: "pro"}); r.status != 200 {
		t.Fatalf("set tier: %d %s", r.status, r.body)
	}
	if _, err := e.reloader.Apply([]byte(strings.NewReplacer("[free, pro]", "[free, gold]", "{pro: {limit: 6}}", "{gold: {limit: 6}}").Replace(layered)), "gold.yaml"); err != nil {
		t.Fatal(err)
	}
	r := e.check("api", id("user", "vip"), 0)
	if r.Tier != "free" || r.Layers[1].Limit != 5 {
		t.Fatalf("identity assigned the removed tier pro: %+v, want the default tier", r)
	}
	m := e.do("GET", "/metrics", "", nil)
	if !strings.Contains(string(m.body), "floodgate_tier_unknown_total 1") {
		t.Fatalf("floodgate_tier_unknown_total not 1:\n%s", m.body)
	}
}

func TestAdminAuthResetAndTopDenied(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	if r := e.do("GET", "/admin/v1/top-denied", "", nil); r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: %d", r.status)
	}
	if r := e.do("GET", "/admin/v1/top-denied", "wrong", nil); r.status != 401 {
		t.Fatalf("wrong token: %d", r.status)
	}
	for range 8 {
		e.check("api", id("user", "noisy"), 0)
	}
	e.check("api", id("user", "quiet"), 0)
	r := e.do("GET", "/admin/v1/top-denied?n=5", testToken, nil)
	var top server.TopDenied
	if err := json.Unmarshal(r.body, &top); err != nil || r.status != 200 {
		t.Fatalf("top denied: %d %s", r.status, r.body)
	}
	// noisy: 5 admitted (edge at 5 of 7), then 3 denied by per-user,
	// which take nothing from the edge; quiet is admitted (edge at 6).
	if len(top.Top) != 1 || top.Top[0].Key != "api/per-user:noisy" || top.Top[0].Count != 3 {
		t.Fatalf("top denied %+v", top.Top)
	}
	reset := e.do("POST", "/admin/v1/reset", testToken, server.ResetRequest{Policy: "api", Identity: id("user", "noisy")})
	var rr server.ResetResponse
	if err := json.Unmarshal(reset.body, &rr); err != nil || reset.status != 200 || strings.Join(rr.Reset, ",") != "per-user" || rr.Keys != 1 {
		t.Fatalf("reset: %d %s", reset.status, reset.body)
	}
	if p := e.peek("api", id("user", "noisy")); p.Layers[1].Remaining != 5 || p.Layers[0].Remaining != 1 {
		t.Fatalf("after reset: %+v", p)
	}
	// Global layers only when named.
	reset = e.do("POST", "/admin/v1/reset", testToken, server.ResetRequest{Policy: "api", Layers: []string{"edge"}})
	if reset.status != 200 {
		t.Fatalf("reset edge: %d %s", reset.status, reset.body)
	}
	if p := e.peek("api", id("user", "noisy")); p.Layers[0].Remaining != 7 {
		t.Fatalf("edge after reset: %+v", p)
	}
	for _, tc := range []struct {
		body server.ResetRequest
		want string
	}{
		{server.ResetRequest{Policy: "nope"}, "unknown policy"},
		{server.ResetRequest{Policy: "api", Layers: []string{"zzz"}}, `no layer "zzz"`},
		{server.ResetRequest{Policy: "api"}, "no layer of policy"},
		{server.ResetRequest{Policy: "api", Layers: []string{"per-user"}}, `needs identity value "user"`},
	} {
		r := e.do("POST", "/admin/v1/reset", testToken, tc.body)
		if p := problemOf(t, r); r.status != 400 || !strings.Contains(p.Detail, tc.want) {
			t.Errorf("reset %+v: %d %q, want %q", tc.body, r.status, p.Detail, tc.want)
		}
	}
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	e := start(t, layered, memStore(t), func(o *server.Options) { o.AdminToken = "" })
	r := e.do("POST", "/admin/v1/reset", "anything", server.ResetRequest{Policy: "api", Identity: id("user", "x")})
	if p := problemOf(t, r); r.status != 403 || !strings.Contains(p.Detail, "disabled") {
		t.Fatalf("admin without token: %d %+v", r.status, p)
	}
}

// TestReloadAppliesLiveAndKeepsLastGood: a new configuration takes effect
// on the next request; an invalid one is rejected and changes nothing.
func TestReloadAppliesLiveAndKeepsLastGood(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	u := id("user", "r")
	if r := e.check("fifty", u, 0); r.Limit != 50 {
		t.Fatalf("before reload: %+v", r)
	}
	raised := strings.Replace(layered, "limit: 50,", "limit: 70,", 1)
	if _, err := e.reloader.Apply([]byte(raised), "raised.yaml"); err != nil {
		t.Fatal(err)
	}
	if r := e.check("fifty", u, 0); r.Limit != 70 || r.Remaining != 68 {
		t.Fatalf("after reload (state kept, limit raised): %+v", r)
	}
	if _, err := e.reloader.Apply([]byte(strings.Replace(raised, "limit: 70,", "limit: -1,", 1)), "bad.yaml"); err == nil {
		t.Fatal("invalid configuration accepted")
	}
	if r := e.check("fifty", u, 0); r.Limit != 70 {
		t.Fatalf("invalid reload changed the limits: %+v", r)
	}
	m := string(e.do("GET", "/metrics", "", nil).body)
	for _, want := range []string{`floodgate_config_reload_total{result="applied",source="policies"} 1`, `floodgate_config_reload_total{result="invalid",source="policies"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestHealthAndReadiness(t *testing.T) {
	st, rs := redisStore(t)
	client := rs.Client(t)
	e := start(t, layered, st, func(o *server.Options) {
		o.Ready = func(ctx context.Context) error { return client.Ping(ctx).Err() }
	})
	if r := e.do("GET", "/readyz", "", nil); r.status != 200 || !strings.Contains(string(r.body), `"ready"`) {
		t.Fatalf("readyz: %d %s", r.status, r.body)
	}
	rs.Kill()
	if r := e.do("GET", "/readyz", "", nil); r.status != 503 || !strings.Contains(string(r.body), `"degraded"`) {
		t.Fatalf("readyz with Redis down: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/healthz", "", nil); r.status != 200 {
		t.Fatalf("healthz with Redis down: %d", r.status)
	}
	// A decision against a dead Redis is a 503 problem, not a panic or a
	// silent allow.
	r := e.post("/v1/check", server.CheckRequest{Policy: "fifty", Identity: id("user", "d")})
	if p := problemOf(t, r); r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Fatalf("check with Redis down: %d %+v", r.status, p)
	}
	rs.Restart(t)
	if r := e.do("GET", "/readyz", "", nil); r.status != 200 {
		t.Fatalf("readyz after restart: %d %s", r.status, r.body)
	}
	e.srv.SetDraining(true)
	if r := e.do("GET", "/readyz", "", nil); r.status != 503 || !strings.Contains(string(r.body), "draining") {
		t.Fatalf("readyz while draining: %d %s", r.status, r.body)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	lim, err := floodgate.New(memStore(t), floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	holder, _ := config.NewHolder(parse(t, layered))
	if _, err := server.New(nil, holder, server.Options{}); err == nil {
		t.Error("nil limiter accepted")
	}
	if _, err := server.New(lim, holder, server.Options{MaxBatch: -1}); err == nil {
		t.Error("negative MaxBatch accepted")
	}
}

func TestAdminLoginUnlock(t *testing.T) {
	backend, err := loginguard.NewMemory(loginguard.MemoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := loginguard.New(backend, loginguard.Options{Secret: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 20 {
		ip := netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
		if _, err := guard.Failure(ctx, "alice", ip); err != nil {
			t.Fatal(err)
		}
	}
	probe := netip.MustParseAddr("198.51.100.1")
	if st, err := guard.Status(ctx, "alice", probe); err != nil || st.Account.LockedUntil.IsZero() {
		t.Fatalf("account not locked after 20 failures: %+v %v", st.Account, err)
	}
	e := start(t, layered, memStore(t), func(o *server.Options) { o.LoginGuard = guard })
	if r := e.do("POST", "/admin/v1/login/unlock", testToken, server.UnlockRequest{}); r.status != 400 {
		t.Fatalf("empty unlock: %d", r.status)
	}
	if r := e.do("POST", "/admin/v1/login/unlock", testToken, server.UnlockRequest{IP: "not-an-ip"}); r.status != 400 {
		t.Fatalf("bad ip: %d", r.status)
	}
	r := e.do("POST", "/admin/v1/login/unlock", testToken, server.UnlockRequest{Account: "alice", IP: "192.0.2.3"})
	if r.status != 200 || !strings.Contains(string(r.body), `"unlocked":true`) || !strings.Contains(string(r.body), `"account":true`) {
		t.Fatalf("unlock: %d %s; want unlocked, the account cleared", r.status, r.body)
	}
	// Nothing left to lift: the answer says so rather than "unlocked"
	// (an unlock under another secret or prefix than the application's
	// also finds nothing, and answered unlocked).
	r = e.do("POST", "/admin/v1/login/unlock", testToken, server.UnlockRequest{Account: "alice"})
	if r.status != 200 || !strings.Contains(string(r.body), `"unlocked":false`) || !strings.Contains(string(r.body), "nothing to lift") {
		t.Fatalf("unlock of nothing: %d %s; want unlocked false and why", r.status, r.body)
	}
	if st, _ := guard.Status(ctx, "alice", probe); !st.Account.LockedUntil.IsZero() || st.Account.Failures != 0 {
		t.Fatalf("still locked after unlock: %+v", st.Account)
	}
	// The owner's own failures from their address lock the pair, which
	// an unlock naming both the account and the address lifts too (it
	// used to answer unlocked and leave the pair locked).
	owner := netip.MustParseAddr("203.0.113.77")
	for range 10 {
		if _, err := guard.Failure(ctx, "bob", owner); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := guard.Status(ctx, "bob", owner); st.Pair.LockedUntil.IsZero() {
		t.Fatalf("pair not locked after 10 failures: %+v", st.Pair)
	}
	if r := e.do("POST", "/admin/v1/login/unlock", testToken, server.UnlockRequest{Account: "BOB", IP: "203.0.113.77"}); r.status != 200 ||
		!strings.Contains(string(r.body), `"cleared":{"account":true,"ip":true,"pair":true}`) {
		t.Fatalf("unlock bob: %d %s; want all three cleared", r.status, r.body)
	}
	if st, _ := guard.Status(ctx, "bob", owner); !st.Pair.LockedUntil.IsZero() || st.Pair.Failures != 0 {
		t.Fatalf("pair still locked after unlocking the account and the address: %+v", st.Pair)
	}
	plain := start(t, layered, memStore(t), nil)
	r = plain.do("POST", "/admin/v1/login/unlock", testToken, server.UnlockRequest{Account: "alice"})
	if r.status != 501 {
		t.Fatalf("unlock without a guard: %d", r.status)
	}
	// The answer names the flag that enables the guard, as serve --help
	// spells it (there is no --login-secret).
	if !strings.Contains(string(r.body), "--login-secret-file") {
		t.Errorf("unlock without a guard: %s, want it to name --login-secret-file", r.body)
	}
}

// TestReadinessDegradedOK checks GET /readyz?degraded=ok: 200 with status
// degraded while a fallback decides (ServesDegraded), 503 without one, and
// 503 while draining; plain /readyz stays 503 when degraded.
func TestReadinessDegradedOK(t *testing.T) {
	down := func(context.Context) error { return errors.New("redis: connection refused") }
	for _, serves := range []bool{true, false} {
		e := start(t, layered, memStore(t), func(o *server.Options) {
			o.Ready, o.ServesDegraded = down, serves
		})
		if r := e.do("GET", "/readyz", "", nil); r.status != 503 || !strings.Contains(string(r.body), `"degraded"`) {
			t.Fatalf("serves=%v: readyz: %d %s", serves, r.status, r.body)
		}
		want := 503
		if serves {
			want = 200
		}
		if r := e.do("GET", "/readyz?degraded=ok", "", nil); r.status != want || !strings.Contains(string(r.body), `"degraded"`) {
			t.Fatalf("serves=%v: readyz?degraded=ok: %d %s, want %d", serves, r.status, r.body, want)
		}
		e.srv.SetDraining(true)
		if r := e.do("GET", "/readyz?degraded=ok", "", nil); r.status != 503 || !strings.Contains(string(r.body), "draining") {
			t.Fatalf("serves=%v: readyz?degraded=ok while draining: %d %s", serves, r.status, r.body)
		}
	}
}
