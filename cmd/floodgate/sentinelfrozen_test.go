package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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

// frozenSlowest is the longest a decision may take with the sentinels
// frozen: a dial that waits for them takes the whole Redis timeout (1 s).
const frozenSlowest = 250 * time.Millisecond

// killPrimaryClients drops every client connection to s's primary (CLIENT
// KILL TYPE normal), as a network blip, Redis's timeout or a proxy's idle
// cut does.
func killPrimaryClients(t *testing.T, s *redistest.Sentinel) {
	t.Helper()
	if err := s.Primary.Client(t).ClientKillByFilter(context.Background(), "TYPE", "normal").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE normal on the primary: %v", err)
	}
}

// TestServeSentinelsFrozenKeepsDeciding: with every sentinel frozen
// (SIGSTOP) and the service's connections to the healthy primary dropped,
// decisions go on centrally and at once, on new connections to the
// primary the sentinels named last. They were all decided locally
// (degraded), each after the whole Redis timeout, with "connection pool:
// failed to dial after 1 attempts: context deadline exceeded" in the log
// (an outside walk): go-redis asked a sentinel at each new connection. The
// log says the sentinels do not answer.
func TestServeSentinelsFrozenKeepsDeciding(t *testing.T) {
	s := redistest.StartSentinel(t)
	svc := startService(t, "--redis-sentinel", strings.Join(s.SentinelAddrs, ","), "--redis-master", s.MasterName,
		"--prefix", fmt.Sprintf("frozen%d", time.Now().UnixNano()))
	check := func() checked {
		return checkOn(t, svc.url, "/v1/check", server.CheckRequest{Policy: "api", Identity: map[string]string{"user": "u"}})
	}
	waitUntil(t, "readyz 200 and a central decision", func() bool {
		code, _ := readyz(t, svc.url)
		c := check()
		return code == 200 && c.status == 200 && !c.resp.Degraded
	})
	s.FreezeSentinels(t)
	killPrimaryClients(t, s)
	var slowest time.Duration
	for i := range 20 {
		c := check()
		if c.status != 200 || c.resp.Degraded {
			t.Fatalf("check %d with the sentinels frozen: %d, degraded %v (%s), after %v; want a central decision", i, c.status, c.resp.Degraded, c.resp.DegradedReason, c.took)
		}
		slowest = max(slowest, c.took)
		if i == 10 {
			time.Sleep(time.Second) // the Follower has found them frozen
			killPrimaryClients(t, s)
		}
	}
	t.Logf("slowest check with the sentinels frozen and the connections killed: %v", slowest)
	if slowest > frozenSlowest {
		t.Errorf("a check took %v with the sentinels frozen, want at most %v", slowest, frozenSlowest)
	}
	if code, body := readyz(t, svc.url); code != 200 {
		t.Errorf("readyz with the sentinels frozen: %d %s", code, body)
	}
	waitUntil(t, "the log saying the sentinels do not answer", func() bool {
		return strings.Contains(svc.Logs(), "no majority of the sentinels answered: new connections go on to the Redis primary they last named")
	})
}

// TestEnvoyCompatSentinelsFrozenKeepsDeciding is
// TestServeSentinelsFrozenKeepsDeciding for envoy-compat (REDIS_TYPE
// sentinel): every ShouldRateLimit failed after REDIS_TIMEOUT with
// "store unavailable: redis: context deadline exceeded".
func TestEnvoyCompatSentinelsFrozenKeepsDeciding(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, filepath.Join(root, "config", "d.yaml"),
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n")
	s := redistest.StartSentinel(t)
	p := startCompat(t, "REDIS_TYPE=sentinel", "REDIS_URL="+s.MasterName+","+strings.Join(s.SentinelAddrs, ","),
		"REDIS_SOCKET_TYPE=tcp", "REDIS_TIMEOUT=1s", "RUNTIME_ROOT="+root)
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	decide := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "d",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "a", Value: "1"}}}}})
		return time.Since(start), err
	}
	waitFor(t, "a decision", func() bool { _, err := decide(); return err == nil })
	time.Sleep(1500 * time.Millisecond) // the Follower has asked the sentinels
	s.FreezeSentinels(t)
	killPrimaryClients(t, s)
	var slowest time.Duration
	for i := range 20 {
		took, err := decide()
		if err != nil {
			t.Fatalf("ShouldRateLimit %d with the sentinels frozen: %v, after %v", i, err, took)
		}
		slowest = max(slowest, took)
		if i == 10 {
			time.Sleep(time.Second)
			killPrimaryClients(t, s)
		}
	}
	t.Logf("slowest ShouldRateLimit with the sentinels frozen and the connections killed: %v", slowest)
	if slowest > frozenSlowest {
		t.Errorf("a ShouldRateLimit took %v with the sentinels frozen, want at most %v", slowest, frozenSlowest)
	}
}
