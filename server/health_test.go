package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/server"
)

// serveHealth serves srv's health handler with ServeHealth on 127.0.0.1
// until the test ends and returns its URL.
func serveHealth(t *testing.T, srv *server.Server) string {
	t.Helper()
	return serveAside(t, srv.ServeHealth, "ServeHealth")
}

// TestHealthHandler: the health listener (serve --health-addr) answers GET
// and HEAD /healthz and /readyz exactly as the public listener does
// (?degraded=ok, a store down, draining), refuses a Host AllowedHosts
// refuses and admits an IP address (the pod IP kubelet probes with), and
// answers 404 to everything else: the API, /metrics, the admin endpoints,
// the profiles, other methods on the probes' paths.
func TestHealthHandler(t *testing.T) {
	for _, engine := range []server.HTTPEngine{server.NetHTTP, server.FastHTTP} {
		t.Run(string(engine), func(t *testing.T) {
			var down atomic.Bool
			e := serveEngine(t, engine, crossOriginConfig, memStore(t), func(o *server.Options) {
				o.Ready = func(context.Context) error {
					if down.Load() {
						return errors.New("redis: connection refused")
					}
					return nil
				}
				o.ServesDegraded = true
				o.AllowedHosts = []string{"floodgate.internal"}
				o.Profiling = true // on the admin handler only: not here either
				o.ShutdownDelay = 3 * time.Second
			})
			health := serveHealth(t, e.srv)
			c := &http.Client{}
			defer c.CloseIdleConnections()
			// alike sends x to both listeners and fails t unless they
			// answer alike, with want.
			alike := func(what string, x exchange, want int) answer {
				t.Helper()
				a, pub := send(t, c, health, x), send(t, c, e.url, x)
				if a.status != want || a.status != pub.status || a.body != pub.body || a.header.Get("Content-Type") != pub.header.Get("Content-Type") {
					t.Fatalf("%s: %s %s: health listener %d %s; public listener %d %s; want %d from both", what, x.method, x.path, a.status, a.body, pub.status, pub.body, want)
				}
				return a
			}
			for _, m := range []string{"GET", "HEAD"} {
				if a := alike("ready", exchange{method: m, path: "/healthz"}, 200); m == "GET" && !strings.Contains(a.body, `"ok"`) {
					t.Fatalf("GET /healthz: %s", a.body)
				} else if m == "HEAD" && a.body != "" {
					t.Fatalf("HEAD /healthz: a body %q", a.body)
				}
				alike("ready", exchange{method: m, path: "/readyz"}, 200)
				alike("ready", exchange{method: m, path: "/readyz?degraded=ok"}, 200)
			}
			// A probe comes with the pod's IP address as Host.
			alike("ready", exchange{method: "GET", path: "/readyz", header: map[string]string{"Host": "10.1.2.3:8086"}}, 200)
			alike("ready", exchange{method: "GET", path: "/healthz", header: map[string]string{"Host": "floodgate.internal:8086"}}, 200)
			a := alike("a rebound page", exchange{method: "GET", path: "/readyz", header: map[string]string{"Host": "attacker.example:8086"}}, 421)
			wantProblem(t, "GET /readyz to Host attacker.example", a, http.StatusMisdirectedRequest, "host-not-allowed", "--allowed-host")
			alike("bad query", exchange{method: "GET", path: "/readyz?degraded=ok&degraded=no"}, 400)

			down.Store(true)
			if a := alike("store down", exchange{method: "GET", path: "/readyz"}, 503); !strings.Contains(a.body, "connection refused") {
				t.Fatalf("readyz, store down: %s, want the error", a.body)
			}
			if a := alike("store down", exchange{method: "GET", path: "/readyz?degraded=ok"}, 200); !strings.Contains(a.body, `"degraded"`) {
				t.Fatalf("readyz?degraded=ok, store down: %s, want status degraded", a.body)
			}
			alike("store down", exchange{method: "HEAD", path: "/readyz"}, 503)
			alike("store down", exchange{method: "GET", path: "/healthz"}, 200)
			down.Store(false)

			for _, x := range []exchange{
				{method: "GET", path: "/metrics"},
				{method: "POST", path: "/v1/check", body: check("api", "x")},
				{method: "POST", path: "/v1/peek", body: check("api", "x")},
				{method: "POST", path: "/v1/quota/check", body: `{"quota":"tokens","identity":{"api_key":"k"},"cost":10}`},
				{method: "POST", path: "/v1/concurrency/acquire", body: `{"limiter":"five","identity":{"user":"x"}}`},
				{method: "GET", path: "/admin/v1/config", token: testToken},
				{method: "POST", path: "/admin/v1/reset", token: testToken, body: `{"policy":"api","identity":{"user":"x"}}`},
				{method: "GET", path: "/debug/pprof/heap"},
				{method: "GET", path: "/debug/pprof/"},
				{method: "GET", path: "/"},
				{method: "GET", path: "/nope"},
				{method: "GET", path: "/healthz/"},
				{method: "GET", path: "/readyz/x"},
				{method: "POST", path: "/healthz"},
				{method: "PUT", path: "/readyz"},
				{method: "DELETE", path: "/readyz"},
				{method: "OPTIONS", path: "/healthz"},
			} {
				a := send(t, c, health, x)
				wantProblem(t, "health listener: "+x.method+" "+x.path, a, http.StatusNotFound, "not-found", "--health-addr", "/healthz and /readyz only")
			}
			if a := send(t, c, health, exchange{method: "HEAD", path: "/metrics"}); a.status != http.StatusNotFound {
				t.Fatalf("HEAD /metrics on the health listener: %d, want 404", a.status)
			}
			// Nothing the API counts was counted by the refused requests.
			if got := peekRemaining(t, c, e.url); got != 100 {
				t.Fatalf("remaining after the health listener's 404s: %v, want 100", got)
			}

			// Serve's shutdown: readiness off on the health listener too,
			// during ShutdownDelay, while it still serves.
			e.cancel()
			waitHealth := time.Now().Add(10 * time.Second)
			for {
				a := send(t, c, health, exchange{method: "GET", path: "/readyz?degraded=ok"})
				if a.status == http.StatusServiceUnavailable && strings.Contains(a.body, `"draining"`) {
					break
				}
				if time.Now().After(waitHealth) {
					t.Fatalf("readyz?degraded=ok on the health listener while Serve drains: %d %s, want 503 draining", a.status, a.body)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if a := send(t, c, health, exchange{method: "GET", path: "/healthz"}); a.status != http.StatusOK {
				t.Fatalf("healthz on the health listener while Serve drains: %d %s, want 200", a.status, a.body)
			}
		})
	}
}
