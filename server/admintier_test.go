package server_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/redis/go-redis/v9"
)

// TestSetTierNeedsTierField: a POST /admin/v1/tier without "tier", or
// with "tier": null, is 400 missing-tier and keeps the assignment (it
// removed it); an explicit "" still removes it.
func TestSetTierNeedsTierField(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	set := func(body string) reply {
		t.Helper()
		return e.do("POST", "/admin/v1/tier", testToken, body)
	}
	get := func() server.TierInfo {
		t.Helper()
		r := e.do("GET", "/admin/v1/tier?dimension=user&value=u1", testToken, nil)
		var info server.TierInfo
		if r.status != http.StatusOK || json.Unmarshal(r.body, &info) != nil {
			t.Fatalf("GET tier: %d %s", r.status, r.body)
		}
		return info
	}
	if r := set(`{"dimension":"user","value":"u1","tier":"pro"}`); r.status != http.StatusOK {
		t.Fatalf("assigning pro: %d %s", r.status, r.body)
	}
	for _, body := range []string{`{"dimension":"user","value":"u1"}`, `{"dimension":"user","value":"u1","tier":null}`} {
		r := set(body)
		if r.status != http.StatusBadRequest {
			t.Fatalf("%s: %d %s, want 400", body, r.status, r.body)
		}
		if p := problemOf(t, r); !strings.HasSuffix(p.Type, ":missing-tier") || !strings.Contains(p.Detail, `field "tier" is required`) {
			t.Errorf("%s: problem %+v, want missing-tier naming the field", body, p)
		}
		if got := get(); got.Tier != "pro" {
			t.Fatalf("after %s: tier %q, want pro kept", body, got.Tier)
		}
	}
	if r := set(`{"dimension":"user","value":"u1","tier":""}`); r.status != http.StatusOK {
		t.Fatalf("removing: %d %s", r.status, r.body)
	}
	if got := get(); got.Tier != "" || got.Effective != "free" {
		t.Fatalf("after removing: %+v, want no tier, effective free", got)
	}
}

// TestGetTierReadsTheStore: GET /admin/v1/tier answers what Redis holds,
// not what the instance cached (another instance's assignment showed as
// none for up to 5 s), and reports the tier decisions use besides the
// stored one (a stored "PRO" is applied as the default tier).
func TestGetTierReadsTheStore(t *testing.T) {
	st, rs := redisStore(t)
	client := rs.Client(t)
	keys, err := config.KeysFor(uniquePrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	assign := func(t *testing.T) config.Assignments {
		a, err := config.NewRedisAssignments(client, keys.Tiers, config.RedisAssignmentsOptions{TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := start(t, layered, st, func(o *server.Options) { o.Assignments = assign(t) })
	b := start(t, layered, st, func(o *server.Options) { o.Assignments = assign(t) })
	get := func(e *env, value string) server.TierInfo {
		t.Helper()
		r := e.do("GET", "/admin/v1/tier?dimension=user&value="+value, testToken, nil)
		var info server.TierInfo
		if r.status != http.StatusOK || json.Unmarshal(r.body, &info) != nil {
			t.Fatalf("GET tier: %d %s", r.status, r.body)
		}
		return info
	}
	// b looks u1 up through a decision: none, cached for an hour.
	if got := b.check("api", id("user", "u1"), 0); got.Tier != "free" {
		t.Fatalf("decision tier %q, want free", got.Tier)
	}
	if r := a.do("POST", "/admin/v1/tier", testToken, `{"dimension":"user","value":"u1","tier":"pro"}`); r.status != http.StatusOK {
		t.Fatalf("assigning on a: %d %s", r.status, r.body)
	}
	if got := get(b, "u1"); got.Tier != "pro" || got.Effective != "pro" {
		t.Fatalf("b's GET after a's assignment: %+v, want tier pro, effective pro", got)
	}
	// Written by other means than the admin API: stored as is, applied
	// as the default tier.
	if err := client.HSet(ctxT(t), keys.Tiers, "user=u2", "PRO").Err(); err != nil {
		t.Fatal(err)
	}
	if got := get(b, "u2"); got.Tier != "PRO" || got.Effective != "free" {
		t.Fatalf("GET of a tier the configuration lacks: %+v, want tier PRO, effective free", got)
	}
	if got := b.check("api", id("user", "u2"), 0); got.Tier != "free" {
		t.Fatalf("decision tier %q, want free", got.Tier)
	}
}

// TestAdminStoreProblemsCarryNoRedisError: an admin call whose store
// fails answers 503 store-unavailable without Redis's address or error
// (the log has them), as the API's problems do.
func TestAdminStoreProblemsCarryNoRedisError(t *testing.T) {
	st, rs := redisStore(t)
	a, err := config.NewRedisAssignments(rs.Client(t), "fg:tiers", config.RedisAssignmentsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	e := start(t, layered, st, func(o *server.Options) {
		o.Assignments = a
		o.Resetters = []server.Resetter{server.RedisResetter{Client: rs.Client(t)}}
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	rs.Stop()
	port := rs.Addr[strings.LastIndexByte(rs.Addr, ':'):]
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/admin/v1/tier", `{"dimension":"user","value":"u1","tier":"pro"}`},
		{"GET", "/admin/v1/tier?dimension=user&value=u1", ""},
		{"POST", "/admin/v1/reset", `{"policy":"api","identity":{"user":"u1"}}`},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		r := e.do(c.method, c.path, testToken, body)
		if r.status != http.StatusServiceUnavailable {
			t.Fatalf("%s %s with Redis down: %d %s, want 503", c.method, c.path, r.status, r.body)
		}
		p := problemOf(t, r)
		if !strings.HasSuffix(p.Type, ":store-unavailable") || strings.Contains(p.Detail, port) || strings.Contains(p.Detail, "dial") ||
			strings.Contains(p.Detail, "refused") || !strings.Contains(p.Detail, "the service log has the error") {
			t.Errorf("%s %s: problem %+v, want store-unavailable without Redis's address or error", c.method, c.path, p)
		}
	}
	if n := strings.Count(logs.String(), port); n < 3 {
		t.Errorf("the log names Redis's address %d times, want the 3 errors:\n%s", n, logs.String())
	}
}

// TestAdminListenerNotFoundListsItsEndpoints: a 404 on the admin listener
// names the admin endpoints, not the API's (nor /readyz, which it does
// not serve).
func TestAdminListenerNotFoundListsItsEndpoints(t *testing.T) {
	e := start(t, layered, memStore(t), func(o *server.Options) { o.SeparateAdmin = true })
	admin := httptest.NewServer(e.srv.AdminHandler())
	t.Cleanup(admin.Close)
	resp, err := http.Get(admin.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /readyz on the admin listener: %d %s, want 404", resp.StatusCode, body)
	}
	var p server.Problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(p.Detail, "/v1/check") || strings.Contains(p.Detail, "GET /healthz and /readyz") ||
		!strings.Contains(p.Detail, "the admin listener's endpoints are POST /admin/v1/reset") || !strings.Contains(p.Detail, "/metrics") {
		t.Fatalf("admin listener 404: %q, want its own endpoints listed", p.Detail)
	}
	// The API's listener keeps listing the API's.
	if r := e.do("GET", "/nothing", "", nil); !strings.Contains(problemOf(t, r).Detail, "the API's endpoints are POST /v1/check") {
		t.Fatalf("API 404: %s", r.body)
	}
}

// TestAdminThrottledRefusalsLoggedOnce: a throttled network's refusals
// are logged at most once per interval, with the count suppressed (each
// was a Warn line: 500 refusals, 500 lines).
func TestAdminThrottledRefusalsLoggedOnce(t *testing.T) {
	var logs syncbuf.Buffer
	e := start(t, layered, memStore(t), func(o *server.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		o.WarnEvery = time.Hour
	})
	for range server.AdminFailureLimit {
		adminCall(e.srv, "198.51.100.9:4000", "wrong-guess")
	}
	for i := range 500 {
		if rr := adminCall(e.srv, "198.51.100.9:4001", "wrong-guess"); rr.Code != http.StatusTooManyRequests {
			t.Fatalf("request %d after the failures: %d, want 429", i, rr.Code)
		}
	}
	if n := strings.Count(logs.String(), "admin request refused: too many failed authentications"); n != 1 {
		t.Fatalf("%d log lines for 500 throttled requests, want 1", n)
	}
	// The next line, an interval later, counts the ones held back: here
	// a fresh server's first line has none.
	if strings.Contains(logs.String(), `"suppressed"`) {
		t.Fatalf("the first line carries a suppressed count:\n%s", logs.String())
	}
}

// TestAdminAuditNamesTheIdentity: the log lines of a tier assignment and
// of a reset name the identity they changed.
func TestAdminAuditNamesTheIdentity(t *testing.T) {
	var logs syncbuf.Buffer
	e := start(t, layered, memStore(t), func(o *server.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	if r := e.do("POST", "/admin/v1/tier", testToken, `{"dimension":"user","value":"u-audit","tier":"pro"}`); r.status != http.StatusOK {
		t.Fatalf("assigning: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/admin/v1/reset", testToken, `{"policy":"api","identity":{"user":"u-audit"}}`); r.status != http.StatusOK {
		t.Fatalf("reset: %d %s", r.status, r.body)
	}
	var tier, reset bool
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct{ Msg, Dimension, Value, Identity string }
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch rec.Msg {
		case "admin tier assignment":
			tier = rec.Dimension == "user" && rec.Value == "u-audit"
		case "admin reset":
			reset = rec.Identity == "user=u-audit"
		}
	}
	if !tier || !reset {
		t.Fatalf("tier line naming the identity %v, reset line %v:\n%s", tier, reset, logs.String())
	}
}

// TestSetTierSaysWhetherStored: a tier assignment whose store fails says
// whether it may have been stored. A refused dial sent nothing: "nothing
// was stored" (it said "it may have been applied" after a kill -9 of the
// primary, cfgfail walk); one sent to a stalled Redis and cut off by the
// read timeout may have been.
func TestSetTierSaysWhetherStored(t *testing.T) {
	st, rs := redisStore(t)
	stalled := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: stalled.Addr, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	if err := c.Ping(ctxT(t)).Err(); err != nil { // a connection in the pool: nothing to dial later
		t.Fatal(err)
	}
	down, err := config.NewRedisAssignments(rs.Client(t), "fg:tiers", config.RedisAssignmentsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slow, err := config.NewRedisAssignments(c, "fg:tiers", config.RedisAssignmentsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eDown := start(t, layered, st, func(o *server.Options) { o.Assignments = down })
	eSlow := start(t, layered, st, func(o *server.Options) { o.Assignments = slow })
	rs.Stop()
	r := eDown.do("POST", "/admin/v1/tier", testToken, `{"dimension":"user","value":"u1","tier":"pro"}`)
	if p := problemOf(t, r); r.status != http.StatusServiceUnavailable || !strings.HasSuffix(p.Type, ":store-unavailable") ||
		!strings.Contains(p.Detail, "nothing was stored") || strings.Contains(p.Detail, "may have been") {
		t.Errorf("tier with Redis refusing connections: %d %+v; want 503 store-unavailable saying nothing was stored", r.status, p)
	}

	if err := posix.Kill(stalled.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = posix.Kill(stalled.Pid, posix.SIGCONT) }()
	r = eSlow.do("POST", "/admin/v1/tier", testToken, `{"dimension":"user","value":"u1","tier":"pro"}`)
	if p := problemOf(t, r); r.status != http.StatusServiceUnavailable || !strings.HasSuffix(p.Type, ":store-unavailable") ||
		!strings.Contains(p.Detail, "it may have been applied") {
		t.Errorf("tier with Redis stalled: %d %+v; want 503 store-unavailable saying it may have been applied", r.status, p)
	}
}
