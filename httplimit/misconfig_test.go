package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/httplimit"
)

// errDecider fails every decision with err.
type errDecider struct{ err error }

func (d errDecider) AllowLayersAt(context.Context, time.Time, int64, ...floodgate.LayerSpec) (floodgate.Decision, error) {
	return floodgate.Decision{}, d.err
}

// TestConfigurationErrorsAreNotFailedOpen: every configuration or
// programming error a decision can fail with (an invalid cost, key,
// layers, time or context, not only an invalid policy) is answered 500
// "misconfigured" in either failure mode. FailOpen used to serve each
// request uncounted (200, 200, 200 at limit 1) and FailClosed to answer
// 503 as for an outage.
func TestConfigurationErrorsAreNotFailedOpen(t *testing.T) {
	cases := []struct {
		name     string
		d        httplimit.Decider
		clock    func() time.Time
		sentinel error
	}{
		// A real Limiter asked to decide at the zero time.
		{"zero time", memLimiter(t), func() time.Time { return time.Time{} }, floodgate.ErrInvalidTime},
	}
	for _, sentinel := range []error{floodgate.ErrInvalidPolicy, floodgate.ErrInvalidCost, floodgate.ErrInvalidKey,
		floodgate.ErrInvalidLayers, floodgate.ErrInvalidTime, floodgate.ErrNilContext} {
		cases = append(cases, struct {
			name     string
			d        httplimit.Decider
			clock    func() time.Time
			sentinel error
		}{sentinel.Error(), errDecider{fmt.Errorf("custom decider: %w", sentinel)}, nil, sentinel})
	}
	for _, c := range cases {
		for _, mode := range []httplimit.FailureMode{httplimit.FailOpen, httplimit.FailClosed} {
			t.Run(c.name+"/"+mode.String(), func(t *testing.T) {
				var mu sync.Mutex
				var errs []error
				srv := serve(t, c.d, []httplimit.Rule{{Policy: fixedWindow(t, "api", 1, time.Minute)}},
					httplimit.Options{FailureMode: mode, Clock: c.clock, OnStoreError: func(_ *http.Request, err error, _ bool) {
						mu.Lock()
						defer mu.Unlock()
						errs = append(errs, err)
					}})
				for i := range 3 {
					resp := get(t, srv.Client(), srv.URL)
					if resp.status != http.StatusInternalServerError || resp.problem.Status != 500 ||
						resp.problem.Detail != "the rate limiter is misconfigured" || resp.problem.Policy != "api" {
						t.Fatalf("request %d: %d %q, want 500 misconfigured", i, resp.status, resp.body)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if len(errs) != 3 || !errors.Is(errs[0], c.sentinel) {
					t.Fatalf("OnStoreError got %v", errs)
				}
			})
		}
	}
}
