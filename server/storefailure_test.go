package server_test

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/floodgate-rl/floodgate/server"
)

// TestStalledStoreFailureNamesTheOperation: with Redis stalled (SIGSTOP:
// each call is sent and its answer never comes), a failed operation's
// 503 says what that operation may have done, and its log line names it.
// A quota status and a peek consume nothing, so they are answered
// store-unavailable saying nothing was counted; a release says the lease
// may have been released; a quota check, that it may have been counted.
// Before, every one of them was "store-indeterminate ... it may have been
// counted", and a status was logged as `quota "hundred" check: ...`.
func TestStalledStoreFailureNamesTheOperation(t *testing.T) {
	// One client for every store: the warmed pool below serves them all.
	rs := redistest.Start(t)
	client := rs.Client(t)
	st, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	qs, cs := redisQuotaLeases(t, client)
	logs := &lockedBuffer{}
	e := start(t, limits, st, func(o *server.Options) {
		o.QuotaStore, o.ConcurrencyStore = qs, cs
		o.DecisionTimeout = 300 * time.Millisecond
		o.WarnEvery = time.Nanosecond // every failure logged
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	u := id("user", "stalled")
	_, lease := e.acquire("/v1/concurrency/acquire", server.AcquireRequest{Limiter: "five", Identity: u})
	if !lease.Acquired {
		t.Fatalf("acquire on a healthy Redis: %+v", lease)
	}
	// Each failure below costs the client its connection, and one dialled
	// to a stalled Redis fails before anything is sent (its handshake
	// gets no answer): the pool holds enough connections, ready, for each
	// operation to be sent on one.
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { _ = client.Do(ctx, "BLPOP", uniquePrefix(t), "0.1").Err() })
	}
	wg.Wait()
	if idle := client.PoolStats().IdleConns; idle < 8 {
		t.Fatalf("%d connections ready, want 8", idle)
	}
	if err := posix.Kill(rs.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = posix.Kill(rs.Pid, posix.SIGCONT) })

	tests := []struct {
		path      string
		body      any
		kind      string
		operation string
		detail    []string // each in the problem's detail
	}{
		{"/v1/quota/status", server.QuotaStatusRequest{Quota: "hundred", Identity: u}, "store-unavailable", "quota status",
			[]string{"while the quota status was being sent or answered", "nothing was counted"}},
		{"/v1/peek", server.PeekRequest{Policy: "api", Identity: u}, "store-unavailable", "peek",
			[]string{"while the peek was being sent or answered", "nothing was counted"}},
		{"/v1/concurrency/release", server.LeaseRequest{Limiter: "five", Identity: u, LeaseID: lease.LeaseID}, "store-indeterminate", "lease release",
			[]string{"while the lease release was being sent or answered, so it may or may not have been applied", "the lease may have been released: release it again"}},
		{"/v1/quota/check", server.QuotaCheckRequest{Quota: "hundred", Identity: u}, "store-indeterminate", "quota check",
			[]string{"while the quota check was being sent or answered, so it may or may not have been applied", "it may have been counted"}},
	}
	for _, tc := range tests {
		r := e.post(tc.path, tc.body)
		p := problemOf(t, r)
		ok := r.status == 503 && p.Type == server.ProblemTypePrefix+tc.kind && r.header.Get("Retry-After") == "1"
		for _, d := range tc.detail {
			ok = ok && strings.Contains(p.Detail, d)
		}
		if tc.kind == "store-unavailable" && strings.Contains(p.Detail, "may have") {
			ok = false
		}
		if !ok {
			t.Errorf("%s with Redis stalled: %d %s %q; want 503 %s saying %q", tc.path, r.status, p.Type, p.Detail, tc.kind, tc.detail)
		}
	}
	failed := logs.lines(t, "decision failed")
	for _, tc := range tests {
		found := false
		for _, rec := range failed {
			if rec["operation"] != tc.operation {
				continue
			}
			found = true
			if msg, _ := rec["error"].(string); tc.operation == "quota status" && (!strings.Contains(msg, `quota "hundred" status: `) || strings.Contains(msg, "check")) {
				t.Errorf("a failed status is logged with error %q; want it named a status, not a check", msg)
			}
		}
		if !found {
			t.Errorf("no \"decision failed\" line with operation %q in %v", tc.operation, failed)
		}
	}
}

// TestDownStoreReadSaysNothingWasRead: with Redis gone, a quota status
// (which counts nothing) is answered 503 store-unavailable saying it could
// not be read, not that it "was not applied, so nothing was counted" (a
// walk's finding: a status never counts); a quota check still says
// nothing was counted. The client dials once per attempt, as serve's
// (config.DialAttempts), so that a Redis that is down is refused within
// the decision's deadline: go-redis's default five dials with pauses ran
// past it, which is a decision out of time (store-timeout). A lease
// release says the lease is still held.
func TestDownStoreReadSaysNothingWasRead(t *testing.T) {
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr, ContextTimeoutEnabled: true, DialerRetries: config.DialAttempts})
	t.Cleanup(func() { _ = client.Close() })
	st, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	qs, cs := redisQuotaLeases(t, client)
	e := start(t, limits, st, func(o *server.Options) {
		o.QuotaStore, o.ConcurrencyStore = qs, cs
		o.DecisionTimeout = 300 * time.Millisecond
	})
	rs.Kill()
	u := id("user", "gone")
	tests := []struct {
		path   string
		body   any
		want   string
		refuse string
	}{
		{"/v1/quota/status", server.QuotaStatusRequest{Quota: "hundred", Identity: u}, "the quota status could not be read (it counts nothing)", "applied"},
		{"/v1/quota/check", server.QuotaCheckRequest{Quota: "hundred", Identity: u}, "the quota check was not applied, so nothing was counted", "could not be read"},
		// A release not applied leaves its slot taken: "nothing was
		// counted" said nothing of that (a walk's finding).
		{"/v1/concurrency/release", server.LeaseRequest{Limiter: "five", Identity: u, LeaseID: "L1"}, "the lease release was not applied, so the lease is still held (its slot stays taken until it is released or its lease_ttl ends): release it again later", "counted"},
	}
	for _, tc := range tests {
		r := e.post(tc.path, tc.body)
		p := problemOf(t, r)
		if r.status != 503 || p.Type != server.ProblemTypePrefix+"store-unavailable" || !strings.Contains(p.Detail, tc.want) || strings.Contains(p.Detail, tc.refuse) {
			t.Errorf("%s with Redis down: %d %s %q; want 503 store-unavailable saying %q", tc.path, r.status, p.Type, p.Detail, tc.want)
		}
	}
}
