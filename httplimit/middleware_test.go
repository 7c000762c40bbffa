package httplimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/clientip"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/proctest"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestLayeredPerIPAndPerKey: a per-client-IP layer and a per-API-key layer
// decided together. A denial by one layer consumes nothing in the other,
// and the headers follow the binding layer.
func TestLayeredPerIPAndPerKey(t *testing.T) {
	res, err := clientip.New(clientip.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	lim := memLimiter(t)
	rec := &recorder{Decider: lim}
	perIP := fixedWindow(t, "per-ip", 2, time.Minute)
	perKey := fixedWindow(t, "per-key", 3, time.Minute)
	srv := serve(t, rec, []httplimit.Rule{
		{Policy: perIP, Key: httplimit.IP(res)},
		{Policy: perKey, Key: httplimit.Header("X-API-Key")},
	}, httplimit.Options{})
	c := srv.Client()
	call := func(ip string) response {
		return get(t, c, srv.URL, "X-Forwarded-For", ip, "X-API-Key", "key-1")
	}
	// The binding layer is the one with the least remaining relative to its
	// limit; a denying layer always binds.
	for i, want := range []struct {
		ip        string
		status    int
		remaining string
	}{
		{"203.0.113.1", 200, "1"}, // per-ip 1/2, per-key 2/3: per-ip binds (0.5 < 0.67)
		{"203.0.113.1", 200, "0"}, // per-ip 0/2 binds
		{"203.0.113.1", 429, "0"}, // per-ip denies; per-key not consumed
		{"203.0.113.2", 200, "0"}, // per-key 0/3 binds
		{"203.0.113.3", 429, "0"}, // per-key denies; per-ip of .3 not consumed
	} {
		resp := call(want.ip)
		if resp.status != want.status || resp.header.Get("X-RateLimit-Remaining") != want.remaining {
			t.Fatalf("step %d (%s): %d remaining %q, want %d %q", i, want.ip, resp.status, resp.header.Get("X-RateLimit-Remaining"), want.status, want.remaining)
		}
		checkHeaders(t, resp, rec.last(t))
	}
	ctx := context.Background()
	if r, _ := lim.PeekAt(ctx, t0, perKey, "key-1"); r.Remaining != 0 {
		t.Errorf("per-key remaining %d, want 0", r.Remaining)
	}
	if r, _ := lim.PeekAt(ctx, t0, perIP, "203.0.113.3"); r.Remaining != 2 {
		t.Errorf("per-ip of a client denied by the key layer: remaining %d, want 2 (nothing consumed)", r.Remaining)
	}
}

func TestKeyRequiredAndOptional(t *testing.T) {
	lim := memLimiter(t)
	srv := serve(t, lim, []httplimit.Rule{
		{Policy: fixedWindow(t, "required", 10, time.Minute), Key: httplimit.Header("X-Tenant")},
		{Policy: fixedWindow(t, "optional", 1, time.Minute), Key: httplimit.Header("X-API-Key"), Optional: true},
	}, httplimit.Options{})
	c := srv.Client()
	resp := get(t, c, srv.URL)
	if resp.status != 400 || resp.problem.Policy != "required" || resp.header.Get("X-RateLimit-Limit") != "" {
		t.Fatalf("missing required key: %d %+v", resp.status, resp.problem)
	}
	// The 400 names the header to send (it did not).
	if !strings.HasSuffix(resp.problem.Detail, ": send the X-Tenant header") {
		t.Fatalf("missing required key: detail %q does not name the header", resp.problem.Detail)
	}
	// Without an API key only the tenant rule applies, again and again.
	for range 3 {
		if resp := get(t, c, srv.URL, "X-Tenant", "t1"); resp.status != 200 || resp.header.Get("X-RateLimit-Limit") != "10" {
			t.Fatalf("anonymous request: %d %v", resp.status, resp.header)
		}
	}
	if resp := get(t, c, srv.URL, "X-Tenant", "t1", "X-API-Key", "k"); resp.status != 200 || resp.header.Get("X-RateLimit-Limit") != "1" {
		t.Fatalf("keyed request: %d %v", resp.status, resp.header)
	}
	if resp := get(t, c, srv.URL, "X-Tenant", "t1", "X-API-Key", "k"); resp.status != 429 || resp.problem.Policy != "optional" {
		t.Fatalf("second keyed request: %d %+v", resp.status, resp.problem)
	}
}

// TestEmptyKeyIsNoKey: a KeyFunc returning "" and no error is taken as
// ErrNoKey (400 for a required rule, skipped for an optional one), not as
// one identity every such request shares (it was: a limit of 1 admitted
// one request without the cookie and refused every other client's).
func TestEmptyKeyIsNoKey(t *testing.T) {
	lim := memLimiter(t)
	cookie := func(r *http.Request) (string, error) { // forgets ErrNoKey
		c, err := r.Cookie("session")
		if err != nil {
			return "", nil
		}
		return c.Value, nil
	}
	srv := serve(t, lim, []httplimit.Rule{
		{Policy: fixedWindow(t, "required", 1, time.Minute), Key: cookie},
	}, httplimit.Options{})
	for range 3 {
		if resp := get(t, srv.Client(), srv.URL); resp.status != 400 || resp.problem.Policy != "required" {
			t.Fatalf("no session: %d %+v; want 400 naming the policy", resp.status, resp.problem)
		}
	}
	if resp := get(t, srv.Client(), srv.URL, "Cookie", "session=s1"); resp.status != 200 {
		t.Fatalf("a session after the refusals: %d (they must count nothing)", resp.status)
	}
	opt := serve(t, memLimiter(t), []httplimit.Rule{
		{Policy: fixedWindow(t, "all", 10, time.Minute)},
		{Policy: fixedWindow(t, "per-session", 1, time.Minute), Key: cookie, Optional: true},
	}, httplimit.Options{})
	for range 3 {
		if resp := get(t, opt.Client(), opt.URL); resp.status != 200 || resp.header.Get("X-RateLimit-Limit") != "10" {
			t.Fatalf("optional rule, no session: %d %v; want 200 under the shared rule only", resp.status, resp.header)
		}
	}
}

type userKey struct{}

func TestUserKey(t *testing.T) {
	m, err := httplimit.New(memLimiter(t), []httplimit.Rule{{
		Policy: fixedWindow(t, "per-user", 1, time.Minute),
		Key: httplimit.User(func(ctx context.Context) (string, bool) {
			u, ok := ctx.Value(userKey{}).(string)
			return u, ok
		}),
	}}, httplimit.Options{Clock: fixedClock})
	if err != nil {
		t.Fatal(err)
	}
	// A stand-in authentication middleware: the user is the basic-auth name.
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, _, ok := r.BasicAuth(); ok {
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
			}
			next.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(auth(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))))
	defer srv.Close()
	do := func(user string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		if user != "" {
			req.SetBasicAuth(user, "pw")
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := []int{do("ann"), do("ann"), do("bob"), do("")}; fmt.Sprint(got) != "[200 429 200 400]" {
		t.Fatalf("statuses %v", got)
	}
}

// TestRouteKey: routes are keyed by their ServeMux pattern, not the raw
// path, both inside the mux (r.Pattern) and around it (mux.Handler).
func TestRouteKey(t *testing.T) {
	for _, outside := range []bool{false, true} {
		t.Run(fmt.Sprintf("outside=%v", outside), func(t *testing.T) {
			mux := http.NewServeMux()
			m, err := httplimit.New(memLimiter(t), []httplimit.Rule{{
				Policy: fixedWindow(t, "per-route", 2, time.Minute),
				Key:    httplimit.Route(mux),
			}}, httplimit.Options{Clock: fixedClock})
			if err != nil {
				t.Fatal(err)
			}
			ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
			wrap := func(h http.Handler) http.Handler { return m.Handler(h) }
			if outside {
				wrap = func(h http.Handler) http.Handler { return h }
			}
			mux.Handle("GET /items/{id}", wrap(ok))
			mux.Handle("GET /users/{id}", wrap(ok))
			var root http.Handler = mux
			if outside {
				root = m.Handler(mux)
			}
			srv := httptest.NewServer(root)
			defer srv.Close()
			var got []int
			for _, path := range []string{"/items/1", "/items/2", "/items/3", "/users/1", "/users/2", "/users/3"} {
				got = append(got, get(t, srv.Client(), srv.URL+path).status)
			}
			if fmt.Sprint(got) != "[200 200 429 200 200 429]" {
				t.Fatalf("statuses %v", got)
			}
			if outside {
				// Unknown paths share one budget and get their 404 while it lasts.
				got = got[:0]
				for _, path := range []string{"/nope/1", "/nope/2", "/other"} {
					got = append(got, get(t, srv.Client(), srv.URL+path).status)
				}
				if fmt.Sprint(got) != "[404 404 429]" {
					t.Fatalf("unmatched statuses %v", got)
				}
			}
		})
	}
}

func TestJoinKey(t *testing.T) {
	res, err := clientip.New(clientip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	m, err := httplimit.New(memLimiter(t), []httplimit.Rule{{
		Policy: fixedWindow(t, "route-ip", 1, time.Minute),
		Key:    httplimit.Join(httplimit.Route(mux), httplimit.IP(res)),
	}}, httplimit.Options{Clock: fixedClock})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("GET /a", m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	mux.Handle("GET /b", m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var got []int
	for _, p := range []string{"/a", "/a", "/b", "/b"} {
		got = append(got, get(t, srv.Client(), srv.URL+p).status)
	}
	if fmt.Sprint(got) != "[200 429 200 429]" {
		t.Fatalf("statuses %v", got)
	}
	// Join's length prefixes keep tuples apart.
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("A", "x|1:y")
	r.Header.Set("B", "z")
	r.Header.Set("C", "x")
	r.Header.Set("D", "y|1:z")
	k1, _ := httplimit.Join(httplimit.Header("A"), httplimit.Header("B"))(r)
	k2, _ := httplimit.Join(httplimit.Header("C"), httplimit.Header("D"))(r)
	if k1 == k2 {
		t.Fatalf("Join collision: %q", k1)
	}
}

// TestSpoofedForwardedFor: behind no trusted proxy, a client rotating
// X-Forwarded-For values still spends one budget; behind a trusted one,
// the header separates clients.
func TestSpoofedForwardedFor(t *testing.T) {
	for _, trust := range []bool{false, true} {
		opts := clientip.Options{}
		if trust {
			opts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
		}
		res, err := clientip.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		srv := serve(t, memLimiter(t), []httplimit.Rule{{Policy: fixedWindow(t, "per-ip", 2, time.Minute), Key: httplimit.IP(res)}}, httplimit.Options{})
		ok := 0
		for i := range 6 {
			if get(t, srv.Client(), srv.URL, "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i)).status == 200 {
				ok++
			}
		}
		if want := map[bool]int{false: 2, true: 6}[trust]; ok != want {
			t.Errorf("trusted=%v: %d served, want %d", trust, ok, want)
		}
	}
}

func TestShadowRule(t *testing.T) {
	lim := memLimiter(t)
	var logs proctest.Buffer // safe for the server's goroutines
	var mu sync.Mutex
	var shadowed []string
	enforced := fixedWindow(t, "enforced", 100, time.Minute)
	trial := fixedWindow(t, "trial", 2, time.Minute)
	srv := serve(t, lim, []httplimit.Rule{
		{Policy: enforced},
		{Policy: trial, Key: httplimit.Header("X-API-Key"), Shadow: true},
	}, httplimit.Options{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		OnShadowDeny: func(r *http.Request, p floodgate.Policy, res floodgate.Result) {
			mu.Lock()
			shadowed = append(shadowed, fmt.Sprintf("%s:%s", p.Name, res.Reason))
			mu.Unlock()
		},
	})
	for i := range 5 {
		resp := get(t, srv.Client(), srv.URL, "X-API-Key", "secret-key-123")
		// Served every time; headers come from the enforced rule only.
		if resp.status != 200 || resp.header.Get("X-RateLimit-Limit") != "100" || resp.header.Get("X-RateLimit-Remaining") != fmt.Sprint(99-i) {
			t.Fatalf("request %d: %d %v", i, resp.status, resp.header)
		}
	}
	// A shadow rule never refuses, even without its key.
	if resp := get(t, srv.Client(), srv.URL); resp.status != 200 {
		t.Fatalf("shadow rule without key: %d", resp.status)
	}
	mu.Lock()
	got := fmt.Sprint(shadowed)
	mu.Unlock()
	if got != "[trial:limited trial:limited trial:limited]" {
		t.Fatalf("shadow denials %s", got)
	}
	// Counted: the trial layer is exhausted for the key.
	if r, _ := lim.PeekAt(context.Background(), t0, trial, "secret-key-123"); r.Remaining != 0 || r.Allowed {
		t.Fatalf("trial state %+v", r)
	}
	out := logs.String()
	if strings.Count(out, "would have denied") != 3 || !strings.Contains(out, "policy=trial") {
		t.Fatalf("logs:\n%s", out)
	}
	if strings.Contains(out, "secret-key-123") {
		t.Fatalf("identity leaked into logs:\n%s", out)
	}
}

// TestShadowOnly: with only shadow rules nothing is ever refused and no
// rate limit headers are sent.
func TestShadowOnly(t *testing.T) {
	var mu sync.Mutex
	denied := 0
	srv := serve(t, memLimiter(t), []httplimit.Rule{{Policy: fixedWindow(t, "observe", 1, time.Minute), Shadow: true}},
		httplimit.Options{OnShadowDeny: func(*http.Request, floodgate.Policy, floodgate.Result) {
			mu.Lock()
			denied++
			mu.Unlock()
		}})
	for range 4 {
		if resp := get(t, srv.Client(), srv.URL); resp.status != 200 || resp.header.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("%d %v", resp.status, resp.header)
		}
	}
	// The callback runs before the response is written.
	mu.Lock()
	defer mu.Unlock()
	if denied != 3 {
		t.Fatalf("%d would-be denials, want 3", denied)
	}
}

// deadStore returns a Limiter on a real Redis store whose server is not
// there (a closed port): every decision fails with
// floodgate.ErrStoreUnavailable, a genuine store error.
func deadStore(t testing.TB) *floodgate.Limiter {
	t.Helper()
	l, err := floodgate.New(deadRedisStore(t), floodgate.Options{Prefix: "dead"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// deadRedisStore returns a Redis store whose server is not there.
func deadRedisStore(t testing.TB) *redisstore.Store {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { client.Close() })
	st, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestStoreFailureModes(t *testing.T) {
	rule := []httplimit.Rule{{Policy: fixedWindow(t, "api", 10, time.Minute), Key: httplimit.Header("X-API-Key")}}
	for _, mode := range []httplimit.FailureMode{httplimit.FailOpen, httplimit.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			var mu sync.Mutex
			var errs []error
			opts := httplimit.Options{OnStoreError: func(r *http.Request, err error, shadow bool) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}}
			if mode == httplimit.FailClosed {
				opts.FailureMode = httplimit.FailClosed
			}
			srv := serve(t, deadStore(t), rule, opts)
			resp := get(t, srv.Client(), srv.URL, "X-API-Key", "second")
			switch mode {
			case httplimit.FailOpen:
				if resp.status != 200 || string(resp.body) != "ok" || resp.header.Get("X-RateLimit-Limit") != "" {
					t.Fatalf("fail open: %d %q %v", resp.status, resp.body, resp.header)
				}
			case httplimit.FailClosed:
				if resp.status != 503 || resp.header.Get("Retry-After") != "1" || resp.problem.Status != 503 || resp.problem.RetryAfter != 1 {
					t.Fatalf("fail closed: %d %v %+v", resp.status, resp.header, resp.problem)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(errs) != 1 || !errors.Is(errs[0], floodgate.ErrStoreUnavailable) {
				t.Fatalf("OnStoreError got %v", errs)
			}
		})
	}
}

// TestMisconfiguredFallbackIsNotFailedOpen: a fallback store whose
// LocalPolicy returns an invalid policy, with Redis down, is answered 500
// in either mode; in fail-open mode it used to serve every request with no
// limit at all.
func TestMisconfiguredFallbackIsNotFailedOpen(t *testing.T) {
	primary := deadRedisStore(t)
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := fallback.New(primary, local, fallback.Options{LocalPolicy: func(p floodgate.Policy) floodgate.Policy { p.Limit = 0; return p }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fb.Close() })
	lim, err := floodgate.New(fb, floodgate.Options{Prefix: "misconf"})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []httplimit.FailureMode{httplimit.FailOpen, httplimit.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			var errs []error
			srv := serve(t, lim, []httplimit.Rule{{Policy: fixedWindow(t, "api", 1, time.Minute)}},
				httplimit.Options{FailureMode: mode, OnStoreError: func(_ *http.Request, err error, _ bool) { errs = append(errs, err) }})
			for i := range 3 {
				resp := get(t, srv.Client(), srv.URL)
				if resp.status != http.StatusInternalServerError || string(resp.body) == "ok" || resp.problem.Status != 500 {
					t.Fatalf("request %d: %d %q, want 500", i, resp.status, resp.body)
				}
			}
			if len(errs) != 3 || !errors.Is(errs[0], floodgate.ErrInvalidPolicy) {
				t.Fatalf("OnStoreError got %v", errs)
			}
		})
	}
}

// TestDefaultFailureModeIsOpen pins the documented default.
func TestDefaultFailureModeIsOpen(t *testing.T) {
	var zero httplimit.Options
	if zero.FailureMode != httplimit.FailOpen {
		t.Fatal("zero FailureMode is not FailOpen")
	}
	srv := serve(t, deadStore(t), []httplimit.Rule{{Policy: fixedWindow(t, "api", 1, time.Minute), Key: httplimit.Header("K")}}, httplimit.Options{})
	if resp := get(t, srv.Client(), srv.URL, "K", "b"); resp.status != 200 {
		t.Fatalf("default mode: %d", resp.status)
	}
}

func TestNewValidates(t *testing.T) {
	lim := memLimiter(t)
	ok := fixedWindow(t, "ok", 1, time.Minute)
	bad := floodgate.Policy{Name: "bad", Algorithm: floodgate.FixedWindow, Limit: 0, Window: time.Minute}
	many := make([]httplimit.Rule, floodgate.MaxLayers+1)
	for i := range many {
		many[i] = httplimit.Rule{Policy: fixedWindow(t, fmt.Sprintf("p%d", i), 1, time.Minute)}
	}
	tests := []struct {
		name  string
		d     httplimit.Decider
		rules []httplimit.Rule
		opts  httplimit.Options
	}{
		{"nil decider", nil, []httplimit.Rule{{Policy: ok}}, httplimit.Options{}},
		{"nil *floodgate.Limiter", (*floodgate.Limiter)(nil), []httplimit.Rule{{Policy: ok}}, httplimit.Options{}},
		{"no rules", lim, nil, httplimit.Options{}},
		{"invalid policy", lim, []httplimit.Rule{{Policy: bad}}, httplimit.Options{}},
		{"duplicate names", lim, []httplimit.Rule{{Policy: ok}, {Policy: ok, Shadow: true}}, httplimit.Options{}},
		{"unknown failure mode", lim, []httplimit.Rule{{Policy: ok}}, httplimit.Options{FailureMode: 7}},
		{"negative timeout", lim, []httplimit.Rule{{Policy: ok}}, httplimit.Options{Timeout: -time.Second}},
		{"too many rules", lim, many, httplimit.Options{}},
	}
	for _, tt := range tests {
		if _, err := httplimit.New(tt.d, tt.rules, tt.opts); !errors.Is(err, httplimit.ErrInvalidOptions) {
			t.Errorf("%s: err = %v, want ErrInvalidOptions", tt.name, err)
		}
	}
}

// TestNewRefusesUnusableKeys: a rule whose Key was built from an argument
// it cannot use is refused by New with ErrInvalidOptions, naming the
// function (they used to be accepted, then IP(nil), User(nil) and
// Join(nil) panicked on the first request and Header("") answered every
// request 400); the same functions with usable arguments are accepted.
func TestNewRefusesUnusableKeys(t *testing.T) {
	lim := memLimiter(t)
	res, err := clientip.New(clientip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := fixedWindow(t, "k", 1, time.Minute)
	for _, tt := range []struct {
		name string
		key  httplimit.KeyFunc
		want string
	}{
		{"IP(nil)", httplimit.IP(nil), "httplimit.IP: nil resolver"},
		{"User(nil)", httplimit.User(nil), "httplimit.User: nil lookup"},
		{"Header(\"\")", httplimit.Header(""), `httplimit.Header: invalid header name ""`},
		{"Header with a space", httplimit.Header("X Key"), `httplimit.Header: invalid header name "X Key"`},
		{"Join()", httplimit.Join(), "httplimit.Join: no parts"},
		{"Join(nil)", httplimit.Join(nil), "httplimit.Join: part 0 is nil"},
		{"Join with IP(nil)", httplimit.Join(httplimit.Route(nil), httplimit.IP(nil)), "httplimit.Join: part 1: httplimit.IP: nil resolver"},
	} {
		m, err := httplimit.New(lim, []httplimit.Rule{{Policy: p, Key: tt.key}}, httplimit.Options{})
		if m != nil || !errors.Is(err, httplimit.ErrInvalidOptions) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New = %v, %v; want ErrInvalidOptions saying %q", tt.name, m, err, tt.want)
		}
	}
	user := func(context.Context) (string, bool) { return "u", true }
	for _, key := range []httplimit.KeyFunc{httplimit.IP(res), httplimit.User(user), httplimit.Header("X-API-Key"), httplimit.Join(httplimit.Route(nil), httplimit.IP(res))} {
		if _, err := httplimit.New(lim, []httplimit.Rule{{Policy: p, Key: key}}, httplimit.Options{}); err != nil {
			t.Errorf("usable key refused: %v", err)
		}
	}
}

// TestHandlerNilPanicsAtOnce: Handler(nil) panics when it is called, with
// a message naming it, as http.ServeMux.Handle does, instead of returning
// a handler that panics on the first request it admits.
func TestHandlerNilPanicsAtOnce(t *testing.T) {
	m, err := httplimit.New(memLimiter(t), []httplimit.Rule{{Policy: fixedWindow(t, "h", 1, time.Minute)}}, httplimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, next := range []http.Handler{nil, http.HandlerFunc(nil)} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "httplimit: Middleware.Handler: nil handler") {
					t.Errorf("Handler(%#v): recovered %v, want a panic naming Middleware.Handler", next, r)
				}
			}()
			m.Handler(next)
		}()
	}
}

// TestKeyFuncFailure: a per-IP rule on a server whose peers are not IP
// addresses is a configuration error: 500, never a silent shared bucket.
func TestKeyFuncFailure(t *testing.T) {
	res, _ := clientip.New(clientip.Options{})
	m, err := httplimit.New(memLimiter(t), []httplimit.Rule{{Policy: fixedWindow(t, "ip", 1, time.Minute), Key: httplimit.IP(res)}}, httplimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "@"
	rr := httptest.NewRecorder()
	m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(rr, req)
	body, _ := io.ReadAll(rr.Body)
	if rr.Code != 500 || !bytes.Contains(body, []byte(`"status":500`)) {
		t.Fatalf("%d %s", rr.Code, body)
	}
}

// TestRetryAfterOneSecond: a denial one second from its retry says "retry
// after 1 second" (it read "1 seconds").
func TestRetryAfterOneSecond(t *testing.T) {
	lim := memLimiter(t)
	perKey := fixedWindow(t, "per-key", 1, time.Second)
	srv := serve(t, lim, []httplimit.Rule{{Policy: perKey, Key: httplimit.Header("X-API-Key")}}, httplimit.Options{})
	c := srv.Client()
	if r := get(t, c, srv.URL, "X-API-Key", "k"); r.status != 200 {
		t.Fatalf("first request: %d", r.status)
	}
	r := get(t, c, srv.URL, "X-API-Key", "k")
	if r.status != 429 || r.header.Get("Retry-After") != "1" || !strings.HasSuffix(r.problem.Detail, "retry after 1 second") {
		t.Fatalf("second request: %d Retry-After %q detail %q; want 429, 1, \"... retry after 1 second\"", r.status, r.header.Get("Retry-After"), r.problem.Detail)
	}
}
