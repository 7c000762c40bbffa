package server_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/posix"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/quota"
	"github.com/floodgate-rl/floodgate/replicawait"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/redis/go-redis/v9"
)

// TestQuotaDenialsUnderWaitReplicasWithReplicaStopped: serve's quotas
// through a replicawait.Client (--redis-wait-replicas 1) on a primary
// whose only replica is stopped. A check the primary applied is answered
// 503 store-not-replicated; a check or reserve that does not fit, and a
// check of more than the limit, wrote nothing a failover could lose and
// are answered as the denials they are (200 allowed false, 429 with
// enforce=1). They were 503 store-not-replicated, "the Redis primary
// applied the operation": an outside walk saw a plain exhausted quota
// answered so. One connection carries every operation, so that each
// denial's WAIT waits for the unconfirmed check before it.
func TestQuotaDenialsUnderWaitReplicasWithReplicaStopped(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	client := redis.NewClient(&redis.Options{Addr: primary.Addr, PoolSize: 1, ContextTimeoutEnabled: true, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { client.Close() })
	for deadline := time.Now().Add(10 * time.Second); ; {
		if n, _ := client.Do(ctxT(t), "WAIT", 1, 100).Int(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not connect")
		}
	}
	w, err := replicawait.New(client, replicawait.Options{Replicas: 1, Timeout: 500 * time.Millisecond}) // ample for the replica up, on a loaded host
	if err != nil {
		t.Fatal(err)
	}
	qs, err := quota.NewRedisStore(w)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := redisStore(t)
	e := start(t, limits, st, func(o *server.Options) {
		o.QuotaStore = qs
		o.DecisionTimeout = 2 * time.Second
	})
	u := id("user", "U")
	if status, r := e.quotaCall("/v1/quota/check", server.QuotaCheckRequest{Quota: "hundred", Identity: u, Cost: ptr(90)}); status != 200 || !r.Allowed {
		t.Fatalf("check 90 with the replica up: %d %+v", status, r)
	}
	if err := posix.Kill(replica.Pid, posix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = posix.Kill(replica.Pid, posix.SIGCONT) })

	r := e.post("/v1/quota/check", server.QuotaCheckRequest{Quota: "hundred", Identity: u, Cost: ptr(5)})
	if p := problemOf(t, r); r.status != http.StatusServiceUnavailable || p.Type != server.ProblemTypePrefix+"store-not-replicated" {
		t.Fatalf("check 5 applied on the primary alone: %d %s; want 503 store-not-replicated", r.status, r.body)
	}
	for _, tc := range []struct {
		name, path string
		body       any
		status     int
		reason     string
	}{
		{"check 10", "/v1/quota/check", server.QuotaCheckRequest{Quota: "hundred", Identity: u, Cost: ptr(10)}, 200, "exhausted"},
		{"check 10 enforced", "/v1/quota/check?enforce=1", server.QuotaCheckRequest{Quota: "hundred", Identity: u, Cost: ptr(10)}, 429, "exhausted"},
		{"reserve 10", "/v1/quota/reserve", server.QuotaReserveRequest{Quota: "hundred", Identity: u, RequestID: "big", Estimate: ptr(10)}, 200, "exhausted"},
		{"check 500", "/v1/quota/check", server.QuotaCheckRequest{Quota: "hundred", Identity: u, Cost: ptr(500)}, 200, "cost_exceeds_limit"},
		{"reserve 500", "/v1/quota/reserve", server.QuotaReserveRequest{Quota: "hundred", Identity: u, RequestID: "huge", Estimate: ptr(500)}, 200, "cost_exceeds_limit"},
	} {
		r := e.post(tc.path, tc.body)
		var resp server.QuotaResponse
		if r.status != tc.status || json.Unmarshal(r.body, &resp) != nil || resp.Allowed || resp.Reason != tc.reason || resp.Used != 95 {
			t.Errorf("%s, replica stopped: %d %s; want %d, allowed false, reason %s, used 95", tc.name, r.status, r.body, tc.status, tc.reason)
		} else if tc.reason == "exhausted" && resp.RetryAfterMS <= 0 {
			t.Errorf("%s: retry_after_ms %d; want positive", tc.name, resp.RetryAfterMS)
		}
	}
	// The one 503 is counted once, as indeterminate; the denials not at all.
	if got := labelledCounter(t, e.reg, "floodgate_decision_errors_total", "reason", "indeterminate"); got != 1 {
		t.Errorf("floodgate_decision_errors_total{reason=\"indeterminate\"} = %v, want 1 (the check applied)", got)
	}
}
