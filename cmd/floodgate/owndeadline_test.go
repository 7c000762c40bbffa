package main

import (
	"context"
	"encoding/json"
	"net/http"
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

	"github.com/floodgate-rl/floodgate/server"
)

// TestServeOwnDeadlineIsATimeout: a decision that runs out of
// --decision-timeout (the service's own deadline, not the caller's)
// before its store call is sent is counted in
// floodgate_decision_errors_total as timeout, as its answer says ("the
// decision did not finish in time") and docs/operations.md's row for the
// metric does, over gRPC and HTTP. A walk (memory mode, 200 callers
// sending 1 MiB ShouldRateLimit requests, --decision-timeout 100ms) saw
// them counted and logged as store_unavailable. A nanosecond's deadline
// has always passed by the time the store looks at it.
func TestServeOwnDeadlineIsATimeout(t *testing.T) {
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n")
	svc := startService(t, "--decision-timeout", "1ns", "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}}}}})
	if status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "envoyrls: the decision did not finish in time" {
		t.Fatalf("gRPC call past --decision-timeout: %v; want UNAVAILABLE, the decision did not finish in time", err)
	}
	resp, err := http.Post(svc.url+"/v1/check", "application/json", strings.NewReader(`{"policy":"api","identity":{"user":"u1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var p server.Problem
	derr := json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if resp.StatusCode != 503 || derr != nil || p.Type != server.ProblemTypePrefix+"store-timeout" {
		t.Fatalf("HTTP check past --decision-timeout: %d %+v (%v); want 503 store-timeout", resp.StatusCode, p, derr)
	}
	if n := metricValue(t, svc.url, `floodgate_decision_errors_total{reason="timeout"}`); n != 2 {
		t.Errorf(`floodgate_decision_errors_total{reason="timeout"} = %v, want 2`, n)
	}
	if n := metricValue(t, svc.url, `floodgate_decision_errors_total{reason="store_unavailable"}`); n != 0 {
		t.Errorf(`floodgate_decision_errors_total{reason="store_unavailable"} = %v, want 0`, n)
	}
	if rec, ok := svc.Logged("decision failed"); !ok || rec["reason"] != "timeout" {
		t.Errorf("decision failed log line: %v; want reason timeout", rec)
	}
}
