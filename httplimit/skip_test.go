package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/httplimit"
)

// TestSkip: requests Options.Skip returns true for (CORS preflight, a
// health check) reach the handler undecided — uncounted, without rate
// limit headers — however used up the limit is; the others are decided.
func TestSkip(t *testing.T) {
	skip := func(r *http.Request) bool { return r.Method == http.MethodOptions || r.URL.Path == "/healthz" }
	srv := serve(t, memLimiter(t), []httplimit.Rule{{Policy: fixedWindow(t, "api", 1, time.Minute)}}, httplimit.Options{Skip: skip})
	preflight := func() response {
		req, err := http.NewRequest(http.MethodOptions, srv.URL+"/items", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return response{status: resp.StatusCode, header: resp.Header}
	}
	for i := range 3 {
		for _, r := range []response{preflight(), get(t, srv.Client(), srv.URL+"/healthz")} {
			if r.status != http.StatusOK || r.header.Get("X-RateLimit-Limit") != "" {
				t.Fatalf("skipped request %d: status %d, headers %v; want 200 without rate limit headers", i, r.status, r.header)
			}
		}
	}
	if r := get(t, srv.Client(), srv.URL+"/items"); r.status != http.StatusOK || r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("first decided request: status %d, remaining %q; want 200 and 0 (skipped requests not counted)", r.status, r.header.Get("X-RateLimit-Remaining"))
	}
	if r := get(t, srv.Client(), srv.URL+"/items"); r.status != http.StatusTooManyRequests {
		t.Fatalf("second decided request: status %d, want 429", r.status)
	}
	if r := preflight(); r.status != http.StatusOK || r.header.Get("Retry-After") != "" {
		t.Fatalf("preflight once the limit is used up: status %d, headers %v", r.status, r.header)
	}
}
