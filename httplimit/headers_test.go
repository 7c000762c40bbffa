package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
)

// checkHeaders asserts that resp's rate limit headers say exactly what the
// decision's binding Result says.
func checkHeaders(t *testing.T, resp response, d floodgate.Decision) {
	t.Helper()
	res := d.Result()
	if got := headerInt(t, resp.header, "X-RateLimit-Limit"); got != res.Limit {
		t.Errorf("X-RateLimit-Limit = %d, want %d", got, res.Limit)
	}
	if got := headerInt(t, resp.header, "X-RateLimit-Remaining"); got != res.Remaining {
		t.Errorf("X-RateLimit-Remaining = %d, want %d", got, res.Remaining)
	}
	wantReset := res.ResetAt.Unix()
	if res.ResetAt.Nanosecond() != 0 {
		wantReset++
	}
	if got := headerInt(t, resp.header, "X-RateLimit-Reset"); got != wantReset {
		t.Errorf("X-RateLimit-Reset = %d, want %d (ResetAt %v)", got, wantReset, res.ResetAt)
	}
	if res.Allowed {
		if resp.status != http.StatusOK || resp.header.Get("Retry-After") != "" {
			t.Errorf("allowed: status %d, Retry-After %q", resp.status, resp.header.Get("Retry-After"))
		}
		return
	}
	if resp.status != http.StatusTooManyRequests {
		t.Fatalf("denied: status %d, want 429", resp.status)
	}
	if resp.header.Get("Content-Type") != httplimit.ProblemContentType {
		t.Errorf("Content-Type = %q", resp.header.Get("Content-Type"))
	}
	p := resp.problem
	if p.Type != "about:blank" || p.Title != "Too Many Requests" || p.Status != 429 || p.Reason != res.Reason.String() || p.Limit != res.Limit || p.Reset != wantReset {
		t.Errorf("problem = %+v, result %+v", p, res)
	}
	if res.Reason == floodgate.ReasonCostExceedsLimit {
		if ra := resp.header.Get("Retry-After"); ra != "" || p.RetryAfter != 0 {
			t.Errorf("cost exceeds limit: Retry-After %q, problem retry_after %d, want none", ra, p.RetryAfter)
		}
		return
	}
	want := int64(res.RetryAfter / time.Second)
	if res.RetryAfter%time.Second != 0 {
		want++
	}
	want = max(want, 1)
	if got := headerInt(t, resp.header, "Retry-After"); got != want || p.RetryAfter != want {
		t.Errorf("Retry-After = %d, problem %d, want %d (RetryAfter %v)", got, p.RetryAfter, want, res.RetryAfter)
	}
}

func TestHeadersMatchResult(t *testing.T) {
	tests := []struct {
		name     string
		policy   floodgate.Policy
		requests int
		want     []int // statuses
	}{
		{name: "fixed window", policy: floodgate.Policy{Name: "fw", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Minute},
			requests: 5, want: []int{200, 200, 200, 429, 429}},
		{name: "sliding window", policy: floodgate.Policy{Name: "sw", Algorithm: floodgate.SlidingWindow, Limit: 2, Window: time.Minute},
			requests: 3, want: []int{200, 200, 429}},
		// A sub-second retry is rounded up to 1, a fractional reset up to
		// the next second.
		{name: "token bucket sub-second", policy: floodgate.Policy{Name: "tb", Algorithm: floodgate.TokenBucket, Limit: 4, Window: time.Second, Burst: 2},
			requests: 3, want: []int{200, 200, 429}},
		{name: "gcra", policy: floodgate.Policy{Name: "gcra", Algorithm: floodgate.GCRA, Limit: 3, Window: 10 * time.Second},
			requests: 4, want: []int{200, 200, 200, 429}},
		{name: "sliding log", policy: floodgate.Policy{Name: "sl", Algorithm: floodgate.SlidingLog, Limit: 1, Window: 90 * time.Second},
			requests: 2, want: []int{200, 429}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{Decider: memLimiter(t)}
			srv := serve(t, rec, []httplimit.Rule{{Policy: policy(t, tt.policy)}}, httplimit.Options{})
			for i := range tt.requests {
				resp := get(t, srv.Client(), srv.URL)
				if resp.status != tt.want[i] {
					t.Fatalf("request %d: status %d, want %d (%s)", i, resp.status, tt.want[i], resp.body)
				}
				checkHeaders(t, resp, rec.last(t))
			}
		})
	}
}

// TestHeadersValues pins the literal header values for one fixed window,
// independently of the Result.
func TestHeadersValues(t *testing.T) {
	srv := serve(t, memLimiter(t), []httplimit.Rule{{Policy: fixedWindow(t, "api", 2, time.Minute)}}, httplimit.Options{})
	reset := strconv.FormatInt(t0.Truncate(time.Minute).Add(time.Minute).Unix(), 10)
	for i, want := range []struct {
		status              int
		remaining, retry    string
		detailHasRetryAfter bool
	}{{200, "1", "", false}, {200, "0", "", false}, {429, "0", "50", true}} {
		resp := get(t, srv.Client(), srv.URL)
		h := resp.header
		if resp.status != want.status || h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Remaining") != want.remaining ||
			h.Get("X-RateLimit-Reset") != reset || h.Get("Retry-After") != want.retry {
			t.Fatalf("request %d: %d %v", i, resp.status, h)
		}
		if want.detailHasRetryAfter && (resp.problem.RetryAfter != 50 || resp.problem.Policy != "api" || !strings.Contains(resp.problem.Detail, "50 seconds")) {
			t.Fatalf("problem %+v", resp.problem)
		}
	}
}

func TestIETFHeaders(t *testing.T) {
	perClient := fixedWindow(t, "per-client", 5, time.Minute)
	global := policy(t, floodgate.Policy{Name: "global", Algorithm: floodgate.TokenBucket, Limit: 100, Window: 1500 * time.Millisecond})
	srv := serve(t, memLimiter(t), []httplimit.Rule{
		{Policy: perClient, Key: httplimit.Header("X-API-Key")},
		{Policy: global},
	}, httplimit.Options{IETFHeaders: true})
	resp := get(t, srv.Client(), srv.URL, "X-API-Key", "k1")
	// The per-client window resets in 50 s; the bucket, missing one token
	// of 15 ms, refills within one second (rounded up). Window 1.5 s is
	// advertised as 2.
	if got, want := resp.header.Get("RateLimit-Policy"), `"per-client";q=5;w=60, "global";q=100;w=2`; got != want {
		t.Errorf("RateLimit-Policy = %s, want %s", got, want)
	}
	if got, want := resp.header.Get("RateLimit"), `"per-client";r=4;t=50, "global";r=99;t=1`; got != want {
		t.Errorf("RateLimit = %s, want %s", got, want)
	}
	// Off by default.
	plain := serve(t, memLimiter(t), []httplimit.Rule{{Policy: global}}, httplimit.Options{})
	if resp := get(t, plain.Client(), plain.URL); resp.header.Get("RateLimit") != "" || resp.header.Get("RateLimit-Policy") != "" {
		t.Errorf("IETF headers sent without IETFHeaders: %v", resp.header)
	}
}

// TestIETFHeadersQuota: a calendar quota advertises the length of its
// current period as its window (it has no Window; it used to say w=0).
func TestIETFHeadersQuota(t *testing.T) {
	q, err := floodgate.NewQuota("monthly", 100, floodgate.Calendar{Unit: floodgate.PeriodMonth})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		now  time.Time
		want string
	}{
		{time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC), `"monthly";q=100;w=2678400`}, // 31 days
		{time.Date(2027, 2, 10, 0, 0, 0, 0, time.UTC), `"monthly";q=100;w=2419200`},  // 28 days
	} {
		now := tc.now
		srv := serve(t, memLimiter(t), []httplimit.Rule{{Policy: q}}, httplimit.Options{IETFHeaders: true, Clock: func() time.Time { return now }})
		resp := get(t, srv.Client(), srv.URL)
		if got := resp.header.Get("RateLimit-Policy"); got != tc.want {
			t.Errorf("%v: RateLimit-Policy = %s, want %s", now, got, tc.want)
		}
	}
}

func TestCostExceedsLimit(t *testing.T) {
	rec := &recorder{Decider: memLimiter(t)}
	cost := func(r *http.Request) (int64, error) { return strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64) }
	perIP := fixedWindow(t, "small", 5, time.Minute)
	big := fixedWindow(t, "big", 100, time.Minute)
	srv := serve(t, rec, []httplimit.Rule{{Policy: big}, {Policy: perIP, Key: httplimit.Header("X-User")}}, httplimit.Options{Cost: cost})

	resp := get(t, srv.Client(), srv.URL, "X-Cost", "6", "X-User", "u1")
	checkHeaders(t, resp, rec.last(t))
	if resp.problem.Reason != "cost_exceeds_limit" || resp.problem.Policy != "small" || !strings.Contains(resp.problem.Detail, "never") {
		t.Fatalf("problem %+v", resp.problem)
	}
	// Nothing was consumed anywhere: the same user can still spend 5.
	resp = get(t, srv.Client(), srv.URL, "X-Cost", "5", "X-User", "u1")
	if resp.status != 200 || resp.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("cost 5 after refused cost 6: %d %v", resp.status, resp.header)
	}
	// Spent up and too costly at once: the cost wins, no Retry-After.
	resp = get(t, srv.Client(), srv.URL, "X-Cost", "6", "X-User", "u1")
	if resp.status != 429 || resp.header.Get("Retry-After") != "" || resp.problem.Reason != "cost_exceeds_limit" {
		t.Fatalf("exhausted and too costly: %d %v %+v", resp.status, resp.header, resp.problem)
	}
}

// TestRetryAfterIsTheLongestWait: when two rules deny, Retry-After and
// the headers come from the one whose wait is longer, whatever their order,
// so that a client that waits as told is admitted (a retry-after walk:
// Retry-After 2 from the first rule, then 429 again with 4 after waiting).
func TestRetryAfterIsTheLongestWait(t *testing.T) {
	rec := &recorder{Decider: memLimiter(t)}
	minute := fixedWindow(t, "minute", 2, time.Minute)
	hour := fixedWindow(t, "hour", 2, time.Hour)
	srv := serve(t, rec, []httplimit.Rule{{Policy: minute, Key: httplimit.Header("X-User")}, {Policy: hour, Key: httplimit.Header("X-User")}}, httplimit.Options{})
	for range 2 {
		if resp := get(t, srv.Client(), srv.URL, "X-User", "u1"); resp.status != 200 {
			t.Fatalf("status %d, want 200", resp.status)
		}
	}
	resp := get(t, srv.Client(), srv.URL, "X-User", "u1")
	checkHeaders(t, resp, rec.last(t))
	// The fixed clock is 10 s into an hour: the minute's window ends in
	// 50 s, the hour's in 3590 s.
	if resp.status != 429 || resp.header.Get("Retry-After") != "3590" || resp.problem.Policy != "hour" {
		t.Fatalf("both exhausted: status %d, Retry-After %q, policy %q, want 429, 3590 and hour", resp.status, resp.header.Get("Retry-After"), resp.problem.Policy)
	}
}

func TestCostFunc(t *testing.T) {
	rec := &recorder{Decider: memLimiter(t)}
	cost := func(r *http.Request) (int64, error) { return strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64) }
	srv := serve(t, rec, []httplimit.Rule{{Policy: fixedWindow(t, "units", 10, time.Minute)}}, httplimit.Options{Cost: cost})
	for _, step := range []struct {
		cost      string
		status    int
		remaining string
	}{
		{"3", 200, "7"},
		{"0", 200, "7"}, // cost 0 only checks
		{"7", 200, "0"},
		{"1", 429, "0"},
		{"-1", 400, ""},
		{"x", 400, ""},
		{strconv.FormatInt(floodgate.MaxCost+1, 10), 400, ""},
	} {
		resp := get(t, srv.Client(), srv.URL, "X-Cost", step.cost)
		if resp.status != step.status || resp.header.Get("X-RateLimit-Remaining") != step.remaining {
			t.Fatalf("cost %s: %d remaining %q, want %d %q", step.cost, resp.status, resp.header.Get("X-RateLimit-Remaining"), step.status, step.remaining)
		}
		if step.status == 400 && (resp.problem.Status != 400 || resp.header.Get("Content-Type") != httplimit.ProblemContentType) {
			t.Fatalf("cost %s: problem %+v", step.cost, resp.problem)
		}
	}
}

// TestNestedMiddlewaresHeaders: an outer per-IP middleware with the IETF
// fields around an inner per-route one. The response describes one
// middleware, the inner: a walk found the inner's X-RateLimit-* beside
// the outer's RateLimit and RateLimit-Policy when the inner had no
// IETFHeaders, two policies in one response.
func TestNestedMiddlewaresHeaders(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		innerIETF             bool
		wantPolicy, wantLimit string
	}{
		{"inner without IETF fields", false, "", ""},
		{"inner with IETF fields", true, `"per-route";q=3;w=60`, `"per-route";r=2;t=50`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := memLimiter(t)
			outer, err := httplimit.New(lim, []httplimit.Rule{{Policy: fixedWindow(t, "per-ip", 10, time.Minute)}},
				httplimit.Options{IETFHeaders: true, Clock: fixedClock})
			if err != nil {
				t.Fatal(err)
			}
			inner, err := httplimit.New(lim, []httplimit.Rule{{Policy: fixedWindow(t, "per-route", 3, time.Minute)}},
				httplimit.Options{IETFHeaders: tc.innerIETF, Clock: fixedClock})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(outer.Handler(inner.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))))
			t.Cleanup(srv.Close)
			resp := get(t, srv.Client(), srv.URL)
			if resp.status != 200 || resp.header.Get("X-RateLimit-Limit") != "3" || resp.header.Get("X-RateLimit-Remaining") != "2" {
				t.Fatalf("status %d, X-RateLimit-* %v, want the inner's 3 and 2", resp.status, resp.header)
			}
			if got := resp.header.Get("RateLimit-Policy"); got != tc.wantPolicy {
				t.Errorf("RateLimit-Policy = %q, want %q", got, tc.wantPolicy)
			}
			if got := resp.header.Get("RateLimit"); got != tc.wantLimit {
				t.Errorf("RateLimit = %q, want %q", got, tc.wantLimit)
			}
		})
	}
}
