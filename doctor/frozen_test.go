package doctor_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/doctor"
	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// freeze stops srv's process (SIGSTOP), as a Redis that hangs does, and
// registers its SIGCONT before the server's own cleanup stops it.
func freeze(t *testing.T, srv *redistest.Server) func() {
	t.Helper()
	t.Cleanup(func() { _ = posix.Kill(srv.Pid, posix.SIGCONT) })
	return func() {
		if err := posix.Kill(srv.Pid, posix.SIGSTOP); err != nil {
			t.Errorf("SIGSTOP: %v", err)
		}
	}
}

// TestRedisFreezesDuringTheRun: a Redis that stops answering half-way
// through a run (SIGSTOP after the scan) with a run bounded by a deadline.
// The run passed every check that read Redis after the freeze (the
// policies' MEMORY USAGE, the tiers' HLEN) on nothing and exited 0 after
// its time ran out, the report silent about both. Every check whose reads
// failed now fails, saying so, and the run reports its deadline.
func TestRedisFreezesDuringTheRun(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	client := srv.Client(t)
	cfg := publish(t, client, "fz", testConfig)
	traffic(t, client, "fz", cfg)
	stop := freeze(t, srv)
	var calls atomic.Int32
	now := func() time.Time {
		// The second call is the key checks' clock, after the scan.
		if calls.Add(1) == 2 {
			stop()
		}
		return time.Now()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	rep, err := doctor.Run(ctx, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "fz", Now: now,
		LatencySamples: 5, LatencyWarn: 5 * time.Second, LatencyFail: 10 * time.Second})
	if err != nil {
		t.Fatalf("doctor.Run: %v", err)
	}
	want(t, rep, doctor.GroupKeys, "scan", doctor.Pass)
	want(t, rep, doctor.GroupKeys, "policies", doctor.Fail, "MEMORY USAGE: ")
	want(t, rep, doctor.GroupClocks, "host-offset", doctor.Fail, "TIME: ")
	c := want(t, rep, doctor.GroupConfig, "tiers", doctor.Fail, "HLEN: ")
	// HLEN meets the run's deadline (the fix names --timeout) or, on a
	// loaded machine, the client's own read timeout first (the fix for a
	// Redis that stopped answering): either says what happened.
	if !strings.Contains(c.Fix, "--timeout") && !strings.Contains(c.Fix, "Redis stopped answering") {
		t.Errorf("tiers fix %q names neither --timeout nor a Redis that stopped answering", c.Fix)
	}
	want(t, rep, doctor.GroupRun, "deadline", doctor.Fail, "the run ended (context deadline exceeded)")
	if rep.Worst() != doctor.Fail {
		t.Fatalf("worst %v, want fail:\n%s", rep.Worst(), text(rep))
	}
}

// TestInstancesNotReadBeforeTheDeadline: an instance doctor's own time ran
// out before reading is reported as not read, with the --timeout fix, not
// as down (a re-walk saw "2 of 2 instances not ready ... unreachable" and
// "check that they are up" while they were serving).
func TestInstancesNotReadBeforeTheDeadline(t *testing.T) {
	srv := redistest.Start(t, healthyRedis...)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // answers nothing before the run's end
	}))
	defer slow.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rep, err := doctor.Run(ctx, doctor.Options{Redis: config.Redis{URL: "redis://" + srv.Addr}, Prefix: "nr", Instances: []string{slow.URL},
		LatencySamples: 5, LatencyWarn: 5 * time.Second, LatencyFail: 10 * time.Second})
	if err != nil {
		t.Fatalf("doctor.Run: %v", err)
	}
	c := want(t, rep, doctor.GroupInstances, "ready", doctor.Warn, "1 of 1 instance not read: doctor's time ran out first", "see Run/deadline")
	if !strings.Contains(c.Fix, "--timeout") || strings.Contains(c.Fix, "up and reachable") {
		t.Errorf("ready fix %q: want the --timeout fix, not a reachability one", c.Fix)
	}
	want(t, rep, doctor.GroupRun, "deadline", doctor.Fail)
}
