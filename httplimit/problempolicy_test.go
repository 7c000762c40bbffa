package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/httplimit"
)

// TestInnerFailClosedNamesItsPolicies reproduces the library walk's LOW
// finding: the package doc says an inner middleware's 503 (its store
// failed closed) names the inner policy in its body, next to the outer
// middleware's headers, but the body had no "policy". Now it names the
// policies of the failed decision, comma-separated.
func TestInnerFailClosedNamesItsPolicies(t *testing.T) {
	outer, err := httplimit.New(memLimiter(t), []httplimit.Rule{{Policy: fixedWindow(t, "per-ip", 10, time.Minute)}}, httplimit.Options{Clock: fixedClock})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := httplimit.New(deadStore(t), []httplimit.Rule{
		{Policy: fixedWindow(t, "login", 2, time.Minute)},
		{Policy: fixedWindow(t, "login-global", 20, time.Minute)},
	}, httplimit.Options{FailureMode: httplimit.FailClosed, Clock: fixedClock})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(outer.Handler(inner.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))))
	t.Cleanup(srv.Close)
	r := get(t, srv.Client(), srv.URL)
	if r.status != http.StatusServiceUnavailable || r.header.Get("X-RateLimit-Limit") != "10" {
		t.Fatalf("status %d, headers %v; want 503 with the outer's X-RateLimit-Limit 10", r.status, r.header)
	}
	if r.problem.Policy != "login,login-global" {
		t.Errorf("problem policy %q, want %q; body %s", r.problem.Policy, "login,login-global", r.body)
	}
}
