package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeFallbackOffReportsFailures: with --fallback off there is no
// fallback store to report the decisions made on Redis, yet they are
// reported as with one: every decision in rate_limit_redis_latency_seconds
// and a failed one in rate_limit_redis_errors_total, so that the alert
// rules on them work whatever the failure mode. A gRPC request whose
// decision failed (Redis stalled by SIGSTOP) is counted in
// floodgate_decision_errors_total and logged ("decision failed"), as an
// HTTP check is, and its status message says what failed (here: the
// script was sent, Redis never answered, so it may have run) without the
// store's own error, which named the Redis address (as HTTP problem
// bodies never do). Before, with --fallback off, the two Redis metrics
// stayed at 0 and a failed gRPC request was neither counted nor logged.
func TestServeFallbackOffReportsFailures(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n")
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--prefix", fmt.Sprintf("fallbackoff%d", time.Now().UnixNano()),
		"--fallback", "off", "--decision-timeout", "300ms", "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	call := func(user string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}}})
		return err
	}
	check := map[string]any{"policy": "api", "identity": map[string]string{"user": "42"}, "cost": 1}
	const (
		latency   = "rate_limit_redis_latency_seconds_count"
		redisErrs = "rate_limit_redis_errors_total"
		failedErr = `floodgate_decision_errors_total{reason="indeterminate"}`
	)
	waitUntil(t, "a gRPC and an HTTP decision on Redis", func() bool {
		return call("warm") == nil && checkOn(t, svc.url, "/v1/check", check).status == 200
	})
	if n := metricValue(t, svc.url, latency); n < 2 {
		t.Fatalf("%s = %v after a gRPC and an HTTP decision on Redis with --fallback off, want ≥ 2", latency, n)
	}
	errs0 := metricValue(t, svc.url, redisErrs)

	stallRedis(t, rs)
	err = call("stalled")
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("gRPC call with Redis stalled and --fallback off: %v, want UNAVAILABLE", err)
	}
	msg := status.Convert(err).Message()
	t.Logf("gRPC status message with Redis stalled: %q", msg)
	_, port, _ := strings.Cut(rs.Addr, ":")
	// The script was sent and Redis, stopped, never answered: it may
	// have run, so the outcome is indeterminate.
	if strings.Contains(msg, rs.Addr) || strings.Contains(msg, ":"+port) || !strings.Contains(msg, "it may have been counted") {
		t.Fatalf("gRPC status message %q: want it to say the request may have been counted, without the Redis address %s", msg, rs.Addr)
	}
	if n := metricValue(t, svc.url, failedErr); n != 1 {
		t.Fatalf("%s = %v after one failed gRPC decision, want 1", failedErr, n)
	}
	if n := metricValue(t, svc.url, redisErrs); n != errs0+1 {
		t.Fatalf("%s = %v after one failed decision (%v before), want %v", redisErrs, n, errs0, errs0+1)
	}
	waitUntil(t, `the "decision failed" log line`, func() bool {
		rec, ok := svc.Logged("decision failed")
		return ok && rec["reason"] == "indeterminate"
	})
}

// TestServeFallbackOffHeartbeatWarning: with --fallback off and Redis
// unreachable, a failed heartbeat is logged without the advice about the
// local fallback's divisor, which does not exist then (a deploy kit walk:
// the log told operators a fallback divided limits by --instances).
func TestServeFallbackOffHeartbeatWarning(t *testing.T) {
	rs := redistest.Start(t)
	rs.Kill()
	svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--fallback", "off", "--instances", "3")
	defer svc.stop(t)
	waitUntil(t, "a heartbeat failure in the log", func() bool {
		_, ok := svc.Logged("instance heartbeat failed")
		return ok
	})
	if strings.Contains(svc.Logs(), "local fallback") {
		t.Fatalf("the log speaks of a local fallback with --fallback off:\n%s", svc.Logs())
	}
}
