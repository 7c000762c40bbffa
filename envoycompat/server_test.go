package envoycompat

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/health"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestHTTPJSONAnswersAsShouldRateLimit sends the same requests to two
// services of the same configuration, one through POST /json on a real
// HTTP server, the other by calling ShouldRateLimit: the answers must be
// equal, with 200, 429 or 500 as the overall code says, and 400 for a
// request refused.
func TestHTTPJSONAnswersAsShouldRateLimit(t *testing.T) {
	seq := []*rlspb.RateLimitRequest{
		req(t, "cost", 5, "user=a"),
		req(t, "cost", 16, "user=a"),
		req(t, "cost", 1, "user=a"),
		req(t, "cost", 0, "user=b"),
		req(t, "cost", 19, "user=b"),
		req(t, "cost", 7, "user=b+0"),
		req(t, "cost", 0, "user=b+1"),
		req(t, "cost", 1, "shadow=s"), req(t, "cost", 1, "shadow=s"), req(t, "cost", 1, "shadow=s"),
		req(t, "cost", 1, "free=x"),
		req(t, "cost", 1, "never=x", "user=z"),
		req(t, "cost", 1, "q=a", "q=b"), req(t, "cost", 1, "q=a", "q=b"), req(t, "cost", 1, "q=a", "q=b"),
		req(t, "cost", 1, "monthly=m"),
		req(t, "cost", 2, "user=o;override=3/hour"), req(t, "cost", 2, "user=o;override=3/hour"),
		req(t, "cost", 1, "user=ü 日本"),
		req(t, "nowhere", 1, "user=a"),
		req(t, "cost", 1, "nothing=here"),
		req(t, "", 1, "user=a"),
		req(t, "cost", 1),
	}
	options := map[string]Options{
		"defaults":         {},
		"headers":          {ResponseHeaders: true, LimitHeader: "RateLimit-Limit", RemainingHeader: "RateLimit-Remaining", ResetHeader: "RateLimit-Reset"},
		"global shadow":    {GlobalShadowMode: true},
		"dynamic metadata": {DynamicMetadata: true},
	}
	stores(t, func(t *testing.T, mk func() Store) {
		for name, opts := range options {
			t.Run(name, func(t *testing.T) {
				opts.CacheKeyPrefix = "direct_"
				direct := newRig(t, mk(), opts, costConfig).svc
				opts.CacheKeyPrefix = "http_"
				viaHTTP := newRig(t, mk(), opts, costConfig).svc
				srv := httptest.NewServer(viaHTTP.HTTPHandler(NewHealth(health.NewServer(), false)))
				t.Cleanup(srv.Close)
				seen := map[int]int{}
				for i, rq := range seq {
					body, err := protojson.Marshal(rq)
					if err != nil {
						t.Fatal(err)
					}
					want, wantErr := direct.ShouldRateLimit(context.Background(), rq)
					code, ctype, out := postJSON(t, srv.URL+"/json", body)
					seen[code]++
					if wantErr != nil {
						if code != http.StatusBadRequest {
							t.Errorf("request %d %s: %d %s, want 400 (%v)", i, body, code, out, wantErr)
						}
						continue
					}
					wantCode := map[rlspb.RateLimitResponse_Code]int{rlspb.RateLimitResponse_OK: 200, rlspb.RateLimitResponse_OVER_LIMIT: 429}[want.GetOverallCode()]
					if code != wantCode || ctype != "application/json" {
						t.Errorf("request %d %s: %d %q, want %d application/json", i, body, code, ctype, wantCode)
					}
					got := new(rlspb.RateLimitResponse)
					if err := protojson.Unmarshal(out, got); err != nil {
						t.Fatalf("request %d %s: answer %s: %v", i, body, out, err)
					}
					if !proto.Equal(got, want) {
						t.Errorf("request %d %s: answer %s, want %v", i, body, out, want)
					}
				}
				if seen[200] == 0 || seen[400] == 0 || (seen[429] == 0 && !opts.GlobalShadowMode) {
					t.Errorf("answers %v: want 200, 429 and 400 among them", seen)
				}
				for _, bad := range []string{"", "{not json", `{"domain":"cost","descriptors":[{"entries":[{"key":"user","value":"a"}]}],"bogus":1}`, strings.Repeat(" ", maxJSONBody+1)} {
					if code, _, out := postJSON(t, srv.URL+"/json", []byte(bad)); code != http.StatusBadRequest {
						t.Errorf("body %.40q: %d %s, want 400", bad, code, out)
					}
				}
			})
		}
	})
}

// postJSON posts body and returns the status, Content-Type and body of
// the answer.
func postJSON(t *testing.T, url string, body []byte) (int, string, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), out
}

// TestJSONRefusesCrossOriginBrowsers: a POST /json a browser sends on
// behalf of a web page (any Origin, the service's own and a rebound
// name's included, or a Sec-Fetch-Site naming another site), JSON in a
// text/plain form included, is answered 403 and counts nothing; requests
// without the browser's headers (Envoy, curl) are served, and so are ones
// with Sec-Fetch-Site same-origin or none without Origin.
func TestJSONRefusesCrossOriginBrowsers(t *testing.T) {
	svc := newRig(t, &MemoryStore{Now: func() time.Time { return fixedNow }}, Options{}, costConfig).svc
	srv := httptest.NewServer(svc.HTTPHandler(NewHealth(health.NewServer(), false)))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	body := `{"domain":"cost","descriptors":[{"entries":[{"key":"user","value":"xo"}]}]}`
	post := func(h map[string]string) (int, string) {
		t.Helper()
		rq, err := http.NewRequest("POST", srv.URL+"/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			if k == "Host" {
				rq.Host = v
				continue
			}
			rq.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(rq)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	remaining := func() uint32 { // after counting one more
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), req(t, "cost", 1, "user=xo"))
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatuses()[0].GetLimitRemaining()
	}
	before := remaining()
	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
		{"Sec-Fetch-Site": "same-site"},
		{"Origin": "https://evil.example", "Content-Type": "application/x-www-form-urlencoded"},
		// Its own origin, and a page whose DNS name is rebound to the
		// service's address (DNS rebinding): it serves no page.
		{"Origin": srv.URL},
		{"Origin": "http://attacker.example:" + port, "Sec-Fetch-Site": "same-origin", "Host": "attacker.example:" + port},
	} {
		if code, out := post(h); code != http.StatusForbidden || !strings.Contains(out, "nothing was counted") {
			t.Fatalf("POST /json with %v: %d %s, want 403", h, code, out)
		}
	}
	if got := remaining(); got != before-1 {
		t.Fatalf("remaining after the refused requests and one more: %d, want %d", got, before-1)
	}
	for _, h := range []map[string]string{nil, {"Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}} {
		if code, out := post(h); code != http.StatusOK {
			t.Fatalf("POST /json with %v: %d %s, want 200", h, code, out)
		}
	}
	if got := remaining(); got != before-5 {
		t.Fatalf("remaining after 3 served requests and one more: %d, want %d", got, before-5)
	}
}
