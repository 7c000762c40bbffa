package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// scriptCalls returns how many script calls (EVALSHA and EVAL) rs ran
// since it started.
func scriptCalls(t *testing.T, rs *redistest.Server) int {
	t.Helper()
	info, err := rs.Client(t).Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		_, rest, _ := strings.Cut(line, "calls=")
		v, _, _ := strings.Cut(rest, ",")
		c, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		n += c
	}
	return n
}

// TestServeDenyCache: with --deny-cache-entries, serve answers the checks
// of an identity over its limit without a Redis call, over HTTP and gRPC,
// with the denial Redis gave (same limit, a retry hint), admits exactly
// the limit, counts the answers on /metrics, and forgets the identity's
// denials when POST /admin/v1/reset resets it, so that its next check is
// admitted at once. An identity under its limit still goes to Redis.
func TestServeDenyCache(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "floodgate.yaml")
	writeFileAtomic(t, cfg, `version: "1"
policies:
  - name: tight
    layers:
      - {name: per-user, algorithm: fixed_window, limit: 2, window: 1h, dimension: user}
`)
	if err := os.Mkdir(filepath.Join(dir, "envoy"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, filepath.Join(dir, "envoy", "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	// A max TTL of an hour: no entry lapses however slow the machine.
	svc := startService(t, "--redis", "redis://"+rs.Addr, "--config", cfg, "--admin-token", e2eAdminToken,
		"--grpc-addr", "127.0.0.1:0", "--envoy-config", filepath.Join(dir, "envoy"),
		"--deny-cache-entries", "100", "--deny-cache-max-ttl", "1h")
	defer svc.stop(t)
	if !strings.Contains(svc.Logs(), `"deny_cache_entries":100`) {
		t.Errorf("the listening line does not say deny_cache_entries 100:\n%s", svc.Logs())
	}
	u1 := server.CheckRequest{Policy: "tight", Identity: map[string]string{"user": "u1"}}
	for i := range 3 {
		c := checkOn(t, svc.url, "/v1/check", u1)
		if c.status != http.StatusOK || c.resp.Allowed != (i < 2) {
			t.Fatalf("check %d of u1: %d allowed %v; want 200 and allowed for the first 2 only", i+1, c.status, c.resp.Allowed)
		}
	}
	before := scriptCalls(t, rs)
	const flood = 50
	for i := range flood {
		c := checkOn(t, svc.url, "/v1/check", u1)
		if c.status != http.StatusOK || c.resp.Allowed || c.resp.Limit != 2 || c.resp.RetryAfterMS <= 0 {
			t.Fatalf("flood check %d of u1: %d %+v; want 200, denied, limit 2, a retry hint", i+1, c.status, c.resp)
		}
	}
	// The heartbeat may run a script meanwhile; the flood runs none.
	if calls := scriptCalls(t, rs) - before; calls > 5 {
		t.Errorf("%d denied checks of an identity over its limit made %d script calls; want none (the deny cache answers them)", flood, calls)
	}
	if v := metricValue(t, svc.url, "floodgate_deny_cache_answers_total"); v != flood {
		t.Errorf("floodgate_deny_cache_answers_total %v, want %d", v, flood)
	}
	if v := metricValue(t, svc.url, "floodgate_deny_cache_entries_max"); v != 100 {
		t.Errorf("floodgate_deny_cache_entries_max %v, want 100", v)
	}
	if v := metricValue(t, svc.url, "floodgate_deny_cache_evictions_total"); v != 0 {
		t.Errorf("floodgate_deny_cache_evictions_total %v with one entry of 100, want 0", v)
	}

	// Envoy's API decides through the same cache.
	conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "e1"}}}}})
		cancel()
		want := rlspb.RateLimitResponse_OVER_LIMIT
		if i == 0 {
			want = rlspb.RateLimitResponse_OK
		}
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("ShouldRateLimit %d of e1: %v, %v; want %v", i+1, resp.GetOverallCode(), err, want)
		}
	}
	if v := metricValue(t, svc.url, "floodgate_deny_cache_answers_total"); v != flood+2 {
		t.Errorf("floodgate_deny_cache_answers_total after 3 gRPC denials %v, want %d (the first learnt from Redis)", v, flood+2)
	}
	if v := metricValue(t, svc.url, "floodgate_deny_cache_entries"); v != 2 {
		t.Errorf("floodgate_deny_cache_entries %v, want 2 (u1 and e1)", v)
	}

	// Another identity is decided by Redis.
	before = scriptCalls(t, rs)
	if c := checkOn(t, svc.url, "/v1/check", server.CheckRequest{Policy: "tight", Identity: map[string]string{"user": "u2"}}); c.status != http.StatusOK || !c.resp.Allowed {
		t.Fatalf("check of u2: %d allowed %v; want 200, allowed", c.status, c.resp.Allowed)
	}
	if calls := scriptCalls(t, rs) - before; calls < 1 {
		t.Errorf("u2's check made no script call; want Redis to decide it")
	}

	// A reset on this instance drops u1's cached denial with its counter.
	if code, body := bearerPost(t, svc.url+"/admin/v1/reset", `{"policy":"tight","identity":{"user":"u1"}}`); code != http.StatusOK {
		t.Fatalf("reset of u1: %d %s", code, body)
	}
	if c := checkOn(t, svc.url, "/v1/check", u1); c.status != http.StatusOK || !c.resp.Allowed {
		t.Fatalf("check of u1 after its reset: %d allowed %v; want 200, allowed (the cached denial forgotten)", c.status, c.resp.Allowed)
	}
	if v := metricValue(t, svc.url, "floodgate_deny_cache_entries"); v != 1 {
		t.Errorf("floodgate_deny_cache_entries after u1's reset %v, want 1 (e1)", v)
	}
}

// TestServeDenyCacheFlags: the deny cache's flags out of range, in memory
// mode (no Redis to spare calls to) or --deny-cache-max-ttl alone are
// refused with the flag named, before anything dials Redis.
func TestServeDenyCacheFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--deny-cache-entries", "10"}, "--deny-cache-entries needs --redis"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--deny-cache-max-ttl", "5s"}, "--deny-cache-max-ttl needs --deny-cache-entries"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--deny-cache-entries", "-1"}, "--deny-cache-entries -1: out of range 0..10000000"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--deny-cache-entries", "10000001"}, "--deny-cache-entries 10000001: out of range"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--deny-cache-entries", "10", "--deny-cache-max-ttl", "2h"}, "--deny-cache-max-ttl 2h0m0s: out of range 1ms..1h0m0s"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--deny-cache-entries", "10", "--deny-cache-max-ttl", "0s"}, "--deny-cache-max-ttl 0s: out of range"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--deny-cache-entries", "10", "--deny-cache-max-ttl", "-1s"}, "--deny-cache-max-ttl -1s: must not be negative"},
	} {
		code, out := runCLI(t, append([]string{"serve", "--addr", "127.0.0.1:0"}, c.args...)...)
		if code == 0 || !strings.Contains(out, c.says) {
			t.Errorf("serve %v: exit %d, output %q; want a failure saying %q", c.args, code, out, c.says)
		}
	}
}
