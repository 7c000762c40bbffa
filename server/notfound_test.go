package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-rl/floodgate/server"
)

// TestUnknownRouteIsProblem: a path the API does not have (404) and a
// known path with the wrong method (405, with Allow) answer
// application/problem+json like every other error.
func TestUnknownRouteIsProblem(t *testing.T) {
	e := start(t, layered, memStore(t), nil)
	r := e.do("POST", "/v1/chekc", "", map[string]string{})
	if r.status != http.StatusNotFound {
		t.Fatalf("status %d, want 404", r.status)
	}
	if p := problemOf(t, r); !strings.HasSuffix(p.Type, "not-found") || !strings.Contains(p.Detail, "/v1/chekc") || !strings.Contains(p.Detail, "POST /v1/check,") {
		t.Errorf("404 problem %+v", p)
	}
	r = e.do("GET", "/v1/check", "", nil)
	if r.status != http.StatusMethodNotAllowed {
		t.Fatalf("status %d, want 405", r.status)
	}
	if p := problemOf(t, r); !strings.HasSuffix(p.Type, "method-not-allowed") || !strings.Contains(p.Detail, "POST") {
		t.Errorf("405 problem %+v", p)
	}
	if got := r.header.Get("Allow"); !strings.Contains(got, "POST") {
		t.Errorf("Allow %q, want POST", got)
	}
	if r := e.do("GET", "/healthz", "", nil); r.status != http.StatusOK {
		t.Errorf("GET /healthz: %d", r.status)
	}
}

// TestUncleanPathRedirects: a path not in clean form is answered 307 to
// the clean path, query kept, on both HTTP servers, and nothing is
// counted (as docs/configuration.md says).
func TestUncleanPathRedirects(t *testing.T) {
	for _, engine := range []server.HTTPEngine{server.NetHTTP, server.FastHTTP} {
		e := serveEngine(t, engine, engineConfig, memStore(t), nil)
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		for _, path := range []string{"//v1/check?enforce=1", "/v1/./check?enforce=1", "/v1/x/../check?enforce=1"} {
			resp, err := c.Post(e.url+path, "application/json", strings.NewReader(check("api", "unclean")))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusTemporaryRedirect || loc != "/v1/check?enforce=1" {
				t.Errorf("%s %s: %d Location %q; want 307 to /v1/check?enforce=1", engine, path, resp.StatusCode, loc)
			}
		}
		if a := send(t, c, e.url, exchange{method: "POST", path: "/v1/peek", body: check("api", "unclean")}); !strings.Contains(a.body, `"remaining":2,`) {
			t.Errorf("%s: after the redirected checks: %s; want nothing counted", engine, a.body)
		}
	}
}

// TestNotFoundNamesThePathAsSent: a 404 names the path as the request
// sent it, escapes and all, on both engines: /v1%2fcheck used to be
// answered "no endpoint /v1/check", naming an endpoint that exists.
func TestNotFoundNamesThePathAsSent(t *testing.T) {
	for _, engine := range []server.HTTPEngine{server.NetHTTP, server.FastHTTP} {
		e := serveEngine(t, engine, engineConfig, memStore(t), nil)
		req, err := http.NewRequest("POST", e.url+"/v1%2fcheck", strings.NewReader(check("api", "escaped")))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"no endpoint /v1%2fcheck; `) {
			t.Errorf("%s: POST /v1%%2fcheck: %d %s; want 404 naming /v1%%2fcheck", engine, resp.StatusCode, body)
		}
	}
}

// TestNotFoundNamesTheAdminListener: with the admin endpoints (and
// /metrics) on the admin listener only, the public listener's 404 for one
// of them says where they are (a new user following the docs' curl of
// /admin/v1/tier on --addr with --admin-addr set got a 404 naming
// neither); without, it does not mention the admin listener.
func TestNotFoundNamesTheAdminListener(t *testing.T) {
	for _, tc := range []struct {
		name             string
		separate, metric bool
		want             string
	}{
		{"separate admin", true, false, "; the admin endpoints (/admin/v1/...) are on the admin listener (--admin-addr)"},
		{"separate admin and metrics", true, true, "; the admin endpoints (/admin/v1/...) and /metrics are on the admin listener (--admin-addr)"},
		{"one listener", false, false, ""},
	} {
		e := start(t, layered, memStore(t), func(o *server.Options) {
			o.SeparateAdmin, o.MetricsAdminOnly = tc.separate, tc.metric
			o.Gatherer = prometheus.NewRegistry()
		})
		path := "/admin/v1/tier"
		if !tc.separate {
			path = "/admin/v1/nope"
		}
		r := e.do("POST", path, `{}`, map[string]string{"Authorization": "Bearer " + testToken})
		if r.status != http.StatusNotFound {
			t.Fatalf("%s: status %d, want 404", tc.name, r.status)
		}
		p := problemOf(t, r)
		if tc.want == "" && strings.Contains(p.Detail, "admin listener") || tc.want != "" && !strings.HasSuffix(p.Detail, tc.want) {
			t.Errorf("%s: 404 detail %q, want it to end %q", tc.name, p.Detail, tc.want)
		}
	}
}
