package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/deadline"
	"github.com/floodgate-rl/floodgate/server"
)

// TestCallerDeadlineCountsAsTimeout: a decision whose caller's deadline
// ended (or that the caller left) before the store answered is counted as
// reason timeout, not store_unavailable, although the store wraps the
// context's error as "store unavailable" (nothing was sent). A walk's 18
// gRPC calls with a 3 ms deadline on a stalled Redis counted as Redis
// being down. A store failure with the caller still waiting keeps its
// class (a deadline of the service's own is a timeout too:
// TestOwnDeadlineBeforeTheCallIsATimeout).
func TestCallerDeadlineCountsAsTimeout(t *testing.T) {
	logs := &lockedBuffer{}
	e := start(t, errorsYAML, memStore(t), func(o *server.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	errorsOf := func(reason string) float64 {
		t.Helper()
		mfs, err := e.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "floodgate_decision_errors_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" && l.GetValue() == reason {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		t.Fatalf("no floodgate_decision_errors_total{reason=%q}", reason)
		return 0
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	e.srv.DecisionFailed(gone, fmt.Errorf("%w: redis: %w", floodgate.ErrStoreUnavailable, context.Canceled))
	if got := errorsOf("timeout"); got != 1 {
		t.Errorf("timeout errors after a call the caller left: %v, want 1", got)
	}
	if got := errorsOf("store_unavailable"); got != 0 {
		t.Errorf("store_unavailable errors after a call the caller left: %v, want 0", got)
	}
	// serve's --decision-timeout is a shared deadline, which does not end
	// with the request: the queue's drop of a decision whose client has
	// gone (deadline.Gone) counted as store_unavailable (review11).
	left, leave := context.WithCancel(context.Background())
	shared, stop := deadline.New().WithTimeout(left, time.Now(), time.Minute)
	defer stop()
	leave()
	e.srv.DecisionFailed(shared, fmt.Errorf("%w: %w (while waiting to be sent)", floodgate.ErrStoreUnavailable, context.Canceled))
	if got := errorsOf("timeout"); got != 2 {
		t.Errorf("timeout errors after a queued call dropped for a client that left (under a shared deadline): %v, want 2", got)
	}
	if got := errorsOf("store_unavailable"); got != 0 {
		t.Errorf("store_unavailable errors after a queued call dropped for a client that left: %v, want 0", got)
	}
	// Nobody reads those answers: counted, not logged (a burst of
	// hang-ups was a stream of error lines; hangupwalk).
	if failed := logs.lines(t, "decision failed"); len(failed) != 0 {
		t.Errorf("decision failed logged for clients that had gone: %v", failed)
	}
	e.srv.DecisionFailed(context.Background(), fmt.Errorf("%w: redis: %w", floodgate.ErrStoreUnavailable, syscall.ECONNREFUSED))
	if got := errorsOf("store_unavailable"); got != 1 {
		t.Errorf("store_unavailable errors after a store failure with the caller waiting: %v, want 1", got)
	}
}

const errorsYAML = `
version: "1"
policies:
  - name: api
    layers:
      - {name: per-user, algorithm: fixed_window, limit: 10, window: 1m, dimension: user}
`
