package main

import (
	"context"
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
)

// TestServeGRPCMessageSize: serve's gRPC API refused a request over 1 MiB
// with RESOURCE_EXHAUSTED, where envoyproxy/ratelimit and envoy-compat
// (gRPC's default, 4 MiB) decide it, and counted and logged nothing;
// Envoy lets a refused request through unlimited by default, the per-IP
// descriptor beside the long one not charged (a differential walk). A
// request of 1.1 MiB is decided now, its per-IP descriptor charged; one
// over 4 MiB is still refused, as theirs, and counted in
// floodgate_grpc_rejected_total{reason="message_size"} and logged.
func TestServeGRPCMessageSize(t *testing.T) {
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	svc := startService(t, "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	const sizeSeries = `floodgate_grpc_rejected_total{reason="message_size"}`
	if got := metricValue(t, svc.url, sizeSeries); got != 0 {
		t.Fatalf("%s = %v at start, want 0", sizeSeries, got)
	}
	conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	call := func(valueLen int) (*rlspb.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.7"}}},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user_agent", Value: strings.Repeat("a", valueLen)}}},
		}})
	}

	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		resp, err := call(1100 << 10)
		if err != nil {
			t.Fatalf("request %d of 1.1 MiB: %v, want it decided (theirs and envoy-compat decide it)", i, err)
		}
		if got := resp.GetOverallCode(); got != want {
			t.Fatalf("request %d of 1.1 MiB: %v, want %v (the per-IP limit of 1 charged)", i, got, want)
		}
	}
	if got := metricValue(t, svc.url, sizeSeries); got != 0 {
		t.Errorf("%s = %v after decided requests, want 0", sizeSeries, got)
	}

	if _, err := call(4 << 20); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a request over 4 MiB: %v, want RESOURCE_EXHAUSTED (as theirs)", err)
	}
	// gRPC answers before the service has counted: the log line comes
	// after the count.
	const logged = "gRPC rate limit call refused: its message is over the gRPC server's size limit"
	waitUntil(t, "the refusal's log line", func() bool { return strings.Contains(svc.Logs(), logged) })
	if got := metricValue(t, svc.url, sizeSeries); got != 1 {
		t.Errorf("%s = %v after one request over 4 MiB, want 1", sizeSeries, got)
	}
}
