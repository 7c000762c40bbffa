package httplimit_test

import (
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// reportedErrors records the errors the middleware reports to OnStoreError.
type reportedErrors struct {
	mu   sync.Mutex
	errs []error
}

func (s *reportedErrors) add(_ *http.Request, err error, shadow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if shadow {
		err = nil // no shadow rules here: recorded as nil to fail the test
	}
	s.errs = append(s.errs, err)
}

func (s *reportedErrors) take() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := s.errs
	s.errs = nil
	return errs
}

// TestFallbackStoreDegradedAnswers puts the middleware on a fallback.Store
// around a real Redis, kills Redis, and checks the answers of a rule whose
// policy fails closed (fallback.ModeClosed) and of one decided by the local
// store (ModeLocal). The closed one used to get an ordinary 429 ("rate limit
// "login-ip" exceeded", X-RateLimit-Remaining: 0), as if the client had used
// up its limit, and the local ones went unmarked and unreported: now the
// closed rule is answered exactly as a plain Redis store failed closed is
// (503, Retry-After: 1, no X-RateLimit-*), and both are marked with
// X-Floodgate-Degraded and reported to OnStoreError and the log.
func TestFallbackStoreDegradedAnswers(t *testing.T) {
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr, ContextTimeoutEnabled: true,
		DialerRetries: 1, MaxRetries: 1, MinRetryBackoff: -1, MaxRetryBackoff: -1})
	t.Cleanup(func() { client.Close() })
	primary, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A budget Redis misses only when it is down, not when the machine
	// is busy: a killed Redis refuses connections at once.
	fb, err := fallback.New(primary, local, fallback.Options{
		Budget: 5 * time.Second, DefaultMode: fallback.ModeLocal,
		Modes: map[string]fallback.Mode{"login-ip": fallback.ModeClosed},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fb.Close)
	lim, err := floodgate.New(fb, floodgate.Options{Prefix: "fb"})
	if err != nil {
		t.Fatal(err)
	}
	plainLim, err := floodgate.New(primary, floodgate.Options{Prefix: "plain"})
	if err != nil {
		t.Fatal(err)
	}

	login := []httplimit.Rule{{Policy: fixedWindow(t, "login-ip", 50, time.Minute)}}
	api := []httplimit.Rule{{Policy: fixedWindow(t, "api", 3, time.Minute)}}
	var loginErrs, openLoginErrs, apiErrs, plainErrs reportedErrors
	logs := &syncbuf.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	loginSrv := serve(t, lim, login, httplimit.Options{FailureMode: httplimit.FailClosed, OnStoreError: loginErrs.add, Logger: logger})
	// The policy's failure mode (closed) has decided: a middleware
	// failing open does not serve what it refused.
	openLoginSrv := serve(t, lim, login, httplimit.Options{FailureMode: httplimit.FailOpen, OnStoreError: openLoginErrs.add})
	apiSrv := serve(t, lim, api, httplimit.Options{OnStoreError: apiErrs.add, Logger: logger})
	plainSrv := serve(t, plainLim, login, httplimit.Options{FailureMode: httplimit.FailClosed, OnStoreError: plainErrs.add})
	c := &http.Client{}

	// Redis decides: nothing is marked or reported.
	for _, srv := range []string{loginSrv.URL, apiSrv.URL} {
		r := get(t, c, srv)
		if r.status != http.StatusOK || r.header.Get("X-Floodgate-Degraded") != "" || r.header.Get("X-Ratelimit-Limit") == "" {
			t.Fatalf("%s with Redis up: %d %v", srv, r.status, r.header)
		}
	}
	if n := len(loginErrs.take()) + len(apiErrs.take()); n != 0 {
		t.Fatalf("%d store errors reported with Redis up", n)
	}

	rs.Kill()

	// The plain Redis store failed closed: the answer to match.
	plain := get(t, c, plainSrv.URL)
	if plain.status != http.StatusServiceUnavailable || len(plainErrs.take()) != 1 {
		t.Fatalf("plain store with Redis down: %d %q", plain.status, plain.body)
	}
	const wantBody = `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the rate limiter is unavailable; try again shortly","policy":"login-ip","retry_after":1}` + "\n"
	if string(plain.body) != wantBody {
		t.Fatalf("plain store's 503 body %q, want %q", plain.body, wantBody)
	}

	for _, tc := range []struct {
		name string
		url  string
		errs *reportedErrors
	}{{"FailClosed", loginSrv.URL, &loginErrs}, {"FailOpen", openLoginSrv.URL, &openLoginErrs}} {
		for i := range 3 {
			r := get(t, c, tc.url)
			if r.status != http.StatusServiceUnavailable {
				t.Fatalf("%s: closed rule, request %d with Redis down: %d %v %q; want 503", tc.name, i, r.status, r.header, r.body)
			}
			if string(r.body) != string(plain.body) {
				t.Errorf("%s: closed rule's body %q, want the plain store's %q", tc.name, r.body, plain.body)
			}
			for name, want := range map[string]string{
				"Retry-After":           "1",
				"Content-Type":          httplimit.ProblemContentType,
				"Cache-Control":         "no-store",
				"X-Ratelimit-Limit":     "",
				"X-Ratelimit-Remaining": "",
				"X-Ratelimit-Reset":     "",
			} {
				if got := r.header.Get(name); got != want {
					t.Errorf("%s: closed rule's %s = %q, want %q", tc.name, name, got, want)
				}
			}
			if got := r.header.Get("X-Floodgate-Degraded"); !strings.HasPrefix(got, "closed; reason=") {
				t.Errorf("%s: closed rule's X-Floodgate-Degraded = %q, want closed; reason=...", tc.name, got)
			}
		}
		if errs := tc.errs.take(); len(errs) != 3 || errs[0] == nil || errs[2] == nil {
			t.Errorf("%s: OnStoreError got %v, want 3 errors", tc.name, errs)
		}
	}

	// The local store decides "api" at its own limit (3, one instance),
	// counting from 0: served, then refused once that is used up, each
	// answer marked.
	for i := range 4 {
		r := get(t, c, apiSrv.URL)
		wantStatus, remaining := http.StatusOK, 2-i
		if i == 3 {
			wantStatus, remaining = http.StatusTooManyRequests, 0
		}
		if r.status != wantStatus {
			t.Fatalf("local rule, request %d with Redis down: %d %q; want %d", i, r.status, r.body, wantStatus)
		}
		if got := r.header.Get("X-Floodgate-Degraded"); !strings.HasPrefix(got, "local; reason=") {
			t.Errorf("local rule, request %d: X-Floodgate-Degraded = %q, want local; reason=...", i, got)
		}
		if got, want := r.header.Get("X-Ratelimit-Limit"), "3"; got != want {
			t.Errorf("local rule, request %d: X-RateLimit-Limit = %q, want %q", i, got, want)
		}
		if got := headerInt(t, r.header, "X-Ratelimit-Remaining"); got != int64(remaining) {
			t.Errorf("local rule, request %d: X-RateLimit-Remaining = %d, want %d", i, got, remaining)
		}
		if i == 3 && (r.problem.Policy != "api" || r.problem.Reason != "limited") {
			t.Errorf("local rule's 429: %q", r.body)
		}
	}
	if errs := apiErrs.take(); len(errs) != 4 || errs[0] == nil || errs[3] == nil {
		t.Errorf("local rule: OnStoreError got %v, want 4 errors", errs)
	}
	out := logs.String()
	for _, want := range []string{
		`level=WARN msg="rate limit: store failed, decided by its failure mode"`,
		"mode=closed", "mode=local", "allowed=true", "allowed=false",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
