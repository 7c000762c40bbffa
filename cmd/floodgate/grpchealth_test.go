package main

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeGRPCHealth: serve's gRPC listener answers the standard health
// service for the whole server, envoyproxy/ratelimit's "ratelimit" (so its
// probes keep working after the migration guide's switch to serve; they
// got Unimplemented) and the rate limit service's name, following what
// /readyz?degraded=ok says: SERVING while decisions are answered, also
// degraded ones; NOT_SERVING once it drains, and while it cannot decide
// (--fallback off with Redis down).
func TestServeGRPCHealth(t *testing.T) {
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	status := func(t *testing.T, c healthpb.HealthClient, name string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			t.Fatalf("health of %q: %v", name, err)
		}
		return r.GetStatus()
	}
	all := func(t *testing.T, c healthpb.HealthClient, want healthpb.HealthCheckResponse_ServingStatus) bool {
		t.Helper()
		for _, name := range []string{"", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"} {
			if status(t, c, name) != want {
				return false
			}
		}
		return true
	}
	dial := func(t *testing.T, svc *service) healthpb.HealthClient {
		t.Helper()
		conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return healthpb.NewHealthClient(conn)
	}

	t.Run("draining", func(t *testing.T) {
		svc := startService(t, "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir, "--shutdown-delay", "4s", "--drain-timeout", "60s")
		c := dial(t, svc)
		if !all(t, c, healthpb.HealthCheckResponse_SERVING) {
			t.Fatal("not SERVING after the start")
		}
		// A client watching health (grpc-go's client-side health checking
		// does) must not hold the shutdown for the drain timeout.
		wctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		watch, err := c.Watch(wctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := watch.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Watch: %v %v", r, err)
		}
		if err := svc.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "NOT_SERVING while draining", func() bool { return all(t, c, healthpb.HealthCheckResponse_NOT_SERVING) })
		select {
		case <-svc.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("serve still running 30s after SIGTERM (shutdown delay 4s): the Watch stream held the drain")
		}
	})

	t.Run("redis down without fallback", func(t *testing.T) {
		rs := redistest.Start(t)
		svc := startService(t, "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir, "--redis", "redis://"+rs.Addr, "--fallback", "off")
		defer svc.stop(t)
		c := dial(t, svc)
		if !all(t, c, healthpb.HealthCheckResponse_SERVING) {
			t.Fatal("not SERVING with Redis up")
		}
		rs.Kill()
		waitUntil(t, "NOT_SERVING with Redis down and --fallback off", func() bool { return all(t, c, healthpb.HealthCheckResponse_NOT_SERVING) })
		rs.Restart(t)
		waitUntil(t, "SERVING once Redis is back", func() bool { return all(t, c, healthpb.HealthCheckResponse_SERVING) })
	})

	t.Run("redis down with the fallback", func(t *testing.T) {
		rs := redistest.Start(t)
		svc := startService(t, "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir, "--redis", "redis://"+rs.Addr)
		defer svc.stop(t)
		c := dial(t, svc)
		rs.Kill()
		// Decisions go on, degraded: still SERVING, as /readyz?degraded=ok.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if !all(t, c, healthpb.HealthCheckResponse_SERVING) {
				t.Fatal("NOT_SERVING while the fallback decides")
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}
