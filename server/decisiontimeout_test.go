package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/server"
)

// TestOwnDeadlineBeforeTheCallIsATimeout: a decision whose own deadline
// (DecisionTimeout, serve's --decision-timeout) ended before its store
// call was sent is answered 503 store-timeout and counted as timeout in
// floodgate_decision_errors_total, as docs/operations.md says, over HTTP
// and through DecisionFailed (serve's gRPC APIs). It was counted and
// answered store_unavailable, as if the store were down: only the
// caller's own deadline was looked at (a walk: 1 MiB Envoy requests under
// load, in memory mode, with --decision-timeout 100ms). A nanosecond
// deadline has always passed by the time the store looks at it.
func TestOwnDeadlineBeforeTheCallIsATimeout(t *testing.T) {
	st := memStore(t)
	e := start(t, limits, st, func(o *server.Options) { o.DecisionTimeout = time.Nanosecond })
	r := e.post("/v1/check", server.CheckRequest{Policy: "api", Identity: id("user", "late")})
	if p := problemOf(t, r); r.status != 503 || p.Type != server.ProblemTypePrefix+"store-timeout" {
		t.Errorf("check past its decision deadline: %d %s %q; want 503 store-timeout", r.status, p.Type, p.Detail)
	}
	// What a gRPC API gets from the store for a decision past its own
	// deadline, its caller's context still live.
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	out := make([]floodgate.Result, 1)
	p := floodgate.Policy{Name: "p", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute}
	err := st.Decide(ctx, time.Now().UnixMicro(), []floodgate.Layer{{Policy: p, Key: "k{x}", Cost: 1}}, out)
	if !errors.Is(err, floodgate.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("decision past its deadline: %v; want store unavailable, deadline exceeded", err)
	}
	e.srv.DecisionFailed(context.Background(), err)
	if got := labelledCounter(t, e.reg, "floodgate_decision_errors_total", "reason", "timeout"); got != 2 {
		t.Errorf("floodgate_decision_errors_total{reason=\"timeout\"} = %v, want 2", got)
	}
	if got := labelledCounter(t, e.reg, "floodgate_decision_errors_total", "reason", "store_unavailable"); got != 0 {
		t.Errorf("floodgate_decision_errors_total{reason=\"store_unavailable\"} = %v, want 0", got)
	}
}
