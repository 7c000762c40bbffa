package server_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/quota"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/server"
)

// limits has quotas and concurrency limits next to one policy.
const limits = `
version: "1"
tiers: [free, pro]
policies:
  - name: api
    layers:
      - {name: per-user, algorithm: fixed_window, limit: 5, window: 1h, dimension: user}
quotas:
  - {name: hundred, limit: 100, period: month, dimension: user}
  - name: tokens
    limit: 1000
    period: day
    timezone: America/New_York
    dimension: api_key
    soft_threshold: 0.5
    hold: 1h
    tiers: {pro: {limit: 5000}}
  - {name: pair, limit: 10, period: week, dimension: user+ip}
concurrency:
  - {name: five, limit: 5, lease_ttl: 30s, dimension: user, tiers: {pro: {limit: 7}}}
`

// backends starts the same test on in-process stores and on a private
// redis-server (floodgate, quota and concurrency stores on one client).
func backends(t *testing.T, yaml string, run func(t *testing.T, e *env)) {
	t.Run("memory", func(t *testing.T) {
		run(t, start(t, yaml, memStore(t), nil))
	})
	t.Run("redis", func(t *testing.T) {
		st, rs := redisStore(t)
		client := rs.Client(t)
		qs, cs := redisQuotaLeases(t, client)
		run(t, start(t, yaml, st, func(o *server.Options) { o.QuotaStore, o.ConcurrencyStore = qs, cs }))
	})
}

// quotaCall posts a quota operation and decodes a 200/429 answer.
func (e *env) quotaCall(path string, body any) (int, server.QuotaResponse) {
	e.t.Helper()
	r := e.post(path, body)
	if r.status != 200 && r.status != 429 {
		e.t.Fatalf("%s %+v: status %d: %s", path, body, r.status, r.body)
	}
	var resp server.QuotaResponse
	if err := json.Unmarshal(r.body, &resp); err != nil {
		e.t.Fatalf("decoding %s: %v", r.body, err)
	}
	return r.status, resp
}

func (e *env) quotaStatus(name string, ident map[string]string) server.QuotaResponse {
	e.t.Helper()
	_, resp := e.quotaCall("/v1/quota/status", server.QuotaStatusRequest{Quota: name, Identity: ident})
	return resp
}

func ptr(v int64) *int64 { return &v }

// TestQuotaConcurrentChecksExactLimit: 300 concurrent checks of cost 1
// against a quota of 100 admit exactly 100, on both stores.
func TestQuotaConcurrentChecksExactLimit(t *testing.T) {
	backends(t, limits, func(t *testing.T, e *env) {
		u := id("user", "u1")
		var allowed atomic.Int64
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for range 300 {
			wg.Go(func() {
				<-gate
				r := e.post("/v1/quota/check", server.QuotaCheckRequest{Quota: "hundred", Identity: u})
				var resp server.QuotaResponse
				if err := json.Unmarshal(r.body, &resp); err != nil || r.status != 200 {
					t.Errorf("status %d: %s", r.status, r.body)
					return
				}
				if resp.Allowed {
					allowed.Add(1)
				}
			})
		}
		close(gate)
		wg.Wait()
		if got := allowed.Load(); got != 100 {
			t.Fatalf("allowed %d of 300 concurrent checks at limit 100, want exactly 100", got)
		}
		st := e.quotaStatus("hundred", u)
		if st.Used != 100 || st.Remaining != 0 || !st.Exhausted || st.Allowed || st.Fraction != 1 || !st.Soft {
			t.Fatalf("status after the race: %+v", st)
		}
		// Denied with ?enforce=1: 429, Retry-After, the quota's headers.
		r := e.post("/v1/quota/check?enforce=1", server.QuotaCheckRequest{Quota: "hundred", Identity: u})
		var resp server.QuotaResponse
		if err := json.Unmarshal(r.body, &resp); err != nil || r.status != 429 || resp.Reason != "exhausted" || resp.RetryAfterMS <= 0 {
			t.Fatalf("enforced denial: %d %s", r.status, r.body)
		}
		if r.header.Get("Retry-After") == "" || r.header.Get("X-RateLimit-Limit") != "100" || r.header.Get("X-RateLimit-Remaining") != "0" {
			t.Fatalf("headers %v", r.header)
		}
		end, err := time.Parse(time.RFC3339, resp.Period.End)
		if err != nil || r.header.Get("X-RateLimit-Reset") != strconv.FormatInt(end.Unix(), 10) {
			t.Fatalf("X-RateLimit-Reset %q, period end %q", r.header.Get("X-RateLimit-Reset"), resp.Period.End)
		}
		m := string(e.do("GET", "/metrics", "", nil).body)
		for _, want := range []string{
			`rate_limit_allowed_total{policy="hundred",route="/v1/quota/check",tier="free"} 100`,
			`rate_limit_denied_total{policy="hundred",route="/v1/quota/check",tier="free"} 201`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

// TestQuotaReserveSettle: a reservation holds its estimate against
// concurrent work, a denied one holds nothing, and settling commits the
// real cost once however often it is repeated.
func TestQuotaReserveSettle(t *testing.T) {
	backends(t, limits, func(t *testing.T, e *env) {
		k := id("api_key", "k1")
		_, r := e.quotaCall("/v1/quota/reserve", server.QuotaReserveRequest{Quota: "tokens", Identity: k, RequestID: "job-1", Estimate: ptr(400)})
		if !r.Allowed || r.Reserved != 400 || r.Remaining != 600 || r.Used != 0 || r.RequestID != "job-1" || r.Tier != "free" {
			t.Fatalf("reserve 400: %+v", r)
		}
		// The period is a New York day: it starts at midnight there.
		loc, _ := time.LoadLocation("America/New_York")
		start, err := time.Parse(time.RFC3339, r.Period.Start)
		if local := start.In(loc); err != nil || local.Format(time.RFC3339) != r.Period.Start || local.Hour() != 0 || r.Period.Key != local.Format("2006-01-02") {
			t.Fatalf("period of a New York daily quota: %+v (%v)", r.Period, err)
		}
		// 700 does not fit in the 600 left: denied, holds nothing.
		code, r := e.quotaCall("/v1/quota/reserve?enforce=1", server.QuotaReserveRequest{Quota: "tokens", Identity: k, RequestID: "job-2", Estimate: ptr(700)})
		if code != 429 || r.Allowed || r.Reason != "exhausted" || r.Reserved != 400 {
			t.Fatalf("reserve 700 of 600: %d %+v", code, r)
		}
		if st := e.quotaStatus("tokens", k); st.Reserved != 400 || st.Remaining != 600 || st.Soft {
			t.Fatalf("a denied reserve held something: %+v", st)
		}
		// Settle for less than the estimate: the difference is refunded.
		// Settled 20 times at once, it counts once.
		var wg sync.WaitGroup
		results := make([]server.QuotaResponse, 20)
		for i := range results {
			wg.Go(func() {
				rr := e.post("/v1/quota/settle", server.QuotaSettleRequest{Quota: "tokens", Identity: k, RequestID: "job-1", Actual: ptr(550)})
				if rr.status != 200 || json.Unmarshal(rr.body, &results[i]) != nil {
					t.Errorf("settle: %d %s", rr.status, rr.body)
				}
			})
		}
		wg.Wait()
		replays := 0
		for _, res := range results {
			// The replays charge nothing: only the first answer says 550.
			if !res.Allowed || res.Used != 550 || res.Reserved != 0 || res.Charged != map[bool]int64{false: 550, true: 0}[res.Replayed] || res.Refunded != 0 {
				t.Fatalf("settle result %+v", res)
			}
			if res.Replayed {
				replays++
			}
		}
		if replays != 19 {
			t.Fatalf("%d of 20 settlements replayed, want 19", replays)
		}
		// 550 > 0.5 × 1000: soft.
		if st := e.quotaStatus("tokens", k); st.Used != 550 || st.Reserved != 0 || st.Remaining != 450 || !st.Soft || st.Fraction != 0.55 {
			t.Fatalf("status after settling: %+v", st)
		}
		// Reserving a settled id again is a conflict, and changes nothing.
		rr := e.post("/v1/quota/reserve", server.QuotaReserveRequest{Quota: "tokens", Identity: k, RequestID: "job-1", Estimate: ptr(10)})
		if p := problemOf(t, rr); rr.status != 409 || p.Type != server.ProblemTypePrefix+"quota-already-settled" {
			t.Fatalf("reserve of a settled id: %d %+v", rr.status, p)
		}
		// A reservation cancelled with actual 0 gives everything back.
		e.quotaCall("/v1/quota/reserve", server.QuotaReserveRequest{Quota: "tokens", Identity: k, RequestID: "job-3", Estimate: ptr(300)})
		if _, r := e.quotaCall("/v1/quota/settle", server.QuotaSettleRequest{Quota: "tokens", Identity: k, RequestID: "job-3", Actual: ptr(0)}); r.Refunded != 300 || r.Used != 550 || r.Reserved != 0 {
			t.Fatalf("cancel: %+v", r)
		}
		// A settlement without a reservation is charged and says so.
		if _, r := e.quotaCall("/v1/quota/settle", server.QuotaSettleRequest{Quota: "tokens", Identity: k, RequestID: "late", Actual: ptr(50)}); !r.Unmatched || r.Used != 600 {
			t.Fatalf("unmatched settle: %+v", r)
		}
		// The check endpoint counts against the same usage.
		if _, r := e.quotaCall("/v1/quota/check", server.QuotaCheckRequest{Quota: "tokens", Identity: k, Cost: ptr(400)}); !r.Allowed || r.Remaining != 0 || !r.Exhausted {
			t.Fatalf("check of the rest: %+v", r)
		}
		// A pro key gets the pro limit and keeps nothing of k1's usage.
		if r := e.do("POST", "/admin/v1/tier", testToken, server.TierRequest{Dimension: "api_key", Value: "k2", Tier: "pro"}); r.status != 200 {
			t.Fatalf("set tier: %d %s", r.status, r.body)
		}
		if st := e.quotaStatus("tokens", id("api_key", "k2")); st.Tier != "pro" || st.Limit != 5000 || st.Used != 0 {
			t.Fatalf("pro key: %+v", st)
		}
	})
}

// TestQuotaStateLostIsAConflict: a usage counter deleted mid-period makes
// every operation a 409 that says to fail closed, until an admin restores
// the usage.
func TestQuotaStateLostIsAConflict(t *testing.T) {
	st, rs := redisStore(t)
	client := rs.Client(t)
	qs, err := quota.NewRedisStore(client)
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, limits, st, func(o *server.Options) { o.QuotaStore = qs })
	u := id("user", "lost")
	if _, r := e.quotaCall("/v1/quota/check", server.QuotaCheckRequest{Quota: "hundred", Identity: u, Cost: ptr(30)}); !r.Allowed {
		t.Fatalf("check: %+v", r)
	}
	ctx := ctxT(t)
	keys, _, err := client.Scan(ctx, 0, e.lim.Prefix()+":hundred:q:*:u", 100).Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("usage keys %v %v", keys, err)
	}
	if err := client.Del(ctx, keys[0]).Err(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/quota/check", "/v1/quota/status"} {
		r := e.post(path, server.QuotaCheckRequest{Quota: "hundred", Identity: u})
		if path == "/v1/quota/status" {
			r = e.post(path, server.QuotaStatusRequest{Quota: "hundred", Identity: u})
		}
		p := problemOf(t, r)
		if r.status != 409 || p.Type != server.ProblemTypePrefix+"quota-state-lost" || !strings.Contains(p.Detail, "fail closed") {
			t.Fatalf("%s after the usage vanished: %d %+v", path, r.status, p)
		}
	}
	// The typed client surfaces the problem type for callers to fail closed.
	c, err := server.NewClient(e.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.QuotaSettle(ctx, server.QuotaSettleRequest{Quota: "hundred", Identity: u, RequestID: "x", Actual: ptr(1)})
	var pe *server.ProblemError
	if !errors.As(err, &pe) || pe.Problem.Type != server.ProblemTypePrefix+"quota-state-lost" {
		t.Fatalf("client settle: %v", err)
	}
	restore := e.do("POST", "/admin/v1/quota/restore", testToken, server.RestoreRequest{Quota: "hundred", Identity: u, Used: ptr(30)})
	if restore.status != 200 {
		t.Fatalf("restore: %d %s", restore.status, restore.body)
	}
	if st := e.quotaStatus("hundred", u); st.Used != 30 || st.Remaining != 70 {
		t.Fatalf("after restore: %+v", st)
	}
}

// TestQuotaRestoreAudit: the restore's log line names the identity and the
// usage it replaced, read in the restore's own step: the number when the
// usage existed, "unknown" when it was lost.
func TestQuotaRestoreAudit(t *testing.T) {
	st, rs := redisStore(t)
	client := rs.Client(t)
	qs, err := quota.NewRedisStore(client)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	e := start(t, limits, st, func(o *server.Options) {
		o.QuotaStore = qs
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	u := id("user", "audited")
	if _, r := e.quotaCall("/v1/quota/check", server.QuotaCheckRequest{Quota: "hundred", Identity: u, Cost: ptr(30)}); !r.Allowed {
		t.Fatalf("check: %+v", r)
	}
	restore := func(used int64) {
		t.Helper()
		if r := e.do("POST", "/admin/v1/quota/restore", testToken, server.RestoreRequest{Quota: "hundred", Identity: u, Used: ptr(used)}); r.status != 200 {
			t.Fatalf("restore: %d %s", r.status, r.body)
		}
	}
	restore(3)
	ctx := ctxT(t)
	keys, _, err := client.Scan(ctx, 0, e.lim.Prefix()+":hundred:q:*:u", 100).Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("usage keys %v %v", keys, err)
	}
	if err := client.Del(ctx, keys[0]).Err(); err != nil {
		t.Fatal(err)
	}
	restore(5)
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Msg, Quota, Identity, Period string
			Used                         int64
			Previous                     any `json:"previous_used"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != "admin quota restore" {
			continue
		}
		got = append(got, fmt.Sprintf("%s %s period=%t used=%d previous=%v", rec.Quota, rec.Identity, rec.Period != "", rec.Used, rec.Previous))
	}
	want := []string{
		"hundred user=audited period=true used=3 previous=30",
		"hundred user=audited period=true used=5 previous=unknown (the usage was lost)",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("restore log lines:\n got %q\nwant %q\n%s", got, want, logs.String())
	}
}

// TestQuotaBadInput: every malformed quota request gets a specific 4xx
// problem and consumes nothing.
func TestQuotaBadInput(t *testing.T) {
	e := start(t, limits, memStore(t), nil)
	u := `"identity":{"user":"victim"}`
	tests := []struct {
		name, path, body string
		status           int
		kind, detail     string
	}{
		{"missing quota", "/v1/quota/check", `{` + u + `}`, 400, "missing-quota", `"quota" is required`},
		{"unknown quota", "/v1/quota/check", `{"quota":"nope",` + u + `}`, 400, "unknown-quota", `unknown quota "nope"`},
		{"policy name is not a quota", "/v1/quota/check", `{"quota":"api",` + u + `}`, 400, "unknown-quota", `unknown quota "api"`},
		{"missing identity", "/v1/quota/check", `{"quota":"hundred"}`, 400, "missing-identity", `quota "hundred" needs identity value "user"`},
		{"half a composite identity", "/v1/quota/check", `{"quota":"pair",` + u + `}`, 400, "missing-identity", `needs identity value "ip"`},
		{"empty identity value", "/v1/quota/check", `{"quota":"hundred","identity":{"user":""}}`, 400, "invalid-identity", "is empty"},
		{"huge identity value", "/v1/quota/check", `{"quota":"hundred","identity":{"user":"` + strings.Repeat("v", 1025) + `"}}`, 400, "invalid-identity", "1025 bytes (max 1024)"},
		{"too many identity values", "/v1/quota/check", `{"quota":"hundred","identity":{` + manyValues(17) + `}}`, 400, "invalid-identity", "17 values (max 16)"},
		{"negative cost", "/v1/quota/check", `{"quota":"hundred",` + u + `,"cost":-1}`, 400, "invalid-cost", "cost -1 out of range 1..1099511627776"},
		{"zero cost", "/v1/quota/check", `{"quota":"hundred",` + u + `,"cost":0}`, 400, "invalid-cost", "use /v1/quota/status"},
		{"huge cost", "/v1/quota/check", `{"quota":"hundred",` + u + `,"cost":1099511627777}`, 400, "invalid-cost", "out of range"},
		{"fractional cost", "/v1/quota/check", `{"quota":"hundred",` + u + `,"cost":2.5}`, 400, "malformed-json", `"cost" must be a whole number`},
		{"unknown field", "/v1/quota/check", `{"quota":"hundred",` + u + `,"estimate":5}`, 400, "unknown-field", `unknown field "estimate" (known fields: quota, identity, cost)`},
		{"cost on status", "/v1/quota/status", `{"quota":"hundred",` + u + `,"cost":5}`, 400, "unknown-field", `unknown field "cost"`},
		{"bad enforce", "/v1/quota/check?enforce=2", `{"quota":"hundred",` + u + `}`, 400, "invalid-parameter", `enforce="2"`},
		{"missing request id", "/v1/quota/reserve", `{"quota":"hundred",` + u + `,"estimate":5}`, 400, "missing-request-id", `"request_id" is required`},
		{"oversized request id", "/v1/quota/reserve", `{"quota":"hundred",` + u + `,"request_id":"` + strings.Repeat("r", 129) + `","estimate":5}`, 400, "invalid-request-id", "request_id is 129 bytes (max 128)"},
		{"request id with a space", "/v1/quota/reserve", `{"quota":"hundred",` + u + `,"request_id":"a b","estimate":5}`, 400, "invalid-request-id", "byte 1 (0x20) is not printable ASCII"},
		{"numeric request id", "/v1/quota/reserve", `{"quota":"hundred",` + u + `,"request_id":7,"estimate":5}`, 400, "malformed-json", `"request_id" must be a string`},
		{"missing estimate", "/v1/quota/reserve", `{"quota":"hundred",` + u + `,"request_id":"r"}`, 400, "missing-cost", `"estimate" is required`},
		{"zero estimate", "/v1/quota/reserve", `{"quota":"hundred",` + u + `,"request_id":"r","estimate":0}`, 400, "invalid-cost", "estimate 0 out of range 1.."},
		{"text estimate", "/v1/quota/reserve", `{"quota":"hundred",` + u + `,"request_id":"r","estimate":"5"}`, 400, "malformed-json", `"estimate" must be a whole number`},
		{"missing actual", "/v1/quota/settle", `{"quota":"hundred",` + u + `,"request_id":"r"}`, 400, "missing-cost", `"actual" is required`},
		{"negative actual", "/v1/quota/settle", `{"quota":"hundred",` + u + `,"request_id":"r","actual":-4}`, 400, "invalid-cost", "actual -4 out of range 0.."},
		{"settle without id", "/v1/quota/settle", `{"quota":"hundred",` + u + `,"actual":4}`, 400, "missing-request-id", `"request_id" is required`},
		{"oversized body", "/v1/quota/check", `{"quota":"hundred","identity":{"user":"victim","pad":"` + strings.Repeat("x", 70<<10) + `"}}`, 413, "body-too-large", "larger than 65536 bytes"},
		{"not JSON", "/v1/quota/settle", `quota=hundred`, 400, "malformed-json", "malformed JSON at byte"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.post(tc.path, tc.body)
			p := problemOf(t, r)
			if r.status != tc.status || p.Type != server.ProblemTypePrefix+tc.kind || !strings.Contains(p.Detail, tc.detail) {
				t.Fatalf("got %d %s %q\nwant %d %s containing %q", r.status, p.Type, p.Detail, tc.status, tc.kind, tc.detail)
			}
		})
	}
	if st := e.quotaStatus("hundred", id("user", "victim")); st.Used != 0 || st.Reserved != 0 {
		t.Fatalf("bad requests consumed: %+v", st)
	}
	// Restore is an admin operation, validated the same way.
	for _, tc := range []struct {
		token, body string
		status      int
	}{
		{"", `{"quota":"hundred",` + u + `,"used":1}`, 401},
		{testToken, `{"quota":"hundred",` + u + `}`, 400},
		{testToken, `{"quota":"hundred",` + u + `,"used":-1}`, 400},
		{testToken, `{"quota":"zzz",` + u + `,"used":1}`, 400},
		{testToken, `{"quota":"hundred",` + u + `,"used":1,"period":"1999-01"}`, 400},
	} {
		if r := e.do("POST", "/admin/v1/quota/restore", tc.token, tc.body); r.status != tc.status {
			t.Errorf("restore %s with token %q: %d, want %d", tc.body, tc.token, r.status, tc.status)
		}
	}
	if st := e.quotaStatus("hundred", id("user", "victim")); st.Used != 0 {
		t.Fatalf("rejected restores changed the usage: %+v", st)
	}
}

// TestQuotaStoreDown: a quota operation against a dead Redis is a 503
// with Retry-After, not a silent allow.
func TestQuotaStoreDown(t *testing.T) {
	st, rs := redisStore(t)
	qs, err := quota.NewRedisStore(rs.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, limits, st, func(o *server.Options) { o.QuotaStore = qs; o.DecisionTimeout = 2 * time.Second })
	rs.Kill()
	r := e.post("/v1/quota/reserve", server.QuotaReserveRequest{Quota: "hundred", Identity: id("user", "d"), RequestID: "r", Estimate: ptr(1)})
	if p := problemOf(t, r); r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Fatalf("reserve with Redis down: %d %+v", r.status, p)
	}
}

// TestQuotaAndLeasesOnCluster: on a real Redis Cluster, identities in
// different slots each get exactly their limit, and reserve/settle and
// acquire/release work (each operation's keys share one slot).
func TestQuotaAndLeasesOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	client := cl.Client(t)
	st, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	qs, cs := redisQuotaLeases(t, client)
	e := start(t, limits, st, func(o *server.Options) { o.QuotaStore, o.ConcurrencyStore = qs, cs })
	users := []string{"a", "b", "c", "d", "e", "f"} // spread over the three primaries
	var wg sync.WaitGroup
	allowed := make([]atomic.Int64, len(users))
	for i, u := range users {
		for range 8 {
			wg.Go(func() {
				r := e.post("/v1/quota/check", server.QuotaCheckRequest{Quota: "pair", Identity: id("user", u, "ip", "10.0.0.1"), Cost: ptr(2)})
				var resp server.QuotaResponse
				if r.status != 200 || json.Unmarshal(r.body, &resp) != nil {
					t.Errorf("check: %d %s", r.status, r.body)
					return
				}
				if resp.Allowed {
					allowed[i].Add(1)
				}
			})
		}
	}
	wg.Wait()
	for i := range users {
		if got := allowed[i].Load(); got != 5 {
			t.Errorf("user %s: %d checks of cost 2 admitted at limit 10, want 5", users[i], got)
		}
	}
	k := id("api_key", "cluster")
	if _, r := e.quotaCall("/v1/quota/reserve", server.QuotaReserveRequest{Quota: "tokens", Identity: k, RequestID: "j", Estimate: ptr(100)}); !r.Allowed {
		t.Fatalf("reserve: %+v", r)
	}
	for range 2 {
		if _, r := e.quotaCall("/v1/quota/settle", server.QuotaSettleRequest{Quota: "tokens", Identity: k, RequestID: "j", Actual: ptr(60)}); r.Used != 60 || r.Reserved != 0 {
			t.Fatalf("settle: %+v", r)
		}
	}
	_, a := e.acquire("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "five", Identity: id("user", "a")})
	if !a.Acquired {
		t.Fatalf("acquire: %+v", a)
	}
	if rel := e.release("five", id("user", "a"), a.LeaseID); !rel.Released {
		t.Fatalf("release: %+v", rel)
	}
}
