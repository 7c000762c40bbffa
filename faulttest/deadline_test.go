package faulttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// stopRedis freezes srv's process (SIGSTOP): its connections stay open
// and accept commands, and nothing answers, as with a Redis stuck on a
// slow disk or a swapped-out host. The process is continued by the
// returned function, and at cleanup in any case.
func stopRedis(t *testing.T, srv *redistest.Server) (resume func()) {
	t.Helper()
	pid := srv.Pid
	if err := posix.Kill(pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume = func() { _ = posix.Kill(pid, posix.SIGCONT) }
	t.Cleanup(resume)
	return resume
}

// TestCallerDeadlineBeforeBudget: a caller whose deadline comes before the
// budget (Envoy calls with 20 ms, the budget is 50 ms) must get the
// failure mode's answer while it still waits for one. The primary call
// used to run under the caller's context as it was: with Redis stalled it
// ended only when the caller's time was up, so the local answer came too
// late, and a caller that gave up at its deadline (a gRPC client's
// RST_STREAM cancels the server's context, often before the server's own
// timer fires) got context.Canceled, which the breaker counts as nobody's
// fault: with such callers only, a stalled Redis never opened the breaker
// and every request timed out.
func TestCallerDeadlineBeforeBudget(t *testing.T) {
	leakCheck(t)
	srv := redistest.Start(t)
	const callerTimeout = time.Second // stands for Envoy's 20 ms, scaled so that the test has room
	r := newRig(t, newClient(t, srv.Addr), fallback.Options{
		Budgets: map[string]time.Duration{"short": 2 * callerTimeout, "exact": exactBudget},
		Breaker: fallback.BreakerOptions{FailureThreshold: 3},
	})
	p := policy(t, "short", 50)
	r.waitCentral(p)
	resume := stopRedis(t, srv)
	for i := range 4 {
		// A caller that gives up at its deadline, by cancelling just
		// before it, as grpc-go's server context does when the client's
		// cancellation arrives first.
		base, giveUp := context.WithCancel(context.Background())
		ctx, cancel := context.WithTimeout(base, callerTimeout)
		timer := time.AfterFunc(callerTimeout-10*time.Millisecond, giveUp)
		res, o, err := r.decide(ctx, p, fmt.Sprint("user-", i))
		waited := ctx.Err() // nil while the caller still waits
		timer.Stop()
		cancel()
		giveUp()
		if err != nil {
			t.Fatalf("decision %d with Redis stalled: %v; want the failure mode's answer", i, err)
		}
		if waited != nil {
			t.Fatalf("decision %d answered after the caller gave up (%v): the failure mode must answer before the caller's deadline", i, waited)
		}
		if !o.Degraded || o.Mode != fallback.ModeLocal || !res.Allowed {
			t.Fatalf("decision %d: %+v, outcome %+v; want allowed by the local fallback", i, res, o)
		}
		t.Logf("decision %d: degraded, reason %s", i, o.Reason)
	}
	if !r.watch.opened(fallback.DefaultPartition) {
		t.Fatalf("breaker never opened after 4 decisions on a stalled Redis (states %v)", r.watch.history())
	}
	resume()
	r.waitCentral(p)
}
