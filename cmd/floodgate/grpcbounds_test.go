package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/envoyrls"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// repeated returns a request of n copies of one descriptor route=value.
func repeated(domain, value string, n int) *rlspb.RateLimitRequest {
	d := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "route", Value: value}}}
	req := &rlspb.RateLimitRequest{Domain: domain, Descriptors: make([]*ratelimitv3.RateLimitDescriptor, n)}
	for i := range req.Descriptors {
		req.Descriptors[i] = d
	}
	return req
}

// TestServeGRPCDescriptorBound: serve refused more than 16 distinct
// limited descriptors but decided any number of repeats of one (a
// grpcbounds walk: 6 requests of 150,000 took it from 31 to 422 MB). A
// request of more than envoyrls.MaxRequestDescriptors descriptors,
// repeats included, is INVALID_ARGUMENT now, saying the bound, and
// charges nothing; one of exactly the bound is decided.
func TestServeGRPCDescriptorBound(t *testing.T) {
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: route\n    rate_limit: {unit: hour, requests_per_unit: 100000}\n")
	svc := startService(t, "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir)
	conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	call := func(req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return client.ShouldRateLimit(ctx, req)
	}

	for _, n := range []int{envoyrls.MaxRequestDescriptors + 1, 100_000} {
		_, err := call(repeated("edge", "/a", n))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "a request carries at most 256") {
			t.Fatalf("%d repeats of one descriptor: %v, want INVALID_ARGUMENT saying the bound", n, err)
		}
	}
	// Nothing was charged: the one descriptor's counter stands at 1.
	resp, err := call(repeated("edge", "/a", 1))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 99_999 {
		t.Errorf("remaining %d after the refused requests, want 99999 (nothing charged by them)", got)
	}
	resp, err = call(repeated("edge", "/b", envoyrls.MaxRequestDescriptors))
	if err != nil || len(resp.GetStatuses()) != envoyrls.MaxRequestDescriptors {
		t.Fatalf("a request of %d descriptors: %v, %v; want it decided", envoyrls.MaxRequestDescriptors, resp, err)
	}
}

// TestServeGRPCMaxConnectionAge: a gRPC connection whose calls never
// finish was never idle and never closed (a grpcbounds walk: stalled
// connections held every gRPC place for 6 minutes and more). It is sent
// GOAWAY at --grpc-max-connection-age and closed, its calls cut, at the
// end of --grpc-max-connection-age-grace: a health Watch stream, which
// never ends by itself, ends with the connection. Out of range, or 0 (no
// bound in gRPC), either flag stops serve at start.
func TestServeGRPCMaxConnectionAge(t *testing.T) {
	dir := t.TempDir()
	writeFileAtomic(t, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: route\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")
	for _, bad := range [][]string{{"--grpc-max-connection-age", "0s"}, {"--grpc-max-connection-age-grace", "0s"}, {"--grpc-max-connection-age", "1000h"}} {
		code, out := runCLI(t, append([]string{"serve", "--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir}, bad...)...)
		if code == 0 || !strings.Contains(out, bad[0]+" "+strings.TrimSuffix(bad[1], "0s")) {
			t.Errorf("serve %s %s: exit %d, %q; want an error naming the flag", bad[0], bad[1], code, out)
		}
	}

	svc := startService(t, "--grpc-addr", "127.0.0.1:0", "--envoy-config", dir,
		"--grpc-max-connection-age", "1s", "--grpc-max-connection-age-grace", "1s")
	conn, err := grpc.NewClient(svc.addr(t, grpcListening), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The context only bounds a test whose connection is never closed.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, err = w.Recv()
		if err != nil {
			break
		}
	}
	if ctx.Err() != nil || status.Code(err) != codes.Unavailable {
		t.Fatalf("a Watch stream past the connection's age and grace ended with %v (context %v), want UNAVAILABLE: its connection closed by serve", err, ctx.Err())
	}
}

// TestEnvoyCompatDescriptorBound: envoy-compat decided requests of any
// number of descriptors, each a Redis key written (a grpcbounds walk: 6
// requests of 150,000 took it from 32 to 563 MB, and each wrote 150,000
// keys). A request of more than FLOODGATE_MAX_DESCRIPTORS (default 1,000)
// descriptors is refused now, over gRPC with INVALID_ARGUMENT and on POST
// /json with 400, both saying the bound, and writes no key.
func TestEnvoyCompatDescriptorBound(t *testing.T) {
	rdb := redistest.Start(t)
	_, rt := compatRuntime(t, "domain: edge\ndescriptors:\n  - key: route\n    rate_limit: {unit: hour, requests_per_unit: 100000}\n")
	env := append(rt, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rdb.Addr, "CACHE_KEY_PREFIX=bound_")
	p := startCompat(t, env...)
	waitFor(t, "healthcheck OK", func() bool {
		code, body := httpGet(t, "http://"+p.http+"/healthcheck")
		return code == 200 && body == "OK"
	})
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	distinct := func(n int) *rlspb.RateLimitRequest {
		req := &rlspb.RateLimitRequest{Domain: "edge"}
		for i := range n {
			req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "route", Value: "/r" + strconv.Itoa(i)}}})
		}
		return req
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, req := range []*rlspb.RateLimitRequest{distinct(1001), repeated("edge", "/same", 50_000)} {
		_, err := client.ShouldRateLimit(ctx, req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 1000 (FLOODGATE_MAX_DESCRIPTORS)") {
			t.Fatalf("%d descriptors: %v, want INVALID_ARGUMENT saying the bound", len(req.GetDescriptors()), err)
		}
	}
	body := `{"domain":"edge","descriptors":[` + strings.Repeat(`{"entries":[{"key":"route","value":"/j"}]},`, 1000) + `{"entries":[{"key":"route","value":"/j"}]}]}`
	if code, out := httpPost(t, "http://"+p.http+"/json", body); code != 400 || !strings.Contains(out, "at most 1000") {
		t.Errorf("POST /json of 1001 descriptors: %d %q, want 400 saying the bound", code, out)
	}
	if keys := rdb.Client(t).Keys(ctx, "bound_*").Val(); len(keys) != 0 {
		t.Errorf("refused requests wrote %d keys (%v...), want none", len(keys), keys[:min(3, len(keys))])
	}
	// Exactly the bound is decided.
	if resp, err := client.ShouldRateLimit(ctx, distinct(1000)); err != nil || len(resp.GetStatuses()) != 1000 {
		t.Fatalf("1000 descriptors: %v, want them decided", err)
	}
}
