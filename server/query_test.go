package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/server"
)

// TestRepeatedQueryParameterRefused: a query parameter the API reads,
// given twice, is refused with 400 invalid-parameter naming it, on every
// endpoint that reads one and on both HTTP engines, and nothing is
// counted. Before, the first value was read and the others ignored:
// "?enforce=1&enforce=yes" passed, "?enforce=1&enforce=0" answered 429,
// where a proxy or a client library reading the last value saw neither.
func TestRepeatedQueryParameterRefused(t *testing.T) {
	quota := `{"quota":"tokens","identity":{"api_key":"k"}`
	tests := []struct {
		name, method, path, token, body, param string
	}{
		{"check, invalid second value", "POST", "/v1/check?enforce=1&enforce=yes", "", check("api", "q"), "enforce"},
		{"check, contradicting values", "POST", "/v1/check?enforce=1&enforce=0", "", check("api", "q"), "enforce"},
		{"check, the same value twice", "POST", "/v1/check?enforce=1&enforce=1", "", check("api", "q"), "enforce"},
		{"check, one value escaped", "POST", "/v1/check?enforce=%31&enforce=0", "", check("api", "q"), "enforce"},
		{"check, the name escaped", "POST", "/v1/check?enforce=1&enf%6Frce=0", "", check("api", "q"), "enforce"},
		{"peek", "POST", "/v1/peek?enforce=0&x=1&enforce=1", "", check("api", "q"), "enforce"},
		{"batch", "POST", "/v1/check/batch?enforce=0&enforce=0", "", `{"requests":[` + check("api", "q") + `]}`, "enforce"},
		{"quota check", "POST", "/v1/quota/check?enforce=1&enforce=0", "", quota + `}`, "enforce"},
		{"quota status", "POST", "/v1/quota/status?enforce=1&enforce=0", "", quota + `}`, "enforce"},
		{"quota reserve", "POST", "/v1/quota/reserve?enforce=1&enforce=0", "", quota + `,"request_id":"r","estimate":5}`, "enforce"},
		{"quota settle", "POST", "/v1/quota/settle?enforce=1&enforce=0", "", quota + `,"request_id":"r","actual":5}`, "enforce"},
		{"acquire", "POST", "/v1/concurrency/acquire?enforce=1&enforce=0", "", `{"limiter":"five","identity":{"user":"q"}}`, "enforce"},
		{"tier dimension", "GET", "/admin/v1/tier?dimension=user&value=a&dimension=ip", testToken, "", "dimension"},
		{"tier value", "GET", "/admin/v1/tier?dimension=user&value=a&value=b", testToken, "", "value"},
		{"top denied", "GET", "/admin/v1/top-denied?n=5&n=500000", testToken, "", "n"},
		{"readiness", "GET", "/readyz?degraded=ok&degraded=no", "", "", "degraded"},
	}
	for _, engine := range []server.HTTPEngine{server.NetHTTP, server.FastHTTP} {
		t.Run(string(engine), func(t *testing.T) {
			e := serveEngine(t, engine, engineConfig, memStore(t), nil)
			for _, tc := range tests {
				a := send(t, http.DefaultClient, e.url, exchange{method: tc.method, path: tc.path, token: tc.token, body: tc.body})
				var p server.Problem
				if err := json.Unmarshal([]byte(a.body), &p); err != nil || a.status != 400 || p.Type != server.ProblemTypePrefix+"invalid-parameter" ||
					!strings.Contains(p.Detail, "query parameter "+tc.param+" is given 2 times") {
					t.Errorf("%s: %s %s: %d %s; want 400 invalid-parameter naming %s", tc.name, tc.method, tc.path, a.status, a.body, tc.param)
				}
			}
			// Nothing was counted or held: a refused request decides nothing.
			for _, x := range []struct{ path, body, want string }{
				{"/v1/peek", check("api", "q"), `"remaining":2,`},
				{"/v1/quota/status", quota + `}`, `"used":0,"reserved":0,`},
				{"/v1/concurrency/acquire", `{"limiter":"five","identity":{"user":"q"}}`, `"in_flight":1,`},
			} {
				if a := send(t, http.DefaultClient, e.url, exchange{method: "POST", path: x.path, body: x.body}); a.status != 200 || !strings.Contains(a.body, x.want) {
					t.Errorf("%s after the refused requests: %d %s; want %s", x.path, a.status, a.body, x.want)
				}
			}
			// One value is read as before.
			for _, path := range []string{"/v1/check?enforce=1&x=1&y=2", "/v1/check?x=a+b&enforce=%31"} {
				if a := send(t, http.DefaultClient, e.url, exchange{method: "POST", path: path, body: check("api", "one")}); a.status != 200 {
					t.Errorf("%s: %d %s; want 200", path, a.status, a.body)
				}
			}
		})
	}
}
