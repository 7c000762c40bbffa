package httplimit_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memstore"
)

// t0 is the fixed instant the tests' clocks return: 10 seconds into a
// minute, so a 1-minute fixed window resets 50 seconds later.
var t0 = time.Date(2026, 12, 1, 10, 0, 10, 0, time.UTC)

func fixedClock() time.Time { return t0 }

// memLimiter returns a Limiter on a fresh memstore.
func memLimiter(t testing.TB) *floodgate.Limiter {
	t.Helper()
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New(st, floodgate.Options{Prefix: "httplimit-test"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func policy(t testing.TB, p floodgate.Policy) floodgate.Policy {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

func fixedWindow(t testing.TB, name string, limit int64, window time.Duration) floodgate.Policy {
	t.Helper()
	return policy(t, floodgate.Policy{Name: name, Algorithm: floodgate.FixedWindow, Limit: limit, Window: window})
}

// serve starts a real HTTP server whose handler, behind the middleware,
// answers 200 "ok".
func serve(t testing.TB, d httplimit.Decider, rules []httplimit.Rule, opts httplimit.Options) *httptest.Server {
	t.Helper()
	if opts.Clock == nil {
		opts.Clock = fixedClock
	}
	m, err := httplimit.New(d, rules, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	return srv
}

type response struct {
	status  int
	header  http.Header
	body    []byte
	problem httplimit.Problem
}

// get sends one request with the given headers and reads the whole
// response, decoding a problem body.
func get(t testing.TB, c *http.Client, url string, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Error(err)
		return response{}
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Error(err)
		return response{}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
	}
	r := response{status: resp.StatusCode, header: resp.Header, body: body}
	if resp.Header.Get("Content-Type") == httplimit.ProblemContentType {
		if err := json.Unmarshal(body, &r.problem); err != nil {
			t.Errorf("problem body %q: %v", body, err)
		}
	}
	return r
}

func headerInt(t testing.TB, h http.Header, name string) int64 {
	t.Helper()
	v := h.Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("header %s = %q: %v", name, v, err)
	}
	return n
}

// recorder wraps a real Limiter and keeps the decisions it returned, so
// tests can compare the response headers with the exact Result.
type recorder struct {
	httplimit.Decider
	mu        sync.Mutex
	decisions []floodgate.Decision
}

func (r *recorder) AllowLayersAt(ctx context.Context, now time.Time, cost int64, specs ...floodgate.LayerSpec) (floodgate.Decision, error) {
	d, err := r.Decider.AllowLayersAt(ctx, now, cost, specs...)
	if err == nil {
		r.mu.Lock()
		r.decisions = append(r.decisions, d)
		r.mu.Unlock()
	}
	return d, err
}

func (r *recorder) last(t testing.TB) floodgate.Decision {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.decisions) == 0 {
		t.Fatal("no decision recorded")
	}
	return r.decisions[len(r.decisions)-1]
}
