package server_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/server"
)

// tierNoOverrides has a policy naming tier_dimension "account" without a
// layer with per-tier limits: no decision's limits depend on it.
const tierNoOverrides = `
version: "1"
tiers: [free, pro]
policies:
  - name: api
    tier_dimension: user
    layers:
      - {name: per-user, algorithm: fixed_window, limit: 5, window: 1h, dimension: user, tiers: {pro: {limit: 6}}}
  - name: flat
    tier_dimension: account
    layers:
      - {name: per-account, algorithm: fixed_window, limit: 5, window: 1h, dimension: account}
quotas:
  - {name: tokens, limit: 1000, period: day, dimension: api_key, tiers: {pro: {limit: 5000}}}
`

// TestTierOfUntieredDimensionSaysSo: an assignment to a dimension no
// policy, quota or concurrency limit of the configuration is tiered by
// (a typo: api-key for api_key) is stored, since a configuration may
// come to use it, but the POST and the GET say that nothing uses it and
// list the dimensions that are, the GET claims no effective tier, and
// the audit line carries the warning. The admin walk's POST answered
// 200 and the GET "effective": "pro", as if it worked. A policy naming
// the dimension as tier_dimension without per-tier limits is named as
// such.
func TestTierOfUntieredDimensionSaysSo(t *testing.T) {
	var logs syncbuf.Buffer
	e := start(t, tierNoOverrides, memStore(t), func(o *server.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	type answer struct {
		Dimension string    `json:"dimension"`
		Value     string    `json:"value"`
		Tier      string    `json:"tier"`
		Effective *string   `json:"effective"`
		UsedBy    *[]string `json:"used_by"`
		Warning   string    `json:"warning"`
	}
	call := func(method, path string, body any) answer {
		t.Helper()
		r := e.do(method, path, testToken, body)
		var a answer
		if r.status != http.StatusOK || json.Unmarshal(r.body, &a) != nil {
			t.Fatalf("%s %s: %d %s, want 200", method, path, r.status, r.body)
		}
		if a.UsedBy == nil {
			t.Fatalf("%s %s: %s, want a used_by list", method, path, r.body)
		}
		return a
	}
	const tiered = "api_key, user"
	for _, dim := range []string{"nodim", "account"} {
		set := call("POST", "/admin/v1/tier", `{"dimension":"`+dim+`","value":"u2","tier":"pro"}`)
		if set.Tier != "pro" || len(*set.UsedBy) != 0 || !strings.Contains(set.Warning, `"`+dim+`"`) || !strings.Contains(set.Warning, tiered) ||
			!strings.Contains(set.Warning, "no policy, quota or concurrency limit") {
			t.Errorf("POST tier of %s: %+v, want it stored, used by nothing, with a warning naming %s and listing %s", dim, set, dim, tiered)
		}
		get := call("GET", "/admin/v1/tier?dimension="+dim+"&value=u2", nil)
		if get.Tier != "pro" || get.Effective == nil || *get.Effective != "" || len(*get.UsedBy) != 0 || get.Warning != set.Warning {
			t.Errorf("GET tier of %s: %+v (effective %v), want tier pro, effective \"\", used by nothing, the POST's warning", dim, get, get.Effective)
		}
	}
	if w := call("GET", "/admin/v1/tier?dimension=account&value=u2", nil).Warning; !strings.Contains(w, `policy "flat" names it as tier_dimension but has no per-tier limits`) {
		t.Errorf("warning for account: %q, want policy flat named as having no per-tier limits", w)
	}
	// The check of a policy naming it without per-tier limits answers the
	// tier whose limits applied: the default one.
	if r := e.check("flat", id("account", "u2"), 0); r.Tier != "free" {
		t.Errorf("check of flat for an account assigned pro: tier %q, want free (its limits apply)", r.Tier)
	}
	// A used dimension: named users, no warning, effective the tier.
	set := call("POST", "/admin/v1/tier", `{"dimension":"user","value":"u1","tier":"pro"}`)
	if strings.Join(*set.UsedBy, ",") != "policy api" || set.Warning != "" {
		t.Errorf("POST tier of user: %+v, want used by policy api without a warning", set)
	}
	if get := call("GET", "/admin/v1/tier?dimension=user&value=u1", nil); get.Effective == nil || *get.Effective != "pro" || get.Warning != "" {
		t.Errorf("GET tier of user: %+v, want effective pro without a warning", get)
	}
	if get := call("GET", "/admin/v1/tier?dimension=api_key&value=k1", nil); strings.Join(*get.UsedBy, ",") != "quota tokens" || *get.Effective != "free" {
		t.Errorf("GET tier of api_key: %+v, want used by quota tokens, effective free", get)
	}
	var audited bool
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "admin tier assignment" {
			continue
		}
		w, _ := rec["warning"].(string)
		switch rec["dimension"] {
		case "nodim":
			audited = true
			if !strings.Contains(w, "no policy, quota or concurrency limit") {
				t.Errorf("audit line of the nodim assignment: %s, want the warning", line)
			}
		case "user":
			if w != "" {
				t.Errorf("audit line of the user assignment: %s, want no warning", line)
			}
		}
	}
	if !audited {
		t.Errorf("no admin tier assignment line for nodim in:\n%s", logs.String())
	}
}

// TestTopDeniedKeyFormsDocumented: GET /admin/v1/top-denied lists a
// policy's denials as policy/layer:identity, a quota's as
// quota:name:identity and a concurrency limit's as
// concurrency:name:identity, and docs/operations.md describes each (it
// said "Each key is policy/layer:identity", the admin walk's
// "quota/tokens:q2" unexplained).
func TestTopDeniedKeyFormsDocumented(t *testing.T) {
	e := start(t, limits, memStore(t), nil)
	u := id("user", "heavy", "api_key", "k9")
	for range 6 {
		e.check("api", u, 0)
		e.post("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "five", Identity: u})
	}
	pair := id("ip", "10.0.0.7", "user", "alice")
	for range 2 {
		e.post("/v1/quota/check", server.QuotaCheckRequest{Quota: "hundred", Identity: u, Cost: ptr(60)})
		e.post("/v1/quota/check", server.QuotaCheckRequest{Quota: "pair", Identity: pair, Cost: ptr(6)})
	}
	r := e.do("GET", "/admin/v1/top-denied?n=10", testToken, nil)
	var top server.TopDenied
	if r.status != 200 || json.Unmarshal(r.body, &top) != nil {
		t.Fatalf("top denied: %d %s", r.status, r.body)
	}
	keys := map[string]bool{}
	for _, it := range top.Top {
		keys[it.Key] = true
	}
	raw, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := regexp.MustCompile(`\s+`).ReplaceAllString(string(raw), " ")
	for _, tc := range []struct{ key, form string }{
		{"api/per-user:heavy", "`policy/layer:identity`"},
		{"quota:hundred:heavy", "`quota:name:identity`"},
		{"concurrency:five:heavy", "`concurrency:name:identity`"},
		{"quota:pair:5:alice8:10.0.0.7", "(`5:alice8:10.0.0.7`)"},
	} {
		if !keys[tc.key] {
			t.Errorf("top denied %+v lacks %q", top.Top, tc.key)
		}
		if !strings.Contains(doc, tc.form) {
			t.Errorf("docs/operations.md does not describe the key form %s (%s)", tc.form, tc.key)
		}
	}
	if strings.Contains(doc, "Each key is `policy/layer:identity`.") {
		t.Errorf("docs/operations.md still says every key is policy/layer:identity")
	}
}

// TestTopDeniedPolicyNamedQuota: a policy named quota (or concurrency)
// whose layer has a quota's (or limiter's) name keeps its top-K count
// apart from that quota's: both were counted as "quota/qx:42" (keyspace
// walk: three denials of each listed once, with count 4).
func TestTopDeniedPolicyNamedQuota(t *testing.T) {
	const yaml = `
version: "1"
policies:
  - name: quota
    layers:
      - {name: qx, algorithm: fixed_window, limit: 1, window: 1h, dimension: user}
  - name: concurrency
    layers:
      - {name: cx, algorithm: fixed_window, limit: 1, window: 1h, dimension: user}
quotas:
  - {name: qx, limit: 1, period: month, dimension: user}
concurrency:
  - {name: cx, limit: 1, lease_ttl: 30s, dimension: user}
`
	e := start(t, yaml, memStore(t), nil)
	u := id("user", "42")
	for range 3 {
		e.check("quota", u, 0)
		e.check("concurrency", u, 0)
		e.post("/v1/quota/check", server.QuotaCheckRequest{Quota: "qx", Identity: u, Cost: ptr(1)})
		e.post("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "cx", Identity: u})
	}
	r := e.do("GET", "/admin/v1/top-denied?n=10", testToken, nil)
	var top server.TopDenied
	if r.status != 200 || json.Unmarshal(r.body, &top) != nil {
		t.Fatalf("top denied: %d %s", r.status, r.body)
	}
	got := map[string]int64{}
	for _, it := range top.Top {
		got[it.Key] = int64(it.Count)
	}
	// A quota check within the limit is not denied: the first of the
	// three quota checks fits (limit 1, cost 1), so is the first acquire
	// (its lease is never released).
	for key, want := range map[string]int64{"quota/qx:42": 2, "concurrency/cx:42": 2, "quota:qx:42": 2, "concurrency:cx:42": 2} {
		if got[key] != want {
			t.Errorf("top denied %s = %d, want %d (all: %v)", key, got[key], want, got)
		}
	}
}

// TestQuotaRestoreWithRedisDownSaysNothingChanged: a quota restore with
// Redis down is answered 503 store-unavailable saying the restore was
// not applied and nothing was changed (it said "nothing was counted",
// the wording of a check), and logged as "admin quota restore failed"
// with the store's error, as a failed reset or tier assignment is, and
// as docs/configuration.md lists.
func TestQuotaRestoreWithRedisDownSaysNothingChanged(t *testing.T) {
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr, ContextTimeoutEnabled: true, DialerRetries: config.DialAttempts})
	t.Cleanup(func() { _ = client.Close() })
	st, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	qs, cs := redisQuotaLeases(t, client)
	var logs syncbuf.Buffer
	e := start(t, limits, st, func(o *server.Options) {
		o.QuotaStore, o.ConcurrencyStore = qs, cs
		o.DecisionTimeout = 300 * time.Millisecond
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	rs.Kill()
	r := e.do("POST", "/admin/v1/quota/restore", testToken, server.RestoreRequest{Quota: "hundred", Identity: id("user", "gone"), Used: ptr(30)})
	p := problemOf(t, r)
	if r.status != http.StatusServiceUnavailable || p.Type != server.ProblemTypePrefix+"store-unavailable" ||
		!strings.Contains(p.Detail, "the quota restore was not applied, so nothing was changed") || strings.Contains(p.Detail, "counted") {
		t.Errorf("restore with Redis down: %d %s %q; want 503 store-unavailable saying nothing was changed", r.status, p.Type, p.Detail)
	}
	var found bool
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "admin quota restore failed" {
			continue
		}
		found = true
		if rec["level"] != "ERROR" || rec["quota"] != "hundred" || rec["identity"] != "user=gone" || rec["used"] != float64(30) {
			t.Errorf("admin quota restore failed line %s; want level ERROR, the quota, identity and used", line)
		}
		if msg, _ := rec["error"].(string); !strings.Contains(msg, rs.Addr[strings.LastIndexByte(rs.Addr, ':'):]) {
			t.Errorf("admin quota restore failed line %s; want the store's error", line)
		}
	}
	if !found {
		t.Errorf("no \"admin quota restore failed\" line in:\n%s", logs.String())
	}
	raw, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if doc := regexp.MustCompile(`\s+`).ReplaceAllString(string(raw), " "); !strings.Contains(doc, "`admin quota restore failed`,") {
		t.Errorf("docs/configuration.md does not list the admin quota restore failed line with the store's error")
	}
}
