package httplimit_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/denycache"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/syncbuf"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/redisstore"
)

// fallbackStore returns a fallback.Store around a real Redis, deciding
// the policies named in modes by those modes and the others locally, and
// that Redis. Its budget is missed only when Redis is down, not when the
// machine is busy: a killed Redis refuses connections at once.
func fallbackStore(t *testing.T, modes map[string]fallback.Mode) (*fallback.Store, *redistest.Server) {
	t.Helper()
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr, ContextTimeoutEnabled: true,
		DialerRetries: 1, MaxRetries: -1, MinRetryBackoff: -1, MaxRetryBackoff: -1})
	t.Cleanup(func() { client.Close() })
	primary, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := fallback.New(primary, local, fallback.Options{
		Budget: 5 * time.Second, DefaultMode: fallback.ModeLocal, Modes: modes,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fb.Close)
	return fb, rs
}

// storeErrors counts what the middleware reports to OnStoreError, the
// shadow rules' failures apart.
type storeErrors struct {
	mu               sync.Mutex
	enforced, shadow int
}

func (s *storeErrors) add(_ *http.Request, err error, shadow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		return
	}
	if shadow {
		s.shadow++
	} else {
		s.enforced++
	}
}

func (s *storeErrors) counts() (enforced, shadow int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.enforced, s.shadow
}

// TestShadowRuleDegradedIsStoreFailure: with Redis down, a shadow rule
// whose policy fails closed (fallback.ModeClosed) was decided with the
// request's own context, which carried no place for the fallback's
// outcome, so its failure mode's denials reached OnShadowDeny and the
// log as the rule's own ("shadow rule would have denied ... reason=
// limited") for every request. They are store failures of the shadow
// rules now: reported to OnStoreError with shadow true and logged as
// such, never as shadow denials.
func TestShadowRuleDegradedIsStoreFailure(t *testing.T) {
	fb, rs := fallbackStore(t, map[string]fallback.Mode{"shadow-login": fallback.ModeClosed})
	lim, err := floodgate.New(fb, floodgate.Options{Prefix: "shadowfb"})
	if err != nil {
		t.Fatal(err)
	}
	rules := []httplimit.Rule{
		{Policy: fixedWindow(t, "api", 1000, time.Minute)},
		{Policy: fixedWindow(t, "shadow-login", 1000, time.Minute), Shadow: true},
	}
	var errs storeErrors
	var mu sync.Mutex
	shadowDenials := 0
	logs := &syncbuf.Buffer{}
	srv := serve(t, lim, rules, httplimit.Options{
		OnStoreError: errs.add,
		OnShadowDeny: func(*http.Request, floodgate.Policy, floodgate.Result) {
			mu.Lock()
			shadowDenials++
			mu.Unlock()
		},
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	c := &http.Client{}
	if r := get(t, c, srv.URL); r.status != http.StatusOK {
		t.Fatalf("with Redis up: %d %q", r.status, r.body)
	}

	rs.Kill()
	const n = 20
	for i := range n {
		if r := get(t, c, srv.URL); r.status != http.StatusOK {
			t.Fatalf("request %d with Redis down: %d %q; want 200 (api decided locally)", i, r.status, r.body)
		}
	}
	mu.Lock()
	denials := shadowDenials
	mu.Unlock()
	if denials != 0 {
		t.Errorf("%d shadow denials reported for the failure mode's decisions, want 0", denials)
	}
	if enforced, shadow := errs.counts(); enforced != n || shadow != n {
		t.Errorf("OnStoreError: %d enforced and %d shadow failures, want %d and %d", enforced, shadow, n, n)
	}
	out := logs.String()
	if strings.Contains(out, "shadow rule would have denied") {
		t.Errorf("the failure mode's denials logged as shadow denials:\n%s", out)
	}
	if !strings.Contains(out, `msg="rate limit: store failed, decided by its failure mode"`) || !strings.Contains(out, "shadow=true") {
		t.Errorf("log lacks the shadow rules' store failure:\n%s", out)
	}
}

// embeddedLimiter is a type of the user's own embedding a Limiter.
type embeddedLimiter struct{ *floodgate.Limiter }

// metricsDecider is a Decider of the user's own around a Limiter
// (metrics, tracing), which New cannot see into.
type metricsDecider struct {
	l     *floodgate.Limiter
	calls int
	mu    sync.Mutex
}

func (m *metricsDecider) AllowLayersAt(ctx context.Context, now time.Time, cost int64, specs ...floodgate.LayerSpec) (floodgate.Decision, error) {
	m.mu.Lock()
	m.calls++
	m.mu.Unlock()
	return m.l.AllowLayersAt(ctx, now, cost, specs...)
}

// unwrappingDecider is metricsDecider saying what it wraps.
type unwrappingDecider struct{ metricsDecider }

func (u *unwrappingDecider) Unwrap() httplimit.Decider { return u.l }

// TestWrappedFallbackStoreDegradedAnswers: New found a fallback.Store
// only directly under a *floodgate.Limiter, so behind a denycache, a type
// embedding the Limiter or a Decider of the user's own a policy failing
// closed during an outage was answered as a used-up limit again (429
// "rate limit exceeded", X-RateLimit-Remaining: 0). New looks through
// the first two, and through a Decider with an Unwrap method; for the
// others Options.FallbackStore says so, and New warns when it cannot
// tell.
func TestWrappedFallbackStoreDegradedAnswers(t *testing.T) {
	fb, rs := fallbackStore(t, map[string]fallback.Mode{"login-ip": fallback.ModeClosed})
	lim, err := floodgate.New(fb, floodgate.Options{Prefix: "wrapfb"})
	if err != nil {
		t.Fatal(err)
	}
	dc, err := denycache.New(fb, denycache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dcLim, err := floodgate.New(dc, floodgate.Options{Prefix: "wrapdc"})
	if err != nil {
		t.Fatal(err)
	}
	rules := []httplimit.Rule{{Policy: fixedWindow(t, "login-ip", 50, time.Minute)}}
	logs := &syncbuf.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	type server struct {
		name string
		url  string
	}
	var servers []server
	for _, tc := range []struct {
		name string
		d    httplimit.Decider
		opts httplimit.Options
	}{
		{"Limiter on denycache", dcLim, httplimit.Options{}},
		{"embedded Limiter", embeddedLimiter{lim}, httplimit.Options{}},
		{"Decider with Unwrap", &unwrappingDecider{metricsDecider{l: lim}}, httplimit.Options{}},
		{"Decider with FallbackStore", &metricsDecider{l: lim}, httplimit.Options{FallbackStore: true}},
	} {
		tc.opts.Logger = logger
		servers = append(servers, server{tc.name, serve(t, tc.d, rules, tc.opts).URL})
	}
	if out := logs.String(); out != "" {
		t.Errorf("New logged for deciders it can tell:\n%s", out)
	}

	// New cannot see into a Decider of the user's own: it says so.
	if _, err := httplimit.New(&metricsDecider{l: lim}, rules, httplimit.Options{Logger: logger}); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "Options.FallbackStore") ||
		!strings.Contains(out, "decider=*httplimit_test.metricsDecider") {
		t.Errorf("New's log for a decider it cannot see into:\n%s", out)
	}

	c := &http.Client{}
	for _, s := range servers {
		if r := get(t, c, s.url); r.status != http.StatusOK || r.header.Get(httplimit.DegradedHeader) != "" {
			t.Fatalf("%s with Redis up: %d %v", s.name, r.status, r.header)
		}
	}
	rs.Kill()
	for _, s := range servers {
		for i := range 3 {
			r := get(t, c, s.url)
			if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" ||
				r.header.Get("X-Ratelimit-Remaining") != "" || !strings.HasPrefix(r.header.Get(httplimit.DegradedHeader), "closed; reason=") {
				t.Errorf("%s, request %d with Redis down: %d %v %q; want 503 marked closed, no X-RateLimit-*", s.name, i, r.status, r.header, r.body)
			}
		}
	}
}

// TestDegradedDecisionLogIsRateLimited: every decision a failure mode
// took was logged, one WARN line per request (1000 lines for 1000
// requests with the breaker open). The line is written at most once per
// 10 seconds for each reason now, as serve's; OnStoreError still gets
// each one.
func TestDegradedDecisionLogIsRateLimited(t *testing.T) {
	fb, rs := fallbackStore(t, nil)
	lim, err := floodgate.New(fb, floodgate.Options{Prefix: "logfb"})
	if err != nil {
		t.Fatal(err)
	}
	var errs storeErrors
	logs := &syncbuf.Buffer{}
	srv := serve(t, lim, []httplimit.Rule{{Policy: fixedWindow(t, "api", 1000, time.Minute)}},
		httplimit.Options{OnStoreError: errs.add, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	c := &http.Client{}
	rs.Kill()
	start := time.Now()
	const n = 200
	for i := range n {
		if r := get(t, c, srv.URL); r.status != http.StatusOK {
			t.Fatalf("request %d with Redis down: %d %q", i, r.status, r.body)
		}
	}
	// Bounds, not timing: however long the requests took, a reason may
	// have one line per started 10 s.
	perReason := 1 + int(time.Since(start)/(10*time.Second))
	if enforced, _ := errs.counts(); enforced != n {
		t.Errorf("OnStoreError called %d times, want %d", enforced, n)
	}
	lines := map[string]int{}
	total := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, "decided by its failure mode") {
			continue
		}
		total++
		for _, f := range strings.Fields(line) {
			if reason, ok := strings.CutPrefix(f, "reason="); ok {
				lines[reason]++
			}
		}
	}
	if total == 0 {
		t.Fatalf("no line for the degraded decisions:\n%s", logs.String())
	}
	for reason, k := range lines {
		if k > perReason {
			t.Errorf("%d lines of reason %s for %d decisions, want at most %d:\n%s", k, reason, n, perReason, logs.String())
		}
	}
}
