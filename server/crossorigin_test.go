package server_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/server"
)

// crossOriginConfig has a policy, a quota and a concurrency limit to
// spend from a browser.
const crossOriginConfig = `
version: "1"
policies:
  - name: api
    layers:
      - {name: per-user, algorithm: fixed_window, limit: 100, window: 1h, dimension: user}
quotas:
  - {name: tokens, limit: 1000, period: month, dimension: api_key}
concurrency:
  - {name: five, limit: 5, lease_ttl: 30s, dimension: user}
`

// field decodes the JSON answer a and returns its field name.
func field(t *testing.T, a answer, name string) any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(a.body), &m); err != nil {
		t.Fatalf("decoding %q: %v", a.body, err)
	}
	return m[name]
}

// TestCrossOriginRequestsRefused: on both engines, a request a browser
// sends from a page of another origin (Sec-Fetch-Site cross-site or
// same-site, or any Origin not trusted), whatever its Content-Type,
// is answered 403 cross-origin-request on every endpoint that changes
// something and changes nothing: no check, quota unit or lease is
// counted, no reset is done, and no admin failure is counted (GETs
// included). Requests without those headers (curl), ones with
// Sec-Fetch-Site same-origin or none without Origin, and ones from a
// trusted origin are served.
func TestCrossOriginRequestsRefused(t *testing.T) {
	const trusted = "https://app.example.com"
	for _, engine := range []server.HTTPEngine{server.NetHTTP, server.FastHTTP} {
		t.Run(string(engine), func(t *testing.T) {
			e := serveEngine(t, engine, crossOriginConfig, memStore(t), func(o *server.Options) {
				o.TrustedOrigins = []string{trusted}
			})
			c := &http.Client{}
			defer c.CloseIdleConnections()
			do := func(x exchange) answer { t.Helper(); return send(t, c, e.url, x) }
			remaining := func() float64 {
				t.Helper()
				a := do(exchange{method: "POST", path: "/v1/peek", body: check("api", "x")})
				if a.status != http.StatusOK {
					t.Fatalf("peek: %d %s", a.status, a.body)
				}
				return field(t, a, "remaining").(float64)
			}
			host := strings.TrimPrefix(e.url, "http://")
			served := []map[string]string{
				nil, // curl, a server-side client
				{"Content-Type": "application/x-www-form-urlencoded"}, // curl -d
				{"Sec-Fetch-Site": "same-origin"},
				{"Sec-Fetch-Site": "none"}, // typed in the address bar
				{"Origin": trusted, "Sec-Fetch-Site": "cross-site"},
				{"Origin": trusted},
			}
			for _, h := range served {
				if a := do(exchange{method: "POST", path: "/v1/check", body: check("api", "x"), header: h}); a.status != http.StatusOK {
					t.Fatalf("check with %v: %d %s, want 200", h, a.status, a.body)
				}
			}
			want := float64(100 - len(served))
			if got := remaining(); got != want {
				t.Fatalf("remaining after %d served checks: %v, want %v", len(served), got, want)
			}

			crossSite := map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example", "Content-Type": "text/plain"}
			refused := []exchange{
				{method: "POST", path: "/v1/check", body: check("api", "x"), header: crossSite},
				{method: "POST", path: "/v1/check?enforce=1", body: check("api", "x"), header: map[string]string{"Sec-Fetch-Site": "same-site"}},
				{method: "POST", path: "/v1/check", body: check("api", "x"), header: map[string]string{"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"}},
				{method: "POST", path: "/v1/check", body: check("api", "x"), header: map[string]string{"Origin": "null"}},
				{method: "POST", path: "/v1/check", body: check("api", "x"), header: map[string]string{"Origin": trusted + ":8443"}},
				// The service's own origin: it serves no page sending this
				// (a page of a DNS name rebound to it sends the same).
				{method: "POST", path: "/v1/check", body: check("api", "x"), header: map[string]string{"Origin": "http://" + host}},
				{method: "POST", path: "/v1/check/batch", body: `{"requests":[` + check("api", "x") + `]}`, header: crossSite},
				{method: "POST", path: "/v1/peek", body: check("api", "x"), header: crossSite},
				{method: "POST", path: "/v1/quota/check", body: `{"quota":"tokens","identity":{"api_key":"k"},"cost":10}`, header: crossSite},
				{method: "POST", path: "/v1/quota/reserve", body: `{"quota":"tokens","identity":{"api_key":"k"},"request_id":"r1","estimate":10}`, header: crossSite},
				{method: "POST", path: "/v1/concurrency/acquire", body: `{"limiter":"five","identity":{"user":"x"}}`, header: crossSite},
				{method: "POST", path: "/admin/v1/reset", token: testToken, body: `{"policy":"api","identity":{"user":"x"}}`, header: crossSite},
				{method: "POST", path: "/nope", header: crossSite},
			}
			for range server.AdminFailureLimit + 1 {
				refused = append(refused, exchange{method: "GET", path: "/admin/v1/config", header: crossSite})
			}
			for _, x := range refused {
				a := do(x)
				if a.status != http.StatusForbidden || a.header.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("%s %s with %v: %d %v %s, want a 403 problem", x.method, x.path, x.header, a.status, a.header, a.body)
				}
				if kind := field(t, a, "type"); kind != server.ProblemTypePrefix+"cross-origin-request" {
					t.Fatalf("%s %s with %v: problem %v", x.method, x.path, x.header, kind)
				}
				if detail := field(t, a, "detail").(string); !strings.Contains(detail, "nothing was counted") || !strings.Contains(detail, "--trusted-origin") {
					t.Fatalf("%s %s: detail %q", x.method, x.path, detail)
				}
			}
			// Nothing changed: the count (neither spent nor reset), the
			// quota, the leases, and the admin failures of this network.
			if got := remaining(); got != want {
				t.Fatalf("remaining after the refused requests: %v, want %v", got, want)
			}
			if a := do(exchange{method: "POST", path: "/v1/quota/status", body: `{"quota":"tokens","identity":{"api_key":"k"}}`}); field(t, a, "used") != 0.0 || field(t, a, "reserved") != 0.0 {
				t.Fatalf("quota after the refused requests: %s, want nothing used or reserved", a.body)
			}
			if a := do(exchange{method: "POST", path: "/v1/concurrency/acquire", body: `{"limiter":"five","identity":{"user":"x"}}`}); field(t, a, "in_flight") != 1.0 {
				t.Fatalf("acquire after the refused requests: %s, want in_flight 1", a.body)
			}
			if a := do(exchange{method: "GET", path: "/admin/v1/config", token: testToken}); a.status != http.StatusOK {
				t.Fatalf("admin call after %d refused GETs without a token: %d %s, want 200", server.AdminFailureLimit+1, a.status, a.body)
			}
			// Safe methods elsewhere are not refused.
			if a := do(exchange{method: "GET", path: "/healthz", header: crossSite}); a.status != http.StatusOK {
				t.Fatalf("GET /healthz cross-site: %d", a.status)
			}
		})
	}
}

// TestTrustedOriginValidated: server.New refuses a trusted origin that no
// browser would send, saying why.
func TestTrustedOriginValidated(t *testing.T) {
	holder, err := config.NewHolder(parse(t, crossOriginConfig))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(memStore(t), floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for origin, why := range map[string]string{
		"app.example.com":             "want scheme://host[:port]",
		"localhost:3000":              "want scheme://host[:port]",
		"null":                        "want scheme://host[:port]",
		"*":                           "want scheme://host[:port]",
		"https://app.example.com/":    "no path",
		"https://app.example.com/ui":  "no path",
		"https://app.example.com?x":   "no path, query",
		"https://u:p@app.example.com": "no user information",
		"https://App.Example.com":     "lower case",
		"https://app.example.com:443": "write https://app.example.com",
		"http://app.example.com:80":   "write http://app.example.com",
		"https://a b.example":         "invalid",
		// Accepted before, never matched (a re-walk).
		"https://*.example.com":         "without wildcards",
		"ftp://x":                       "http:// or https://",
		"https://app.example.com:0":     "port 0 is not 1..65535",
		"https://app.example.com:99999": "port 99999 is not 1..65535",
	} {
		err := server.ValidateTrustedOrigin(origin)
		if !errors.Is(err, server.ErrInvalidOrigin) || !strings.Contains(err.Error(), why) {
			t.Errorf("ValidateTrustedOrigin(%q): %v, want an error saying %q", origin, err, why)
		}
		if _, err := server.New(lim, holder, server.Options{TrustedOrigins: []string{"https://ok.example", origin}}); !errors.Is(err, server.ErrInvalidOrigin) || !strings.Contains(err.Error(), why) {
			t.Errorf("server.New with trusted origin %q: %v, want an error saying %q", origin, err, why)
		}
	}
	for _, origin := range []string{"https://app.example.com", "http://localhost:3000", "http://[::1]:8080", "https://app.example.com:8443"} {
		if err := server.ValidateTrustedOrigin(origin); err != nil {
			t.Errorf("ValidateTrustedOrigin(%q): %v", origin, err)
		}
	}
}
