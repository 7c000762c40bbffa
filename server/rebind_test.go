package server_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/server"
)

// The DNS rebinding walk: a page on attacker.example, whose owner points
// that name at 127.0.0.1, is of the same origin as the service for its
// visitor's browser. Its requests say so (Host and Origin both
// attacker.example:PORT, Sec-Fetch-Site: same-origin), and net/http's
// CrossOriginProtection, which served the API before, took them for the
// service's own.

// rebound are the headers of a POST a rebound page's browser sends to
// host (the service's host:port).
func rebound(host string) map[string]string {
	_, port, _ := net.SplitHostPort(host)
	return map[string]string{"Host": "attacker.example:" + port, "Origin": "http://attacker.example:" + port, "Sec-Fetch-Site": "same-origin"}
}

// peekRemaining returns what /v1/peek reports left of policy api for
// user x.
func peekRemaining(t *testing.T, c *http.Client, base string) float64 {
	t.Helper()
	a := send(t, c, base, exchange{method: "POST", path: "/v1/peek", body: check("api", "x")})
	if a.status != http.StatusOK {
		t.Fatalf("peek: %d %s", a.status, a.body)
	}
	return field(t, a, "remaining").(float64)
}

// wantProblem fails t unless a is the problem kind with status, its
// detail saying every one of says.
func wantProblem(t *testing.T, what string, a answer, status int, kind string, says ...string) {
	t.Helper()
	if a.status != status || a.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s: %d %v %s, want a %d problem", what, a.status, a.header, a.body, status)
	}
	if got := field(t, a, "type"); got != server.ProblemTypePrefix+kind {
		t.Fatalf("%s: problem %v, want %s", what, got, kind)
	}
	detail := field(t, a, "detail").(string)
	for _, s := range says {
		if !strings.Contains(detail, s) {
			t.Fatalf("%s: detail %q does not say %q", what, detail, s)
		}
	}
}

// TestRebindingRefused: on both engines, a request with a method that
// changes something, sent by a browser on behalf of a page whose origin
// is not a trusted one, is refused with 403 and counts nothing, even when
// its Origin matches its Host: the rebinding request of the walk, an
// https:// Origin to this plain-HTTP listener, odd spellings of the
// service's own origin. A trusted origin's page, curl and a browser's
// requests without Origin are served.
func TestRebindingRefused(t *testing.T) {
	const trusted = "https://app.example.com"
	for _, engine := range []server.HTTPEngine{server.NetHTTP, server.FastHTTP} {
		t.Run(string(engine), func(t *testing.T) {
			e := serveEngine(t, engine, crossOriginConfig, memStore(t), func(o *server.Options) {
				o.TrustedOrigins = []string{trusted}
			})
			c := &http.Client{}
			defer c.CloseIdleConnections()
			host := strings.TrimPrefix(e.url, "http://")
			before := peekRemaining(t, c, e.url)
			for _, h := range []map[string]string{
				rebound(host),
				{"Host": rebound(host)["Host"], "Origin": rebound(host)["Origin"]}, // a browser without Sec-Fetch-Site
				{"Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"},      // the service's own origin: it serves no page
				{"Origin": "https://" + host},                                      // the scheme differs: this listener is plain HTTP
				{"Origin": "HTTP://" + host},
				{"Origin": "http://" + host + "/"},
				{"Origin": "http://" + host, "Sec-Fetch-Site": "none"},
				{"Origin": trusted + "/"},
				{"Origin": strings.ToUpper(trusted)},
			} {
				for _, path := range []string{"/v1/check", "/v1/check/batch", "/v1/peek", "/v1/quota/check", "/v1/concurrency/acquire"} {
					body := check("api", "x")
					switch path {
					case "/v1/check/batch":
						body = `{"requests":[` + body + `]}`
					case "/v1/quota/check":
						body = `{"quota":"tokens","identity":{"api_key":"k"},"cost":10}`
					case "/v1/concurrency/acquire":
						body = `{"limiter":"five","identity":{"user":"x"}}`
					}
					a := send(t, c, e.url, exchange{method: "POST", path: path, body: body, header: h})
					wantProblem(t, "POST "+path+" with "+strings.Join(mapPairs(h), ", "), a, http.StatusForbidden, "cross-origin-request",
						"nothing was counted", "DNS rebinding", "floodgate serves no page", "--trusted-origin")
				}
			}
			if got := peekRemaining(t, c, e.url); got != before {
				t.Fatalf("remaining after the refused checks: %v, want %v (unchanged)", got, before)
			}
			if a := send(t, c, e.url, exchange{method: "POST", path: "/v1/quota/status", body: `{"quota":"tokens","identity":{"api_key":"k"}}`}); field(t, a, "used") != 0.0 {
				t.Fatalf("quota after the refused requests: %s, want nothing used", a.body)
			}
			if a := send(t, c, e.url, exchange{method: "POST", path: "/v1/concurrency/acquire", body: `{"limiter":"five","identity":{"user":"x"}}`}); field(t, a, "in_flight") != 1.0 {
				t.Fatalf("acquire after the refused requests: %s, want in_flight 1", a.body)
			}
			served := []map[string]string{
				nil, // curl
				{"Content-Type": "application/x-www-form-urlencoded", "User-Agent": "curl/8.5.0"}, // curl -d
				{"Origin": trusted, "Sec-Fetch-Site": "cross-site"},
				{"Origin": trusted},
				{"Sec-Fetch-Site": "same-origin"}, // no Origin: not what browsers send with a POST, but not refused
				{"Sec-Fetch-Site": "none"},
			}
			for _, h := range served {
				if a := send(t, c, e.url, exchange{method: "POST", path: "/v1/check", body: check("api", "x"), header: h}); a.status != http.StatusOK {
					t.Fatalf("check with %v: %d %s, want 200", h, a.status, a.body)
				}
			}
			if got, want := peekRemaining(t, c, e.url), before-float64(len(served)); got != want {
				t.Fatalf("remaining after %d served checks: %v, want %v", len(served), got, want)
			}
			// GETs are reads, served to any page (AllowedHosts keeps
			// rebound ones out): a rebound page's fetch of /readyz.
			if a := send(t, c, e.url, exchange{method: "GET", path: "/readyz", header: map[string]string{"Host": rebound(host)["Host"], "Sec-Fetch-Site": "same-origin"}}); a.status != http.StatusOK {
				t.Fatalf("GET /readyz from a rebound page: %d %s, want 200", a.status, a.body)
			}
		})
	}
}

// mapPairs writes h's pairs, for messages.
func mapPairs(h map[string]string) []string {
	var out []string
	for k, v := range h {
		out = append(out, k+": "+v)
	}
	return out
}

// serveAdmin serves srv's admin handler with ServeAdmin on 127.0.0.1
// until the test ends and returns its URL.
func serveAdmin(t *testing.T, srv *server.Server) string {
	t.Helper()
	return serveAside(t, srv.ServeAdmin, "ServeAdmin")
}

// serveAside runs serve (a Server's ServeAdmin or ServeHealth, named
// name in errors) on 127.0.0.1 until the test ends and returns its URL.
func serveAside(t *testing.T, serve func(context.Context, net.Listener) error, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	return "http://" + ln.Addr().String()
}

// TestAdminRebindingRefused: on the admin listener, an admin request or a
// profile carrying an Origin not trusted is refused whatever its method,
// the service's own origin and a rebound page's included, and counts no
// admin failure; the links of the profiles' index page (GET,
// Sec-Fetch-Site: same-origin, no Origin), an address typed in
// (Sec-Fetch-Site: none) and go tool pprof are served.
func TestAdminRebindingRefused(t *testing.T) {
	e := serveEngine(t, server.NetHTTP, crossOriginConfig, memStore(t), func(o *server.Options) {
		o.SeparateAdmin, o.Profiling = true, true
	})
	admin := serveAdmin(t, e.srv)
	host := strings.TrimPrefix(admin, "http://")
	c := &http.Client{}
	defer c.CloseIdleConnections()
	for range server.AdminFailureLimit + 1 {
		for _, h := range []map[string]string{rebound(host), {"Origin": admin}, {"Origin": admin, "Sec-Fetch-Site": "same-origin"}} {
			for _, x := range []exchange{
				{method: "GET", path: "/admin/v1/config", header: h},
				{method: "POST", path: "/admin/v1/reset", body: `{"policy":"api","identity":{"user":"x"}}`, header: h},
				{method: "GET", path: "/debug/pprof/heap", header: h},
			} {
				a := send(t, c, admin, x)
				wantProblem(t, x.method+" "+x.path, a, http.StatusForbidden, "cross-origin-request", "nothing was counted", "DNS rebinding")
			}
		}
	}
	if a := send(t, c, admin, exchange{method: "GET", path: "/admin/v1/config", token: testToken}); a.status != http.StatusOK {
		t.Fatalf("admin call after %d refused requests without a token: %d %s, want 200 (no failure counted)", server.AdminFailureLimit+1, a.status, a.body)
	}
	for _, h := range []map[string]string{
		nil,                               // go tool pprof, curl
		{"Sec-Fetch-Site": "none"},        // typed in the address bar
		{"Sec-Fetch-Site": "same-origin"}, // a link of the index page
	} {
		if a := send(t, c, admin, exchange{method: "GET", path: "/debug/pprof/heap?debug=1", header: h}); a.status != http.StatusOK {
			t.Fatalf("GET /debug/pprof/heap with %v: %d %s, want 200", h, a.status, a.body)
		}
		if a := send(t, c, admin, exchange{method: "GET", path: "/admin/v1/config", token: testToken, header: h}); a.status != http.StatusOK {
			t.Fatalf("GET /admin/v1/config with %v: %d %s, want 200", h, a.status, a.body)
		}
	}
}

// TestAllowedHosts: with AllowedHosts, on both engines and on the admin
// listener, a request whose Host is neither a listed name (or one under a
// listed wildcard), nor an IP address, nor localhost is answered 421
// host-not-allowed and counts nothing, GETs included; the others are
// served as without the option.
func TestAllowedHosts(t *testing.T) {
	for _, engine := range []server.HTTPEngine{server.NetHTTP, server.FastHTTP} {
		t.Run(string(engine), func(t *testing.T) {
			e := serveEngine(t, engine, crossOriginConfig, memStore(t), func(o *server.Options) {
				o.AllowedHosts = []string{"floodgate.internal", "*.floodgate.example"}
				o.SeparateAdmin, o.Profiling = true, true
			})
			admin := serveAdmin(t, e.srv)
			c := &http.Client{}
			defer c.CloseIdleConnections()
			host := strings.TrimPrefix(e.url, "http://")
			_, port, _ := net.SplitHostPort(host)
			before := peekRemaining(t, c, e.url)
			refused := []exchange{
				{method: "POST", path: "/v1/check", body: check("api", "x"), header: rebound(host)},
				{method: "POST", path: "/v1/check", body: check("api", "x"), header: map[string]string{"Host": "attacker.example:" + port}},
				{method: "POST", path: "/v1/check", body: check("api", "x"), header: map[string]string{"Host": "Attacker.Example"}},
				{method: "POST", path: "/v1/check/batch", body: `{"requests":[` + check("api", "x") + `]}`, header: map[string]string{"Host": "floodgate.example:" + port}},
				{method: "POST", path: "/v1/quota/check", body: `{"quota":"tokens","identity":{"api_key":"k"},"cost":10}`, header: map[string]string{"Host": "floodgate.internal.attacker.example"}},
				{method: "POST", path: "/v1/peek", body: check("api", "x"), header: map[string]string{"Host": "attacker.example:" + port, "Sec-Fetch-Site": "same-origin"}},
				{method: "GET", path: "/metrics", header: map[string]string{"Host": "attacker.example:" + port, "Sec-Fetch-Site": "same-origin"}},
				{method: "GET", path: "/readyz", header: map[string]string{"Host": "localhost.attacker.example"}},
				{method: "GET", path: "/nope", header: map[string]string{"Host": "attacker.example"}},
			}
			for _, x := range refused {
				a := send(t, c, e.url, x)
				wantProblem(t, x.method+" "+x.path+" to Host "+x.header["Host"], a, http.StatusMisdirectedRequest, "host-not-allowed",
					strings.ToLower(x.header["Host"]), "--allowed-host", "DNS rebinding", "nothing was counted")
			}
			if got := peekRemaining(t, c, e.url); got != before {
				t.Fatalf("remaining after the refused requests: %v, want %v (unchanged)", got, before)
			}
			served := []string{"", "127.0.0.1:" + port, "[::1]:" + port, "[::1]", "localhost:" + port, "LOCALHOST", "floodgate.internal:" + port,
				"Floodgate.Internal", "floodgate.internal.", "eu.floodgate.example:" + port, "a.b.floodgate.example"}
			for _, h := range served {
				hdr := map[string]string{"Host": h}
				if h == "" {
					hdr = nil // the listener's address, as dialled
				}
				if a := send(t, c, e.url, exchange{method: "POST", path: "/v1/check", body: check("api", "x"), header: hdr}); a.status != http.StatusOK {
					t.Fatalf("check to Host %q: %d %s, want 200", h, a.status, a.body)
				}
				if a := send(t, c, e.url, exchange{method: "GET", path: "/metrics", header: hdr}); a.status != http.StatusOK {
					t.Fatalf("GET /metrics to Host %q: %d %s, want 200", h, a.status, a.body)
				}
			}
			if got, want := peekRemaining(t, c, e.url), before-float64(len(served)); got != want {
				t.Fatalf("remaining after %d served checks: %v, want %v", len(served), got, want)
			}
			// The admin listener: the same rule.
			for _, x := range []exchange{
				{method: "GET", path: "/admin/v1/config", token: testToken, header: map[string]string{"Host": "attacker.example"}},
				{method: "GET", path: "/metrics", header: map[string]string{"Host": "attacker.example:9090", "Sec-Fetch-Site": "same-origin"}},
				{method: "GET", path: "/debug/pprof/heap", header: map[string]string{"Host": "attacker.example:9090", "Sec-Fetch-Site": "same-origin"}},
			} {
				a := send(t, c, admin, x)
				wantProblem(t, "admin "+x.method+" "+x.path, a, http.StatusMisdirectedRequest, "host-not-allowed", "--allowed-host")
			}
			for _, h := range []string{"", "localhost:9090", "[::1]:9090", "ops.floodgate.example"} {
				hdr := map[string]string{"Host": h, "Sec-Fetch-Site": "same-origin"}
				if h == "" {
					hdr = nil
				}
				if a := send(t, c, admin, exchange{method: "GET", path: "/admin/v1/config", token: testToken, header: hdr}); a.status != http.StatusOK {
					t.Fatalf("admin GET /admin/v1/config to Host %q: %d %s, want 200", h, a.status, a.body)
				}
				if a := send(t, c, admin, exchange{method: "GET", path: "/debug/pprof/heap?debug=1", header: hdr}); a.status != http.StatusOK {
					t.Fatalf("admin GET /debug/pprof/heap to Host %q: %d, want 200", h, a.status)
				}
			}
		})
	}
}

// TestAllowedHostValidated: server.New refuses an allowed host that no
// Host header would match as meant, saying why.
func TestAllowedHostValidated(t *testing.T) {
	holder, err := config.NewHolder(parse(t, crossOriginConfig))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(memStore(t), floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, why := range map[string]string{
		"":                               "empty: give a host name",
		"floodgate.example.com:8080":     "a host name has no port (every port is served): write floodgate.example.com",
		"https://floodgate.example.com":  "a host name, not a URL: write floodgate.example.com",
		"http://floodgate.example.com/x": "a host name, not a URL: write floodgate.example.com",
		"floodgate.example.com/v1":       "a host name has no path: write floodgate.example.com",
		"floodgate example.com":          "invalid character ' '",
		" floodgate.example.com":         "invalid character ' '",
		"floodgate.example.com.":         "without the trailing dot",
		"10.0.0.5":                       "an IP address: requests to IP addresses and localhost are always served",
		"[::1]":                          "an IP address",
		"::1":                            "an IP address",
		"[::1]:8080":                     "an IP address",
		"*":                              "a wildcard names a domain",
		"*.":                             "a wildcard names a domain",
		"api.*.example.com":              "a wildcard is allowed only as a leading *.",
		"**.example.com":                 "a wildcard is allowed only as a leading *.",
		"a..example.com":                 "an empty label",
		".example.com":                   "an empty label",
		strings.Repeat("a", 254):         "longer than 253 characters",
	} {
		err := server.ValidateAllowedHost(name)
		if !errors.Is(err, server.ErrInvalidHost) || !strings.Contains(err.Error(), why) {
			t.Errorf("ValidateAllowedHost(%q): %v, want an error saying %q", name, err, why)
		}
		if _, err := server.New(lim, holder, server.Options{AllowedHosts: []string{"ok.example", name}}); !errors.Is(err, server.ErrInvalidHost) || !strings.Contains(err.Error(), why) {
			t.Errorf("server.New with allowed host %q: %v, want an error saying %q", name, err, why)
		}
	}
	for _, name := range []string{"floodgate.example.com", "Floodgate.Example.COM", "localhost", "floodgate", "floodgate_1", "*.example.com", "xn--bcher-kva.example"} {
		if err := server.ValidateAllowedHost(name); err != nil {
			t.Errorf("ValidateAllowedHost(%q): %v", name, err)
		}
	}
}

// TestEnginesRefuseHostsAlike: the answers to Hosts AllowedHosts refuses,
// and to rebound pages' requests, are the same on both engines, byte for
// byte, on the natively served endpoints and the others.
func TestEnginesRefuseHostsAlike(t *testing.T) {
	opts := func(o *server.Options) { o.AllowedHosts = []string{"floodgate.internal"} }
	std := serveEngine(t, server.NetHTTP, crossOriginConfig, memStore(t), opts)
	fast := serveEngine(t, server.FastHTTP, crossOriginConfig, memStore(t), opts)
	var xs []exchange
	for _, h := range []map[string]string{
		{"Host": "attacker.example:30020", "Origin": "http://attacker.example:30020", "Sec-Fetch-Site": "same-origin"},
		{"Host": "Attacker.Example:30020"},
		{"Host": "floodgate.internal:30020", "Origin": "http://floodgate.internal:30020", "Sec-Fetch-Site": "same-origin"},
		{"Host": "Floodgate.Internal", "Origin": "HTTP://Floodgate.Internal"},
		{"Host": "[::1]:30020", "Origin": "https://[::1]:30020"},
		{"Host": "localhost:30020"},
	} {
		xs = append(xs,
			exchange{method: "POST", path: "/v1/check", body: check("api", "x"), header: h},
			exchange{method: "POST", path: "/v1/peek", body: check("api", "x"), header: h},
			exchange{method: "POST", path: "/v1/quota/check", body: `{"quota":"tokens","identity":{"api_key":"k"}}`, header: h},
			exchange{method: "GET", path: "/metrics", header: h},
			exchange{method: "GET", path: "/admin/v1/config", header: h})
	}
	compareEngines(t, std, fast, xs)
}

// TestProfileSecondsBounded: a CPU profile or trace asking for more than
// MaxProfileSeconds, or for a duration that is not a whole number of
// seconds, is refused 400 at once, instead of holding the process's one
// profiler (net/http/pprof accepted seconds=100000 and held it for a
// day); one within the bound is served.
func TestProfileSecondsBounded(t *testing.T) {
	e := serveEngine(t, server.NetHTTP, crossOriginConfig, memStore(t), func(o *server.Options) {
		o.SeparateAdmin, o.Profiling = true, true
	})
	admin := serveAdmin(t, e.srv)
	c := &http.Client{Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	for _, path := range []string{"/debug/pprof/profile", "/debug/pprof/trace", "/debug/pprof/heap", "/debug/pprof/allocs", "/debug/pprof/mutex"} {
		for _, v := range []string{"100000", "301", "0", "-1", "1.5", "x"} {
			a := send(t, c, admin, exchange{method: "GET", path: path + "?seconds=" + v})
			if a.status != http.StatusBadRequest || !strings.Contains(a.body, "from 1 to 300") {
				t.Fatalf("GET %s?seconds=%s: %d %q, want 400 naming the bound", path, v, a.status, a.body)
			}
		}
		if a := send(t, c, admin, exchange{method: "GET", path: path + "?seconds=1"}); a.status != http.StatusOK {
			t.Fatalf("GET %s?seconds=1: %d %s, want 200", path, a.status, a.body)
		}
	}
}
