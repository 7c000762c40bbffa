package envoycompat

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/health"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-rl/floodgate/internal/syncbuf"
)

// TestRefusedRequestsLogged: a request refused as a service_error (an
// empty domain, no descriptors, more than MaxDescriptors, no
// configuration loaded) counted in
// floodgate_envoy_should_rate_limit_errors_total but was never logged
// (only store errors were), so an operator paged on the counter could not
// tell which client sent what. Now the first one is logged at warn level
// with the client's address, the domain and why, the next ones within
// LogEvery only counted, over gRPC and POST /json alike.
func TestRefusedRequestsLogged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config bool
		req    *rlspb.RateLimitRequest
		why    string
	}{
		{"empty domain", true, req(t, "", 1, "key2=a"), "rate limit domain must not be empty"},
		{"no descriptors", true, req(t, "another", 1), "rate limit descriptor list must not be empty"},
		{"too many descriptors", true, req(t, "another", 1, "key2=a", "key2=b", "key2=c"), "a request carries at most 2 (FLOODGATE_MAX_DESCRIPTORS)"},
		{"no configuration", false, req(t, "another", 1, "key2=a"), "no rate limit configuration loaded"},
	} {
		for _, via := range []string{"grpc", "json"} {
			t.Run(tc.name+" "+via, func(t *testing.T) {
				logs := &syncbuf.Buffer{}
				opts := Options{Log: slog.New(slog.NewTextHandler(logs, nil)), LogEvery: time.Hour, MaxDescriptors: 2}
				var r *rig
				if tc.config {
					r = newRig(t, &MemoryStore{}, opts, integrationConfig)
				} else {
					r = newRig(t, &MemoryStore{}, opts)
				}
				call := func() {
					t.Helper()
					if via == "grpc" {
						if _, err := r.client.ShouldRateLimit(context.Background(), tc.req); err == nil {
							t.Fatal("refused request answered without error")
						}
						return
					}
					hs := httptest.NewServer(r.svc.HTTPHandler(NewHealth(health.NewServer(), false)))
					defer hs.Close()
					body, err := protojson.Marshal(tc.req)
					if err != nil {
						t.Fatal(err)
					}
					resp, err := http.Post(hs.URL+"/json", "application/json", strings.NewReader(string(body)))
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusBadRequest {
						t.Fatalf("POST /json of a refused request: %d, want 400", resp.StatusCode)
					}
				}
				const n = 5
				for range n {
					call()
				}
				out := logs.String()
				if got := strings.Count(out, "ShouldRateLimit: request refused (service_error)"); got != 1 {
					t.Fatalf("%d refused request lines for %d refused requests, want 1:\n%s", got, n, out)
				}
				for _, want := range []string{"level=WARN", "client=127.0.0.1:", "domain=" + tc.req.GetDomain(), tc.why} {
					if !strings.Contains(out, want) {
						t.Errorf("the refused request line lacks %q:\n%s", want, out)
					}
				}
				if got := testutil.ToFloat64(r.metrics.serviceError); got != n {
					t.Errorf("service_error = %v, want %d", got, n)
				}
			})
		}
	}
}

// TestUnreadableJSONLogged: a POST /json whose body is not a
// RateLimitRequest (malformed JSON, a field it lacks, a body over the
// 1 MiB limit) was answered "Bad Request" and left no trace: it never
// reaches ShouldRateLimit, so no counter counts it (as with theirs), and
// nothing was logged. Now the first one is logged at warn level with the
// client's address and why, the next ones within LogEvery not; none is
// counted as a service_error.
func TestUnreadableJSONLogged(t *testing.T) {
	for _, tc := range []struct {
		name, body, why string
	}{
		{"malformed", `{"domain": "another", "descriptors": [`, "unexpected EOF"},
		{"unknown field", `{"domain": "another", "descriptor": []}`, `unknown field \"descriptor\"`},
		{"too long", `{"domain": "` + strings.Repeat("a", maxJSONBody) + `"}`, "the body is longer than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &syncbuf.Buffer{}
			r := newRig(t, &MemoryStore{}, Options{Log: slog.New(slog.NewTextHandler(logs, nil)), LogEvery: time.Hour}, integrationConfig)
			hs := httptest.NewServer(r.svc.HTTPHandler(NewHealth(health.NewServer(), false)))
			defer hs.Close()
			const n = 3
			for range n {
				resp, err := http.Post(hs.URL+"/json", "application/json", strings.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest {
					t.Fatalf("POST /json of an unreadable body: %d, want 400", resp.StatusCode)
				}
			}
			out := logs.String()
			if got := strings.Count(out, "POST /json: the body is not a RateLimitRequest"); got != 1 {
				t.Fatalf("%d unreadable body lines for %d requests, want 1:\n%s", got, n, out)
			}
			for _, want := range []string{"level=WARN", "client=127.0.0.1:", tc.why} {
				if !strings.Contains(out, want) {
					t.Errorf("the unreadable body line lacks %q:\n%.2000s", want, out)
				}
			}
			if len(out) > 2000 {
				t.Errorf("the unreadable body line is %d bytes long: the error is not clipped", len(out))
			}
			if got := testutil.ToFloat64(r.metrics.serviceError); got != 0 {
				t.Errorf("service_error = %v for unreadable bodies, want 0 (they never reach ShouldRateLimit)", got)
			}
		})
	}
}
