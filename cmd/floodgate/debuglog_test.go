package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/fallback"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// TestServeDebugLogsEachFallbackDecision: at --log-level debug, serve
// logs one line per decision taken by a failure mode, from the HTTP API
// and the gRPC one, with its policy, layers, keys, mode, reason and Redis
// error, as docs/operations.md (Logs) says; at info, none. A
// new-operator walk found nothing but the WARN line held back to one per
// 10 s: no debug-level logging existed.
func TestServeDebugLogsEachFallbackDecision(t *testing.T) {
	rs := redistest.Start(t)
	rs.Kill()
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n")
	const httpChecks, grpcCalls = 3, 2
	for _, level := range []string{"debug", "info"} {
		t.Run(level, func(t *testing.T) {
			svc := startService(t, "--redis", "redis://"+rs.Addr+"/0", "--log-level", level,
				"--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
			for range httpChecks {
				// login's on_redis_failure is closed: denied.
				c := checkOn(t, svc.url, "/v1/check", server.CheckRequest{Policy: "login", Identity: map[string]string{"account": "alice", "ip": "192.0.2.1"}})
				if c.status != 200 || !c.resp.Degraded || c.resp.FailureMode != "closed" {
					t.Fatalf("login check with Redis down: %d degraded %v mode %q; want 200, degraded, closed", c.status, c.resp.Degraded, c.resp.FailureMode)
				}
			}
			conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := rlspb.NewRateLimitServiceClient(conn)
			for range grpcCalls {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "bob"}}}}})
				cancel()
				if err != nil || !resp.GetDynamicMetadata().GetFields()["degraded"].GetBoolValue() {
					t.Fatalf("ShouldRateLimit with Redis down: %v, %v; want a degraded answer", resp, err)
				}
			}
			svc.stop(t) // every line written is read
			recs := logRecords(svc.Logs(), fallbackDebugMsg)
			if level == "info" {
				if len(recs) != 0 {
					t.Fatalf("%d %q lines at info, want none:\n%s", len(recs), fallbackDebugMsg, svc.Logs())
				}
				return
			}
			if len(recs) != httpChecks+grpcCalls {
				t.Fatalf("%d %q lines for %d HTTP and %d gRPC decisions taken by the fallback, want %d:\n%s",
					len(recs), fallbackDebugMsg, httpChecks, grpcCalls, httpChecks+grpcCalls, svc.Logs())
			}
			t.Logf("first line: %v; last: %v", recs[0], recs[len(recs)-1])
			reasons := map[string]bool{"timeout": true, "unavailable": true, "breaker_open": true}
			for i, rec := range recs {
				policy, mode := "login", "closed"
				if i >= httpChecks {
					policy, mode = "edge", "local"
				}
				layers, _ := rec["layers"].([]any)
				keys, _ := rec["keys"].([]any)
				if rec["level"] != "DEBUG" || rec["policy"] != policy || rec["mode"] != mode || !reasons[rec["reason"].(string)] ||
					rec["error"] == "" || rec["error"] == "none" || len(layers) == 0 || len(keys) != len(layers) ||
					!strings.HasPrefix(layers[0].(string), policy+".") {
					t.Errorf("line %d: %v; want DEBUG, policy %s, its layers and keys, mode %s, reason timeout, unavailable or breaker_open, the error", i+1, rec, policy, mode)
				}
			}
		})
	}
}

// TestLogEachFallbackCostsNothingBelowDebug: serve's OnDegraded builds
// and allocates nothing when debug is off, and at debug writes every
// decision, none held back.
func TestLogEachFallbackCostsNothingBelowDebug(t *testing.T) {
	p, err := floodgate.NewSlidingWindow("api.per-user", 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	d := fallback.Degraded{Layers: []floodgate.Layer{{Policy: p, Key: "fg:{api.per-user:u}", Cost: 1}},
		Mode: fallback.ModeLocal, Reason: fallback.ReasonUnavailable, Err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")}
	ctx := context.Background()

	var buf bytes.Buffer
	info := logEachFallback(slog.New(slog.NewJSONHandler(&buf, nil)))
	if n := testing.AllocsPerRun(100, func() { info(ctx, d) }); n != 0 {
		t.Errorf("a degraded decision at info allocates %v times, want 0", n)
	}
	if buf.Len() != 0 {
		t.Errorf("wrote at info: %s", buf.String())
	}

	debug := logEachFallback(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for range 3 {
		debug(ctx, d)
	}
	recs := logRecords(buf.String(), fallbackDebugMsg)
	if len(recs) != 3 {
		t.Fatalf("%d lines for 3 decisions at debug, want 3:\n%s", len(recs), buf.String())
	}
	if r := recs[0]; r["policy"] != "api" || r["mode"] != "local" || r["reason"] != "unavailable" || r["error"] != d.Err.Error() {
		t.Errorf("line %v; want policy api, mode local, reason unavailable, error %q", r, d.Err)
	}
}
