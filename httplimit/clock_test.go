package httplimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
	"github.com/floodgate-rl/floodgate/memstore"
)

// TestClockDefaultsToTheLimiters: a Middleware given no Clock stamps its
// decisions, and its headers, with the limiter's clock (Options.Clock of
// floodgate.New, which docs/operations.md has disciplined to Redis by
// clocksync), not with time.Now. The limiter's clock is frozen 10 s into a
// minute: a one-minute window resets at the end of that minute, 50 s
// later. Before, the middleware stamped its decisions with time.Now
// (AllowLayersAt), and the clock given to the limiter was silently
// unused: the window and the reset were this machine's.
func TestClockDefaultsToTheLimiters(t *testing.T) {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := floodgate.New(st, floodgate.Options{Prefix: "httplimit-clock", Clock: fixedClock})
	if err != nil {
		t.Fatal(err)
	}
	m, err := httplimit.New(lim, []httplimit.Rule{{Policy: fixedWindow(t, "api", 2, time.Minute)}}, httplimit.Options{IETFHeaders: true}) // no Clock
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	resp := get(t, srv.Client(), srv.URL)
	if resp.status != http.StatusOK {
		t.Fatalf("status %d: %s", resp.status, resp.body)
	}
	if got, want := resp.header.Get("X-RateLimit-Reset"), strconv.FormatInt(t0.Truncate(time.Minute).Add(time.Minute).Unix(), 10); got != want {
		t.Errorf("X-RateLimit-Reset = %s, want %s (the end of the limiter's minute)", got, want)
	}
	if got, want := resp.header.Get("RateLimit"), `"api";r=1;t=50`; got != want {
		t.Errorf("RateLimit = %s, want %s", got, want)
	}
}
