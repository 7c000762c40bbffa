package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeTieredOperationsOnDownRedisAreUnavailable is the redisretry
// walk's repro: with Redis down (killed), a tiered check, a quota check
// and a lease, each looking its identity's tier up first, were reported
// as reason timeout (the check: degraded_reason timeout, counted in
// rate_limit_fallback_total{reason="timeout"}; the quota check and the
// lease: 503 store-timeout once their deadline had gone by), where a
// refused connection is reason unavailable: go-redis sent the lookup's
// HGET again three times, after pauses of 10 ms and more, before the
// dial error came back. The budget and the deadline here (25 ms) are
// shorter than those pauses' least sum (30 ms), and far longer than two
// refused dials: each operation is now answered unavailable.
func TestServeTieredOperationsOnDownRedisAreUnavailable(t *testing.T) {
	rs := redistest.Start(t)
	rs.Kill()
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--fallback-budget", "25ms", "--decision-timeout", "25ms")

	c := checkOn(t, svc.url, "/v1/check", server.CheckRequest{Policy: "llm", Identity: map[string]string{"api_key": "new1"}})
	if c.status != 200 || !c.resp.Degraded || c.resp.DegradedReason != "unavailable" {
		t.Errorf("tiered check with Redis down: %d degraded %v reason %q header %q; want 200, degraded, reason unavailable",
			c.status, c.resp.Degraded, c.resp.DegradedReason, c.degraded)
	}
	for _, reason := range []string{"timeout", "unavailable"} {
		want := 0.0
		if reason == "unavailable" {
			want = 1
		}
		name := `rate_limit_fallback_total{mode="` + strings.SplitN(c.degraded, ";", 2)[0] + `",reason="` + reason + `"}`
		if n := metricOrZero(t, svc.url, name); n != want {
			t.Errorf("%s = %v, want %v", name, n, want)
		}
	}

	for _, op := range []struct {
		path string
		body any
	}{
		{"/v1/quota/check", server.QuotaCheckRequest{Quota: "llm-tokens", Identity: map[string]string{"api_key": "new2"}}},
		{"/v1/concurrency/acquire", server.AcquireRequest{Limiter: "reports", Identity: map[string]string{"user": "new3"}}},
	} {
		status, body := postRaw(t, svc.url+op.path, op.body)
		if status != http.StatusServiceUnavailable || !strings.Contains(body, "urn:floodgate:problem:store-unavailable") {
			t.Errorf("%s with Redis down: %d %s; want 503 store-unavailable", op.path, status, body)
		}
	}
	if n := metricOrZero(t, svc.url, `floodgate_decision_errors_total{reason="timeout"}`); n != 0 {
		t.Errorf(`floodgate_decision_errors_total{reason="timeout"} = %v, want 0`, n)
	}
	if n := metricValue(t, svc.url, `floodgate_decision_errors_total{reason="store_unavailable"}`); n != 2 {
		t.Errorf(`floodgate_decision_errors_total{reason="store_unavailable"} = %v, want 2`, n)
	}
	if t.Failed() {
		t.Logf("log:\n%s", svc.Logs())
	}
}

// postRaw posts body as JSON to url and returns the status and the body.
func postRaw(t *testing.T, url string, body any) (int, string) {
	t.Helper()
	data, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// metricOrZero is metricValue for a series that may not have been
// created yet: absent, it reads 0.
func metricOrZero(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}
